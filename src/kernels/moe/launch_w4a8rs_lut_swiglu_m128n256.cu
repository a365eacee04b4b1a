// The register-operand INT4 Linear-1 kernel for two-level scales (MoeWeightLayout::int4_rs_lut)
// on 128-token tiles: two 64-token pieces per converted weight fragment (W4RsTraits kPieces = 2),
// so the conversion per MAC is half the 64-token tile's; SwiGLU + router weight + fp8
// requantisation per piece.
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsLutSwiGluM128N256 = MoeW4A8RsKernel<W4RsTraits<5, true, 0, false, 2, true>>;

cudaError_t moe_w4a8rs_lut_swiglu_m128n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsLutSwiGluM128N256>(p, stream);
}
KernelInfo moe_w4a8rs_lut_swiglu_m128n256_info() { return KernelW4A8RsLutSwiGluM128N256::info(); }

}  // namespace xstage::kernels::moe
