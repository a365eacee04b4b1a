// W8A8 Linear-1 with gate and up fused (SwiGLU + router weight + fp8 requantisation) on 128 x 256
// tiles: a stage holds 128 token rows and the 128 gate + 128 up weight rows of 128 output
// channels; each warp group owns 64 token rows and runs the gate and the up piece one after the
// other per K block (MoeTraits::kGateUpDual), so the operand bytes per FLOP are a 128-row
// tile's and the epilogue needs no exchange. Schedules 0 and 2 (no room for the overlap one).
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8SwiGluM128N256 = ShippedKernel<kTileSwiGluM128N256, true, LocalSwiGluEpilogue>;

cudaError_t moe_w8a8_swiglu_m128n256(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8SwiGluM128N256>(p, stream);
}
KernelInfo moe_w8a8_swiglu_m128n256_info() { return KernelW8A8SwiGluM128N256::info(); }

}  // namespace xstage::kernels::moe
