// Named policies of the MoE grouped-GEMM kernels (host and device, no CUDA code): a shipped
// kernel is MoeConfig<WeightFormat, ActivationScales, Tile, Cluster, Epilogue>, one line of
// configs.def. config.cuh turns a configuration into its kernel type; src/ops/moe_gemm_op.cpp
// turns the same line into a row of the dispatch table and the planner's candidates.
#pragma once
#include <limits>

namespace xstage::kernels::moe {

// --- Weight formats (B) ---
// fp8 e4m3 rows, fp32 128 x 128 block scales (W8A8).
struct Fp8Blocks {};
// 4-bit rows (INT4 group-128 or MXFP4: the format is a launch parameter), converted to fp8 in
// shared memory (w4a8.cuh): INT4 runs the decoupled design, MXFP4 the lock-step one.
struct W4Rows {};
// INT4 with two-level scales in the register-operand layout (ops::prepack_int4_lut_rs[_glu]):
// per-row conversion tables with the e4m3 group scale folded in, fp32 channel scales.
struct Int4Lut {};
// MXFP4 in the register-operand layout (ops::prepack_mxfp4_rs[_glu]): codes, exponent gaps,
// fp32 block scales.
struct Mxfp4Rs {};

// --- Activation scales (A) ---
struct ActPer128 {};    // fp32 [k/128, m_total]: one per token per 128 channels
struct ActPerToken {};  // fp32 [m_total]: one per token (register-operand formats, two-piece tiles)

// --- Tile: block_m x block_n of the output (block_n counts weight rows: gate + up for SwiGLU),
// `stages` shared-memory buffers (0: the format's own ring depth, W4Rows), `warpgroups`
// consumer warp groups. ---
template <int M, int N, int Stages, int Warpgroups>
struct Tile {
  static constexpr int block_m = M;
  static constexpr int block_n = N;
  static constexpr int stages = Stages;
  static constexpr int warpgroups = Warpgroups;
};

// --- Cluster of CTAs that multicast the shared operand (m: B along m-blocks, n: A). ---
template <int M, int N>
struct Cluster {
  static constexpr int m = M;
  static constexpr int n = N;
};

// --- Epilogues ---
struct Bf16Rows {};   // bf16 rows [m_total, n]
struct SwiGluFp8 {};  // gate rows [0, n/2), up rows [n/2, n): fp8 silu(gate) * up * row weight, per-128 scales
// SwiGLU on gate/up-interleaved weight rows (the *_glu layouts): 64 channels per tile, the
// per-token amax of a 128-channel scale block shared by the two CTAs of a 1 x 2 cluster.
struct SwiGluFp8Interleaved {};
// (The Mega-MoE kernel's remote-rows epilogue, mega_epilogue.cuh, runs inside its own kernel and
// is not a configuration here.)

template <class WeightFormat_, class ActScales_, class Tile_, class Cluster_, class Epilogue_>
struct MoeConfig {
  using WeightFormat = WeightFormat_;
  using ActScales = ActScales_;
  using TileShape = Tile_;
  using ClusterShape = Cluster_;
  using Epilogue = Epilogue_;
};

// Planning prior of a configuration (configs.def): `rate` is the tile's measured throughput per
// output element relative to the family's reference tile; the planner considers the entry from
// `min_tokens` to `max_tokens` tokens per expert (docs/moe-gemm.md, "Planning").
inline constexpr int kAnyTokens = std::numeric_limits<int>::max();

}  // namespace xstage::kernels::moe
