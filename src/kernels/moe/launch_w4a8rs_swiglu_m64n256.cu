// W4A8 Linear-1 with the weights as wgmma's register operand (INT4 group-128, prepacked layout of
// w4a8_rs_layout.hpp), gate/up fused with the SwiGLU + router weight + fp8 requantisation
// epilogue: 64 tokens x 128 output channels (128 gate + 128 up weight rows) per tile.
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsSwiGluM64N256 = MoeW4A8RsKernel<W4RsTraits<6, true>>;

cudaError_t moe_w4a8rs_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsSwiGluM64N256>(p, stream);
}
KernelInfo moe_w4a8rs_swiglu_m64n256_info() { return KernelW4A8RsSwiGluM64N256::info(); }

}  // namespace xstage::kernels::moe
