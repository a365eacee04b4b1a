// Burst-Gap model: table lookups, closed-form predictions (docs/model.md derives them),
// input validation and the params file (xstage.params.v2).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "model/json_fields.hpp"
#include "model/json_file.hpp"
#include "model/table.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"

namespace xstage::model {

using detail::Above;
using detail::interpolate;

double Params::t0_us(long long burst_bytes) const {
  return interpolate(
      t0_table, static_cast<double>(burst_bytes), [](const T0Entry& e) { return static_cast<double>(e.burst_bytes); },
      [](const T0Entry& e) { return e.t0_us; }, Above::kExtend, "T0");
}

namespace {
constexpr auto kKey = [](const auto& e) { return static_cast<double>(e.producers); };
}  // namespace

double Params::r_gbps(int k) const {
  return interpolate(r_table, k, kKey, [](const REntry& e) { return e.r_gbps; }, Above::kClamp, "R");
}

double Params::delta_us(int k) const {
  return interpolate(delta_table, k, kKey, [](const DeltaEntry& e) { return e.delta_us; }, Above::kClamp, "delta");
}

double Params::q_bytes(int k) const {
  return interpolate(q_table, k, kKey, [](const QEntry& e) { return e.q_bytes; }, Above::kClamp, "Q");
}

bool Params::q_lower_bound(int k) const {
  if (q_table.empty()) throw Error("params: the Q table is empty");
  const auto n = detail::neighbours(q_table, k, kKey);
  // Clamped lookups use the one end entry; interpolation both neighbours.
  return (n.lo >= 0 && q_table[n.lo].lower_bound) || (n.hi >= 0 && q_table[n.hi].lower_bound);
}

double Params::q_cold_bytes(int k) const {
  return interpolate(q_cold_table, k, kKey, [](const QColdEntry& e) { return e.q_bytes; }, Above::kClamp, "Q_cold");
}

namespace {

[[noreturn]] void bad(const std::string& what) { throw Error(format_error("params", what)); }

void check_value(const char* table, const std::string& key, const char* field, double v, bool positive) {
  if (!std::isfinite(v) || v < 0 || (positive && v == 0))
    bad(fmt::format("{} table: {} for {} must be finite and {} 0, got {}", table, field, key, positive ? ">" : ">=", v));
}

// Keys >= 1 and unique, values finite >= 0 (or > 0 for rates), at least one entry.
template <class E, class KeyF, class ValF>
void check_table(const std::vector<E>& t, const char* table, const char* key_name, const char* field, KeyF key,
                 ValF val, bool positive) {
  if (t.empty()) bad(fmt::format("the {} table must have at least one entry", table));
  std::set<long long> seen;
  for (const auto& e : t) {
    const long long k = key(e);
    if (k < 1) bad(fmt::format("{} table: {} must be >= 1, got {}", table, key_name, k));
    if (!seen.insert(k).second) bad(fmt::format("{} table: {}={} is listed twice", table, key_name, k));
    check_value(table, fmt::format("{}={}", key_name, k), field, val(e), positive);
  }
}

}  // namespace

void check_params(const Params& p) {
  check_table(p.t0_table, "t0", "burst_bytes", "t0_us", [](const T0Entry& e) { return e.burst_bytes; },
              [](const T0Entry& e) { return e.t0_us; }, false);
  const auto k = [](const auto& e) { return static_cast<long long>(e.producers); };
  check_table(p.r_table, "r", "producers", "r_gbps", k, [](const REntry& e) { return e.r_gbps; }, true);
  check_table(p.delta_table, "delta", "producers", "delta_us", k, [](const DeltaEntry& e) { return e.delta_us; },
              false);
  check_table(p.q_table, "q", "producers", "q_bytes", k, [](const QEntry& e) { return e.q_bytes; }, false);
  check_table(p.q_cold_table, "q_cold", "producers", "q_bytes", k, [](const QColdEntry& e) { return e.q_bytes; },
              false);
  if (!std::isfinite(p.r_agg_gbps) || p.r_agg_gbps <= 0)
    bad(fmt::format("r_agg_gbps must be finite and > 0, got {}", p.r_agg_gbps));
  if (p.sm_count < 0) bad(fmt::format("sm_count must be >= 0, got {}", p.sm_count));
}

const char* regime_name(Regime r) {
  switch (r) {
    case Regime::kIssueBound: return "issue_bound";
    case Regime::kDrainBound: return "drain_bound";
    case Regime::kFillBound: return "fill_bound";
  }
  return "?";
}

Prediction predict(const Params& p, int producers, long long burst_bytes, double gap_us) {
  Prediction out;
  out.volume_bytes = static_cast<long long>(producers) * burst_bytes;
  const double v = static_cast<double>(out.volume_bytes);
  out.r_gbps = p.r_gbps(producers);
  out.r_agg_gbps = p.r_agg_gbps;
  if (!(out.r_gbps > 0) || !(out.r_agg_gbps > 0))
    throw Error("predict: params have a non-positive rate (run check_params first)");
  const double r = out.r_gbps * kBytesPerUsPerGbps;        // bytes/us, median producer's view
  const double r_agg = out.r_agg_gbps * kBytesPerUsPerGbps;  // bytes/us, all producers
  const double t0 = out.t0_us = p.t0_us(burst_bytes);
  const double delta = out.delta_us = p.delta_us(producers);
  out.q_bytes = p.q_bytes(producers);
  out.q_lower_bound = p.q_lower_bound(producers);
  out.q_cold_bytes = p.q_cold_bytes(producers);
  // D: the stage never empties, one burst per V/R(K), each boundary costing delta(K).
  const double d = out.drain_term_us = v / r - gap_us - delta;
  // F: the burst alone overfills an empty stage; beyond Q bytes go at the delivered rate.
  const double f = out.fill_term_us = (v - out.q_bytes) / r_agg;
  out.cold_fill_term_us = (v - out.q_cold_bytes) / r_agg;

  out.issue_us = std::max({t0, d, f});
  // A relative tolerance keeps G = G* (computed in floating point) on the free side.
  const double tol = 1e-9 * std::max(1.0, t0);
  if (d <= t0 + tol && f <= t0 + tol) out.regime = Regime::kIssueBound;
  else if (d > f + tol) out.regime = Regime::kDrainBound;
  else out.regime = Regime::kFillBound;
  out.backpressure_free = out.regime == Regime::kIssueBound;
  // The turnaround is paid only where the drain term binds (measured at zero gap).
  out.period_us = out.issue_us + gap_us + (out.regime == Regime::kDrainBound ? delta : 0.0);
  out.backpressure_us = out.issue_us - t0;

  // The isolated span max(T0, F) is reached once D <= it: G* = [V/R - delta - max(T0, F)]+.
  const double isolated = std::max(t0, f);
  out.recovery_gap_us = std::max(0.0, v / r - delta - isolated);
  out.cold_issue_base_us = isolated;
  out.cold_issue_us = std::max(t0, out.cold_fill_term_us);
  return out;
}

void validate_inputs(int producers, long long burst_bytes, double gap_us, int max_producers) {
  if (producers < 1)
    throw InvalidArgument(fmt::format("producers (K) must be at least 1, got {}", producers));
  if (max_producers > 0 && producers > max_producers)
    throw InvalidArgument(fmt::format(
        "producers (K) = {} exceeds the {} SMs of the device (one producer CTA per SM)",
        producers, max_producers));
  if (burst_bytes <= 0)
    throw InvalidArgument(fmt::format("burst bytes (B) must be positive, got {}", burst_bytes));
  if (burst_bytes % 16 != 0)
    throw InvalidArgument(fmt::format(
        "burst bytes (B) = {} is not a multiple of 16 (the width of one v4 store)", burst_bytes));
  if (std::isnan(gap_us)) throw InvalidArgument("gap (G) is NaN; give a number of microseconds >= 0");
  if (!std::isfinite(gap_us)) throw InvalidArgument("gap (G) must be finite");
  if (gap_us < 0) throw InvalidArgument(fmt::format("gap (G) must be >= 0 us, got {}", gap_us));
}

// ---- JSON ----------------------------------------------------------------------------

namespace {

// Reads the array field `key` of j, one entry per element via `read(element, where)`.
template <class E, class ReadF>
std::vector<E> read_table(const nlohmann::json& j, const char* key, const std::string& where, ReadF read) {
  const auto it = j.find(key);
  if (it == j.end()) throw Error(format_error(where, fmt::format("missing field \"{}\"", key)));
  if (!it->is_array()) throw Error(format_error(where, fmt::format("field \"{}\": expected an array", key)));
  std::vector<E> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string at = fmt::format("{}: {}[{}]", where, key, i);
    detail::require_object((*it)[i], at);
    out.push_back(read((*it)[i], at));
  }
  return out;
}

template <class E>
void sort_by_producers(std::vector<E>& t) {
  std::sort(t.begin(), t.end(), [](const E& a, const E& b) { return a.producers < b.producers; });
}

}  // namespace

