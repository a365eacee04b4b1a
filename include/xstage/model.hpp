// The Burst-Gap model of the X-Stage (docs/model.md): three parameters (T0, R, Q) turn a
// store schedule (K producers x B bytes per burst, gap G) into predicted issue spans,
// periods and backpressure. Pure host code: the fitter, the simulator, the CLI and the
// fused-kernel schedulers all share these equations.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace xstage::model {

// Units: times in microseconds, sizes in bytes, rates in GB/s (1 GB/s = 1e9 B/s = 1e3 B/us).
inline constexpr double kBytesPerUsPerGbps = 1e3;
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr const char* kParamsSchema = "xstage.params.v1";

// Extension beyond the base model: the first burst after a kernel launch ("cold") is slower
// than a warm isolated burst on real hardware. Affine in the burst volume:
//   cold_ext = isolated + c0_us + c1_us_per_mib * V / MiB.
// Kept separate so it can be replaced once real data shows its shape.
struct ColdExtension {
  double c0_us = 0;
  double c1_us_per_mib = 0;
  double extra_us(long long volume_bytes) const;
};

struct Params {
  // T0(B) = t0_fixed_us + B / issue rate of one producer.
  double t0_fixed_us = 0;
  double issue_gbps_per_producer = 0;
  double r_gbps = 0;                                // aggregate drain rate R
  std::vector<std::pair<int, double>> q_bytes_by_k;  // (K, Q bytes), sorted by K
  ColdExtension cold;
  int sm_count = 0;     // SMs of the device the params were fitted on (0 = unknown)
  std::string source;   // free text: device, date, commit, data file

  double t0_us(long long burst_bytes) const;  // backpressure-free issue time of a burst
  double q_bytes(int producers) const;        // piecewise-linear in K, clamped at the ends
};

// Throws xstage::Error (context "params") when a field is out of range: rates must be > 0,
// t0_fixed >= 0, the Q table non-empty with K >= 1 unique and Q >= 0. Sorts nothing.
void check_params(const Params& p);

// The regime that sets the steady issue span.
enum class Regime {
  kIssueBound,  // T0: no backpressure
  kDrainBound,  // V/R - G: the previous bursts are still draining (periodic backpressure)
  kFillBound,   // (V - Q)/R: the burst alone overfills the stage
};
const char* regime_name(Regime r);

struct Prediction {
  double issue_us = 0;           // steady issue span T_iss = max(T0, V/R - G, (V - Q)/R)
  double period_us = 0;          // start-to-start = T_iss + G
  double backpressure_us = 0;    // T_iss - T0 (stall time of a burst)
  double recovery_gap_us = 0;    // smallest gap after which the next burst is at its isolated span
  double cold_issue_us = 0;      // first burst after launch, base model (= isolated span)
  double cold_issue_ext_us = 0;  // same, with the ColdExtension
  bool backpressure_free = false;  // V/(T0+G) <= R and [V - R T0]+ <= Q
  // Intermediate quantities, reported so a reader can check the arithmetic.
  double t0_us = 0;
  double drain_us = 0;  // V/R
  double q_bytes = 0;
  long long volume_bytes = 0;  // V = K*B
  Regime regime = Regime::kIssueBound;
};

// K producers, B bytes each per burst, gap G (measured from the end of a burst's issue).
// Params must be valid (check_params); inputs are not re-validated (see validate_inputs).
Prediction predict(const Params& p, int producers, long long burst_bytes, double gap_us);

// Throws xstage::InvalidArgument with one clear line for: producers < 1 or > max_producers
// (when max_producers > 0), burst_bytes <= 0 or not a multiple of 16 (the v4 store width),
// gap negative, NaN or infinite.
void validate_inputs(int producers, long long burst_bytes, double gap_us, int max_producers);

void to_json(nlohmann::json& j, const ColdExtension& c);
void from_json(const nlohmann::json& j, ColdExtension& c);
// Params JSON carries "schema": "xstage.params.v1"; from_json checks it, the fields and
// their ranges (xstage::Error), and sorts the Q table by K.
void to_json(nlohmann::json& j, const Params& p);
void from_json(const nlohmann::json& j, Params& p);
void to_json(nlohmann::json& j, const Prediction& p);

// Reads a params file; throws xstage::Error "<path>: <problem>".
Params load_params(const std::string& path);
void save_params(const Params& p, const std::string& path);

// A few human-readable lines (T0 line, R, Q table, cold extension, source).
std::string format_params(const Params& p);

}  // namespace xstage::model
