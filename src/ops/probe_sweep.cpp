#include "xstage/ops/probe_sweep.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "xstage/error.hpp"

namespace xstage::ops {
namespace {

void check_names(const std::vector<std::string>& v, std::initializer_list<const char*> ok, const char* axis) {
  for (const auto& s : v) {
    bool found = false;
    for (const char* o : ok) found = found || s == o;
    if (!found) {
      std::string list;
      for (const char* o : ok) list += std::string(list.empty() ? "" : ", ") + o;
      throw InvalidArgument(fmt::format("sweep: {} '{}' is not one of: {}", axis, s, list));
    }
  }
}

template <class T>
void non_empty(const std::vector<T>& v, const char* axis) {
  if (v.empty()) throw InvalidArgument(fmt::format("sweep: axis '{}' has no values", axis));
}

}  // namespace

long long parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) throw InvalidArgument("'" + text + "' is not a byte count (e.g. 4096, 16KiB, 2MiB)");
  long long n = std::stoll(text.substr(0, i));
  std::string unit = text.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  long long mul = 1;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb") mul = 1024;
  else if (unit == "m" || unit == "mib" || unit == "mb") mul = 1024 * 1024;
  else throw InvalidArgument("'" + text + "': unknown unit '" + unit + "' (use B, KiB or MiB)");
  return n * mul;
}

std::vector<ProbePoint> expand_sweep(const SweepAxes& a, int all_sms) {
  non_empty(a.threads, "threads");
  non_empty(a.burst_bytes, "burst_bytes");
  non_empty(a.gap_us, "gap_us");
  non_empty(a.gap_kind, "gap_kind");
  non_empty(a.store, "store");
  non_empty(a.dest, "dest");
  non_empty(a.addr, "addr");
  non_empty(a.warmup_bytes, "warmup_bytes");
  non_empty(a.pre_wait_us, "pre_wait_us");
  for (long long w : a.warmup_bytes)
    if (w < 0 || w % 16) throw InvalidArgument(fmt::format("sweep: warm-up bytes {} must be a multiple of 16 >= 0", w));
  for (double w : a.pre_wait_us)
    if (!(w >= 0) || !std::isfinite(w)) throw InvalidArgument(fmt::format("sweep: pre-wait {} us must be >= 0", w));
  check_names(a.gap_kind, {"idle", "work"}, "gap kind");
  check_names(a.store, {"v4", "v4_release", "v4_noalloc", "bulk"}, "store");
  check_names(a.dest, {"peer", "all_peers", "local"}, "destination");
  check_names(a.addr, {"fresh", "rewrite"}, "address pattern");
  if (a.role != "fit" && a.role != "validate")
    throw InvalidArgument("sweep: role '" + a.role + "' must be fit or validate");
  if (a.bursts < 2) throw InvalidArgument(fmt::format("sweep: bursts {} must be >= 2", a.bursts));
  std::vector<int> ks = a.producers.empty() ? std::vector<int>{0} : a.producers;
  for (int k : ks)
    if (k < 0) throw InvalidArgument(fmt::format("sweep: producers {} must be >= 1 (0 = all SMs)", k));
  for (long long b : a.burst_bytes)
    if (b <= 0 || b % 16)
      throw InvalidArgument(fmt::format("sweep: burst bytes {} must be a positive multiple of 16", b));
  for (double g : a.gap_us)
    if (!(g >= 0) || !std::isfinite(g)) throw InvalidArgument(fmt::format("sweep: gap {} us must be >= 0", g));
  std::vector<ProbePoint> out;
  for (const auto& dest : a.dest)
    for (const auto& store : a.store)
      for (const auto& addr : a.addr)
        for (const auto& kind : a.gap_kind)
          for (int k : ks)
            for (int th : a.threads)
              for (long long b : a.burst_bytes)
                for (long long w : a.warmup_bytes)
                for (double pw : a.pre_wait_us)
                for (double g : a.gap_us) {
                  ProbePoint p;
                  p.warmup_bytes = w;
                  p.pre_wait_us = pw;
                  p.producers = k == 0 ? all_sms : k;
                  p.threads = th;
                  p.burst_bytes = b;
                  p.gap_us = g;
                  p.gap_kind = kind;
                  p.store = store;
                  p.dest = dest;
                  p.addr = addr;
                  p.bursts = a.bursts;
                  p.role = a.role;
                  out.push_back(p);
                }
  return out;
}

std::vector<SweepAxes> load_sweep_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InvalidArgument("sweep file '" + path + "' cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw InvalidArgument("sweep file '" + path + "' is not valid JSON: " + e.what());
  }
  if (!j.contains("groups") || !j["groups"].is_array() || j["groups"].empty())
    throw InvalidArgument("sweep file '" + path + "' needs a non-empty \"groups\" array");
  std::vector<SweepAxes> out;
  int gi = 0;
  for (const auto& g : j["groups"]) {
    SweepAxes a;
    std::string where = fmt::format("sweep file '{}', group {}", path, gi++);
    try {
      auto get = [&](const char* key, auto& dst) {
        if (g.contains(key)) g.at(key).get_to(dst);
      };
      get("name", a.name);
      get("producers", a.producers);
      get("threads", a.threads);
      get("gap_us", a.gap_us);
      get("gap_kind", a.gap_kind);
      get("store", a.store);
      get("dest", a.dest);
      get("addr", a.addr);
      get("bursts", a.bursts);
      get("role", a.role);
      get("pre_wait_us", a.pre_wait_us);
      auto get_bytes = [&](const char* key, std::vector<long long>& dst) {
        if (!g.contains(key)) return;
        dst.clear();
        for (const auto& b : g[key]) dst.push_back(b.is_string() ? parse_bytes(b.get<std::string>()) : b.get<long long>());
      };
      get_bytes("burst_bytes", a.burst_bytes);
      get_bytes("warmup_bytes", a.warmup_bytes);
      for (auto it = g.begin(); it != g.end(); ++it) {
        static const char* known[] = {"name",  "producers", "threads", "burst_bytes", "gap_us",
                                      "gap_kind", "store", "dest", "addr", "bursts", "role", "warmup_bytes",
                                      "pre_wait_us"};
        bool ok = false;
        for (const char* k : known) ok = ok || it.key() == k;
        if (!ok) throw InvalidArgument("unknown field '" + it.key() + "'");
      }
      expand_sweep(a, 1);  // validate now, with the file and group in the message
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(where + ": " + e.what());
    } catch (const std::exception& e) {
      throw InvalidArgument(where + ": " + e.what());
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace xstage::ops
