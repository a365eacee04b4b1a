// Host entry of the Mega-MoE persistent kernel (mega_kernel.cuh); no device code here. The
// operator (src/ops/mega_moe_op.cpp) validates everything first; this returns the first
// CUDA error and never throws.
#pragma once
#include <cuda_runtime.h>

#include "kernels/moe/mega_args.hpp"
#include "xstage/mega_tile.hpp"

namespace xstage::kernels::moe {

struct MegaWeights {
  const void* w1 = nullptr;         // fp8 [E/P, 2I, H]
  const float* w1_scales = nullptr;  // [E/P, 2I/128, H/128]
  const void* w2 = nullptr;         // fp8 [E/P, H, I]
  const float* w2_scales = nullptr;  // [E/P, H/128, I/128]
};

// One call: `ctas` co-resident CTAs (cooperative launch; at most one per SM), one function per
// tile configuration (xstage/mega_tile.hpp), each in its own translation unit.
cudaError_t mega_moe_launch_m64n256(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);
cudaError_t mega_moe_launch_m128n256(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);

inline cudaError_t mega_moe_launch(::xstage::moe::MegaTile tile, const MegaMoeArgs& m, const MegaWeights& w, int ctas,
                                   cudaStream_t s) {
  return tile == ::xstage::moe::MegaTile::m128n256 ? mega_moe_launch_m128n256(m, w, ctas, s)
                                                   : mega_moe_launch_m64n256(m, w, ctas, s);
}

}  // namespace xstage::kernels::moe
