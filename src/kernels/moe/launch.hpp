// Host-side entry points of the MoE grouped-GEMM kernels (no device code here): one launcher
// per shipped instantiation, defined in launch_<quant>_<epilogue>_<tile>.cu, plus what each
// instantiation looks like. The launchers assume the operator (src/ops/moe_gemm_op.cpp)
// validated the parameters; they return the first CUDA error and never throw.
#pragma once
#include <cuda_runtime.h>

#include "kernels/moe/params.hpp"

namespace xstage::kernels::moe {

// A CTA computes block_m x block_n of the output with two or three consumer warp groups, each
// owning a 64 x 128 piece (block 128 x 128 / 192 x 128: the groups split M; block 64 x 256:
// they split N). K moves in blocks of 128 (the scale granularity) through `stages`
// shared-memory buffers. Clusters of cluster_m x cluster_n CTAs multicast the shared operand
// (A along n, B along m).
struct TileConfig {
  int block_m;
  int block_n;
  int block_k;
  int stages;
  int consumer_warpgroups;
  int cluster_m = 1;
  int cluster_n = 1;
};

// 6 stages (192 KiB) fit next to the bf16 epilogue's half-piece staging (docs/moe-gemm.md).
inline constexpr TileConfig kTileM128N128{128, 128, 128, 6, 2};
inline constexpr TileConfig kTileM64N256{64, 256, 128, 4, 2};
// Three consumer warp groups along M: 25% fewer bytes into shared memory per FLOP than
// 128 x 128 (40 KiB per 192 x 128 x 128 block instead of 32 KiB per 128 x 128 x 128).
inline constexpr TileConfig kTileM192N128{192, 128, 128, 4, 3};
inline constexpr TileConfig kTileM128N128C2x1{128, 128, 128, 6, 2, 2, 1};
inline constexpr TileConfig kTileM128N128C1x2{128, 128, 128, 6, 2, 1, 2};
inline constexpr TileConfig kTileM128N128C2x2{128, 128, 128, 6, 2, 2, 2};
// Two warp groups of 64 x 192 (m64n192 wgmmas, schedules 0 and 2 only): 16.5 KiB into and out of
// shared memory per MFLOP instead of 19.1; planned for large problems (plan_block_n).
inline constexpr TileConfig kTileM128N192{128, 192, 128, 5, 2};
inline constexpr TileConfig kTileM128N192C2x1{128, 192, 128, 5, 2, 2, 1};
inline constexpr TileConfig kTileM64N256C2x1{64, 256, 128, 4, 2, 2, 1};
// The two-pass SwiGLU tile: the 64 KiB gate park (SwiGluSerialQuantEpilogue) leaves room for 4
// stages of 32 KiB.
inline constexpr TileConfig kTileSwiGluM128N128{128, 128, 128, 4, 2};
// The 128 x 256 gate/up tile (both pieces per warp group, MoeTraits::kGateUpDual): 48 KiB stages.
inline constexpr TileConfig kTileSwiGluM128N256{128, 256, 128, 4, 2};
// The same shape for plain GEMMs (two 128-column pieces per warp group, bf16 epilogue).
inline constexpr TileConfig kTileM128N256{128, 256, 128, 4, 2};
// Both 128 x 256 tiles in 2 x 1 clusters (two m-blocks share, and multicast, the B chunks).
inline constexpr TileConfig kTileM128N256C2x1{128, 256, 128, 4, 2, 2, 1};
inline constexpr TileConfig kTileSwiGluM128N256C2x1{128, 256, 128, 4, 2, 2, 1};

struct KernelInfo {
  TileConfig tile;
  int threads;        // 128 producer + 128 per consumer warp group
  int smem_bytes;     // dynamic shared memory per CTA
  int producer_regs;  // setmaxnreg of the producer warp group
  int consumer_regs;  // setmaxnreg of the consumer warp groups
};

// W8A8, bf16 output [m_total, n].
cudaError_t moe_w8a8_bf16_m128n128(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_bf16_m64n256(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_bf16_m192n128(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_bf16_m128n192(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_bf16_m128n192_c2x1(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_bf16_m128n256(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_bf16_m128n256_c2x1(const MoeGemmParams& p, cudaStream_t stream);
// Clusters: 2 x 1 share B (two m-blocks of one expert), 1 x 2 share A, 2 x 2 both.
cudaError_t moe_w8a8_bf16_m128n128_c2x1(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_bf16_m128n128_c1x2(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_bf16_m128n128_c2x2(const MoeGemmParams& p, cudaStream_t stream);
// W8A8 Linear-1 with gate/up fused (B rows [0, n/2) gate, [n/2, n) up): out = fp8
// quantise(silu(gate) * up * row_weight) per token per 128 channels, out_scales as a_scales.
cudaError_t moe_w8a8_swiglu_m64n256(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_swiglu_m64n256_c2x1(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_swiglu_m128n128(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_swiglu_m128n256(const MoeGemmParams& p, cudaStream_t stream);
cudaError_t moe_w8a8_swiglu_m128n256_c2x1(const MoeGemmParams& p, cudaStream_t stream);

KernelInfo moe_w8a8_bf16_m128n128_info();
KernelInfo moe_w8a8_bf16_m64n256_info();
KernelInfo moe_w8a8_bf16_m192n128_info();
KernelInfo moe_w8a8_bf16_m128n192_info();
KernelInfo moe_w8a8_bf16_m128n192_c2x1_info();
KernelInfo moe_w8a8_bf16_m128n256_info();
KernelInfo moe_w8a8_bf16_m128n256_c2x1_info();
KernelInfo moe_w8a8_swiglu_m64n256_info();
KernelInfo moe_w8a8_swiglu_m128n128_info();
KernelInfo moe_w8a8_swiglu_m128n256_info();
KernelInfo moe_w8a8_swiglu_m128n256_c2x1_info();
KernelInfo moe_w8a8_bf16_m128n128_c2x1_info();
KernelInfo moe_w8a8_bf16_m128n128_c1x2_info();
KernelInfo moe_w8a8_bf16_m128n128_c2x2_info();
KernelInfo moe_w8a8_swiglu_m64n256_c2x1_info();

}  // namespace xstage::kernels::moe
