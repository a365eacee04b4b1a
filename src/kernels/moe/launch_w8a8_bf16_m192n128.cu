// W8A8 grouped GEMM, bf16 output, 192 x 128 tiles (three consumer warp groups split M):
// many tokens per expert, where the bytes moved into shared memory per FLOP limit the rate.
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8Bf16M192N128 = ShippedKernel<kTileM192N128, false, LocalBf16Epilogue>;

cudaError_t moe_w8a8_bf16_m192n128(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8Bf16M192N128>(p, stream);
}
KernelInfo moe_w8a8_bf16_m192n128_info() { return KernelW8A8Bf16M192N128::info(); }

}  // namespace xstage::kernels::moe
