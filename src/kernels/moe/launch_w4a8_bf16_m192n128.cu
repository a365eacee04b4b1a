// W4A8 grouped GEMM (int4 group-128 or mxfp4 weights, converted to fp8 in shared memory), bf16
// output, 192 x 128 tiles (three consumer warp groups split M): many tokens per expert.
#include "kernels/moe/w4a8.cuh"

namespace xstage::kernels::moe {

// int4: the decoupled design; mxfp4: the lock-step one (w4a8.cuh, W4Traits).
using KernelW4A8Bf16M192N128Int4 = ShippedW4A8Kernel<kW4TileM192N128, false, LocalBf16Epilogue, true>;
using KernelW4A8Bf16M192N128Mx = ShippedW4A8Kernel<kW4TileM192N128, false, LocalBf16Epilogue, false>;

cudaError_t moe_w4a8_bf16_m192n128(const MoeW4A8Params& p, cudaStream_t stream) {
  return p.format == W4Format::mxfp4 ? launch_moe_w4a8<KernelW4A8Bf16M192N128Mx>(p, stream)
                                       : launch_moe_w4a8<KernelW4A8Bf16M192N128Int4>(p, stream);
}
KernelInfo moe_w4a8_bf16_m192n128_info(W4Format f) {
  return f == W4Format::mxfp4 ? KernelW4A8Bf16M192N128Mx::info() : KernelW4A8Bf16M192N128Int4::info();
}

}  // namespace xstage::kernels::moe
