// Runtime on real GPUs: symmetric windows, device-initiated remote stores, the timed barrier,
// the timeout path and bad-input errors (single-process mode; launcher mode is the ctest
// gpu.launcher_mode_exchange).
#include <gtest/gtest.h>

#include <chrono>

#include "gpu/gpu_env.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/selftest.hpp"
#include "xstage/team.hpp"
#include "xstage/topology.hpp"

using namespace xstage;

TEST(Topology, ReportsEveryGpuAndPair) {
  XS_REQUIRE_GPUS(1);
  Topology t = discover_topology();
  ASSERT_EQ(static_cast<int>(t.gpus.size()), gputest::visible_gpus());
  EXPECT_GT(t.gpus[0].sm_count, 0);
  EXPECT_EQ(t.links.size(), t.gpus.size() * (t.gpus.size() - 1));
  EXPECT_FALSE(t.nccl_version.empty());
  auto j = to_json(t);
  EXPECT_EQ(j["gpu_count"].get<int>(), gputest::visible_gpus());
}

TEST(TeamLocal, ExchangePatternBetweenTwoGpus) {
  XS_REQUIRE_GPUS(2);
  TeamOptions o;
  o.gpus = 2;
  auto team = Team::local(o);
  ASSERT_EQ(team->world_size(), 2);
  // Awkward sizes included: one vector, a page plus a vector, a MiB plus three vectors.
  uint32_t salt = 7;
  for (size_t bytes : {size_t(16), size_t(4096 + 16), size_t((1 << 20) + 48)}) {
    auto rep = ops::exchange_selftest(*team, bytes, salt++);
    ASSERT_EQ(rep.size(), 2u);
    for (const auto& r : rep)
      for (int src = 0; src < 2; ++src)
        EXPECT_EQ(r.wrong_words[src], 0u) << "rank " << r.rank << " from rank " << src << ", " << bytes << " B";
  }
}

TEST(TeamLocal, ExchangeOnEveryVisibleGpu) {
  int n = gputest::visible_gpus();
  if (n < 3) GTEST_SKIP() << "needs >= 3 GPUs to go beyond the 2-GPU test, found " << n;
  XS_REQUIRE_GPUS(n);
  auto team = Team::local({});
  auto rep = ops::exchange_selftest(*team, 65536 + 16, 99);
  for (const auto& r : rep)
    for (int src = 0; src < n; ++src) EXPECT_EQ(r.wrong_words[src], 0u);
}

TEST(TeamLocal, WaitOnFlagNobodySetsTimesOutWithClearError) {
  XS_REQUIRE_GPUS(2);
  TeamOptions o;
  o.gpus = 2;
  o.wait_timeout_s = 0.5;
  auto team = Team::local(o);
  double secs = 0;
  std::string err = ops::timeout_selftest(*team, 1, &secs);
  ASSERT_FALSE(err.empty()) << "the wait did not report a timeout";
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
  EXPECT_NE(err.find("never set"), std::string::npos) << err;
  EXPECT_GE(secs, 0.45);
  EXPECT_LT(secs, 3.0) << "timeout took far longer than its bound";
  // The team stays usable after a reported timeout.
  auto rep = ops::exchange_selftest(*team, 256, 3);
  EXPECT_EQ(rep[0].wrong_words[1], 0u);
}

TEST(TeamLocal, TooManyGpusIsAClearError) {
  XS_REQUIRE_GPUS(1);
  TeamOptions o;
  o.gpus = gputest::visible_gpus() + 1;
  try {
    Team::local(o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("visible"), std::string::npos) << e.what();
  }
  TeamOptions m;
  m.gpus = 1;
  m.min_gpus = 2;
  EXPECT_THROW(Team::local(m), InvalidArgument);
}

TEST(TeamLocal, BadSelftestSizeIsRejected) {
  XS_REQUIRE_GPUS(2);
  TeamOptions o;
  o.gpus = 2;
  auto team = Team::local(o);
  EXPECT_THROW(ops::exchange_selftest(*team, 24, 1), InvalidArgument);
}
