// Fluid X-Stage simulator: exact hand-computed cases, agreement with the closed form in
// steady state, the recovery gap, and deterministic synthetic probe data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/simulator.hpp"

namespace xm = xstage::model;

namespace {

// Same round numbers as test_model: T0(B) = 0.2 + B/1e5 us, R = 4e5 B/us, Q(16)=1e6, Q(64)=2e6.
xm::Params hand_params() {
  xm::Params p;
  p.t0_fixed_us = 0.2;
  p.issue_gbps_per_producer = 100;
  p.r_gbps = 400;
  p.q_bytes_by_k = {{16, 1e6}, {64, 2e6}};
  p.cold = {0.5, 0.25};
  return p;
}

// Close to what BRIEF reports for 2xH200 (0.21 us for 132 x 16 KB, ~390 GB/s).
xm::Params h200_like() {
  xm::Params p;
  p.t0_fixed_us = 0.1;
  p.issue_gbps_per_producer = 80;
  p.r_gbps = 390;
  p.q_bytes_by_k = {{33, 1.5 * xm::kMiB}, {132, 4.0 * xm::kMiB}};
  p.cold = {0.8, 0.3};
  return p;
}

constexpr double kEps = 1e-9;

}  // namespace

TEST(Simulator, SingleBurstBelowCapacityTakesT0) {
  const auto r = xm::simulate(hand_params(), {16, 10000, 0.0, 1, false});
  ASSERT_EQ(r.issue_us.size(), 1u);
  EXPECT_NEAR(r.issue_us[0], 0.3, kEps);
  // Injected at 1.6e6 B/us for 0.1 us while draining at 4e5: 1.2e5 B left at the end.
  EXPECT_NEAR(r.stage_at_end_bytes[0], 1.2e5, 1e-3);
  EXPECT_NEAR(r.drained_us, 0.3 + 1.2e5 / 4e5, kEps);
}

TEST(Simulator, OverfillingBurstHandComputed) {
  // K=16, B=200000 (V=3.2e6): after the 0.2 us start, inject at 1.6e6 B/us; the stage
  // (1e6) fills after 1e6/1.2e6 = 0.8333 us with 1.3333e6 B admitted; the remaining
  // 1.8667e6 B go at R: 4.6667 us. Span = 0.2 + (V - Q)/R = 5.7 us.
  const auto r = xm::simulate(hand_params(), {16, 200000, 0.0, 1, false});
  EXPECT_NEAR(r.issue_us[0], 5.7, 1e-9);
  EXPECT_NEAR(r.stage_at_end_bytes[0], 1e6, 1e-3);
  EXPECT_NEAR(r.max_stage_bytes, 1e6, 1e-3);
  EXPECT_NEAR(r.drained_us, 5.7 + 2.5, 1e-9);
}

TEST(Simulator, ColdExtraDelaysTheFirstBurstOnly) {
  const auto p = hand_params();
  const auto warm = xm::simulate(p, {16, 10000, 50.0, 4, false});
  const auto cold = xm::simulate(p, {16, 10000, 50.0, 4, true});
  const double extra = 0.5 + 0.25 * 160000.0 / xm::kMiB;
  EXPECT_NEAR(cold.issue_us[0] - warm.issue_us[0], extra, kEps);
  for (int i = 1; i < 4; ++i) EXPECT_NEAR(cold.issue_us[i], warm.issue_us[i], kEps);
  EXPECT_NEAR(cold.cold_issue_us, cold.issue_us[0], 0);
}

TEST(Simulator, SaturatedPeriodIsExactlyVOverR) {
  const auto r = xm::simulate(hand_params(), {64, 20000, 1.0, 50, true});
  EXPECT_NEAR(r.steady_period_us, 3.2, 1e-9);
  EXPECT_NEAR(r.steady_issue_us, 2.2, 1e-9);
  for (size_t i = 1; i < r.period_us.size(); ++i)
    EXPECT_NEAR(r.start_us[i] - r.start_us[i - 1], r.period_us[i - 1], 1e-9);
}

