// W4A8 grouped GEMM, bf16 output, 64 x 256 tiles (two consumer warp groups split N): few
// tokens per expert (<= 64), where a taller tile would be mostly padding.
#include "kernels/moe/w4a8.cuh"

namespace xstage::kernels::moe {

// int4: the decoupled design; mxfp4: the lock-step one (w4a8.cuh, W4Traits).
using KernelW4A8Bf16M64N256Int4 = ShippedW4A8Kernel<kW4TileM64N256, false, LocalBf16Epilogue, true>;
using KernelW4A8Bf16M64N256Mx = ShippedW4A8Kernel<kW4TileM64N256, false, LocalBf16Epilogue, false>;

cudaError_t moe_w4a8_bf16_m64n256(const MoeW4A8Params& p, cudaStream_t stream) {
  return p.format == W4Format::mxfp4 ? launch_moe_w4a8<KernelW4A8Bf16M64N256Mx>(p, stream)
                                       : launch_moe_w4a8<KernelW4A8Bf16M64N256Int4>(p, stream);
}
KernelInfo moe_w4a8_bf16_m64n256_info(W4Format f) {
  return f == W4Format::mxfp4 ? KernelW4A8Bf16M64N256Mx::info() : KernelW4A8Bf16M64N256Int4::info();
}

}  // namespace xstage::kernels::moe
