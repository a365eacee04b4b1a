// W8A8 Linear-1 (gate/up fused, SwiGLU + fp8 requantisation epilogue), 64 x 256 tiles in
// clusters of 2 x 1 CTAs (two m-blocks of one expert) that multicast the weight chunks.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8SwiGluM64N256C2X1 = ShippedKernel<kTileM64N256C2x1, true, LocalSwiGluEpilogue>;

cudaError_t moe_w8a8_swiglu_m64n256_c2x1(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8SwiGluM64N256C2X1>(p, stream);
}
KernelInfo moe_w8a8_swiglu_m64n256_c2x1_info() { return KernelW8A8SwiGluM64N256C2X1::info(); }

}  // namespace xstage::kernels::moe
