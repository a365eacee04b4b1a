#include "xstage/rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "xstage/error.hpp"

namespace xstage {
namespace {

using Clock = std::chrono::steady_clock;

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() { if (fd >= 0) ::close(fd); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

std::string where(const LaunchEnv& env) {
  return env.master_addr + ":" + std::to_string(env.rendezvous_port);
}

bool send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* p, size_t n, Clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (ms <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, ms) <= 0) return false;
    ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::vector<char> serve(const LaunchEnv& env, const std::vector<char>& blob, double timeout_s) {
  Fd s(::socket(AF_INET, SOCK_STREAM, 0));
  if (s.fd < 0) throw Error("rendezvous: socket() failed: " + std::string(std::strerror(errno)));
  int one = 1;
  ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(env.rendezvous_port));
  if (::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    throw Error("rendezvous: rank 0 cannot listen on port " + std::to_string(env.rendezvous_port) + ": " +
                std::strerror(errno) + " (pick another with XSTAGE_RDZV_PORT)");
  ::listen(s.fd, 128);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const uint32_t n = static_cast<uint32_t>(blob.size());
  for (int served = 1; served < env.world_size; ++served) {
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    pollfd pfd{s.fd, POLLIN, 0};
    if (ms <= 0 || ::poll(&pfd, 1, ms) <= 0)
      throw Error("rendezvous: rank 0 waited " + std::to_string(timeout_s) + " s on port " +
                  std::to_string(env.rendezvous_port) + " but only " + std::to_string(served - 1) + " of " +
                  std::to_string(env.world_size - 1) + " ranks connected (were all ranks started?)");
    Fd c(::accept(s.fd, nullptr, nullptr));
    if (c.fd < 0 || !send_all(c.fd, &n, sizeof n) || !send_all(c.fd, blob.data(), blob.size()))
      throw Error("rendezvous: rank 0 failed to send the id to a peer: " + std::string(std::strerror(errno)));
  }
  return blob;
}

std::vector<char> fetch(const LaunchEnv& env, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(env.rendezvous_port);
  if (::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &res) != 0 || !res)
    throw Error("rendezvous: cannot resolve MASTER_ADDR '" + env.master_addr + "'");
  sockaddr_storage addr{};
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  socklen_t len = res->ai_addrlen;
  ::freeaddrinfo(res);
  while (true) {
    Fd c(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      uint32_t n = 0;
      if (!recv_all(c.fd, &n, sizeof n, deadline) || n > (1u << 20))
        throw Error("rendezvous: rank " + std::to_string(env.rank) + " got no id from " + where(env));
      std::vector<char> blob(n);
      if (!recv_all(c.fd, blob.data(), n, deadline))
        throw Error("rendezvous: rank " + std::to_string(env.rank) + " got a truncated id from " + where(env));
      return blob;
    }
    if (Clock::now() > deadline)
      throw Error("rendezvous: rank " + std::to_string(env.rank) + " could not reach rank 0 at " + where(env) +
                  " within " + std::to_string(timeout_s) + " s (is rank 0 running? same MASTER_ADDR/MASTER_PORT?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::vector<char> rendezvous_broadcast(const LaunchEnv& env, const std::vector<char>& blob, double timeout_s) {
  if (env.world_size == 1) return blob;
  return env.rank == 0 ? serve(env, blob, timeout_s) : fetch(env, timeout_s);
}

}  // namespace xstage
