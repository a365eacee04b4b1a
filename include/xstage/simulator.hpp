// X-Stage simulator: an exact fluid (piecewise-linear) model of K producers feeding one
// shared in-flight stage. It checks the closed-form Burst-Gap model (which idealises the
// start overhead) and manufactures probe data with known parameters for testing the fitter.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "xstage/model.hpp"
#include "xstage/probe_data.hpp"

namespace xstage::model {

struct SimConfig {
  int producers = 1;         // K
  long long burst_bytes = 16;  // B per producer per burst
  double gap_us = 0;         // idle time after each burst's issue
  int bursts = 32;           // n
  bool cold = true;          // add params.cold.extra_us(V) to the start overhead of burst 1
};

struct SimResult {
  std::vector<double> start_us;    // per burst: time the burst starts
  std::vector<double> issue_us;    // per burst: issue span (start -> last byte admitted)
  std::vector<double> period_us;   // per burst: issue span + gap (start-to-start)
  std::vector<double> stage_at_end_bytes;  // stage occupancy when each burst's issue ends
  double cold_issue_us = 0;        // burst 1
  double steady_issue_us = 0;      // median over the steady window (steady_window)
  double steady_period_us = 0;     // median over the steady window
  double drained_us = 0;           // when the stage is empty after the last burst (from burst 1's start)
  double max_stage_bytes = 0;      // peak occupancy
};

// Bursts [first, last) (0-based) that count as steady: the middle half, [n/4, n - n/4),
// starting at burst 1 at the earliest, as the probe defines it (probe_data.hpp). n = 1 -> {0, 1}.
std::pair<int, int> steady_window(int bursts);

// The model: every producer, after a start overhead t0_fixed, issues B bytes at
// issue_gbps_per_producer; the stage (capacity Q(K)) drains at R whenever it holds data; a
// full stage admits bytes only as fast as it drains, stalling the producers. Producers are
// identical, so they are simulated as one aggregate stream of rate K*issue rate (the same
// per-producer spans result). Throws xstage::InvalidArgument for K < 1, B <= 0, G < 0,
// n < 1; the params must pass check_params.
SimResult simulate(const Params& p, const SimConfig& cfg);

// Copies `configs` and fills their measurements (cold_issue_us, steady_issue_us and its
// p10/p90, period_us, gap_measured_us, completion_us, drain_gbps, delivered_gbps,
// aggregate_gbps, producer_skew = 1, issue_us_per_burst) from simulate(), each time multiplied by an independent factor
// (1 + noise_rel * N(0,1)), floored at 0.05. Warm-up fields are copied but not simulated.
// A config's `bursts` (0 -> 32) sets n. Same seed -> same output, on every platform.
std::vector<ProbePoint> synthesize(const Params& p, const std::vector<ProbePoint>& configs,
                                   double noise_rel, uint64_t seed);

}  // namespace xstage::model
