// The launcher-mode rendezvous over loopback TCP, with real sockets and threads, and its
// bounded failure when a peer never shows up.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "xstage/error.hpp"
#include "xstage/rendezvous.hpp"

using namespace xstage;

namespace {
// A port the kernel just handed out as free (bound to port 0 on loopback, then released), so
// a test never collides with a port another process holds.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  EXPECT_GT(port, 0) << "could not get a free loopback port";
  return port;
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
