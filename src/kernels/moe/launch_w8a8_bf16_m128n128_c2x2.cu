// W8A8 grouped GEMM, bf16 output, 128 x 128 tiles in clusters of 2x2 CTAs that multicast the
// shared operand (2x1: B, 1x2: A, 2x2: both). Forced only (measured no faster than 1x1).
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8Bf16M128N128C2x2 = ShippedKernel<kTileM128N128C2x2, false, LocalBf16Epilogue>;

cudaError_t moe_w8a8_bf16_m128n128_c2x2(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8Bf16M128N128C2x2>(p, stream);
}
KernelInfo moe_w8a8_bf16_m128n128_c2x2_info() { return KernelW8A8Bf16M128N128C2x2::info(); }

}  // namespace xstage::kernels::moe
