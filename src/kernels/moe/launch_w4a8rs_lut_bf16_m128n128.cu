// The register-operand INT4 kernel for two-level scales (MoeWeightLayout::int4_rs_lut), bf16
// output, 128 tokens x 128 output columns per tile: the row's conversion table carries the group
// scale, so the promotion is acc += part * a_scale (W4RsTraits kLut).
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsLutBf16M128N128 = MoeW4A8RsKernel<W4RsTraits<6, false, 0, false, 1, true>>;

cudaError_t moe_w4a8rs_lut_bf16_m128n128(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsLutBf16M128N128>(p, stream);
}
KernelInfo moe_w4a8rs_lut_bf16_m128n128_info() { return KernelW4A8RsLutBf16M128N128::info(); }

}  // namespace xstage::kernels::moe
