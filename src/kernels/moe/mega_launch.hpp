// Host entry of the Mega-MoE persistent kernel (mega_kernel.cuh); no device code here. The
// operator (src/ops/mega_moe_op.cpp) validates everything first; this returns the first
// CUDA error and never throws.
#pragma once
#include <cuda_runtime.h>

#include "kernels/moe/mega_args.hpp"

namespace xstage::kernels::moe {

struct MegaWeights {
  const void* w1 = nullptr;         // fp8 [E/P, 2I, H]
  const float* w1_scales = nullptr;  // [E/P, 2I/128, H/128]
  const void* w2 = nullptr;         // fp8 [E/P, H, I]
  const float* w2_scales = nullptr;  // [E/P, H/128, I/128]
};

// One call: `ctas` co-resident CTAs (cooperative launch; at most one per SM).
cudaError_t mega_moe_launch(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);

// Tiles per m-block of 64 rows: Linear-1 (128 h channels each), Linear-2 (256 hidden channels).
inline int mega_l1_tiles_per_block(int intermediate) { return intermediate / 128; }
inline int mega_l2_tiles_per_block(int hidden) { return (hidden + 255) / 256; }

}  // namespace xstage::kernels::moe
