// Burst-Gap model: closed-form predictions (docs/model.md derives them), parameter I/O and
// input validation.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "model/json_fields.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"

namespace xstage::model {

double ColdExtension::extra_us(long long volume_bytes) const {
  return c0_us + c1_us_per_mib * static_cast<double>(volume_bytes) / kMiB;
}

double Params::t0_us(long long burst_bytes) const {
  return t0_fixed_us +
         static_cast<double>(burst_bytes) / (issue_gbps_per_producer * kBytesPerUsPerGbps);
}

double Params::q_bytes(int producers) const {
  if (q_bytes_by_k.empty()) throw Error("params: the Q table (q_bytes_by_k) is empty");
  // Nearest table entries at or below / at or above K; the table need not be sorted.
  const std::pair<int, double>* lo = nullptr;
  const std::pair<int, double>* hi = nullptr;
  for (const auto& e : q_bytes_by_k) {
    if (e.first <= producers && (!lo || e.first > lo->first)) lo = &e;
    if (e.first >= producers && (!hi || e.first < hi->first)) hi = &e;
  }
  if (!lo) return hi->second;  // below the table: clamp
  if (!hi) return lo->second;  // above the table: clamp
  if (lo->first == hi->first) return lo->second;
  const double w = static_cast<double>(producers - lo->first) / (hi->first - lo->first);
  return lo->second + w * (hi->second - lo->second);
}

void check_params(const Params& p) {
  auto bad = [](const std::string& what) { throw Error(format_error("params", what)); };
  if (!std::isfinite(p.t0_fixed_us) || p.t0_fixed_us < 0)
    bad(fmt::format("t0_fixed_us must be >= 0, got {}", p.t0_fixed_us));
  if (!std::isfinite(p.issue_gbps_per_producer) || p.issue_gbps_per_producer <= 0)
    bad(fmt::format("issue_gbps_per_producer must be > 0, got {}", p.issue_gbps_per_producer));
  if (!std::isfinite(p.r_gbps) || p.r_gbps <= 0)
    bad(fmt::format("r_gbps must be > 0, got {}", p.r_gbps));
  if (p.q_bytes_by_k.empty()) bad("q_bytes_by_k must list at least one (producers, q_bytes) pair");
  std::set<int> seen;
  for (const auto& [k, q] : p.q_bytes_by_k) {
    if (k < 1) bad(fmt::format("q_bytes_by_k: producers must be >= 1, got {}", k));
    if (!std::isfinite(q) || q < 0) bad(fmt::format("q_bytes_by_k: Q for K={} must be >= 0, got {}", k, q));
    if (!seen.insert(k).second) bad(fmt::format("q_bytes_by_k: K={} is listed twice", k));
  }
  if (!std::isfinite(p.cold.c0_us) || !std::isfinite(p.cold.c1_us_per_mib))
    bad("cold extension coefficients must be finite");
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
  if (!(p.r_gbps > 0) || !(p.issue_gbps_per_producer > 0))
    throw Error("predict: params have a non-positive rate (run check_params first)");
  Prediction out;
  const long long volume = static_cast<long long>(producers) * burst_bytes;
  const double v = static_cast<double>(volume);
  const double r = p.r_gbps * kBytesPerUsPerGbps;  // bytes per us
  const double t0 = p.t0_us(burst_bytes);
  const double q = p.q_bytes(producers);
  const double drain = v / r;
  const double drain_bound = drain - gap_us;  // stage never empties: one burst per V/R
  const double fill_bound = (v - q) / r;      // burst alone overfills an empty stage

  out.volume_bytes = volume;
  out.t0_us = t0;
  out.drain_us = drain;
  out.q_bytes = q;
  out.issue_us = std::max({t0, drain_bound, fill_bound});
  out.period_us = out.issue_us + gap_us;
  out.backpressure_us = out.issue_us - t0;
  if (out.issue_us <= t0) out.regime = Regime::kIssueBound;
  else if (drain_bound >= fill_bound) out.regime = Regime::kDrainBound;
  else out.regime = Regime::kFillBound;

  // At the end of a burst's issue the stage holds V - R*T_iss(isolated) bytes; the next
  // burst is unaffected once they have drained. Equals [V/R - T0]+ unless the burst
  // overfills the stage, where it is Q/R.
  const double isolated = std::max(t0, fill_bound);
  out.recovery_gap_us = std::max(0.0, drain - isolated);
  out.cold_issue_us = isolated;
  out.cold_issue_ext_us = isolated + p.cold.extra_us(volume);

  // BRIEF's two conditions; a relative tolerance keeps G = G* (computed in floating point)
  // on the free side of the boundary.
  const double tol = 1e-9 * std::max(1.0, t0);
  out.backpressure_free = drain_bound <= t0 + tol && std::max(0.0, v - r * t0) <= q + 1e-9 * v;
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

void to_json(nlohmann::json& j, const ColdExtension& c) {
  j = nlohmann::json{{"c0_us", c.c0_us}, {"c1_us_per_mib", c.c1_us_per_mib}};
}

void from_json(const nlohmann::json& j, ColdExtension& c) {
  detail::require_object(j, "cold");
  c.c0_us = detail::required_field<double>(j, "c0_us", "cold");
  c.c1_us_per_mib = detail::required_field<double>(j, "c1_us_per_mib", "cold");
}

void to_json(nlohmann::json& j, const Params& p) {
  nlohmann::json q = nlohmann::json::array();
  for (const auto& [k, bytes] : p.q_bytes_by_k) q.push_back({{"producers", k}, {"q_bytes", bytes}});
  j = nlohmann::json{{"schema", kParamsSchema},
                     {"t0_fixed_us", p.t0_fixed_us},
                     {"issue_gbps_per_producer", p.issue_gbps_per_producer},
                     {"r_gbps", p.r_gbps},
                     {"q_bytes_by_k", q},
                     {"cold", p.cold},
                     {"sm_count", p.sm_count},
                     {"source", p.source}};
}

void from_json(const nlohmann::json& j, Params& p) {
  const std::string where = "params";
  detail::require_object(j, where);
  const auto schema = detail::required_field<std::string>(j, "schema", where);
  if (schema != kParamsSchema)
    throw Error(format_error(where, fmt::format("schema is \"{}\", expected \"{}\"", schema, kParamsSchema)));
  Params out;
  out.t0_fixed_us = detail::required_field<double>(j, "t0_fixed_us", where);
  out.issue_gbps_per_producer = detail::required_field<double>(j, "issue_gbps_per_producer", where);
  out.r_gbps = detail::required_field<double>(j, "r_gbps", where);
  const auto it = j.find("q_bytes_by_k");
  if (it == j.end()) throw Error(format_error(where, "missing field \"q_bytes_by_k\""));
  if (!it->is_array()) throw Error(format_error(where, "field \"q_bytes_by_k\": expected an array"));
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string at = fmt::format("{}: q_bytes_by_k[{}]", where, i);
    detail::require_object((*it)[i], at);
    out.q_bytes_by_k.emplace_back(detail::required_field<int>((*it)[i], "producers", at),
                                  detail::required_field<double>((*it)[i], "q_bytes", at));
  }
  std::sort(out.q_bytes_by_k.begin(), out.q_bytes_by_k.end());
  if (j.contains("cold")) out.cold = j.at("cold").get<ColdExtension>();
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
                     {"cold_issue_ext_us", p.cold_issue_ext_us},
                     {"backpressure_free", p.backpressure_free},
                     {"t0_us", p.t0_us},
                     {"drain_us", p.drain_us},
                     {"q_bytes", p.q_bytes},
                     {"volume_bytes", p.volume_bytes},
                     {"regime", regime_name(p.regime)}};
}

