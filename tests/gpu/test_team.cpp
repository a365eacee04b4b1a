// Runtime: symmetric windows, device-initiated remote stores, the timed barrier, the timeout
// path and bad-input errors, with 2, 4 and 8 ranks on real GPUs where the machine has them,
// else on virtual ranks of one GPU (single-process mode; launcher mode is the ctest
// gpu.launcher_mode_exchange).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "gpu/gpu_env.hpp"
#include "kernels/selftest/exchange.hpp"
#include "runtime/coresidency.hpp"
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
  XS_TEAM(team, 2, 5.0);
  EXPECT_THROW(ops::exchange_selftest(*team, 24, 1), InvalidArgument);
}

// --- P ranks: real GPUs where there are enough, else virtual ranks of one GPU ---------------

class TeamRanks : public ::testing::TestWithParam<int> {};

TEST_P(TeamRanks, ExchangeAndBarrierBetweenEveryPair) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  ASSERT_EQ(team->world_size(), P);
  for (int i = 0; i < team->local_count(); ++i) EXPECT_GT(team->sm_count(i), 0);
  uint32_t salt = 17;
  for (size_t bytes : {size_t(16), size_t(4096 + 16), size_t((1 << 20) + 48)}) {
    auto rep = ops::exchange_selftest(*team, bytes, salt++);
    ASSERT_EQ(static_cast<int>(rep.size()), P);
    for (const auto& r : rep)
      for (int src = 0; src < P; ++src)
        EXPECT_EQ(r.wrong_words[src], 0u) << "rank " << r.rank << " from rank " << src << ", " << bytes << " B";
  }
}

TEST_P(TeamRanks, WaitOnFlagNobodySetsTimesOutOnEveryRank) {
  const int P = GetParam();
  XS_TEAM(team, P, 0.5);
  for (int i : {0, P - 1}) {
    double secs = 0;
    std::string err = ops::timeout_selftest(*team, i, &secs);
    ASSERT_FALSE(err.empty()) << "rank " << i << ": the wait did not report a timeout";
    EXPECT_NE(err.find("rank " + std::to_string(team->rank(i))), std::string::npos) << err;
    EXPECT_NE(err.find("timed out"), std::string::npos) << err;
    EXPECT_LT(secs, 10.0) << "the wait was not bounded";
  }
  auto rep = ops::exchange_selftest(*team, 256, 3);  // still usable afterwards
  for (const auto& r : rep) EXPECT_EQ(r.wrong_words[0], 0u);
}

// The last rank never reaches the barrier: every other rank's barrier ends in a timeout
// error that names the barrier, within the bound.
TEST_P(TeamRanks, ARankThatSkipsTheBarrierTimesOutEveryOther) {
  const int P = GetParam();
  XS_TEAM(team, P, 0.5);
  std::vector<std::string> err(team->local_count());
  const auto t0 = std::chrono::steady_clock::now();
  team->run([&](int i) {
    if (team->rank(i) == P - 1) return;
    cudaStream_t s = team->stream(i);
    ASSERT_EQ(kernels::launch_team_barrier(team->device_view(i), team->next_epoch(i), s), cudaSuccess);
    team->synchronize(i, "the barrier");
    try {
      team->check_device_status(i);
    } catch (const Error& e) {
      err[i] = e.what();
    }
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < team->local_count(); ++i) {
    if (team->rank(i) == P - 1) continue;
    EXPECT_NE(err[i].find("timed out"), std::string::npos) << "rank " << i << ": '" << err[i] << "'";
  }
  EXPECT_LT(secs, 10.0);
}

INSTANTIATE_TEST_SUITE_P(P, TeamRanks, ::testing::Values(2, 4, 8));

TEST(VirtualRanks, ImpossibleSplitsAreClearErrors) {
  XS_REQUIRE_GPUS(1);
  TeamOptions o;
  EXPECT_THROW(Team::virtual_ranks(0, o), InvalidArgument);
  EXPECT_THROW(Team::virtual_ranks(9, o), InvalidArgument);
  o.virtual_device = gputest::visible_gpus();
  EXPECT_THROW(Team::virtual_ranks(2, o), InvalidArgument);
}

namespace {
// A 4-rank virtual team in `mode` exchanges correctly, has no NCCL communicator, and gives
// every rank an SM partition of whole 8-SM granules that together fit the GPU.
void check_partition_mode(Team& t) {
  std::printf("[ team     ] %s\n", t.partition_story().c_str());
  EXPECT_TRUE(t.is_virtual());
  EXPECT_STREQ(t.kind(), "virtual");
  EXPECT_THROW(t.comm(0), InvalidArgument);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_LE(t.sm_count(i) * 4, sms);
    EXPECT_EQ(t.sm_count(i) % kSmPartitionGranularity, 0);
  }
  auto rep = ops::exchange_selftest(t, 4096, 5);
  for (const auto& r : rep)
    for (int src = 0; src < 4; ++src) EXPECT_EQ(r.wrong_words[src], 0u);
}
}  // namespace

TEST(VirtualRanks, ReducedGridsExchangeAndSizeGridsFromTheirPartition) {
  XS_REQUIRE_GPUS(1);
  TeamOptions o;
  o.partition = TeamOptions::SmPartition::reduced_grids;
  auto t = Team::virtual_ranks(4, o);
  EXPECT_NE(t->partition_story().find("reduced grids"), std::string::npos) << t->partition_story();
  check_partition_mode(*t);
}

