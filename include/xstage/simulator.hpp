// X-Stage simulator: an exact fluid (piecewise-linear) model of K producers feeding one
// shared in-flight stage, built so that its steady states are the closed form's (docs/model.md,
// "Simulator"). It shows the transients the closed form leaves out (a stage filling over many
// bursts, the steady window) and manufactures probe data with known parameters for the fitter.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "xstage/model.hpp"
#include "xstage/probe_data.hpp"

namespace xstage::model {

struct SimConfig {
  int producers = 1;           // K
  long long burst_bytes = 16;  // B per producer per burst
  double gap_us = 0;           // requested idle time after each burst's issue
  int bursts = 32;             // n
  bool cold = true;            // burst 0 sees the cold capacity Q_cold(K) instead of Q(K)
};

struct SimResult {
  std::vector<double> start_us;            // per burst: time the burst starts
  std::vector<double> issue_us;            // per burst: issue span (start -> last byte admitted)
  std::vector<double> gap_us;              // per burst: the gap that followed (G, or G + delta)
  std::vector<double> period_us;           // per burst: issue span + gap (start-to-start)
  std::vector<double> stage_at_end_bytes;  // stage occupancy when each burst's issue ends
  std::vector<char> started_empty;         // per burst: the stage was empty at its start
  double cold_issue_us = 0;                // burst 0
  double steady_issue_us = 0;              // median over the steady window (steady_window)
  double steady_period_us = 0;             // median over the steady window
  double steady_gap_us = 0;                // median over the steady window
  double drained_us = 0;                   // when the stage is empty after the last burst
  double max_stage_bytes = 0;              // peak occupancy
};

// Bursts [first, last) (0-based) that count as steady: the middle half, [n/4, n - n/4),
// starting at burst 1 at the earliest, as the probe defines it (probe_data.hpp). n = 1 -> {0, 1}.
std::pair<int, int> steady_window(int bursts);

// The median producer's view, as one aggregate stream of K identical producers:
//  - a burst offers V = K*B bytes at V/T0(B), so an unobstructed burst takes T0(B);
//  - the stage holds Q(K) bytes (Q_cold(K) during burst 0 when cfg.cold); a full stage admits
//    bytes only as fast as it drains;
//  - it drains at R_agg from the start of a burst that finds it empty (the producers start
//    together, all their bytes share the link) and at R(K) from the start of a burst that
//    finds it non-empty (back to back: the median producer's share), until the next burst;
//  - a burst that found the stage non-empty and was stalled by it is followed by a gap of
//    G + delta(K) (the turnaround measured under backpressure), otherwise by G.
// Throws xstage::InvalidArgument for K < 1, B <= 0, G < 0 or not finite, n < 1; the params
// must pass check_params.
SimResult simulate(const Params& p, const SimConfig& cfg);

// Copies `configs` and fills their measurements from simulate(), each multiplied by an
// independent factor (1 + noise_rel * N(0,1)), floored at 0.05: cold_issue_us,
// steady_issue_us and its p10/p90, period_us, gap_measured_us (median actual gap),
// issue_us_per_burst, drain_gbps = V/period. The launch as a whole cannot deliver faster than
// R_agg, so the slowest producer ends no earlier than n*V/R_agg after the start:
// aggregate_gbps = n*V / max(median producer's end, n*V/R_agg), completion_us = max(time the
// stage is empty, n*V/R_agg), delivered_gbps = n*V/completion_us, producer_skew = that end over
// the median producer's. Warm-up fields are copied but not simulated. A config's `bursts`
// (0 -> 32) sets n. Same seed -> same output, on every platform.
std::vector<ProbePoint> synthesize(const Params& p, const std::vector<ProbePoint>& configs,
                                   double noise_rel, uint64_t seed);

}  // namespace xstage::model
