// SM partitions of one GPU through CUDA green contexts (docs/virtual-ranks.md): one green
// context and stream per virtual rank. The driver API is reached through the runtime's entry
// point lookup, so nothing links libcuda (the CLI still starts on a machine without a driver).
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "xstage/virtual_ranks.hpp"

namespace xstage::green {

struct Partitions {
  std::vector<void*> contexts;        // CUgreenCtx, one per rank
  std::vector<cudaStream_t> streams;  // the rank's stream, inside its green context
  int sms_per_rank = 0;               // what the driver gave each partition
  int unused = 0;
};

// `plan.ranks` green contexts of plan.sms_per_rank SMs each on `device` (its primary context
// must be current), made on first use of that split and kept for the process, with a fresh
// stream in each. Empty string on success, else one line saying what the driver refused (the
// caller falls back or reports it).
std::string create(int device, const SmSplit& plan, Partitions* out);

// Another stream in rank `r`'s partition (for operators that run a second stream).
cudaError_t create_stream(const Partitions& p, int r, cudaStream_t* out);

// Replaces every rank's stream with a fresh one in the same partition (after a failed
// co-residency check); on failure the partitions hold no streams.
cudaError_t remake_streams(Partitions& p);

// Destroys the streams (the contexts stay cached).
void destroy(Partitions& p);

// True when CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY, the default): a kernel's
// first launch may then wait behind another virtual rank's waiting kernel.
bool lazy_module_loading();

// Whether the driver offers green contexts on `device` ("" if yes, else why not).
std::string available(int device);

}  // namespace xstage::green
