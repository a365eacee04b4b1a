// W8A8 grouped GEMM, bf16 output, 128 x 128 tiles (the two consumer warp groups split M):
// 65+ tokens per expert (planned by row fill against 192 x 128). One instantiation per translation unit so they compile in parallel.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8Bf16M128N128 = ShippedKernel<kTileM128N128, false, LocalBf16Epilogue>;

cudaError_t moe_w8a8_bf16_m128n128(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8Bf16M128N128>(p, stream);
}
KernelInfo moe_w8a8_bf16_m128n128_info() { return KernelW8A8Bf16M128N128::info(); }

}  // namespace xstage::kernels::moe
