// The register-operand INT4 two-level kernel with per-token activation scales (a_scales
// [m_total]; MoeGemmArgs::a_scale_granularity = per_token): bf16 output, 256-token tiles. The
// promotion per 128 K is a plain add; token and channel scales are applied in the epilogue. The
// staged tile is copied out by warps 1-3 of the producer warp group (so three stages).
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsLutTokBf16M256N128 = MoeW4A8RsKernel<W4RsTraits<3, false, 0, false, 2, true, true, false, true>>;

cudaError_t moe_w4a8rs_lut_tok_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsLutTokBf16M256N128>(p, stream);
}
KernelInfo moe_w4a8rs_lut_tok_bf16_m256n128_info() { return KernelW4A8RsLutTokBf16M256N128::info(); }

}  // namespace xstage::kernels::moe
