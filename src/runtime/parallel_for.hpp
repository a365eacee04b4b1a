// f(i) for every i in [0, n) on up to `max_threads` host threads: the host references of the
// benches and tests (every i independent). The first exception thrown by any f(i) stops the
// remaining work and is rethrown on the calling thread.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace xstage {

template <class F>
void parallel_for(size_t n, F&& f, unsigned max_threads = 32) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t nt = std::min<size_t>(n, std::min(hw, std::max(1u, max_threads)));
  if (nt <= 1) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr first;
  std::mutex mu;
  std::vector<std::thread> pool;
  pool.reserve(nt);
  for (size_t t = 0; t < nt; ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) {
        try {
          f(i);
        } catch (...) {
          std::lock_guard<std::mutex> lk(mu);
          if (!first) first = std::current_exception();
          next = n;  // the others stop after their current item
        }
      }
    });
  for (auto& th : pool) th.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace xstage
