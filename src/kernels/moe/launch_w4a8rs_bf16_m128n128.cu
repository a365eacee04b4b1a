// W4A8 grouped GEMM with the weights as wgmma's register operand (INT4 group-128, prepacked
// layout of w4a8_rs_layout.hpp), bf16 output, 128 tokens x 128 output columns per tile: many
// tokens per expert.
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsBf16M128N128 = MoeW4A8RsKernel<W4RsTraits<6>>;

cudaError_t moe_w4a8rs_bf16_m128n128(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsBf16M128N128>(p, stream);
}
KernelInfo moe_w4a8rs_bf16_m128n128_info() { return KernelW4A8RsBf16M128N128::info(); }

}  // namespace xstage::kernels::moe
