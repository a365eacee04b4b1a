// The register-operand INT4 bf16 kernel with 256-token tiles (W4RsTraits kPieces = 2): each
// warp group converts its weight fragments of a K block once and runs them against two 128-token
// pieces, one after the other, so the conversion per MAC halves. Planned from 1024 tokens per
// expert (1.01-1.06x of the 128-token tile: docs/perf-log.md §MoE grouped GEMM, W4A8).
#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsBf16M256N128 = MoeW4A8RsKernel<W4RsTraits<4, false, 0, false, 2>>;

cudaError_t moe_w4a8rs_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8_rs<KernelW4A8RsBf16M256N128>(p, stream);
}
KernelInfo moe_w4a8rs_bf16_m256n128_info() { return KernelW4A8RsBf16M256N128::info(); }

}  // namespace xstage::kernels::moe
