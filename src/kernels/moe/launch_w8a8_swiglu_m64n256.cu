// W8A8 Linear-1 with gate and up fused and the SwiGLU + router weight + fp8 requantisation
// epilogue: a 64-row tile covers 128 output channels (gate chunk + up chunk, one consumer
// warp group each), so the per-128-channel amax is computed inside one CTA.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8SwiGluM64N256 = ShippedKernel<kTileM64N256, true, LocalSwiGluEpilogue>;

cudaError_t moe_w8a8_swiglu_m64n256(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8SwiGluM64N256>(p, stream);
}
KernelInfo moe_w8a8_swiglu_m64n256_info() { return KernelW8A8SwiGluM64N256::info(); }

}  // namespace xstage::kernels::moe
