// The 128 x 256 bf16 tile (launch_w8a8_bf16_m128n256.cu) in 2 x 1 clusters: the two CTAs take
// neighbouring m-blocks of the same 256 columns, so each loads half of every B chunk and
// multicasts it to the other (as the planned 128 x 192 tile does). Forced only.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8Bf16M128N256C2x1 = ShippedKernel<kTileM128N256C2x1, false, LocalBf16Epilogue>;

cudaError_t moe_w8a8_bf16_m128n256_c2x1(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8Bf16M128N256C2x1>(p, stream);
}
KernelInfo moe_w8a8_bf16_m128n256_c2x1_info() { return KernelW8A8Bf16M128N256C2x1::info(); }

}  // namespace xstage::kernels::moe
