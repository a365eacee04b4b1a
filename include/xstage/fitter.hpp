// Calibration of the Burst-Gap model from probe points (BRIEF, part 2; docs/model.md):
//   R(K), delta(K), R_agg  from zero-gap (back-to-back) bursts,
//   T0(B)                  plateaus of large-gap (isolated, warm) bursts below the knee,
//   Q(K)                   from the knee of the large-gap spans, or a lower bound without one,
//   Q_cold(K)              from the first burst after launch (the extension).
// T0 and the knee classification depend on each other, so that part iterates until the set
// of below-knee points stops changing.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xstage/model.hpp"
#include "xstage/probe_data.hpp"

namespace xstage::model {

// The inherited PointFilter (role "fit") picks the points that calibrate the model.
struct FitOptions : PointFilter {
  double zero_gap_max_us = 1e-6;      // gap_us <= this: back-to-back bursts (R, delta, R_agg)
  int zero_gap_min_bursts = 64;       // ... with at least this many bursts (a full stage)
  double isolated_min_gap_us = 10.0;  // gap_us >= this: isolated warm bursts (T0, Q); per
                                      // (K, B) only the largest such gap is used
  double knee_margin = 0.25;          // above the knee: span > (1+m) max(T0, D);
                                      // below: D and F <= (1-m) T0
  int max_iterations = 20;
};

struct T0Fit {
  long long burst_bytes = 0;
  double t0_us = 0;
  int points = 0;  // below-knee large-gap points at this B (one per K, or more)
  double min_us = 0, max_us = 0;
};

// Zero-gap estimates for one K over its K*B splits.
struct RFit {
  int producers = 0;
  double r_gbps = 0;  // median of K*B/period
  int points = 0;
  int splits = 0;  // distinct B
  double min_gbps = 0, max_gbps = 0;
  double spread_rel = 0;  // (max - min) / median
  double delta_us = 0;    // median of gap_measured - gap (clamped at 0)
};

struct QFit {
  int producers = 0;
  double q_bytes = 0;
  bool lower_bound = false;  // no point above the knee: max of V - R_agg T0(B)
  int points = 0;            // large-gap points of this K
  int above_knee = 0;        // of which clearly above the knee (they determine Q)
  double rms_rel_err = 0;    // of the steady formula over the K's large-gap points
};

struct QColdFit {
  int producers = 0;
  double q_bytes = 0;
  int points = 0;       // fitting points of this K with a cold measurement (all gaps)
  int overflowing = 0;  // of which the fitted cold model puts above T0
  double rms_rel_err_base = 0, rms_rel_err_ext = 0;  // cold span: base model vs extension
};

struct FitResult {
  Params params;
  int usable_points = 0;  // passed the label filters
  int iterations = 0;
  std::vector<T0Fit> t0_fits;
  int t0_points = 0;
  double t0_rms_rel_err = 0;
  std::vector<RFit> r_fits;
  int r_points = 0;  // zero-gap points behind R(K) and delta(K)
  int r_agg_points = 0;
  double r_agg_min_gbps = 0, r_agg_max_gbps = 0;
  std::vector<QFit> q_fits;
  std::vector<QColdFit> q_cold_fits;
  int cold_points = 0;
  std::vector<std::string> notes;  // lower bounds, defaults, clamps applied
};

// Throws xstage::Error naming the parameter and the data it needs: no usable points; no
// large-gap points, or fewer than two burst sizes below the knee (T0, Q); no zero-gap point
// with enough bursts (R, delta); none of those with aggregate_gbps > 0 (R_agg). Q(K) without
// an overflowing burst is a lower bound, and without cold measurements Q_cold = Q, each
// with a note.
FitResult fit(const std::vector<ProbePoint>& pts, const FitOptions& opts = {});
// Same, and records the run's sm_count and a source line (device, date, commit) in params.
FitResult fit(const ProbeRun& run, const FitOptions& opts = {});

// {"params", "usable_points", "iterations", "t0": {points, rms_rel_err, table}, "r": {points,
//  table}, "r_agg": {gbps, points, min_gbps, max_gbps}, "q": [...], "q_cold": {points, table},
//  "notes": [...]}
void to_json(nlohmann::json& j, const FitResult& r);
std::string format_fit(const FitResult& r);  // fixed-width tables, several lines

}  // namespace xstage::model
