// W4A8 Linear-1 with MXFP4 weights as wgmma's register operand (prepacked by
// ops::prepack_mxfp4_rs), gate/up fused with the SwiGLU + router weight + fp8 requantisation
// epilogue: 64 tokens x 128 output channels (128 gate + 128 up weight rows) per tile.
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsMxSwiGluM64N256 = MoeW4A8RsKernel<W4RsTraits<6, true, 0, true>>;

cudaError_t moe_w4a8rs_mxfp4_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsMxSwiGluM64N256>(p, stream);
}
KernelInfo moe_w4a8rs_mxfp4_swiglu_m64n256_info() { return KernelW4A8RsMxSwiGluM64N256::info(); }

}  // namespace xstage::kernels::moe
