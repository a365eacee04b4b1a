// The Burst-Gap model of the X-Stage (docs/model.md): measured tables T0(B), R(K), delta(K),
// Q(K), Q_cold(K) and the scalar R_agg turn a store schedule (K producers x B bytes per
// burst, gap G) into predicted issue spans, periods and backpressure. Pure host code: the
// fitter, the simulator, the CLI and the fused-kernel schedulers all share these equations.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xstage::model {

// Units: times in microseconds, sizes in bytes, rates in GB/s (1 GB/s = 1e9 B/s = 1e3 B/us).
inline constexpr double kBytesPerUsPerGbps = 1e3;
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr const char* kParamsSchema = "xstage.params.v2";

// One entry of each table. Tables are looked up by piecewise-linear interpolation in their
// key; they need not be sorted (load_params and fit sort them).
struct T0Entry {
  long long burst_bytes = 0;  // B per producer
  double t0_us = 0;           // issue span of an isolated warm burst of that B
  bool operator==(const T0Entry&) const = default;
};
struct REntry {
  int producers = 0;  // K
  double r_gbps = 0;  // drain rate seen by the median producer, as K*B/period
  bool operator==(const REntry&) const = default;
};
struct DeltaEntry {
  int producers = 0;
  double delta_us = 0;  // turnaround: extra time per burst boundary under backpressure
  bool operator==(const DeltaEntry&) const = default;
};
struct QEntry {
  int producers = 0;
  double q_bytes = 0;        // warm X-Stage capacity
  bool lower_bound = false;  // no isolated burst of this K overflowed: Q is at least this
  bool operator==(const QEntry&) const = default;
};
struct QColdEntry {
  int producers = 0;
  double q_bytes = 0;  // capacity seen by the first burst after a kernel launch
  bool operator==(const QColdEntry&) const = default;
};

struct Params {
  std::vector<T0Entry> t0_table;
  std::vector<REntry> r_table;
  double r_agg_gbps = 0;  // rate all producers' bytes are delivered at: drives the fill terms
  std::vector<DeltaEntry> delta_table;
  std::vector<QEntry> q_table;
  std::vector<QColdEntry> q_cold_table;
  int sm_count = 0;    // SMs of the device the params were fitted on (0 = unknown)
  std::string source;  // free text: device, date, commit, data file

  // T0: constant below the smallest B, linear between entries, and above the largest B the
  // last segment's slope continued (a falling last segment is not continued downward).
  double t0_us(long long burst_bytes) const;
  // The K tables: linear between entries, clamped at both ends.
  double r_gbps(int producers) const;
  double delta_us(int producers) const;
  double q_bytes(int producers) const;
  bool q_lower_bound(int producers) const;  // an entry the lookup used is a lower bound
  double q_cold_bytes(int producers) const;
};

// Throws xstage::Error (context "params") when a field is out of range: every table
// non-empty, keys >= 1 and unique, values finite and >= 0, rates (r_gbps, r_agg_gbps) > 0.
void check_params(const Params& p);

// The term that sets the steady issue span.
enum class Regime {
  kIssueBound,  // T0: no backpressure
  kDrainBound,  // V/R(K) - G - delta(K): the previous bursts are still draining
  kFillBound,   // (V - Q(K))/R_agg: the burst alone overfills the stage
};
const char* regime_name(Regime r);

struct Prediction {
  double issue_us = 0;            // steady issue span T_iss = max(T0, D, F)
  double period_us = 0;           // start-to-start = T_iss + G (+ delta(K) when drain-bound)
  double backpressure_us = 0;     // T_iss - T0 (stall time of a burst)
  double recovery_gap_us = 0;     // smallest G at which T_iss is the isolated span max(T0, F)
  double cold_issue_us = 0;       // first burst after launch, extended model: max(T0, (V - Q_cold)/R_agg)
  double cold_issue_base_us = 0;  // same, base model: the isolated warm span max(T0, F)
  bool backpressure_free = false;  // T_iss = T0: V/(T0 + G + delta) <= R(K) and [V - R_agg T0]+ <= Q
  // The terms, reported so a reader can check the arithmetic.
  double t0_us = 0;
  double drain_term_us = 0;      // D = V/R(K) - G - delta(K)
  double fill_term_us = 0;       // F = (V - Q(K))/R_agg
  double cold_fill_term_us = 0;  // (V - Q_cold(K))/R_agg
  double r_gbps = 0;             // R(K)
  double r_agg_gbps = 0;
  double delta_us = 0;           // delta(K)
  double q_bytes = 0;            // Q(K)
  bool q_lower_bound = false;    // Q(K) is a lower bound, so F is an upper bound
  double q_cold_bytes = 0;       // Q_cold(K)
  long long volume_bytes = 0;    // V = K*B
  Regime regime = Regime::kIssueBound;
};

// K producers, B bytes each per burst, gap G (measured from the end of a burst's issue).
// Params must be valid (check_params); inputs are not re-validated (see validate_inputs).
Prediction predict(const Params& p, int producers, long long burst_bytes, double gap_us);

// Throws xstage::InvalidArgument with one clear line for: producers < 1 or > max_producers
// (when max_producers > 0), burst_bytes <= 0 or not a multiple of 16 (the v4 store width),
// gap negative, NaN or infinite.
void validate_inputs(int producers, long long burst_bytes, double gap_us, int max_producers);

// Params JSON carries "schema": "xstage.params.v2"; from_json checks it (a v1 file gets a
// message saying to refit), the fields and their ranges (xstage::Error), and sorts the tables.
void to_json(nlohmann::json& j, const Params& p);
void from_json(const nlohmann::json& j, Params& p);
void to_json(nlohmann::json& j, const Prediction& p);
void from_json(const nlohmann::json& j, Prediction& p);  // throws xstage::Error on a missing field

// Reads a params file; throws xstage::Error "<path>: <problem>".
Params load_params(const std::string& path);
void save_params(const Params& p, const std::string& path);

// Human-readable fixed-width tables of every parameter, and the source.
std::string format_params(const Params& p);

}  // namespace xstage::model
