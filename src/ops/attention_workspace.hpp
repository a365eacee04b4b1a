// Device workspace of the attention kernel's tail split (kernels/attention/tile_scheduler.cuh):
// one buffer per (device, stream), grown on demand and kept for the process's lifetime.
// Launches on one stream run in order, so they can share it.
#pragma once
#include <cuda_runtime.h>

namespace xstage::ops {

struct SplitWorkspace {
  float* parts = nullptr;  // capacity parts of kernels::attention::split_part_floats() floats
  int capacity = 0;        // parts it holds: the grid it was sized for
};

// The workspace for launches of up to `grid` CTAs on `stream` of the current device.
// Allocation (first use, or a larger grid) synchronises `stream`; throws xstage::Error on
// CUDA failures.
SplitWorkspace split_workspace_for(cudaStream_t stream, int grid);

// The claimed causal order's two counters for launches on `stream` of the current device
// (kernels/attention/params.hpp claim_counter): zeroed once here; every launch leaves them zero.
int* claim_counter_for(cudaStream_t stream);

}  // namespace xstage::ops
