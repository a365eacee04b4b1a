// MoE grouped-GEMM operator: every expert's tokens times that expert's weight, on one GPU,
// with the Hopper kernels of src/kernels/moe (TMA, FP8 wgmma with fp32 promotion per 128-K
// block, warp specialisation, persistent tiles over all experts).
//
// Tokens are sorted by expert: expert e owns rows [offsets[e], offsets[e] + counts[e]) of A
// and of the output (counts and offsets in device memory, segments ascending and disjoint;
// rows between segments are never written). Row-major, K contiguous:
//   A        fp8 e4m3 [m_total, k]        a_scales fp32 [k/128, m_total] (per token per 128;
//                                          int4_rs_lut also per token: MoeActScales)
//   B        fp8 e4m3 [experts, n, k]     b_scales fp32 [experts, n/128, k/128] (per 128x128)
// W4A8 (4-bit weights, converted to fp8 e4m3 inside the kernel; formats of moe_quant4.hpp):
//   B        uint8 [experts, n, k/2]      two values per byte, even K column in the low nibble
//   w4a8_int4:  b_scales fp32 [experts, k/128, n]   per weight row per 128 K (K-group-major)
//   w4a8_mxfp4: b_e8m0 uint8 [experts, k/32, n]     E8M0 exponent per weight row per 32 K;
//               the kernel's math is ops::dequantize_mxfp4_w4a8 (sub-blocks whose scale is
//               below 2^-14 of their 128-K block's largest are flushed to zero)
// Epilogues:
//   bf16:       out bf16 [m_total, n]                                       (Linear-2)
//   swiglu_fp8: B = [gate; up] with n = 2 * intermediate rows per expert;     (Linear-1)
//               h = silu(A Bg^T) * (A Bu^T) * row_weights[row], out fp8 [m_total, n/2],
//               out_scales fp32 [n/2/128, m_total] (the next GEMM's a_scales).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "xstage/ops/moe_quant_kind.hpp"

