// The launcher-mode rendezvous over loopback TCP, with real sockets and threads, and its
// bounded failure when a peer never shows up.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "xstage/error.hpp"
#include "xstage/rendezvous.hpp"

using namespace xstage;

namespace {
int free_port() {
  static std::mt19937 g(static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return 30000 + static_cast<int>(g() % 20000);
}
}  // namespace

TEST(Rendezvous, RankZeroBlobReachesEveryRank) {
  const int world = 4;
  const int port = free_port();
  std::vector<char> blob = {'n', 'c', 'c', 'l', 0, 1, 2, 3};
  std::vector<std::vector<char>> got(world);
  std::vector<std::string> err(world);
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      LaunchEnv e;
      e.rank = r;
      e.world_size = world;
      e.master_addr = "127.0.0.1";
      e.rendezvous_port = port;
      try {
        got[r] = rendezvous_broadcast(e, r == 0 ? blob : std::vector<char>{}, 10.0);
      } catch (const std::exception& ex) {
        err[r] = ex.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(err[r], "") << "rank " << r;
    EXPECT_EQ(got[r], blob) << "rank " << r;
  }
}

TEST(Rendezvous, MissingPeerTimesOutWithClearError) {
  LaunchEnv e;
  e.rank = 0;
  e.world_size = 2;
  e.master_addr = "127.0.0.1";
  e.rendezvous_port = free_port();
  auto t0 = std::chrono::steady_clock::now();
  try {
    rendezvous_broadcast(e, {'x'}, 0.3);
    FAIL() << "no error";
  } catch (const Error& ex) {
    EXPECT_NE(std::string(ex.what()).find("0 of 1 ranks connected"), std::string::npos) << ex.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  LaunchEnv c = e;
  c.rank = 1;
  try {
    rendezvous_broadcast(c, {}, 0.3);
    FAIL() << "no error";
  } catch (const Error& ex) {
    EXPECT_NE(std::string(ex.what()).find("could not reach rank 0"), std::string::npos) << ex.what();
  }
}
