// W4A8 grouped GEMM, bf16 output, 64 x 256 tiles (two consumer warp groups split N): few
// tokens per expert (<= 64), where a taller tile would be mostly padding.
#include "kernels/moe/w4a8.cuh"

namespace xstage::kernels::moe {

using KernelW4A8Bf16M64N256 = ShippedW4A8Kernel<kW4TileM64N256, false, LocalBf16Epilogue>;

cudaError_t moe_w4a8_bf16_m64n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return launch_moe_w4a8<KernelW4A8Bf16M64N256>(p, stream);
}
KernelInfo moe_w4a8_bf16_m64n256_info() { return KernelW4A8Bf16M64N256::info(); }

}  // namespace xstage::kernels::moe
