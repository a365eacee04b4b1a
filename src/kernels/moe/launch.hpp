// Host-side entry points of the MoE grouped-GEMM kernels (no device code here): one launcher and
// one description per line of configs.def, defined in the translation units CMake generates
// from that list (cmake/moe_kernels.cmake). The launchers assume the operator
// (src/ops/moe_gemm_op.cpp) validated the parameters; they return the first CUDA error and never
// throw.
#pragma once
#include <cuda_runtime.h>

#include "kernels/moe/params.hpp"
#include "kernels/moe/params_w4a8.hpp"
#include "kernels/moe/policy.hpp"

namespace xstage::kernels::moe {

// A CTA computes block_m x block_n of the output with two or three consumer warp groups, each
// owning a 64 x 128 piece (block 128 x 128 / 192 x 128: the groups split M; block 64 x 256:
// they split N). K moves in blocks of 128 (the scale granularity) through `stages`
// shared-memory buffers. Clusters of cluster_m x cluster_n CTAs multicast the shared operand
// (A along n, B along m). (The W8A8 kernel template takes this as its tile parameter.)
struct TileConfig {
  int block_m;
  int block_n;
  int block_k;
  int stages;
  int consumer_warpgroups;
  int cluster_m = 1;
  int cluster_n = 1;
};

struct KernelInfo {
  TileConfig tile;
  int threads;        // 128 producer + 128 per consumer warp group
  int smem_bytes;     // dynamic shared memory per CTA
  int producer_regs;  // setmaxnreg of the producer warp group
  int consumer_regs;  // setmaxnreg of the consumer warp groups
};

// moe_launch_<name>: every kernel takes the W4A8 parameters (the W8A8 kernels read their
// MoeGemmParams part). moe_info_<name>: the kernel that runs for weight format f (only the W4A8
// rows kernels depend on it).
#define XSTAGE_MOE_CONFIG(name, rate, min_tokens, max_tokens, ...)               \
  cudaError_t moe_launch_##name(MoeW4A8Params const& p, cudaStream_t stream); \
  KernelInfo moe_info_##name(W4Format f);
#include "kernels/moe/configs.def"
#undef XSTAGE_MOE_CONFIG

}  // namespace xstage::kernels::moe
