// W8A8 grouped GEMM, bf16 output, 128 x 192 tiles in clusters of 2x1 CTAs (two m-blocks of one
// expert) that multicast the shared B chunk: cuBLASLt's cluster shape on these GEMMs.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8Bf16M128N192C2x1 = ShippedKernel<kTileM128N192C2x1, false, LocalBf16Epilogue>;

cudaError_t moe_w8a8_bf16_m128n192_c2x1(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8Bf16M128N192C2x1>(p, stream);
}
KernelInfo moe_w8a8_bf16_m128n192_c2x1_info() { return KernelW8A8Bf16M128N192C2x1::info(); }

}  // namespace xstage::kernels::moe
