// The register-operand MXFP4 Linear-1 kernel with per-token activation scales on
// gate/up-interleaved rows (ops::prepack_mxfp4_rs_glu): the MXFP4 bf16 256-token tile's main loop,
// 64 output channels per tile, SwiGLU + router weight + fp8 requantisation with the per-token amax
// shared by the two CTAs of a 1 x 2 cluster; the epilogue on warps 1-3 of the producer warp group
// (h parked in shared memory, so three stages), as the INT4 two-level glu kernel.
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsMxTokGluM256N128 = MoeW4A8RsKernel<W4RsTraits<3, false, 0, true, 2, false, true, true>>;

cudaError_t moe_w4a8rs_mxfp4_tok_glu_m256n128(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsMxTokGluM256N128>(p, stream);
}
KernelInfo moe_w4a8rs_mxfp4_tok_glu_m256n128_info() { return KernelW4A8RsMxTokGluM256N128::info(); }

}  // namespace xstage::kernels::moe