void to_json(nlohmann::json& j, const Params& p) {
  nlohmann::json t0 = nlohmann::json::array(), r = nlohmann::json::array(), delta = nlohmann::json::array(),
                 q = nlohmann::json::array(), qc = nlohmann::json::array();
  for (const auto& e : p.t0_table) t0.push_back({{"burst_bytes", e.burst_bytes}, {"t0_us", e.t0_us}});
  for (const auto& e : p.r_table) r.push_back({{"producers", e.producers}, {"r_gbps", e.r_gbps}});
  for (const auto& e : p.delta_table) delta.push_back({{"producers", e.producers}, {"delta_us", e.delta_us}});
  for (const auto& e : p.q_table)
    q.push_back({{"producers", e.producers}, {"q_bytes", e.q_bytes}, {"lower_bound", e.lower_bound}});
  for (const auto& e : p.q_cold_table) qc.push_back({{"producers", e.producers}, {"q_bytes", e.q_bytes}});
  j = nlohmann::json{{"schema", kParamsSchema}, {"t0", t0},         {"r", r},
                     {"r_agg_gbps", p.r_agg_gbps}, {"delta", delta}, {"q", q},
                     {"q_cold", qc},               {"sm_count", p.sm_count}, {"source", p.source}};
}

void from_json(const nlohmann::json& j, Params& p) {
  const std::string where = "params";
  detail::require_object(j, where);
  const auto schema = detail::required_field<std::string>(j, "schema", where);
  if (schema == "xstage.params.v1")
    throw Error(format_error(where, fmt::format(
        "schema \"xstage.params.v1\" is the old model (T0 line, one R, affine cold correction), which does not "
        "describe real data; refit with `xstage fit DATA.json --out FILE` to get \"{}\"", kParamsSchema)));
  if (schema != kParamsSchema)
    throw Error(format_error(where, fmt::format("schema is \"{}\", expected \"{}\"", schema, kParamsSchema)));
  using detail::required_field;
  Params out;
  out.t0_table = read_table<T0Entry>(j, "t0", where, [](const nlohmann::json& e, const std::string& at) {
    return T0Entry{required_field<long long>(e, "burst_bytes", at), required_field<double>(e, "t0_us", at)};
  });
  out.r_table = read_table<REntry>(j, "r", where, [](const nlohmann::json& e, const std::string& at) {
    return REntry{required_field<int>(e, "producers", at), required_field<double>(e, "r_gbps", at)};
  });
  out.r_agg_gbps = required_field<double>(j, "r_agg_gbps", where);
  out.delta_table = read_table<DeltaEntry>(j, "delta", where, [](const nlohmann::json& e, const std::string& at) {
    return DeltaEntry{required_field<int>(e, "producers", at), required_field<double>(e, "delta_us", at)};
  });
  out.q_table = read_table<QEntry>(j, "q", where, [](const nlohmann::json& e, const std::string& at) {
    return QEntry{required_field<int>(e, "producers", at), required_field<double>(e, "q_bytes", at),
                  detail::optional_field<bool>(e, "lower_bound", false, at)};
  });
  out.q_cold_table = read_table<QColdEntry>(j, "q_cold", where, [](const nlohmann::json& e, const std::string& at) {
    return QColdEntry{required_field<int>(e, "producers", at), required_field<double>(e, "q_bytes", at)};
  });
  std::sort(out.t0_table.begin(), out.t0_table.end(),
            [](const T0Entry& a, const T0Entry& b) { return a.burst_bytes < b.burst_bytes; });
  sort_by_producers(out.r_table);
  sort_by_producers(out.delta_table);
  sort_by_producers(out.q_table);
  sort_by_producers(out.q_cold_table);
  out.sm_count = detail::optional_field<int>(j, "sm_count", 0, where);
  out.source = detail::optional_field<std::string>(j, "source", "", where);
  check_params(out);
  p = std::move(out);
}

