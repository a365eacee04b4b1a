// W8A8 grouped GEMM with a bf16 epilogue on 128 x 256 tiles: each warp group owns 64 rows and
// runs the tile's two 128-column pieces of a stage one after the other (MoeTraits::kDual, the
// SwiGLU 128 x 256 tile's schedule). Planned from 1024 tokens per expert where whole waves
// favour it (plan_block_n); schedules 0 and 2.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8Bf16M128N256 = ShippedKernel<kTileM128N256, false, LocalBf16Epilogue>;

cudaError_t moe_w8a8_bf16_m128n256(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8Bf16M128N256>(p, stream);
}
KernelInfo moe_w8a8_bf16_m128n256_info() { return KernelW8A8Bf16M128N256::info(); }

}  // namespace xstage::kernels::moe
