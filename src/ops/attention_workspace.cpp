// Per-(device, stream) workspace of the attention tail split; see attention_workspace.hpp.
#include "ops/attention_workspace.hpp"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <utility>

#include "kernels/attention/params.hpp"
#include "runtime/check.hpp"

namespace xstage::ops {

SplitWorkspace split_workspace_for(cudaStream_t stream, int grid) {
  static std::mutex mu;
  // Never freed: a buffer may be in use until the process ends, and CUDA teardown order at
  // exit makes freeing from a static destructor unsafe.
  static auto* cache = new std::map<std::pair<int, cudaStream_t>, SplitWorkspace>();
  int dev = 0;
  XS_CUDA(cudaGetDevice(&dev), "reading the current device");
  std::lock_guard<std::mutex> lock(mu);
  SplitWorkspace& w = (*cache)[{dev, stream}];
  if (w.capacity >= grid) return w;
  if (w.parts != nullptr) {
    // Earlier launches on this stream may still read the old buffer.
    XS_CUDA(cudaStreamSynchronize(stream), "waiting for the stream before growing the attention workspace");
    cudaFree(w.parts);
    w = SplitWorkspace{};
  }
  const size_t bytes = static_cast<size_t>(grid) * static_cast<size_t>(kernels::attention::split_part_floats()) * sizeof(float);
  XS_CUDA(cudaMalloc(&w.parts, bytes), fmt::format("allocating {} bytes of attention workspace", bytes));
  w.capacity = grid;
  return w;
}

int* claim_counter_for(cudaStream_t stream) {
  static std::mutex mu;
  // Keyed by the stream's id, not its handle: cudaStreamPerThread (or the default stream under
  // per-thread default streams) is one handle for a different stream per host thread, and a
  // destroyed stream's handle may come back for a new one. Never freed, as above.
  static auto* cache = new std::map<std::pair<int, unsigned long long>, int*>();
  int dev = 0;
  XS_CUDA(cudaGetDevice(&dev), "reading the current device");
  unsigned long long id = 0;
  XS_CUDA(cudaStreamGetId(stream, &id), "reading the stream's id");
  std::lock_guard<std::mutex> lock(mu);
  int*& c = (*cache)[{dev, id}];
  if (c == nullptr) {
    XS_CUDA(cudaMalloc(&c, 2 * sizeof(int)), "allocating the attention claim counters");
    // On the stream itself, so the first launch there finds them zeroed whatever the stream's
    // flags; every launch leaves them at zero again. Never reached while `stream` captures a CUDA
    // graph (cudaStreamGetId is refused then; the operator runs grouped instead of claimed).
    XS_CUDA(cudaMemsetAsync(c, 0, 2 * sizeof(int), stream), "zeroing the attention claim counters");
  }
  return c;
}

}  // namespace xstage::ops