namespace xstage::ops {

enum class MoeEpilogue : int { bf16 = 0, swiglu_fp8 = 1 };
// Layout of B. rows: the row-major formats above. The register-operand layouts feed the
// weights to wgmma from registers (kernels w4a8rs_*); for SwiGLU the gate and up halves are
// prepacked together as one [n, k] matrix.
//   int4_rs   (w4a8_int4 only): B prepacked by prepack_int4_rs (moe_quant4.hpp, symmetric
//             INT4), same bytes; b_scales unchanged. The code layout the other INT4 layouts
//             build on; no shipped kernel reads it alone.
//   mxfp4_rs  (w4a8_mxfp4 only; kernels with per-token activation scales): B and b_scales (fp32 [experts, k/128, n], block scales) from
//             prepack_mxfp4_rs; b_e8m0 unused. B is moe_weight_bytes(quant, layout, ...) long.
//             The math is dequantize_mxfp4_w4a8(..., kMxfp4RsMaxExponentGap = 11).
//   int4_rs_lut (w4a8_int4 only): INT4 with two-level scales (quantize_int4_lut: an e4m3 scale
//             per row and 128-K group, an fp32 scale per row), B from prepack_int4_lut_rs (the
//             int4_rs codes plus every row's conversion table per K block: the group scale is
//             applied before the wgmma), b_scales = the fp32 channel scales [experts, n]. The
//             math is dequantize_int4_lut. Kernels w4a8rs_lut_*: the promotion is one FFMA per
//             value, as W8A8's (int4_rs needs two: token and weight scales are both vectors).
//   int4_rs_lut_glu (w4a8_int4, swiglu_fp8, per_token only): the int4_rs_lut format on
//             gate/up-interleaved rows, B from prepack_int4_lut_rs_glu and b_scales its permuted
//             channel scales: each 16-row slab holds 8 gate rows and then the up rows of the same
//             8 channels, so one thread holds gate and up of a channel. Kernel
//             w4a8rs_lut_tok_glu_m256n128: the bf16 256-token tile's main loop (half the
//             conversion per MAC of w4a8rs_lut_tok_swiglu_m128n256), 64 channels per tile, the
//             per-token amax of a 128-channel scale block shared by a 1 x 2 cluster.
//   mxfp4_rs_glu (w4a8_mxfp4, swiglu_fp8, per_token only): the mxfp4_rs format on the same
//             gate/up-interleaved rows, B and b_scales (the permuted block scales) from
//             prepack_mxfp4_rs_glu. Kernel w4a8rs_mxfp4_tok_glu_m256n128.
enum class MoeWeightLayout : int {
  rows = 0,
  int4_rs = 1,
  mxfp4_rs = 2,
  int4_rs_lut = 3,
  int4_rs_lut_glu = 4,
  mxfp4_rs_glu = 5
};
// The INT4 two-level layouts (same chunks, same b_scales: fp32 channel scales [experts, n]).
inline constexpr bool moe_layout_is_int4_lut(MoeWeightLayout l) {
  return l == MoeWeightLayout::int4_rs_lut || l == MoeWeightLayout::int4_rs_lut_glu;
}
// The register-operand MXFP4 layouts (same chunks, same b_scales: fp32 block scales [experts, k/128, n]).
inline constexpr bool moe_layout_is_mxfp4_rs(MoeWeightLayout l) {
  return l == MoeWeightLayout::mxfp4_rs || l == MoeWeightLayout::mxfp4_rs_glu;
}
// The gate/up-interleaved Linear-1 layouts (swiglu_fp8 with per-token scales, 1 x 2 clusters).
inline constexpr bool moe_layout_is_glu(MoeWeightLayout l) {
  return l == MoeWeightLayout::int4_rs_lut_glu || l == MoeWeightLayout::mxfp4_rs_glu;
}
// Granularity of the activation scales (a_scales).
//   per_128   fp32 [k/128, m_total]: per token per 128 channels (every kernel; what the
//             SwiGLU epilogue writes for the next GEMM).
//   per_token fp32 [m_total]: one scale per token for all of K. int4_rs_lut on its two-piece
//             tiles only (bf16 256 tokens, SwiGLU 128 tokens): nothing varies per K block, so the
//             promotion per 128 K is a plain add (fp32 accuracy, no token scales in the K loop)
//             and both scales are applied in the epilogue. mxfp4_rs (bf16, 256 tokens): the
//             promotion keeps the row's block scale (one FFMA per value), the token scale goes to
//             the epilogue. The glu layouts (Linear-1) take per_token only. Quantise with
//             quantize_fp8_per_token (moe_quant.hpp). A different activation recipe from W8A8's
//             per_128.
enum class MoeActScales : int { per_128 = 0, per_token = 1 };
const char* moe_weight_layout_name(MoeWeightLayout l);
const char* moe_quant_name(MoeQuant q);
const char* moe_epilogue_name(MoeEpilogue e);

struct MoeGemmArgs {
  MoeQuant quant = MoeQuant::w8a8;
  MoeEpilogue epilogue = MoeEpilogue::bf16;
  int experts = 0;
  int m_total = 0;
  int n = 0;
  int k = 0;

  const void* a = nullptr;  // device pointers
  const float* a_scales = nullptr;
  MoeActScales a_scale_granularity = MoeActScales::per_128;
  const void* b = nullptr;
  MoeWeightLayout b_layout = MoeWeightLayout::rows;
  const float* b_scales = nullptr;    // w8a8, w4a8_int4 (int4_rs_lut: [experts, n]), w4a8_mxfp4 in mxfp4_rs
  const uint8_t* b_e8m0 = nullptr;    // w4a8_mxfp4 in the rows layout only
  const int* counts = nullptr;
  const int* offsets = nullptr;
  void* out = nullptr;
  float* out_scales = nullptr;         // swiglu_fp8 only
  const float* row_weights = nullptr;  // swiglu_fp8 only

  // Optional host copies of counts/offsets: when given they are checked (check_routing).
  const int* host_counts = nullptr;
  const int* host_offsets = nullptr;

