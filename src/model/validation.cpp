// Held-out validation: predict every "validate" point, summarise the relative errors.
#include "xstage/validation.hpp"

#include <fmt/format.h>

#include <cmath>
#include <sstream>

#include "model/stats.hpp"

namespace xstage::model {

ValidationOptions ValidationOptions::from(const FitOptions& f) {
  ValidationOptions v;
  static_cast<PointFilter&>(v) = f;
  v.role = "validate";
  return v;
}

ErrorStats error_stats(const std::vector<double>& rel_errors) {
  ErrorStats s;
  s.n = static_cast<int>(rel_errors.size());
  s.median_rel = detail::median(rel_errors);
  s.p90_rel = detail::quantile(rel_errors, 0.9);
  return s;
}

ValidationReport validate(const Params& p, const std::vector<ProbePoint>& pts, const ValidationOptions& opts) {
  ValidationReport r;
  r.filter = opts.describe();
  std::vector<double> e_issue, e_period, e_cold_base, e_cold_ext;
  auto rel = [](double pred, double meas) { return std::fabs(pred - meas) / meas; };
  for (const auto& pt : pts) {
    if (!opts.matches(pt)) continue;
    const Prediction pr = predict(p, pt.producers, pt.burst_bytes, pt.gap_us);
    ValidatedPoint v;
    v.producers = pt.producers;
    v.burst_bytes = pt.burst_bytes;
    v.gap_us = pt.gap_us;
    v.regime = regime_name(pr.regime);
    v.steady_issue_meas_us = pt.steady_issue_us;
    v.steady_issue_pred_us = pr.issue_us;
    v.period_meas_us = pt.period_us;
    v.period_pred_us = pr.period_us;
    v.cold_meas_us = pt.cold_issue_us;
    v.cold_pred_base_us = pr.cold_issue_base_us;
    v.cold_pred_ext_us = pr.cold_issue_us;
    // 0 means "not measured": such a quantity is skipped for this point.
    if (pt.steady_issue_us > 0) e_issue.push_back(rel(pr.issue_us, pt.steady_issue_us));
    if (pt.period_us > 0) e_period.push_back(rel(pr.period_us, pt.period_us));
    if (pt.cold_issue_us > 0) {
      e_cold_base.push_back(rel(pr.cold_issue_base_us, pt.cold_issue_us));
      e_cold_ext.push_back(rel(pr.cold_issue_us, pt.cold_issue_us));
    }
    r.details.push_back(std::move(v));
  }
  r.points = static_cast<int>(r.details.size());
  r.steady_issue = error_stats(e_issue);
  r.period = error_stats(e_period);
  r.cold_base = error_stats(e_cold_base);
  r.cold_ext = error_stats(e_cold_ext);
  return r;
}

namespace {
nlohmann::json stat_json(const ErrorStats& s) {
  return {{"n", s.n}, {"median_rel_err", s.median_rel}, {"p90_rel_err", s.p90_rel}};
}
}  // namespace

void to_json(nlohmann::json& j, const ValidationReport& r) {
  nlohmann::json details = nlohmann::json::array();
  for (const auto& v : r.details)
    details.push_back({{"producers", v.producers},
                       {"burst_bytes", v.burst_bytes},
                       {"gap_us", v.gap_us},
                       {"regime", v.regime},
                       {"steady_issue_meas_us", v.steady_issue_meas_us},
                       {"steady_issue_pred_us", v.steady_issue_pred_us},
                       {"period_meas_us", v.period_meas_us},
                       {"period_pred_us", v.period_pred_us},
                       {"cold_meas_us", v.cold_meas_us},
                       {"cold_pred_base_us", v.cold_pred_base_us},
                       {"cold_pred_ext_us", v.cold_pred_ext_us}});
  j = nlohmann::json{
      {"filter", r.filter},
      {"points", r.points},
      {"base", {{"steady_issue", stat_json(r.steady_issue)}, {"period", stat_json(r.period)},
                {"cold_issue", stat_json(r.cold_base)}}},
      {"extended", {{"steady_issue", stat_json(r.steady_issue)}, {"period", stat_json(r.period)},
                    {"cold_issue", stat_json(r.cold_ext)}}},
      {"details", details}};
}

std::string format_validation(const ValidationReport& r) {
  std::ostringstream s;
  s << fmt::format("# Validation on {} held-out points ({})\n", r.points, r.filter);
  if (r.points == 0) {
    s << "# no held-out points: nothing to validate\n";
    return s.str();
  }
  s << "# error = |predicted - measured| / measured\n";
  s << fmt::format("# {:<14} {:>5}   {:-^21}   {:-^21}\n", "", "", " base model ", " extended model ");
  s << fmt::format("# {:<14} {:>5}   {:>10} {:>10}   {:>10} {:>10}\n", "quantity", "n", "median", "p90",
                   "median", "p90");
  auto pct = [](double x) { return fmt::format("{:.2f}%", 100 * x); };
  auto row = [&](const char* name, const ErrorStats& b, const ErrorStats& e) {
    if (b.n == 0) {
      s << fmt::format("  {:<14} {:>5}   {:>10} {:>10}   {:>10} {:>10}\n", name, 0, "n/a", "n/a", "n/a", "n/a");
      return;
    }
    s << fmt::format("  {:<14} {:>5}   {:>10} {:>10}   {:>10} {:>10}\n", name, b.n, pct(b.median_rel),
                     pct(b.p90_rel), pct(e.median_rel), pct(e.p90_rel));
  };
  row("steady_issue", r.steady_issue, r.steady_issue);
  row("period", r.period, r.period);
  row("cold_issue", r.cold_base, r.cold_ext);
  return s.str();
}

}  // namespace xstage::model
