// Fluid X-Stage simulator: exact hand-computed cases, agreement with the closed form in each
// regime's steady state, the turnaround band, and deterministic synthetic probe data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/simulator.hpp"

namespace xm = xstage::model;

namespace {

// Same round numbers as test_model: T0 (1000, 0.2) (10000, 0.3) (100000, 1.2) us, R(16)=500,
// R(64)=400, R_agg=400 GB/s, delta(16)=0.1, delta(64)=0.3 us, Q(16)=1e6, Q(64)=2e6,
// Q_cold(16)=2e5, Q_cold(64)=5e5 B.
xm::Params hand_params() {
  xm::Params p;
  p.t0_table = {{1000, 0.2}, {10000, 0.3}, {100000, 1.2}};
  p.r_table = {{16, 500}, {64, 400}};
  p.r_agg_gbps = 400;
  p.delta_table = {{16, 0.1}, {64, 0.3}};
  p.q_table = {{16, 1e6, false}, {64, 2e6, false}};
  p.q_cold_table = {{16, 2e5}, {64, 5e5}};
  return p;
}

// Shaped like the 2xH200 fit: R(K) >= R_agg, a turnaround growing with K, Q_cold << Q.
xm::Params h200_like() {
  xm::Params p;
  p.t0_table = {{1024, 0.15}, {4096, 0.165}, {8192, 0.22}, {16384, 0.30}, {32768, 0.58}, {65536, 1.23}, {131072, 2.53}};
  p.r_table = {{16, 560}, {33, 650}, {66, 390}, {132, 387}};
  p.r_agg_gbps = 370;
  p.delta_table = {{16, 0.16}, {33, 0.19}, {66, 0.33}, {132, 0.48}};
  p.q_table = {{16, 1.5 * xm::kMiB}, {33, 2 * xm::kMiB}, {66, 3 * xm::kMiB}, {132, 5 * xm::kMiB}};
  p.q_cold_table = {{16, 0.3 * xm::kMiB}, {33, 1.2 * xm::kMiB}, {66, 1.5 * xm::kMiB}, {132, 2.5 * xm::kMiB}};
  return p;
}

constexpr double kEps = 1e-9;

}  // namespace

TEST(Simulator, SingleBurstBelowCapacityTakesT0) {
  // K=16, B=10000: V=160000 B offered at V/T0 = 160000/0.3 B/us, drained at R_agg = 4e5 B/us.
  const auto r = xm::simulate(hand_params(), {16, 10000, 0.0, 1, false});
  ASSERT_EQ(r.issue_us.size(), 1u);
  EXPECT_NEAR(r.issue_us[0], 0.3, kEps);
  EXPECT_NEAR(r.stage_at_end_bytes[0], 160000 - 4e5 * 0.3, 1e-6);
  EXPECT_NEAR(r.drained_us, 0.3 + 40000 / 4e5, kEps);
  EXPECT_TRUE(r.started_empty[0]);
}

TEST(Simulator, OverfillingBurstTakesVMinusQOverRagg) {
  // K=16, B=200000: V=3.2e6 offered over T0=2.2 us into Q=1e6 drained at 4e5 B/us: the
  // producers stall once it is full, and the last byte goes in at (V - Q)/R_agg = 5.5 us.
  const auto r = xm::simulate(hand_params(), {16, 200000, 0.0, 1, false});
  EXPECT_NEAR(r.issue_us[0], 5.5, 1e-9);
  EXPECT_NEAR(r.stage_at_end_bytes[0], 1e6, 1e-3);
  EXPECT_NEAR(r.max_stage_bytes, 1e6, 1e-3);
  EXPECT_NEAR(r.drained_us, 5.5 + 2.5, 1e-9);
}

TEST(Simulator, ColdBurstSeesTheColdCapacityOnly) {
  const auto p = hand_params();
  const auto warm = xm::simulate(p, {16, 200000, 50.0, 4, false});
  const auto cold = xm::simulate(p, {16, 200000, 50.0, 4, true});
  EXPECT_NEAR(cold.issue_us[0], (3.2e6 - 2e5) / 4e5, kEps);  // Q_cold(16) = 2e5
  EXPECT_NEAR(warm.issue_us[0], 5.5, kEps);
  for (int i = 1; i < 4; ++i) EXPECT_NEAR(cold.issue_us[i], warm.issue_us[i], kEps);
  EXPECT_NEAR(cold.cold_issue_us, cold.issue_us[0], 0);
  EXPECT_NEAR(cold.cold_issue_us, xm::predict(p, 16, 200000, 50.0).cold_issue_us, kEps);
}

