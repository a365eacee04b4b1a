// Probe data JSON ("xstage.probe.v1"): field names are the ProbePoint / ProbeRun member
// names. Reading is strict about what the fitter depends on (configuration labels and the
// three main measurements) and lenient about the rest, which defaults as in the struct.
#include <fmt/format.h>

#include <array>
#include <cmath>

#include "model/json_fields.hpp"
#include "model/json_file.hpp"
#include "xstage/error.hpp"
#include "xstage/probe_data.hpp"

namespace xstage {
namespace {

constexpr const char* kProbeSchema = "xstage.probe.v1";

void check_point(const ProbePoint& p, const std::string& where) {
  auto bad = [&](const std::string& what) { throw Error(format_error(where, what)); };
  if (p.producers < 1) bad(fmt::format("producers must be >= 1, got {}", p.producers));
  if (p.threads < 0) bad(fmt::format("threads must be >= 0, got {}", p.threads));
  if (p.burst_bytes <= 0) bad(fmt::format("burst_bytes must be > 0, got {}", p.burst_bytes));
  if (p.bursts < 0) bad(fmt::format("bursts must be >= 0, got {}", p.bursts));
  if (!std::isfinite(p.gap_us) || p.gap_us < 0) bad(fmt::format("gap_us must be >= 0, got {}", p.gap_us));
  if (p.role != "fit" && p.role != "validate")
    bad(fmt::format("role must be \"fit\" or \"validate\", got \"{}\"", p.role));
  for (const auto& [name, value] : std::array<std::pair<const char*, const std::string*>, 4>{
           {{"gap_kind", &p.gap_kind}, {"store", &p.store}, {"dest", &p.dest}, {"addr", &p.addr}}})
    if (value->empty()) bad(fmt::format("{} must not be empty", name));
  // Times and rates: finite and not negative (0 means "not measured").
  if (p.warmup_bytes < 0) bad(fmt::format("warmup_bytes must be >= 0, got {}", p.warmup_bytes));
  for (const auto& [name, value] : std::array<std::pair<const char*, double>, 13>{{
           {"cold_issue_us", p.cold_issue_us},
           {"steady_issue_us", p.steady_issue_us},
           {"steady_issue_p10_us", p.steady_issue_p10_us},
           {"steady_issue_p90_us", p.steady_issue_p90_us},
           {"period_us", p.period_us},
           {"gap_measured_us", p.gap_measured_us},
           {"completion_us", p.completion_us},
           {"drain_gbps", p.drain_gbps},
           {"delivered_gbps", p.delivered_gbps},
           {"aggregate_gbps", p.aggregate_gbps},
           {"producer_skew", p.producer_skew},
           {"pre_wait_us", p.pre_wait_us},
           {"gap_us", p.gap_us},
       }})
    if (!std::isfinite(value) || value < 0) bad(fmt::format("{} must be a finite value >= 0, got {}", name, value));
  for (size_t i = 0; i < p.issue_us_per_burst.size(); ++i)
    if (!std::isfinite(p.issue_us_per_burst[i]) || p.issue_us_per_burst[i] < 0)
      bad(fmt::format("issue_us_per_burst[{}] must be a finite value >= 0", i));
}

ProbePoint parse_point(const nlohmann::json& j, const std::string& where) {
  using detail::optional_field;
  using detail::required_field;
  detail::require_object(j, where);
  ProbePoint p;
  p.producers = required_field<int>(j, "producers", where);
  p.threads = optional_field<int>(j, "threads", 0, where);
  p.burst_bytes = required_field<long long>(j, "burst_bytes", where);
  p.gap_us = required_field<double>(j, "gap_us", where);
  p.gap_kind = required_field<std::string>(j, "gap_kind", where);
  p.store = required_field<std::string>(j, "store", where);
  p.dest = required_field<std::string>(j, "dest", where);
  p.addr = required_field<std::string>(j, "addr", where);
  p.bursts = optional_field<int>(j, "bursts", 0, where);
  p.warmup_bytes = optional_field<long long>(j, "warmup_bytes", 0, where);
  p.pre_wait_us = optional_field<double>(j, "pre_wait_us", 0.0, where);
  p.role = required_field<std::string>(j, "role", where);
  p.cold_issue_us = required_field<double>(j, "cold_issue_us", where);
  p.steady_issue_us = required_field<double>(j, "steady_issue_us", where);
  p.period_us = required_field<double>(j, "period_us", where);
  p.steady_issue_p10_us = optional_field<double>(j, "steady_issue_p10_us", 0.0, where);
  p.steady_issue_p90_us = optional_field<double>(j, "steady_issue_p90_us", 0.0, where);
  p.gap_measured_us = optional_field<double>(j, "gap_measured_us", 0.0, where);
  p.completion_us = optional_field<double>(j, "completion_us", 0.0, where);
  p.drain_gbps = optional_field<double>(j, "drain_gbps", 0.0, where);
  p.delivered_gbps = optional_field<double>(j, "delivered_gbps", 0.0, where);
  p.aggregate_gbps = optional_field<double>(j, "aggregate_gbps", 0.0, where);
  p.producer_skew = optional_field<double>(j, "producer_skew", 0.0, where);
  if (const auto it = j.find("issue_us_per_burst"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw Error(format_error(where, "field \"issue_us_per_burst\": expected an array"));
    for (size_t i = 0; i < it->size(); ++i)
      p.issue_us_per_burst.push_back(
          detail::convert_field<double>((*it)[i], "issue_us_per_burst", where));
  }
  check_point(p, where);
  return p;
}

}  // namespace

bool PointFilter::matches(const ProbePoint& p) const {
  return p.role == role && p.dest == dest && p.store == store && p.addr == addr && p.gap_kind == gap_kind &&
         p.warmup_bytes == 0 && p.pre_wait_us == 0;
}

std::string PointFilter::describe() const {
  return fmt::format("role={} dest={} store={} addr={} gap_kind={}, no warm-up", role, dest, store, addr, gap_kind);
}

void to_json(nlohmann::json& j, const ProbePoint& p) {
  j = nlohmann::json{{"producers", p.producers},
                     {"threads", p.threads},
                     {"burst_bytes", p.burst_bytes},
                     {"gap_us", p.gap_us},
                     {"gap_kind", p.gap_kind},
                     {"store", p.store},
                     {"dest", p.dest},
                     {"addr", p.addr},
                     {"bursts", p.bursts},
                     {"warmup_bytes", p.warmup_bytes},
                     {"pre_wait_us", p.pre_wait_us},
                     {"role", p.role},
                     {"cold_issue_us", p.cold_issue_us},
                     {"steady_issue_us", p.steady_issue_us},
                     {"steady_issue_p10_us", p.steady_issue_p10_us},
                     {"steady_issue_p90_us", p.steady_issue_p90_us},
                     {"period_us", p.period_us},
                     {"gap_measured_us", p.gap_measured_us},
                     {"completion_us", p.completion_us},
                     {"drain_gbps", p.drain_gbps},
                     {"delivered_gbps", p.delivered_gbps},
                     {"aggregate_gbps", p.aggregate_gbps},
                     {"producer_skew", p.producer_skew},
                     {"issue_us_per_burst", p.issue_us_per_burst}};
}

void from_json(const nlohmann::json& j, ProbePoint& p) { p = parse_point(j, "probe point"); }

void to_json(nlohmann::json& j, const ProbeRun& r) {
  j = nlohmann::json{{"schema", kProbeSchema},   {"device", r.device},
                     {"commit", r.commit},       {"date", r.date},
                     {"sm_count", r.sm_count},   {"clock_ghz", r.clock_ghz},
                     {"ce_peer_gbps", r.ce_peer_gbps}, {"team", r.team}, {"points", r.points}};
  if (!r.team_note.empty()) j["team_note"] = r.team_note;
}

void from_json(const nlohmann::json& j, ProbeRun& r) {
  using detail::optional_field;
  const std::string where = "probe run";
  detail::require_object(j, where);
  const auto schema = detail::required_field<std::string>(j, "schema", where);
  if (schema != kProbeSchema)
    throw Error(format_error(where, fmt::format("schema is \"{}\", expected \"{}\"", schema, kProbeSchema)));
  ProbeRun out;
  out.device = optional_field<std::string>(j, "device", "", where);
  out.commit = optional_field<std::string>(j, "commit", "", where);
  out.date = optional_field<std::string>(j, "date", "", where);
  out.sm_count = optional_field<int>(j, "sm_count", 0, where);
  out.clock_ghz = optional_field<double>(j, "clock_ghz", 0.0, where);
  out.ce_peer_gbps = optional_field<double>(j, "ce_peer_gbps", 0.0, where);
  out.team = optional_field<std::string>(j, "team", "gpus", where);
  out.team_note = optional_field<std::string>(j, "team_note", "", where);
  if (out.team != "gpus" && out.team != "virtual")
    throw Error(format_error(where, fmt::format("team must be \"gpus\" or \"virtual\", got \"{}\"", out.team)));
  if (out.sm_count < 0) throw Error(format_error(where, fmt::format("sm_count must be >= 0, got {}", out.sm_count)));
  const auto it = j.find("points");
  if (it == j.end()) throw Error(format_error(where, "missing field \"points\""));
  if (!it->is_array()) throw Error(format_error(where, "field \"points\": expected an array"));
  out.points.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i)
    out.points.push_back(parse_point((*it)[i], fmt::format("points[{}]", i)));
  r = std::move(out);
}

ProbeRun load_probe_run(const std::string& path) { return detail::load_json_file<ProbeRun>(path, "probe data file"); }

void save_probe_run(const ProbeRun& run, const std::string& path) {
  detail::save_json_file(nlohmann::json(run), path, "probe data file", 1);
}

}  // namespace xstage
