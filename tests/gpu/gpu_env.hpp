// How GPU tests decide to skip: they need N visible GPUs (with peer access between them
// when N > 1) and say exactly what was missing. Multi-rank tests get their team from
// make_team(P): P real GPUs where the machine has them, else P virtual ranks on GPU 0
// (docs/virtual-ranks.md); XSTAGE_TEST_TEAM=virtual or =gpus forces one kind, and
// XSTAGE_TEST_PARTITION=green or =reduced the virtual ranks' SM partitioning.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "xstage/team.hpp"
#include "xstage/virtual_ranks.hpp"

namespace xstage::gputest {

// P virtual ranks (and their side streams) each need a hardware queue of their own, or a
// kernel can queue behind another rank's waiting kernel; and kernels must be loaded before
// any rank waits (lazy loading can serialise a launch behind a waiting kernel). Both are set
// before CUDA starts (docs/virtual-ranks.md).
inline const bool kConnectionsSet = [] {
  return setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0 && setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0;
}();

inline int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

inline std::string missing_gpus(int need) {
  int n = visible_gpus();
  if (n < need)
    return "needs " + std::to_string(need) + " GPU(s), found " + std::to_string(n) + " (CI has none: skipped)";
  for (int a = 0; a < need; ++a)
    for (int b = 0; b < need; ++b) {
      int can = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can))
        return "GPUs " + std::to_string(a) + " and " + std::to_string(b) + " have no peer access";
    }
  return {};
}

// A team of P ranks, or null with *why set. Prints (and records as a test property) which
// kind of team the test ran on.
inline std::unique_ptr<Team> make_team(int P, double timeout_s, std::string* why) {
  // Under compute-sanitizer kernels run many times slower: XSTAGE_TEST_TIMEOUT_SCALE stretches
  // the bounds of the correctness tests (>= 5 s), never the short ones the timeout tests time.
  if (const char* sc = std::getenv("XSTAGE_TEST_TIMEOUT_SCALE"); sc && timeout_s >= 5.0) timeout_s *= std::atof(sc);
  const char* force = std::getenv("XSTAGE_TEST_TEAM");
  const std::string want = force ? force : "";
  std::unique_ptr<Team> t;
  if (want != "virtual" && missing_gpus(P).empty()) {
    TeamOptions o;
    o.gpus = P;
    o.min_gpus = P;
    o.wait_timeout_s = timeout_s;
    t = Team::local(o);
  } else if (want == "gpus") {
    *why = missing_gpus(P) + " (XSTAGE_TEST_TEAM=gpus)";
    return nullptr;
  } else {
    if (visible_gpus() < 1) {
      *why = "needs " + std::to_string(P) + " GPUs, or one GPU for virtual ranks; found none (CI has none: skipped)";
      return nullptr;
    }
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (std::string e = plan_sm_split(sms, P, nullptr); !e.empty()) {
      *why = e;
      return nullptr;
    }
    TeamOptions o;
    o.wait_timeout_s = timeout_s;
    const char* part = std::getenv("XSTAGE_TEST_PARTITION");  // "green" or "reduced" forces a mode
    if (part && std::string(part) == "green") o.partition = TeamOptions::SmPartition::green_contexts;
    if (part && std::string(part) == "reduced") o.partition = TeamOptions::SmPartition::reduced_grids;
    t = Team::virtual_ranks(P, o);
  }
  std::string line = std::to_string(P) + " ranks on " +
                     (t->is_virtual() ? "virtual ranks of one GPU: " + t->partition_story() : std::string("real GPUs"));
  std::printf("[ team     ] %s\n", line.c_str());
  ::testing::Test::RecordProperty("team", line);
  return t;
}

}  // namespace xstage::gputest

#define XS_REQUIRE_GPUS(n)                                               \
  do {                                                                   \
    std::string why_ = ::xstage::gputest::missing_gpus(n);               \
    if (!why_.empty()) GTEST_SKIP() << why_;                             \
  } while (0)

// auto team = ...: P ranks (real or virtual), or the test skips saying why.
#define XS_TEAM(var, P, timeout_s)                                        \
  std::string var##_why_;                                                \
  auto var = ::xstage::gputest::make_team((P), (timeout_s), &var##_why_); \
  if (!var) GTEST_SKIP() << var##_why_
