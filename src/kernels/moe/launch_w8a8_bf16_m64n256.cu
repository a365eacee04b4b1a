// W8A8 grouped GEMM, bf16 output, 64 x 256 tiles (the two consumer warp groups split N):
// few tokens per expert (at most 64), where a 128-row tile would mostly compute padding.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8Bf16M64N256 = ShippedKernel<kTileM64N256, false, LocalBf16Epilogue>;

cudaError_t moe_w8a8_bf16_m64n256(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8Bf16M64N256>(p, stream);
}
KernelInfo moe_w8a8_bf16_m64n256_info() { return KernelW8A8Bf16M64N256::info(); }

}  // namespace xstage::kernels::moe
