// The register-operand INT4 Linear-1 kernel for two-level scales (MoeWeightLayout::int4_rs_lut):
// gate/up fused, SwiGLU + router weight + fp8 requantisation, 64 tokens x 128 channels per tile;
// the gate and up channel scales are applied before silu(gate) * up.
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsLutSwiGluM64N256 = MoeW4A8RsKernel<W4RsTraits<6, true, 0, false, 1, true>>;

cudaError_t moe_w4a8rs_lut_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsLutSwiGluM64N256>(p, stream);
}
KernelInfo moe_w4a8rs_lut_swiglu_m64n256_info() { return KernelW4A8RsLutSwiGluM64N256::info(); }

}  // namespace xstage::kernels::moe