Params load_params(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(format_error(path, "is a directory, not a params file"));
  std::ifstream in(path);
  if (!in) throw Error(format_error(path, "cannot open the params file for reading"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(format_error(path, std::string("not valid JSON (") + e.what() + ")"));
  }
  try {
    return j.get<Params>();
  } catch (const Error& e) {
    throw Error(format_error(path, e.what()));
  }
}

void save_params(const Params& p, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error(format_error(path, "cannot open the params file for writing"));
  out << nlohmann::json(p).dump(2) << "\n";
  if (!out) throw Error(format_error(path, "write failed"));
}

std::string format_params(const Params& p) {
  std::ostringstream s;
  s << fmt::format("  T0(B)  = {:.4f} us + B / ({:.2f} GB/s per producer)\n", p.t0_fixed_us,
                   p.issue_gbps_per_producer);
  s << fmt::format("  R      = {:.1f} GB/s (aggregate drain rate)\n", p.r_gbps);
  for (const auto& [k, q] : p.q_bytes_by_k)
    s << fmt::format("  Q(K={:>3}) = {:.3f} MiB ({:.0f} B)\n", k, q / kMiB, q);
  s << fmt::format("  cold extension: +{:.4f} us + {:.4f} us/MiB * V\n", p.cold.c0_us,
                   p.cold.c1_us_per_mib);
  if (p.sm_count > 0) s << fmt::format("  sm_count = {}\n", p.sm_count);
  if (!p.source.empty()) s << "  source: " << p.source << "\n";
  return s.str();
}

}  // namespace xstage::model
