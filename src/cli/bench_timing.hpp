// What every single-kernel bench (bench attention, bench moe-gemm) shares around its launches:
// the Hopper check, the rotating inputs' size, device buffers, the event-timed launches behind a
// backlog, and the statistics of their times (docs/measurement.md §Comparing kernel variants on a
// power-capped card).
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_util.hpp"
#include "runtime/check.hpp"

namespace xstage::cli {

// One cudaMalloc'd buffer (at least 16 bytes, so an empty tensor still has an address).
struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) {
    XS_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 16)), fmt::format("allocating {} bytes", bytes));
  }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

// The current GPU's properties; the single-kernel benches run only on sm_90 (Hopper) and stop
// with a one-line error on any other GPU.
inline cudaDeviceProp hopper_device(const char* bench) {
  int dev = 0;
  XS_CUDA(cudaGetDevice(&dev), "selecting the GPU");
  cudaDeviceProp prop{};
  XS_CUDA(cudaGetDeviceProperties(&prop, dev), "reading device properties");
  if (prop.major != 9 || prop.minor != 0)
    throw InvalidArgument(fmt::format("bench {}: needs an sm_90 (Hopper) GPU, found {} (sm_{}{})", bench, prop.name,
                                      prop.major, prop.minor));
  return prop;
}

// Bytes the rotating input sets cover: --rotate-mib if given, else twice the L2, so that no
// timed launch finds its inputs in L2 from the launch before.
inline size_t rotate_bytes_for(double rotate_mib, const cudaDeviceProp& prop) {
  return rotate_mib > 0 ? static_cast<size_t>(rotate_mib * 1048576.0) : 2 * static_cast<size_t>(prop.l2CacheSize);
}

// `iters` launches, each between its own pair of CUDA events: set_args(it) picks the rotating
// input set, launch() enqueues the kernel. A memset of `backlog_bytes` (none if 0) is queued
// first, so the GPU is busy while the host enqueues and no start event waits for the host.
// Returns each launch's time in µs; `what` names the run in a failure.
template <class SetArgs, class Launch>
std::vector<double> timed_launches(int iters, cudaStream_t stream, const DeviceMem& backlog, size_t backlog_bytes,
                                   SetArgs&& set_args, Launch&& launch, const std::string& what) {
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) XS_CUDA(cudaEventCreate(&e), "creating timing events");
  if (backlog_bytes > 0) XS_CUDA(cudaMemsetAsync(backlog.p, 0, backlog_bytes, stream), "queueing the backlog memset");
  for (int it = 0; it < iters; ++it) {
    set_args(it);
    XS_CUDA(cudaEventRecord(ev[2 * it], stream), "recording a start event");
    launch();
    XS_CUDA(cudaEventRecord(ev[2 * it + 1], stream), "recording a stop event");
  }
  XS_CUDA(cudaStreamSynchronize(stream), what);
  std::vector<double> us(iters);
  for (int it = 0; it < iters; ++it) {
    float ms = 0;
    XS_CUDA(cudaEventElapsedTime(&ms, ev[2 * it], ev[2 * it + 1]), "reading timing events");
    us[it] = ms * 1e3;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return us;
}

// Median, extremes and 10 / 90 % quantiles of a non-empty sample of µs, and the rates of
// `flops` at the median and the best time.
struct TimingStats {
  double median_us = 0, min_us = 0, max_us = 0, p10_us = 0, p90_us = 0;
  double tflops = 0, tflops_best = 0;

  static TimingStats of(const std::vector<double>& us, double flops) {
    TimingStats t;
    t.median_us = quantile(us, 0.5);
    t.min_us = *std::min_element(us.begin(), us.end());
    t.max_us = *std::max_element(us.begin(), us.end());
    t.p10_us = quantile(us, 0.1);
    t.p90_us = quantile(us, 0.9);
    t.tflops = flops / (t.median_us * 1e-6) / 1e12;
    t.tflops_best = flops / (t.min_us * 1e-6) / 1e12;
    return t;
  }
  // Adds the seven fields to a result record (the bench JSONs' shared keys).
  void put(nlohmann::json& j) const {
    j["median_us"] = median_us;
    j["min_us"] = min_us;
    j["max_us"] = max_us;
    j["p10_us"] = p10_us;
    j["p90_us"] = p90_us;
    j["tflops"] = tflops;
    j["tflops_best"] = tflops_best;
  }
};

}  // namespace xstage::cli
