// The register-operand INT4 kernel for two-level scales (MoeWeightLayout::int4_rs_lut), bf16
// output, 256-token tiles (two 128-token pieces per converted fragment, as w4a8rs_bf16_m256n128).
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsLutBf16M256N128 = MoeW4A8RsKernel<W4RsTraits<4, false, 0, false, 2, true>>;

cudaError_t moe_w4a8rs_lut_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsLutBf16M256N128>(p, stream);
}
KernelInfo moe_w4a8rs_lut_bf16_m256n128_info() { return KernelW4A8RsLutBf16M256N128::info(); }

}  // namespace xstage::kernels::moe
