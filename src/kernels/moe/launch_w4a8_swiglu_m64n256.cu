// W4A8 Linear-1 with gate and up fused and the SwiGLU + router weight + fp8 requantisation
// epilogue (the W8A8 policy): a 64-row tile covers 128 output channels (gate chunk + up chunk,
// one consumer warp group each).
#include "kernels/moe/w4a8.cuh"

namespace xstage::kernels::moe {

// int4: the decoupled design; mxfp4: the lock-step one (w4a8.cuh, W4Traits).
using KernelW4A8SwiGluM64N256Int4 = ShippedW4A8Kernel<kW4TileM64N256, true, LocalSwiGluEpilogue, true>;
using KernelW4A8SwiGluM64N256Mx = ShippedW4A8Kernel<kW4TileM64N256, true, LocalSwiGluEpilogue, false>;

cudaError_t moe_w4a8_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return p.format == W4Format::mxfp4 ? launch_moe_w4a8<KernelW4A8SwiGluM64N256Mx>(p, stream)
                                       : launch_moe_w4a8<KernelW4A8SwiGluM64N256Int4>(p, stream);
}
KernelInfo moe_w4a8_swiglu_m64n256_info(W4Format f) {
  return f == W4Format::mxfp4 ? KernelW4A8SwiGluM64N256Mx::info() : KernelW4A8SwiGluM64N256Int4::info();
}

}  // namespace xstage::kernels::moe
