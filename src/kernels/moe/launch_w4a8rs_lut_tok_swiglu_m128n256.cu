// The register-operand INT4 two-level Linear-1 kernel with per-token activation scales
// (a_scales [m_total]): 128-token tiles (two 64-token pieces), SwiGLU + router weight + fp8
// requantisation per piece; the token scale multiplies gate and up before the SiLU.
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsLutTokSwiGluM128N256 = MoeW4A8RsKernel<W4RsTraits<5, true, 0, false, 2, true, true>>;

cudaError_t moe_w4a8rs_lut_tok_swiglu_m128n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsLutTokSwiGluM128N256>(p, stream);
}
KernelInfo moe_w4a8rs_lut_tok_swiglu_m128n256_info() { return KernelW4A8RsLutTokSwiGluM128N256::info(); }

}  // namespace xstage::kernels::moe
