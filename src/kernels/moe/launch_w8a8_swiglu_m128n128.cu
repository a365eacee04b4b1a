// W8A8 Linear-1 with gate and up fused and the SwiGLU + router weight + fp8 requantisation
// epilogue on 128-row tiles: a tile covers 128 output channels in two passes over K (gate rows,
// then up rows, both warp groups on the same B chunk), so it moves the bytes of a 128 x 128
// bf16 tile per FLOP instead of the 64 x 256 tile's 1.25x; every schedule (the gate result is
// parked in shared memory, MoeTraits::kGateUpSerial).
#include "kernels/moe/kernel.cuh"

namespace xstage::kernels::moe {

using KernelW8A8SwiGluM128N128 = ShippedKernel<kTileSwiGluM128N128, true, LocalSwiGluEpilogue>;

cudaError_t moe_w8a8_swiglu_m128n128(const MoeGemmParams& p, cudaStream_t stream) {
  return launch_moe_gemm<KernelW8A8SwiGluM128N128>(p, stream);
}
KernelInfo moe_w8a8_swiglu_m128n128_info() { return KernelW8A8SwiGluM128N128::info(); }

}  // namespace xstage::kernels::moe
