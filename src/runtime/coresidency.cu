#include "runtime/coresidency.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

namespace xstage::runtime {
namespace {

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Arrive, then wait (bounded) until all n have arrived; record how many this one saw.
__global__ void arrive_and_wait(unsigned* counter, unsigned n, unsigned long long wait_ns, unsigned* seen,
                                int idx) {
  atomicAdd(counter, 1u);
  __threadfence();
  const unsigned long long t0 = now_ns();
  unsigned c = 0;
  while ((c = atomicAdd(counter, 0u)) < n && now_ns() - t0 < wait_ns) __nanosleep(200);
  seen[idx] = c;
}

}  // namespace

bool wait_stream_bounded(cudaStream_t stream, double timeout_s, cudaError_t* err) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e != cudaErrorNotReady) {
      *err = e;
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *err = cudaErrorNotReady;
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

CoresidencyCheck check_coresident(const std::vector<cudaStream_t>& streams, double wait_s) {
  CoresidencyCheck out;
  const unsigned n = static_cast<unsigned>(streams.size());
  if (n < 2) return out;
  unsigned* buf = nullptr;  // [0]: the counter, [1 + i]: what stream i's kernel saw
  auto fail = [&](const std::string& what, cudaError_t e) {
    out.error = "co-residency check: " + what + ": " + cudaGetErrorString(e);
    cudaGetLastError();
    return out;
  };
  if (cudaError_t e = cudaMalloc(&buf, sizeof(unsigned) * (n + 1)); e != cudaSuccess) return fail("allocating", e);
  if (cudaError_t e = cudaMemset(buf, 0, sizeof(unsigned) * (n + 1)); e != cudaSuccess) {
    cudaFree(buf);
    return fail("clearing", e);
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    cudaFree(buf);
    return fail("clearing", e);
  }
  const auto wait_ns = static_cast<unsigned long long>(wait_s * 1e9);
  for (unsigned i = 0; i < n; ++i) {
    arrive_and_wait<<<1, 1, 0, streams[i]>>>(buf, n, wait_ns, buf + 1, static_cast<int>(i));
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
      // Launched kernels end by themselves within wait_s; wait for them before freeing.
      for (unsigned j = 0; j < i; ++j) cudaStreamSynchronize(streams[j]);
      cudaFree(buf);
      return fail("launching on stream " + std::to_string(i), e);
    }
  }
  // Each kernel ends within wait_s of starting, and a kernel queued behind another starts when
  // that one ends: n + 1 waits bound them all.
  const double bound = wait_s * (n + 1) + 5.0;
  for (unsigned i = 0; i < n; ++i) {
    cudaError_t e = cudaSuccess;
    if (!wait_stream_bounded(streams[i], bound, &e)) {
      // Leave buf allocated: a kernel that may still run writes into it.
      out.error = "co-residency check: stream " + std::to_string(i) + "'s kernel did not finish within " +
                  std::to_string(static_cast<int>(std::ceil(bound))) + " s";
      return out;
    }
    if (e != cudaSuccess) {
      cudaFree(buf);
      return fail("running on stream " + std::to_string(i), e);
    }
  }
  std::vector<unsigned> seen(n + 1);
  const cudaError_t e = cudaMemcpy(seen.data(), buf, sizeof(unsigned) * (n + 1), cudaMemcpyDeviceToHost);
  cudaFree(buf);
  if (e != cudaSuccess) return fail("reading back", e);
  for (unsigned i = 0; i < n; ++i)
    if (seen[1 + i] < n) out.alone.push_back(static_cast<int>(i));
  return out;
}

}  // namespace xstage::runtime
