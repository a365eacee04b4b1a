// Host-side entry points of the W4A8 MoE grouped-GEMM kernels (no device code here), defined
// in launch_w4a8_<epilogue>_<tile>.cu. One kernel per tile serves both 4-bit formats (the
// format is a launch parameter). Like the W8A8 launchers they assume validated parameters
// (src/ops/moe_gemm_op.cpp) and return the first CUDA error.
#pragma once
#include <cuda_runtime.h>

#include "kernels/moe/launch.hpp"
#include "kernels/moe/params_w4a8.hpp"

namespace xstage::kernels::moe {

// Tile shapes; the ring depths depend on the design (w4a8.cuh, W4Traits): int4 runs the
// decoupled design (3 TMA stages, 3 converted buffers), mxfp4 the lock-step one (4 and 2). The
// `stages` field here is not used by the kernels (KernelInfo reports each design's).
inline constexpr TileConfig kW4TileM192N128{192, 128, 128, 0, 3};
inline constexpr TileConfig kW4TileM64N256{64, 256, 128, 0, 2};

// bf16 output [m_total, n].
cudaError_t moe_w4a8_bf16_m192n128(const MoeW4A8Params& p, cudaStream_t stream);
cudaError_t moe_w4a8_bf16_m64n256(const MoeW4A8Params& p, cudaStream_t stream);
// Linear-1, gate/up fused, SwiGLU + router weight + fp8 requantisation (as W8A8).
cudaError_t moe_w4a8_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream);

// INT4 only, B prepacked (ops::prepack_int4_rs; w4a8_rs_layout.hpp): the weights are wgmma's
// register operand (w4a8_rs.cuh), 128 tokens x 128 output columns per tile.
cudaError_t moe_w4a8rs_bf16_m128n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_bf16_m128n128_info();
cudaError_t moe_w4a8rs_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_bf16_m256n128_info();
// The same for Linear-1 with gate/up fused and the SwiGLU + fp8 epilogue: 64 tokens x 128
// output channels per tile.
cudaError_t moe_w4a8rs_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_swiglu_m64n256_info();
// MXFP4, B prepacked by ops::prepack_mxfp4_rs (codes + exponent gaps, fp32 block scales in
// b_scales): the same two tiles.
cudaError_t moe_w4a8rs_mxfp4_bf16_m128n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_mxfp4_bf16_m128n128_info();
cudaError_t moe_w4a8rs_mxfp4_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_mxfp4_bf16_m256n128_info();
cudaError_t moe_w4a8rs_mxfp4_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_mxfp4_swiglu_m64n256_info();
// INT4 with two-level scales (MoeWeightLayout::int4_rs_lut): per-row conversion tables with the
// e4m3 group scale folded in, one-FFMA promotion, fp32 channel scales in the epilogue.
cudaError_t moe_w4a8rs_lut_bf16_m128n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_lut_bf16_m128n128_info();
cudaError_t moe_w4a8rs_lut_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_lut_bf16_m256n128_info();
cudaError_t moe_w4a8rs_lut_swiglu_m64n256(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_lut_swiglu_m64n256_info();
cudaError_t moe_w4a8rs_lut_swiglu_m128n256(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_lut_swiglu_m128n256_info();
// The same with per-token activation scales (a_scales [m_total]): the promotion is a plain add,
// the token scale is applied in the epilogue (two-piece tiles only).
cudaError_t moe_w4a8rs_lut_tok_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_lut_tok_bf16_m256n128_info();
cudaError_t moe_w4a8rs_lut_tok_swiglu_m128n256(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_lut_tok_swiglu_m128n256_info();
// Linear-1 with per-token scales on gate/up-interleaved rows (MoeWeightLayout::int4_rs_lut_glu):
// 256 tokens x 64 channels per tile, 1 x 2 clusters (the per-token amax of a 128-channel scale
// block is shared by the pair); n = 2 * intermediate, a multiple of 256.
cudaError_t moe_w4a8rs_lut_tok_glu_m256n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_lut_tok_glu_m256n128_info();
// MXFP4 with per-token activation scales (MoeWeightLayout::mxfp4_rs / mxfp4_rs_glu): the block
// scale per row and K block stays in the promotion, the token scale goes to the epilogue.
cudaError_t moe_w4a8rs_mxfp4_tok_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_mxfp4_tok_bf16_m256n128_info();
cudaError_t moe_w4a8rs_mxfp4_tok_glu_m256n128(const MoeW4A8Params& p, cudaStream_t stream);
KernelInfo moe_w4a8rs_mxfp4_tok_glu_m256n128_info();

// The kernel a format runs (each tile has one per format).
KernelInfo moe_w4a8_bf16_m192n128_info(W4Format f);
KernelInfo moe_w4a8_bf16_m64n256_info(W4Format f);
KernelInfo moe_w4a8_swiglu_m64n256_info(W4Format f);

}  // namespace xstage::kernels::moe
