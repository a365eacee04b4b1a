// W4A8 Linear-1 with gate and up fused and the SwiGLU + router weight + fp8 requantisation
// epilogue (the W8A8 policy): a 64-row tile covers 128 output channels (gate chunk + up chunk,
// one consumer warp group each).
#include "kernels/moe/w4a8.cuh"

namespace xstage::kernels::moe {

using KernelW4A8SwiGluM64N256 = ShippedW4A8Kernel<kW4TileM64N256, true, LocalSwiGluEpilogue>;

cudaError_t moe_w4a8_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8<KernelW4A8SwiGluM64N256>(p, stream);
}
KernelInfo moe_w4a8_swiglu_m64n256_info() { return KernelW4A8SwiGluM64N256::info(); }

}  // namespace xstage::kernels::moe