TEST(Simulator, SaturatedDrainIsVOverRWithTheTurnaround) {
  // K=16, B=60000: V=960000, T0=0.8, R(16)=5e5 B/us, delta=0.1; G=0.5 -> D = 1.92 - 0.6 = 1.32.
  const auto r = xm::simulate(hand_params(), {16, 60000, 0.5, 50, true});
  EXPECT_NEAR(r.steady_issue_us, 1.32, 1e-9);
  EXPECT_NEAR(r.steady_period_us, 1.92, 1e-9);  // V / R(16)
  EXPECT_NEAR(r.steady_gap_us, 0.6, 1e-9);      // G + delta
  EXPECT_FALSE(r.started_empty[25]);
  for (size_t i = 1; i < r.period_us.size(); ++i)
    EXPECT_NEAR(r.start_us[i] - r.start_us[i - 1], r.period_us[i - 1], 1e-9);
  // The first burst finds the stage empty: no turnaround after it, even though it did not stall.
  EXPECT_TRUE(r.started_empty[0]);
  EXPECT_NEAR(r.gap_us[0], 0.5, kEps);
}

// Where the steady state is clearly one regime, the simulation reaches the closed form
// exactly (docs/model.md, "Simulator"):
//   issue-bound: F <= T0 and V <= R(K) (T0 + G)  (the stage never gains over a period);
//   drain-bound: D > max(T0, F), G + delta < Q/R(K) (it never empties) and it fills within
//                the first quarter of the run;
//   fill-bound:  F > T0, F >= D and G >= Q/R_agg (a full stage empties in the gap).
// In the bands between them it alternates between regimes; those points are not compared.
TEST(Simulator, AgreesWithClosedFormInEachRegime) {
  const auto p = h200_like();
  int issue = 0, drain = 0, fill = 0, n = 0;
  constexpr int kBursts = 600;
  for (int k : {16, 33, 66, 132})
    for (long long b : {1024LL, 4096LL, 16384LL, 65536LL, 131072LL, 262144LL})
      for (double g : {0.0, 0.5, 2.0, 5.0, 15.0, 40.0}) {
        ++n;
        const auto pr = xm::predict(p, k, b, g);
        const auto sim = xm::simulate(p, {k, b, g, kBursts, false});
        const std::string at = std::to_string(k) + "x" + std::to_string(b) + " G=" + std::to_string(g);
        const double v = static_cast<double>(k) * b, r = pr.r_gbps * 1e3, r_agg = pr.r_agg_gbps * 1e3;
        const double t0 = pr.t0_us, d = pr.drain_term_us, f = pr.fill_term_us;
        // Burst 0 of a run finds the stage empty: the isolated span, cold or warm.
        EXPECT_NEAR(sim.cold_issue_us, pr.cold_issue_base_us, 1e-6 * pr.cold_issue_base_us) << at;
        EXPECT_NEAR(xm::simulate(p, {k, b, g, 1, true}).cold_issue_us, pr.cold_issue_us, 1e-6 * pr.cold_issue_us)
            << at;
        bool clean = false;
        if (f <= t0 && v <= r * (t0 + g)) {
          ++issue, clean = true;
        } else if (d > std::max(t0, f) + 1e-6 && g + pr.delta_us < pr.q_bytes / r &&
                   v - r * (t0 + g) > pr.q_bytes / (kBursts / 4 - 2)) {
          ++drain, clean = true;
        } else if (f > t0 && f >= d && g >= pr.q_bytes / r_agg) {
          ++fill, clean = true;
        }
        if (!clean) continue;
        EXPECT_NEAR(sim.steady_issue_us, pr.issue_us, 1e-6 * pr.issue_us) << at;
        EXPECT_NEAR(sim.steady_period_us, pr.period_us, 1e-6 * pr.period_us) << at;
      }
  EXPECT_EQ(n, 144);
  EXPECT_GT(issue, 40);
  EXPECT_GT(drain, 30);
  EXPECT_GT(fill, 5);
  EXPECT_GT(issue + drain + fill, 110);
}

