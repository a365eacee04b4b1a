// Exact event simulation of the fluid X-Stage: between events every rate is constant, so
// each phase is advanced in closed form (no time step, no discretisation error).
#include "xstage/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "model/stats.hpp"
#include "xstage/error.hpp"

namespace xstage::model {
namespace {

using detail::median;
using detail::quantile;

// Stage occupancy s (bytes) and clock t (us), advanced phase by phase.
struct Stage {
  double capacity = 0, drain_rate = 0;  // bytes, bytes/us
  double s = 0, t = 0, peak = 0;

  void idle(double dt) {  // nothing enters; the stage drains
    s = std::max(0.0, s - drain_rate * dt);
    t += dt;
  }

  // Admits `bytes` offered at `rate` (bytes/us); returns true if the producers waited for
  // room at some point (the stage was full).
  bool issue(double bytes, double rate) {
    const double full_eps = 1e-12 * std::max(1.0, capacity);
    bool stalled = false;
    if (s > capacity + full_eps) {  // over a smaller capacity (after the cold burst): wait
      t += (s - capacity) / drain_rate;
      s = capacity;
      stalled = true;
    }
    while (bytes > 0) {
      double dt;
      if (rate > drain_rate && s >= capacity - full_eps) {
        dt = bytes / drain_rate;  // full: admitted only as fast as it drains
        s = capacity;
        bytes = 0;
        stalled = true;
      } else if (rate > drain_rate) {
        const double to_full = (capacity - s) / (rate - drain_rate);
        if (rate * to_full >= bytes) {
          dt = bytes / rate;
          s += (rate - drain_rate) * dt;
          bytes = 0;
        } else {
          dt = to_full;
          bytes -= rate * to_full;
          s = capacity;
        }
      } else if (s > 0 && rate < drain_rate) {
        // Issue slower than drain: the stage empties, then stays empty.
        const double to_empty = s / (drain_rate - rate);
        if (rate * to_empty >= bytes) {
          dt = bytes / rate;
          s -= (drain_rate - rate) * dt;
          bytes = 0;
        } else {
          dt = to_empty;
          bytes -= rate * to_empty;
          s = 0;
        }
      } else {
        dt = bytes / rate;  // stage empty (or rate == drain): occupancy does not change
        bytes = 0;
      }
      t += dt;
      peak = std::max(peak, s);
    }
    return stalled;
  }
};

// Deterministic N(0,1) from a 64-bit engine (Box-Muller; std::normal_distribution's
// algorithm is library-specific, which would break "same seed -> same data").
class Gauss {
 public:
  explicit Gauss(uint64_t seed) : rng_(seed) {}
  double next() {
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;          // [0, 1)
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 rng_;
};

double window_median(const std::vector<double>& v, int bursts) {
  const auto [first, last] = steady_window(bursts);
  return median({v.begin() + first, v.begin() + last});
}

}  // namespace

std::pair<int, int> steady_window(int bursts) {
  if (bursts <= 1) return {0, bursts};
  return {std::max(1, bursts / 4), bursts - bursts / 4};
}

SimResult simulate(const Params& p, const SimConfig& cfg) {
  check_params(p);
  if (cfg.producers < 1) throw InvalidArgument(fmt::format("simulate: producers must be >= 1, got {}", cfg.producers));
  if (cfg.burst_bytes <= 0) throw InvalidArgument(fmt::format("simulate: burst_bytes must be > 0, got {}", cfg.burst_bytes));
  if (!std::isfinite(cfg.gap_us) || cfg.gap_us < 0)
    throw InvalidArgument(fmt::format("simulate: gap_us must be >= 0, got {}", cfg.gap_us));
  if (cfg.bursts < 1) throw InvalidArgument(fmt::format("simulate: bursts must be >= 1, got {}", cfg.bursts));

  const double volume = static_cast<double>(cfg.producers) * static_cast<double>(cfg.burst_bytes);
  const double issue_rate = volume / std::max(1e-9, p.t0_us(cfg.burst_bytes));  // T0 = 0: instantaneous
  const double r_median = p.r_gbps(cfg.producers) * kBytesPerUsPerGbps;
  const double r_agg = p.r_agg_gbps * kBytesPerUsPerGbps;
  const double delta = p.delta_us(cfg.producers);
  Stage st;

  SimResult out;
  for (int b = 0; b < cfg.bursts; ++b) {
    st.capacity = b == 0 && cfg.cold ? p.q_cold_bytes(cfg.producers) : p.q_bytes(cfg.producers);
    const bool empty = st.s <= 1e-9 * std::max(1.0, st.capacity);
    st.drain_rate = empty ? r_agg : r_median;
    const double start = st.t;
    const bool stalled = st.issue(volume, issue_rate);
    const double gap = cfg.gap_us + (!empty && stalled ? delta : 0.0);
    out.start_us.push_back(start);
    out.issue_us.push_back(st.t - start);
    out.gap_us.push_back(gap);
    out.period_us.push_back(st.t - start + gap);
    out.stage_at_end_bytes.push_back(st.s);
    out.started_empty.push_back(empty);
    if (b + 1 == cfg.bursts) out.drained_us = st.t + st.s / st.drain_rate;
    st.idle(gap);
  }
  out.cold_issue_us = out.issue_us.front();
  out.steady_issue_us = window_median(out.issue_us, cfg.bursts);
  out.steady_period_us = window_median(out.period_us, cfg.bursts);
  out.steady_gap_us = window_median(out.gap_us, cfg.bursts);
  out.max_stage_bytes = st.peak;
  return out;
}

std::vector<ProbePoint> synthesize(const Params& p, const std::vector<ProbePoint>& configs,
                                   double noise_rel, uint64_t seed) {
  if (!std::isfinite(noise_rel) || noise_rel < 0)
    throw InvalidArgument(fmt::format("synthesize: noise_rel must be >= 0, got {}", noise_rel));
  Gauss gauss(seed);
  auto noisy = [&](double x) { return x * std::max(0.05, 1.0 + noise_rel * gauss.next()); };

  std::vector<ProbePoint> out;
  out.reserve(configs.size());
  for (const ProbePoint& c : configs) {
    SimConfig cfg{c.producers, c.burst_bytes, c.gap_us, c.bursts > 0 ? c.bursts : 32, true};
    const SimResult sim = simulate(p, cfg);
    ProbePoint m = c;
    m.bursts = cfg.bursts;
    m.issue_us_per_burst.clear();
    for (double x : sim.issue_us) m.issue_us_per_burst.push_back(noisy(x));
    const auto [first, last] = steady_window(cfg.bursts);
    const std::vector<double> steady(m.issue_us_per_burst.begin() + first, m.issue_us_per_burst.begin() + last);
    m.cold_issue_us = noisy(sim.cold_issue_us);
    m.steady_issue_us = noisy(sim.steady_issue_us);
    m.steady_issue_p10_us = quantile(steady, 0.1);
    m.steady_issue_p90_us = quantile(steady, 0.9);
    m.period_us = noisy(sim.steady_period_us);
    m.gap_measured_us = sim.steady_gap_us > 0 ? noisy(sim.steady_gap_us) : 0.0;
    m.drain_gbps = static_cast<double>(c.total_bytes()) / m.period_us / kBytesPerUsPerGbps;
    // The simulated stream is the median producer; the launch as a whole delivers at most R_agg.
    const double all_bytes = static_cast<double>(c.total_bytes()) * cfg.bursts;
    const double floor_us = all_bytes / (p.r_agg_gbps * kBytesPerUsPerGbps);
    const double median_end = sim.start_us.back() + sim.issue_us.back();
    const double last_end = std::max(median_end, floor_us);
    m.completion_us = noisy(std::max(sim.drained_us, floor_us));
    m.delivered_gbps = all_bytes / m.completion_us / kBytesPerUsPerGbps;
    m.aggregate_gbps = all_bytes / noisy(last_end) / kBytesPerUsPerGbps;
    m.producer_skew = last_end / median_end;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace xstage::model
