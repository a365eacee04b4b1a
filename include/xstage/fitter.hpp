// Calibration of the Burst-Gap model from probe points (BRIEF, part 2; docs/model.md):
//   T0 line  from large-gap (isolated, warm) bursts below the knee,
//   R        from zero-gap periodic bursts that are drain-bound (median of V/period),
//   Q per K  from the knee of the large-gap issue span over V,
//   cold     affine correction fitted on the cold-burst residuals (the extension).
// T0 and the knee classification depend on each other, so the fit iterates until the set of
// below-knee points stops changing.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xstage/model.hpp"
#include "xstage/probe_data.hpp"

namespace xstage::model {

struct FitOptions {
  // Only points with exactly these labels calibrate the model.
  std::string role = "fit";
  std::string dest = "peer";
  std::string store = "v4";
  std::string addr = "fresh";
  std::string gap_kind = "idle";
  double zero_gap_max_us = 1e-6;      // gap_us <= this: back-to-back bursts (R)
  double isolated_min_gap_us = 10.0;  // gap_us >= this: isolated warm bursts (T0, Q); per
                                      // (K, B) only the largest such gap is used
  double r_min_period_over_t0 = 1.5;  // a zero-gap point measures R only if period >= this x T0(B)
  double knee_margin = 0.25;          // above the knee: span > (1+m) T0(B); below: (V-Q)/R <= (1-m) T0(B)
  int max_iterations = 20;

  bool matches(const ProbePoint& p) const;  // the label filters above
  std::string describe() const;             // "role=fit dest=peer store=v4 ..."
};

// Zero-gap estimates of R for one total volume V, over its K*B splits.
struct RSplitGroup {
  long long volume_bytes = 0;
  int points = 0;
  int splits = 0;  // distinct K
  double min_gbps = 0, max_gbps = 0;
  double spread_rel = 0;  // (max - min) / median of the group
};

struct QFit {
  int producers = 0;
  double q_bytes = 0;
  int points = 0;      // large-gap points of this K
  int above_knee = 0;  // of which clearly above the knee (they determine Q)
  double rms_rel_err = 0;
};

struct FitResult {
  Params params;
  int usable_points = 0;  // passed the label filters
  // R
  int r_points = 0;
  double r_min_gbps = 0, r_max_gbps = 0;
  double r_spread_rel = 0;  // largest spread over the V groups with >= 2 splits (0 if none)
  std::vector<RSplitGroup> r_splits;
  // T0
  int t0_points = 0;
  double t0_rms_rel_err = 0;
  // Q
  std::vector<QFit> q_fits;
  // cold extension
  int cold_points = 0;
  double cold_rms_base_us = 0, cold_rms_ext_us = 0;
  int iterations = 0;
  std::vector<std::string> notes;  // parameters left undetermined, clamps applied
};

// Throws xstage::Error naming the parameter and what data it needs when too few usable
// points exist for T0, R or Q. The cold extension is left at zero (with a note) when no
// point has a cold measurement.
FitResult fit(const std::vector<ProbePoint>& pts, const FitOptions& opts = {});
// Same, and records the run's sm_count and a source line (device, date, commit) in params.
FitResult fit(const ProbeRun& run, const FitOptions& opts = {});

// {"params": ..., "r": {...}, "t0": {...}, "q": [...], "cold": {...}, "notes": [...]}
void to_json(nlohmann::json& j, const FitResult& r);
std::string format_fit(const FitResult& r);  // human-readable summary, several lines

}  // namespace xstage::model