void to_json(nlohmann::json& j, const Prediction& p) {
  j = nlohmann::json{{"issue_us", p.issue_us},
                     {"period_us", p.period_us},
                     {"backpressure_us", p.backpressure_us},
                     {"recovery_gap_us", p.recovery_gap_us},
                     {"cold_issue_us", p.cold_issue_us},
                     {"cold_issue_base_us", p.cold_issue_base_us},
                     {"backpressure_free", p.backpressure_free},
                     {"regime", regime_name(p.regime)},
                     {"t0_us", p.t0_us},
                     {"drain_term_us", p.drain_term_us},
                     {"fill_term_us", p.fill_term_us},
                     {"cold_fill_term_us", p.cold_fill_term_us},
                     {"r_gbps", p.r_gbps},
                     {"r_agg_gbps", p.r_agg_gbps},
                     {"delta_us", p.delta_us},
                     {"q_bytes", p.q_bytes},
                     {"q_lower_bound", p.q_lower_bound},
                     {"q_cold_bytes", p.q_cold_bytes},
                     {"volume_bytes", p.volume_bytes}};
}

void from_json(const nlohmann::json& j, Prediction& p) {
  const std::string where = "prediction";
  detail::require_object(j, where);
  using detail::optional_field;
  using detail::required_field;
  Prediction out;
  out.issue_us = required_field<double>(j, "issue_us", where);
  out.period_us = required_field<double>(j, "period_us", where);
  out.backpressure_us = required_field<double>(j, "backpressure_us", where);
  out.recovery_gap_us = required_field<double>(j, "recovery_gap_us", where);
  out.cold_issue_us = required_field<double>(j, "cold_issue_us", where);
  out.cold_issue_base_us = required_field<double>(j, "cold_issue_base_us", where);
  out.backpressure_free = required_field<bool>(j, "backpressure_free", where);
  out.t0_us = optional_field<double>(j, "t0_us", 0.0, where);
  out.drain_term_us = optional_field<double>(j, "drain_term_us", 0.0, where);
  out.fill_term_us = optional_field<double>(j, "fill_term_us", 0.0, where);
  out.cold_fill_term_us = optional_field<double>(j, "cold_fill_term_us", 0.0, where);
  out.r_gbps = optional_field<double>(j, "r_gbps", 0.0, where);
  out.r_agg_gbps = optional_field<double>(j, "r_agg_gbps", 0.0, where);
  out.delta_us = optional_field<double>(j, "delta_us", 0.0, where);
  out.q_bytes = optional_field<double>(j, "q_bytes", 0.0, where);
  out.q_lower_bound = optional_field<bool>(j, "q_lower_bound", false, where);
  out.q_cold_bytes = optional_field<double>(j, "q_cold_bytes", 0.0, where);
  out.volume_bytes = optional_field<long long>(j, "volume_bytes", 0, where);
  const auto regime = optional_field<std::string>(j, "regime", "issue_bound", where);
  if (regime == "issue_bound") out.regime = Regime::kIssueBound;
  else if (regime == "drain_bound") out.regime = Regime::kDrainBound;
  else if (regime == "fill_bound") out.regime = Regime::kFillBound;
  else throw Error(format_error(where, "unknown regime \"" + regime + "\""));
  p = out;
}