// With no turnaround the recovery gap G* = [V/R(K) - T0]+ makes every burst free.
TEST(Simulator, RecoveryGapMakesTheNextBurstFree) {
  auto p = h200_like();
  for (auto& e : p.delta_table) e.delta_us = 0;
  for (int k : {33, 132})
    for (long long b : {4096LL, 16384LL}) {
      const auto pr = xm::predict(p, k, b, 0.0);
      ASSERT_GT(pr.recovery_gap_us, 0);
      ASSERT_NE(pr.regime, xm::Regime::kFillBound);
      const auto at_g = xm::simulate(p, {k, b, pr.recovery_gap_us, 100, false});
      for (size_t i = 0; i < at_g.issue_us.size(); ++i)
        EXPECT_NEAR(at_g.issue_us[i], p.t0_us(b), 1e-6) << k << "x" << b << " burst " << i;
      // Half the gap: the stage gains R G*/2 per burst, full after Q/(R G*/2) (~150 at 33 x 4 KiB).
      const auto short_gap = xm::simulate(p, {k, b, 0.5 * pr.recovery_gap_us, 1000, false});
      EXPECT_GT(short_gap.steady_issue_us, 1.05 * p.t0_us(b)) << k << "x" << b;
    }
}

// Between G* = V/R - delta - T0 and V/R - T0 the closed form predicts free bursts whose period
// is shorter than V/R(K): the stage gains V - R(K) (T0 + G) bytes per burst until it is full.
// A run shorter than that (as on the node, where Q is tens of MB) sees only free bursts.
TEST(Simulator, TurnaroundBandFillsTheStageSlowly) {
  const auto p = hand_params();  // K=16, B=20000: V=320000, T0=0.4, V/R=0.64, delta=0.1, G*=0.14
  const auto pr = xm::predict(p, 16, 20000, 0.14);
  ASSERT_TRUE(pr.backpressure_free);
  const auto sim = xm::simulate(p, {16, 20000, 0.14, 60, false});
  const double gain = 320000 - 5e5 * (0.4 + 0.14);  // 50000 B per burst at R(16)
  EXPECT_NEAR(sim.stage_at_end_bytes[2] - sim.stage_at_end_bytes[1], gain, 1e-3);
  for (int i = 0; i < 15; ++i) EXPECT_NEAR(sim.issue_us[i], 0.4, 1e-9) << i;  // ~1e6/50000 bursts to fill
  EXPECT_GT(*std::max_element(sim.issue_us.begin(), sim.issue_us.end()), 0.4 + 1e-6);
}

TEST(Simulator, RejectsBadConfigs) {
  const auto p = hand_params();
  EXPECT_THROW(xm::simulate(p, {0, 16, 0, 4, true}), xstage::InvalidArgument);
  EXPECT_THROW(xm::simulate(p, {1, 0, 0, 4, true}), xstage::InvalidArgument);
  EXPECT_THROW(xm::simulate(p, {1, 16, -1, 4, true}), xstage::InvalidArgument);
  EXPECT_THROW(xm::simulate(p, {1, 16, 0, 0, true}), xstage::InvalidArgument);
  auto bad = p;
  bad.r_agg_gbps = 0;
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
    const double all = static_cast<double>(pts[i].total_bytes()) * 40, floor_us = all / (p.r_agg_gbps * 1e3);
    const double median_end = sim.start_us.back() + sim.issue_us.back();
    EXPECT_EQ(pts[i].role, cfgs[i].role);  // labels are kept
    EXPECT_DOUBLE_EQ(pts[i].steady_issue_us, sim.steady_issue_us);
    EXPECT_DOUBLE_EQ(pts[i].cold_issue_us, sim.cold_issue_us);
    EXPECT_DOUBLE_EQ(pts[i].period_us, sim.steady_period_us);
    EXPECT_DOUBLE_EQ(pts[i].gap_measured_us, sim.steady_gap_us);
    EXPECT_EQ(pts[i].issue_us_per_burst.size(), 40u);
    EXPECT_NEAR(pts[i].drain_gbps, pts[i].total_bytes() / pts[i].period_us / 1e3, 1e-9);
    EXPECT_DOUBLE_EQ(pts[i].completion_us, std::max(sim.drained_us, floor_us));
    EXPECT_NEAR(pts[i].aggregate_gbps, all / std::max(median_end, floor_us) / 1e3, 1e-9);
    // The launch as a whole delivers at most R_agg; back to back it delivers exactly R_agg.
    EXPECT_LE(pts[i].delivered_gbps, p.r_agg_gbps * (1 + 1e-9));
    EXPECT_LE(pts[i].aggregate_gbps, p.r_agg_gbps * (1 + 1e-9));
    if (cfgs[i].gap_us == 0) {
      EXPECT_NEAR(pts[i].aggregate_gbps, p.r_agg_gbps, 1e-9);
    }
    EXPECT_GE(pts[i].producer_skew, 1.0);
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
  EXPECT_LT(r.issue_us[1], r.steady_issue_us);  // still filling
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