// The closed form overlaps the start overhead t0_fixed with draining; the simulator cannot
// (before the first byte is issued an empty stage has nothing to drain). Its steady span is
//   max(t0_fixed + max(B/issue_rate, (V - Q)/R), V/R - G)
// (docs/model.md, "Simulator"): equal to the closed form in the issue- and drain-bound
// regimes, exactly t0_fixed more when the burst overfills the stage, never more than
// t0_fixed apart. With t0_fixed ~0.1 us that is within 3% once the span exceeds ~3.3 us.
TEST(Simulator, AgreesWithClosedFormInSteadyState) {
  const auto p = h200_like();
  const double r = p.r_gbps * 1e3;
  int n = 0, exact = 0, fill = 0;
  for (int k : {8, 33, 66, 132})
    for (long long b : {1024LL, 4096LL, 16384LL, 65536LL, 131072LL})
      for (double g : {0.0, 0.5, 2.0, 5.0, 15.0, 40.0}) {
        const auto pr = xm::predict(p, k, b, g);
        const auto sim = xm::simulate(p, {k, b, g, 600, true});
        const std::string at = std::to_string(k) + "x" + std::to_string(b) + " G=" + std::to_string(g);
        ++n;
        const double v = static_cast<double>(k) * b, stream = b / (p.issue_gbps_per_producer * 1e3);
        const double fill_term = (v - p.q_bytes(k)) / r;
        const double sim_form = std::max(p.t0_fixed_us + std::max(stream, fill_term), v / r - g);
        EXPECT_NEAR(sim.steady_issue_us, sim_form, 1e-6 * sim_form) << at;
        EXPECT_NEAR(sim.steady_period_us - sim.steady_issue_us, g, 1e-9) << at;
        EXPECT_GE(sim.steady_issue_us, pr.issue_us - 1e-9) << at;
        EXPECT_LE(sim.steady_issue_us, pr.issue_us + p.t0_fixed_us + 1e-9) << at;
        if (pr.regime == xm::Regime::kFillBound) {
          ++fill;
          EXPECT_NEAR(sim.steady_issue_us, pr.issue_us + p.t0_fixed_us, 1e-6) << at;
          if (pr.issue_us > p.t0_fixed_us / 0.03) {
            EXPECT_NEAR(sim.steady_issue_us, pr.issue_us, 0.03 * pr.issue_us) << at;
          }
        } else if (v / r - g >= p.t0_fixed_us + fill_term) {
          ++exact;  // clear of the fill regime: identical
          EXPECT_NEAR(sim.steady_issue_us, pr.issue_us, 1e-6 * pr.issue_us) << at;
          EXPECT_NEAR(sim.steady_period_us, pr.period_us, 1e-6 * pr.period_us) << at;
        }
        // The cold burst starts on an empty stage: the isolated span plus the extension.
        const double cold_form = p.cold.extra_us(k * b) + p.t0_fixed_us + std::max(stream, fill_term);
        EXPECT_NEAR(sim.cold_issue_us, cold_form, 1e-6) << at;
        EXPECT_GE(sim.cold_issue_us, pr.cold_issue_ext_us - 1e-9) << at;
        EXPECT_LE(sim.cold_issue_us, pr.cold_issue_ext_us + p.t0_fixed_us + 1e-9) << at;
      }
  EXPECT_EQ(n, 120);
  EXPECT_GT(exact, 60);
  EXPECT_GT(fill, 10);
}

TEST(Simulator, RecoveryGapMakesTheNextBurstFree) {
  const auto p = h200_like();
  for (int k : {33, 132})
    for (long long b : {4096LL, 16384LL}) {
      const auto pr = xm::predict(p, k, b, 0.0);
      ASSERT_GT(pr.recovery_gap_us, 0);
      ASSERT_NE(pr.regime, xm::Regime::kFillBound);
      const auto at_g = xm::simulate(p, {k, b, pr.recovery_gap_us, 100, false});
      for (size_t i = 0; i < at_g.issue_us.size(); ++i)
        EXPECT_NEAR(at_g.issue_us[i], p.t0_us(b), 1e-6) << k << "x" << b << " burst " << i;
      const auto short_gap = xm::simulate(p, {k, b, 0.5 * pr.recovery_gap_us, 100, false});
      EXPECT_GT(short_gap.steady_issue_us, 1.05 * p.t0_us(b)) << k << "x" << b;
    }
}

TEST(Simulator, RejectsBadConfigs) {
  const auto p = hand_params();
  EXPECT_THROW(xm::simulate(p, {0, 16, 0, 4, true}), xstage::InvalidArgument);
  EXPECT_THROW(xm::simulate(p, {1, 0, 0, 4, true}), xstage::InvalidArgument);
  EXPECT_THROW(xm::simulate(p, {1, 16, -1, 4, true}), xstage::InvalidArgument);
  EXPECT_THROW(xm::simulate(p, {1, 16, 0, 0, true}), xstage::InvalidArgument);
  auto bad = p;
  bad.r_gbps = 0;
  EXPECT_THROW(xm::simulate(bad, {1, 16, 0, 4, true}), xstage::Error);
}