Params load_params(const std::string& path) { return detail::load_json_file<Params>(path, "params file"); }

void save_params(const Params& p, const std::string& path) {
  detail::save_json_file(nlohmann::json(p), path, "params file", 2);
}

std::string format_params(const Params& p) {
  std::ostringstream s;
  s << "  T0(B): issue span of an isolated warm burst\n";
  s << fmt::format("  {:>12} {:>10}\n", "B (bytes)", "T0 (us)");
  for (const auto& e : p.t0_table) s << fmt::format("  {:>12} {:>10.4f}\n", e.burst_bytes, e.t0_us);
  // The K tables side by side over the union of their K; "-" where a table has no entry.
  std::map<int, std::vector<std::string>> rows;
  auto put = [&](int k, size_t col, std::string v) {
    auto& r = rows[k];
    r.resize(4, "-");
    r[col] = std::move(v);
  };
  for (const auto& e : p.r_table) put(e.producers, 0, fmt::format("{:.1f}", e.r_gbps));
  for (const auto& e : p.delta_table) put(e.producers, 1, fmt::format("{:.3f}", e.delta_us));
  for (const auto& e : p.q_table)
    put(e.producers, 2, fmt::format("{}{:.3f}", e.lower_bound ? ">=" : "", e.q_bytes / kMiB));
  for (const auto& e : p.q_cold_table) put(e.producers, 3, fmt::format("{:.3f}", e.q_bytes / kMiB));
  s << fmt::format("  {:>5} {:>10} {:>10} {:>12} {:>12}\n", "K", "R (GB/s)", "delta (us)", "Q (MiB)",
                   "Q_cold (MiB)");
  for (const auto& [k, r] : rows)
    s << fmt::format("  {:>5} {:>10} {:>10} {:>12} {:>12}\n", k, r[0], r[1], r[2], r[3]);
  s << fmt::format("  R_agg = {:.1f} GB/s (delivered rate of all producers; drives the fill terms)\n",
                   p.r_agg_gbps);
  if (p.sm_count > 0) s << fmt::format("  sm_count = {}\n", p.sm_count);
  if (!p.source.empty()) s << "  source: " << p.source << "\n";
  return s.str();
}

}  // namespace xstage::model
