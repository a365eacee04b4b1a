// Validation of the Burst-Gap model on held-out probe points (role "validate"): each point
// is predicted from the fitted params and compared with what was measured. Steady issue
// span and period are the same for the base and the extended model; the cold-burst span
// differs: the base model predicts an isolated warm burst (capacity Q(K)), the extension the
// smaller cold capacity Q_cold(K) of the first burst after a launch.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xstage/fitter.hpp"
#include "xstage/model.hpp"
#include "xstage/probe_data.hpp"

namespace xstage::model {

// The held-out points: the fit's label filters with role "validate".
struct ValidationOptions : PointFilter {
  ValidationOptions() { role = "validate"; }
  static ValidationOptions from(const FitOptions& f);
};

// Absolute relative error |pred - meas| / meas over the points that measured the quantity.
struct ErrorStats {
  int n = 0;
  double median_rel = 0;
  double p90_rel = 0;  // linear interpolation between order statistics
};

struct ValidatedPoint {
  int producers = 0;
  long long burst_bytes = 0;
  double gap_us = 0;
  std::string regime;
  double steady_issue_meas_us = 0, steady_issue_pred_us = 0;
  double period_meas_us = 0, period_pred_us = 0;
  double cold_meas_us = 0, cold_pred_base_us = 0, cold_pred_ext_us = 0;
};

struct ValidationReport {
  std::string filter;  // ValidationOptions::describe()
  int points = 0;      // held-out points that passed the filters
  ErrorStats steady_issue, period, cold_base, cold_ext;
  std::vector<ValidatedPoint> details;
};

ValidationReport validate(const Params& p, const std::vector<ProbePoint>& pts,
                          const ValidationOptions& opts = {});
ErrorStats error_stats(const std::vector<double>& rel_errors);

// {"filter", "points", "base": {steady_issue, period, cold_issue}, "extended": {...},
//  "details": [...]}; each stat is {n, median_rel_err, p90_rel_err}.
void to_json(nlohmann::json& j, const ValidationReport& r);
// Fixed-width table, one row per quantity, base and extended side by side.
std::string format_validation(const ValidationReport& r);

}  // namespace xstage::model