namespace {
std::vector<xstage::ProbePoint> some_configs() {
  std::vector<xstage::ProbePoint> v;
  for (int k : {33, 132})
    for (long long b : {4096LL, 65536LL})
      for (double g : {0.0, 3.0, 50.0}) {
        xstage::ProbePoint c;
        c.producers = k;
        c.burst_bytes = b;
        c.gap_us = g;
        c.bursts = 40;
        c.role = g == 3.0 ? "validate" : "fit";
        v.push_back(c);
      }
  return v;
}
}  // namespace

TEST(Synthesize, NoNoiseReproducesTheSimulation) {
  const auto p = h200_like();
  const auto cfgs = some_configs();
  const auto pts = xm::synthesize(p, cfgs, 0.0, 7);
  ASSERT_EQ(pts.size(), cfgs.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    const auto sim = xm::simulate(p, {cfgs[i].producers, cfgs[i].burst_bytes, cfgs[i].gap_us, 40, true});
    EXPECT_EQ(pts[i].role, cfgs[i].role);  // labels are kept
    EXPECT_DOUBLE_EQ(pts[i].steady_issue_us, sim.steady_issue_us);
    EXPECT_DOUBLE_EQ(pts[i].cold_issue_us, sim.cold_issue_us);
    EXPECT_DOUBLE_EQ(pts[i].period_us, sim.steady_period_us);
    EXPECT_EQ(pts[i].issue_us_per_burst.size(), 40u);
    EXPECT_NEAR(pts[i].drain_gbps, pts[i].total_bytes() / pts[i].period_us / 1e3, 1e-9);
    EXPECT_DOUBLE_EQ(pts[i].completion_us, sim.drained_us);
    EXPECT_NEAR(pts[i].delivered_gbps, pts[i].total_bytes() * 40.0 / sim.drained_us / 1e3, 1e-9);
    // Sustained delivery cannot beat the drain rate R.
    EXPECT_LE(pts[i].delivered_gbps, p.r_gbps * (1 + 1e-9));
    EXPECT_GE(pts[i].aggregate_gbps, pts[i].delivered_gbps);  // issue ends before the drain does
    EXPECT_EQ(pts[i].producer_skew, 1.0);
    EXPECT_LE(pts[i].steady_issue_p10_us, pts[i].steady_issue_p90_us);
  }
}

TEST(Simulator, SteadyWindowIsTheMiddleHalfLikeTheProbe) {
  EXPECT_EQ(xm::steady_window(1), std::make_pair(0, 1));
  EXPECT_EQ(xm::steady_window(2), std::make_pair(1, 2));
  EXPECT_EQ(xm::steady_window(3), std::make_pair(1, 3));
  EXPECT_EQ(xm::steady_window(8), std::make_pair(2, 6));
  EXPECT_EQ(xm::steady_window(64), std::make_pair(16, 48));
  // Back to back, the first bursts are absorbed by the still-empty stage; the reported
  // steady span is the median of bursts 16..47 of 64 only.
  const auto p = h200_like();
  const auto r = xm::simulate(p, {132, 16384, 0.0, 64, false});
  std::vector<double> win(r.issue_us.begin() + 16, r.issue_us.begin() + 48);
  std::sort(win.begin(), win.end());
  EXPECT_DOUBLE_EQ(r.steady_issue_us, 0.5 * (win[15] + win[16]));
}

TEST(Synthesize, SeededNoiseIsDeterministicAndHasTheRequestedSize) {
  const auto p = h200_like();
  std::vector<xstage::ProbePoint> cfgs;
  for (int i = 0; i < 400; ++i) {
    xstage::ProbePoint c;
    c.producers = 132;
    c.burst_bytes = 16384;
    c.gap_us = 50;
    c.bursts = 3;
    cfgs.push_back(c);
  }
  const auto a = xm::synthesize(p, cfgs, 0.02, 42);
  const auto b = xm::synthesize(p, cfgs, 0.02, 42);
  const auto c = xm::synthesize(p, cfgs, 0.02, 43);
  int differ = 0;
  double sum = 0, sum2 = 0;
  const double exact = xm::simulate(p, {132, 16384, 50, 3, true}).steady_issue_us;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].steady_issue_us, b[i].steady_issue_us);
    EXPECT_EQ(a[i].issue_us_per_burst, b[i].issue_us_per_burst);
    differ += a[i].steady_issue_us != c[i].steady_issue_us;
    const double f = a[i].steady_issue_us / exact - 1;
    sum += f;
    sum2 += f * f;
  }
  EXPECT_GT(differ, 390);
  const double mean = sum / a.size(), sd = std::sqrt(sum2 / a.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.004);
  EXPECT_NEAR(sd, 0.02, 0.004);
}