// Green contexts where the driver has them; where it does not, the skip carries the driver's
// own refusal (and auto mode falls back to reduced grids, tested above).
TEST(VirtualRanks, GreenContextsExchangeAndSizeGridsFromTheirPartition) {
  XS_REQUIRE_GPUS(1);
  TeamOptions o;
  o.partition = TeamOptions::SmPartition::green_contexts;
  std::unique_ptr<Team> t;
  try {
    t = Team::virtual_ranks(4, o);
  } catch (const Error& e) {
    GTEST_SKIP() << "green contexts not usable on this machine: " << e.what();
  }
  EXPECT_NE(t->partition_story().find("green contexts"), std::string::npos) << t->partition_story();
  check_partition_mode(*t);
}

// The virtual team's All-to-All: a rank that never calls ends every other rank's call with a
// clear host error within the bound (NCCL's own All-to-All on real GPUs has no such bound).
// The co-residency check a virtual team runs when it is made (docs/virtual-ranks.md
// §Co-residency) must see two kernels that cannot run side by side: the same stream twice
// serialises them, so the first waits alone; distinct streams pass.
TEST(VirtualRanks, CoresidencyCheckSeesSerialisedStreams) {
  XS_REQUIRE_GPUS(1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  const runtime::CoresidencyCheck same = runtime::check_coresident({a, a}, 0.2);
  EXPECT_TRUE(same.error.empty()) << same.error;
  EXPECT_EQ(same.alone, std::vector<int>{0});
  const runtime::CoresidencyCheck apart = runtime::check_coresident({a, b}, 0.2);
  EXPECT_TRUE(apart.error.empty()) << apart.error;
  EXPECT_TRUE(apart.alone.empty());
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

// Every virtual team passed the check when it was made, and a side stream too: their kernels
// run side by side (the story says whether streams had to be remade).
TEST_P(TeamRanks, VirtualTeamStreamsRunSideBySide) {
  const int P = GetParam();
  XS_TEAM(team, P, 5.0);
  if (!team->is_virtual()) GTEST_SKIP() << "real GPUs: no shared hardware queues to check";
  cudaStream_t side = team->create_stream(P - 1);
  std::vector<cudaStream_t> streams{side};
  for (int i = 0; i < P; ++i) streams.push_back(team->stream(i));
  const runtime::CoresidencyCheck c = runtime::check_coresident(streams, 2.0);
  EXPECT_TRUE(c.error.empty()) << c.error;
  EXPECT_TRUE(c.alone.empty()) << team->partition_story();
  cudaStreamDestroy(side);
}

TEST(VirtualRanks, AllToAllWithARankThatNeverCallsIsAClearError) {
  XS_REQUIRE_GPUS(1);
  TeamOptions o;
  o.wait_timeout_s = 0.5;
  auto t = Team::virtual_ranks(4, o);
  const size_t bytes = 4096;
  std::vector<void*> send(4), recv(4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(cudaMalloc(&send[i], bytes * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&recv[i], bytes * 4), cudaSuccess);
  }
  std::vector<std::string> err(4);
  const auto t0 = std::chrono::steady_clock::now();
  t->run([&](int i) {
    if (i == 3) return;
    try {
      t->all_to_all(i, send[i], recv[i], bytes, t->stream(i));
    } catch (const Error& e) {
      err[i] = e.what();
    }
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < 3; ++i) EXPECT_NE(err[i].find("not every rank arrived"), std::string::npos) << err[i];
  EXPECT_LT(secs, 5.0);
  cudaDeviceSynchronize();
  for (int i = 0; i < 4; ++i) {
    cudaFree(send[i]);
    cudaFree(recv[i]);
  }
}

// All ranks call: every rank receives block r of every peer's send buffer.
TEST(VirtualRanks, AllToAllMovesEveryBlock) {
  XS_REQUIRE_GPUS(1);
  auto t = Team::virtual_ranks(4, TeamOptions{});
  const size_t bytes = 4096 + 16;
  std::vector<void*> send(4), recv(4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(cudaMalloc(&send[i], bytes * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&recv[i], bytes * 4), cudaSuccess);
    for (int p = 0; p < 4; ++p)  // block p of rank i's send holds the byte 16 * i + p
      ASSERT_EQ(cudaMemset(static_cast<char*>(send[i]) + p * bytes, 16 * i + p, bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(recv[i], 0xEE, bytes * 4), cudaSuccess);
  }
  t->run([&](int i) {
    t->all_to_all(i, send[i], recv[i], bytes, t->stream(i));
    t->synchronize(i, "the All-to-All");
  });
  for (int i = 0; i < 4; ++i) {
    std::vector<unsigned char> h(bytes * 4);
    ASSERT_EQ(cudaMemcpy(h.data(), recv[i], h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int p = 0; p < 4; ++p)
      for (size_t b = 0; b < bytes; ++b)
        ASSERT_EQ(h[p * bytes + b], 16 * p + i) << "rank " << i << " block from rank " << p << " byte " << b;
    cudaFree(send[i]);
    cudaFree(recv[i]);
  }
}
