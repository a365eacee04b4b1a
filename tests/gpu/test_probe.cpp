// The probe operator on real GPUs: every store flavour and destination runs and yields
// consistent timings; invalid configurations are rejected before launching.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gpu/gpu_env.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/probe.hpp"

using namespace xstage;

namespace {
ProbePoint cfg(int k, long long b, double g, const char* store, const char* dest) {
  ProbePoint p;
  p.producers = k;
  p.threads = 256;
  p.burst_bytes = b;
  p.gap_us = g;
  p.store = store;
  p.dest = dest;
  p.bursts = 6;
  return p;
}
}  // namespace

// Every destination kind with 2, 4 and 8 ranks (real GPUs, else virtual ranks of one GPU,
// where "remote" stores land in another rank's allocation on the same GPU).
class ProbeRanks : public ::testing::TestWithParam<int> {};

TEST_P(ProbeRanks, EveryStoreAndDestinationMeasures) {
  XS_TEAM(team, GetParam(), 5.0);
  ops::Prober pr(*team, 64 << 20);
  const int K = std::min(16, pr.sm_count());
  EXPECT_GT(pr.clock_ghz(), 0.5);
  EXPECT_LT(pr.clock_ghz(), 3.0);
  for (const char* store : {"v4", "v4_release", "v4_noalloc", "bulk"})
    for (const char* dest : {"peer", "all_peers", "local"}) {
      ProbePoint p = pr.measure(cfg(K, 16384 + 16 * 3, 2.0, store, dest));
      SCOPED_TRACE(std::string(store) + " -> " + dest);
      EXPECT_TRUE(std::isfinite(p.steady_issue_us));
      EXPECT_GT(p.steady_issue_us, 0.0);
      EXPECT_GT(p.cold_issue_us, 0.0);
      // The requested idle gap was honoured (a spin lasts at least its cycles; the upper bound
      // only catches a broken clock conversion, not a slow or shared machine) and the period
      // holds it.
      EXPECT_GE(p.gap_measured_us, 2.0 * 0.95);
      EXPECT_LT(p.gap_measured_us, 2.0 * 20);
      EXPECT_GE(p.period_us, p.gap_measured_us);
      EXPECT_GT(p.completion_us, 0.0);
      EXPECT_GT(p.drain_gbps, 0.0);
      EXPECT_GT(p.delivered_gbps, 0.0);
      EXPECT_GT(p.aggregate_gbps, 0.0);
      EXPECT_GE(p.producer_skew, 1.0);
      // Delivery cannot outrun the sender's aggregate issue over the same bytes.
      EXPECT_LE(p.delivered_gbps, p.aggregate_gbps * 1.05);
      EXPECT_EQ(static_cast<int>(p.issue_us_per_burst.size()), 6);
    }
}

INSTANTIATE_TEST_SUITE_P(P, ProbeRanks, ::testing::Values(2, 4, 8));

TEST(Probe, WorkGapTakesRoughlyTheRequestedTime) {
  XS_TEAM(team, 2, 5.0);
  ops::Prober pr(*team, 64 << 20);
  ProbePoint c = cfg(8, 4096, 5.0, "v4", "peer");
  c.gap_kind = "work";
  ProbePoint p = pr.measure(c);
  EXPECT_GT(p.gap_measured_us, 5.0 * 0.5);  // FMA work calibrated on an idle SM: loose bounds
  EXPECT_LT(p.gap_measured_us, 5.0 * 20);
}

TEST(Probe, InvalidConfigurationsAreRejected) {
  XS_TEAM(team, 2, 5.0);
  ops::Prober pr(*team, 16 << 20);
  EXPECT_THROW(pr.validate(cfg(pr.sm_count() + 1, 4096, 0, "v4", "peer")), InvalidArgument);
  EXPECT_THROW(pr.validate(cfg(4, 24, 0, "v4", "peer")), InvalidArgument);
  EXPECT_THROW(pr.validate(cfg(4, 4096, -1.0, "v4", "peer")), InvalidArgument);
  EXPECT_THROW(pr.validate(cfg(4, 4096, 0, "st.weird", "peer")), InvalidArgument);
  EXPECT_THROW(pr.validate(cfg(132, 1 << 20, 0, "v4", "peer")), InvalidArgument);  // exceeds the buffer
}