  // Tile planning: tokens per expert expected (0: m_total / experts); block_m, block_n and
  // cluster_m x cluster_n restrict the planner to the shipped kernels with that tile height,
  // width (weight rows: gate + up for SwiGLU) or cluster shape (0: planned; 0 x 0 for the
  // cluster). The shipped kernels are the lines of src/kernels/moe/configs.def.
  int tokens_per_expert_hint = 0;
  int block_m = 0;
  int block_n = 0;
  int cluster_m = 0;
  int cluster_n = 0;
  int num_ctas = 0;  // persistent grid; 0: one CTA per SM
  // Consumer schedule, a tuning override: -1 = default; bit 0 = issue the next K block's
  // wgmmas before promoting the current one, bit 1 = consumer warp groups take turns.
  // The w4a8 kernels and the w8a8 128 x 192 / 128 x 256 tiles have schedules 0 and 2 (those
  // tiles' default is 2, w4a8's 0; the register-operand w4a8 kernels have 0 only).
  int schedule = -1;
};

inline constexpr int kMoeDefaultSchedule = 3;

// Whether the kernels of quantisation q have consumer schedule s (0..3): w8a8 all four, w4a8
// 0 and 2 (ping-pong).
inline constexpr bool moe_schedule_shipped(MoeQuant q, int s) {
  return s >= 0 && s <= 3 && (!moe_is_w4a8(q) || s == 0 || s == 2);
}
// The same for weights in layout l: the register-operand kernels have schedule 0 only.
inline constexpr bool moe_schedule_shipped(MoeQuant q, MoeWeightLayout l, int s) {
  return moe_schedule_shipped(q, s) && (l == MoeWeightLayout::rows || s == 0);
}
// The schedule a call with `requested` (-1: default) runs: the default is 3 for w8a8, 0 for w4a8.
inline constexpr int moe_schedule_for(MoeQuant q, int requested) {
  return requested >= 0 ? requested : (moe_is_w4a8(q) ? 0 : kMoeDefaultSchedule);
}

// Throws xstage::InvalidArgument with one line naming the first problem: unsupported
// quantisation or epilogue, non-positive sizes, n or k not multiples of 128 (n/2 for SwiGLU),
// null or misaligned pointers (16 B for A, B and out, and for the w4a8 weight scales, which
// are bulk-copied; 4 B for the other scales, counts, offsets, row weights), sizes beyond the
// kernel's index range, a forced block_m / block_n / cluster / schedule that is not shipped for the
// quantisation, inconsistent host counts/offsets, a prepacked layout with another
// quantisation.
void validate(const MoeGemmArgs& a);

// counts/offsets (host arrays of `experts` entries) describe ascending, disjoint row
// segments inside [0, m_total); throws InvalidArgument naming the first bad expert.
void check_routing(const int* counts, const int* offsets, int experts, int m_total);

// Bytes of the weight tensor B and of its scales (b_scales or b_e8m0) for `experts` experts
// of n x k weights.
long long moe_weight_bytes(MoeQuant quant, int experts, int n, int k);
long long moe_weight_scale_bytes(MoeQuant quant, int experts, int n, int k);
// The same for weights in layout l (mxfp4_rs: the prepacked bytes and fp32 block scales;
// int4_rs_lut: codes plus tables, and fp32 channel scales).
long long moe_weight_bytes(MoeQuant quant, MoeWeightLayout l, int experts, int n, int k);
long long moe_weight_scale_bytes(MoeQuant quant, MoeWeightLayout l, int experts, int n, int k);

struct MoeInstantiation {
  std::string name;  // e.g. "w8a8_bf16_m128n128" (w4a8: one kernel serves both formats)
  int block_m = 0;
  int block_n = 0;
  int block_k = 0;
  int stages = 0;
  int consumer_warpgroups = 0;
  int cluster_m = 1;
  int cluster_n = 1;
  int threads = 0;
  int smem_bytes = 0;
  int producer_regs = 0;
  int consumer_regs = 0;
  int schedule = 0;  // the consumer schedule the call runs (its request, or the kernel's default)
};
// The compiled kernel that serves these arguments: the planner scores every shipped kernel
// (src/kernels/moe/configs.def) that serves the call's format, layout, activation scales and
// epilogue and any forced block_m / block_n / cluster / schedule, by whole waves of its tiles
// over the persistent grid times its tile area over its rate prior, among those planned for the
// call's tokens per expert (docs/moe-gemm.md, "Planning").
MoeInstantiation select_moe_instantiation(const MoeGemmArgs& a);

// Validates, then launches on `stream` (asynchronous; launch errors throw xstage::Error).
// m_total == 0 launches nothing.
void moe_gemm(const MoeGemmArgs& a, cudaStream_t stream);

// Useful floating-point operations for `rows` routed rows: 2 * rows * n * k.
double moe_gemm_flops(const MoeGemmArgs& a, long long rows);

}  // namespace xstage::ops
