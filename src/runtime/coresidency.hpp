// Whether kernels on a set of streams can run side by side (docs/virtual-ranks.md
// §Co-residency). Virtual ranks rely on it: each rank's persistent kernel waits for the
// others', so two ranks whose streams share a hardware queue, or whose first launch waits on
// something a running kernel holds, would wait for each other until a device bound fires.
// A virtual team checks it once when it is made, instead of finding out in a test.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace xstage::runtime {

struct CoresidencyCheck {
  std::vector<int> alone;  // indices of streams whose kernel waited `wait_s` without seeing all the others
  std::string error;       // a CUDA error or a kernel that never finished (one line); empty if none
};

// One one-thread kernel per stream (all on the current device): each arrives at a shared
// counter and waits up to wait_s for every other to arrive. The host waits at most
// wait_s * (n + 1) + 5 s for all of them, polling (never an unbounded synchronise).
CoresidencyCheck check_coresident(const std::vector<cudaStream_t>& streams, double wait_s);

// Waits for `stream` to drain, polling, at most `timeout_s`; false if it did not.
bool wait_stream_bounded(cudaStream_t stream, double timeout_s, cudaError_t* err);

}  // namespace xstage::runtime
