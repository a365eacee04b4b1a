// W8A8 grouped GEMM, bf16 output, 128 x 192 tiles (two consumer warp groups of 64 x 192, m64n192
// wgmmas): fewer shared-memory and L2 bytes per FLOP than 128 x 128 (planned: plan_block_n).
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8Bf16M128N192 = ShippedKernel<kTileM128N192, false, LocalBf16Epilogue>;

cudaError_t moe_w8a8_bf16_m128n192(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8Bf16M128N192>(p, stream);
}
KernelInfo moe_w8a8_bf16_m128n192_info() { return KernelW8A8Bf16M128N192::info(); }

}  // namespace xstage::kernels::moe
