// The 128 x 256 SwiGLU tile (launch_w8a8_swiglu_m128n256.cu) in 2 x 1 clusters: the two CTAs
// take neighbouring m-blocks of the same 128 channels, so each loads half of every gate and up
// chunk and multicasts it to the other. Forced only.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8SwiGluM128N256C2x1 = ShippedKernel<kTileSwiGluM128N256C2x1, true, LocalSwiGluEpilogue>;

cudaError_t moe_w8a8_swiglu_m128n256_c2x1(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8SwiGluM128N256C2x1>(p, stream);
}
KernelInfo moe_w8a8_swiglu_m128n256_c2x1_info() { return KernelW8A8SwiGluM128N256C2x1::info(); }

}  // namespace xstage::kernels::moe
