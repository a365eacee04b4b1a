// W4A8 grouped GEMM with MXFP4 weights as wgmma's register operand (prepacked by
// ops::prepack_mxfp4_rs: codes and per-sub-block exponent gaps, fp32 block scales), bf16
// output, 128 tokens x 128 output columns per tile.
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsMxBf16M128N128 = MoeW4A8RsKernel<W4RsTraits<6, false, 0, true>>;

cudaError_t moe_w4a8rs_mxfp4_bf16_m128n128(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsMxBf16M128N128>(p, stream);
}
KernelInfo moe_w4a8rs_mxfp4_bf16_m128n128_info() { return KernelW4A8RsMxBf16M128N128::info(); }

}  // namespace xstage::kernels::moe
