// Host-side entry points of the attention forward kernels (no device code here): one
// launcher per shipped instantiation {bf16, fp16} x {d64, d128} x {causal, non-causal},
// defined in launch_<dtype>_d<dim>.cu, plus what each instantiation looks like.
//
// Launchers assume the host operator (src/ops/attention_op.cpp) already validated the
// params; they return the first CUDA error (attribute setting or launch), never throw.
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/params.hpp"
#include "kernels/attention/split_plan.hpp"
#include "kernels/common/persistent_grid.hpp"

namespace xstage::kernels::attention {

// Tile shape per head dim: a CTA computes block_m query rows (block_m / 64 consumer warp
// groups, 64 rows each) against block_n keys per step, with `stages` K/V buffers in flight.
// lazy_rescale: AttentionTraits::kLazyRescale (2 everywhere: +3-5% measured, docs/attention.md).
struct TileConfig {
  int block_m;
  int block_n;
  int stages;
  int consumer_warpgroups;
  int lazy_rescale = 2;
  int q_stages = 1;  // Q buffers: what KernelInfo reports (the configs above leave it at 1; the
                     // instantiations take kLocalQStages, kernel.cuh; docs/attention.md §Design "Q buffers")
};

// The staged-epilogue tiles: every instantiation has one, and the Ulysses kernels use them.
constexpr TileConfig tile_config(int head_dim) {
  return head_dim == 64 ? TileConfig{192, 128, 4, 3} : TileConfig{128, 128, 2, 2};
}

// Long key sets (d = 128, non-causal, local output): 192 keys per step, O stored straight
// from registers (no room for the staging buffer next to 2 x 48 KiB K/V stages). Chosen by
// the operator from kLongKvThreshold keys on: 1.02-1.04x the staged tile at 8192-65536 keys,
// 0.90x at 1024 (tools/attn_study; docs/attention.md §Measured).
constexpr TileConfig long_kv_tile_config() { return TileConfig{128, 192, 2, 2}; }
constexpr int kLongKvThreshold = 8192;

// A 128-row tile for d = 64 (tile policy rows128): with 192-row tiles a short sequence leaves
// SMs idle (S = 1024, 12 heads: 72 tiles on 132 SMs; 24 heads: 144 tiles, a second wave of 12),
// 128 rows give 96 and 192 tiles. The automatic policy serves it to non-causal d = 64 calls
// when rows128_wins (docs/attention.md §Short sequences).
constexpr TileConfig rows128_d64_tile_config() { return TileConfig{128, 128, 4, 2}; }

// Split tiles (non-causal; tile policy split): a 128-row mainloop with the long-key tile's
// registers -> global epilogue, whose parts let a launch split tiles along the keys
// (tile_scheduler.cuh tail_split_plan): the last wave when it leaves most SMs idle (S = 1024,
// 24 heads, d = 128: 192 tiles, 1.45 waves), every tile when the launch is short of a wave
// (S = 1024, 4 heads: 32 tiles). d = 128: the staged tile's 128 x 128 mainloop; d = 64:
// the 128-row tile's (rows128_d64_tile_config). docs/attention.md §Short sequences.
constexpr TileConfig split_tile_config(int head_dim) {
  return head_dim == 64 ? rows128_d64_tile_config() : tile_config(128);
}

// Share of the persistent grid's CTA-slots a launch of `tiles` keeps busy: tiles / (whole waves
// x grid).
constexpr double wave_efficiency(long long tiles, int grid) {
  return tiles <= 0 || grid <= 0 ? 1.0 : double(tiles) / (double((tiles + grid - 1) / grid) * grid);
}
// The 128-row d = 64 tile's rate relative to the 192-row tile's on full waves, measured on one
// H200 where both tiles fill their waves. Non-causal: 0.93-0.96x at S 2048 / 4096 with 24 heads
// since the 128-row tile skips the row max (0.87-0.90x before); at 0.92 the rule takes the
// 128-row tile on S 4096 H 16 (+1.7 %) and S 4608 H 40 (-1.3 %), the only shapes of the short grid
// whose pick moves between 0.87 and 0.95 (also S 4608 H 12, not in that grid; docs/attention.md
// §Short sequences). Causal keeps the value its rule was measured with.
constexpr double kRows128RelativeRate = 0.92;
constexpr double kCausalRows128RelativeRate = 0.87;
// Non-causal d = 64, automatic policy: the 128-row tile wins when its better-filled waves
// outweigh its lower rate. sms: the CTAs the launch may use (one per SM, or num_ctas).
constexpr bool rows128_wins(int q_len, int heads_x_batch, int sms) {
  const long long t192 = (q_len + 191LL) / 192 * heads_x_batch, t128 = (q_len + 127LL) / 128 * heads_x_batch;
  return wave_efficiency(t128, sms) * kRows128RelativeRate > wave_efficiency(t192, sms);
}

// Causal d = 64, automatic policy: the 128-row tile when the modelled busiest CTA finishes
// first with it. A causal launch lasts as long as its busiest CTA (at least its longest tile:
// S = 2048 with 8 heads gives 88 192-row tiles for 132 SMs, and the last one sees every key);
// the model (causal::cta_loads: visible key blocks + 1 per tile, the launch's order, grouped
// taken as longest-first) weighs a 128-row tile's key block at 128 / kCausalRows128RelativeRate
// against the 192-row tile's 192. Launches of more than kCausalRows128MaxWaves waves of 192-row
// tiles keep that tile without the walk (their rounds balance; the walk costs one step per tile).
constexpr int kCausalRows128MaxWaves = 4;
#if !defined(__CUDA_ARCH__)
inline bool causal_rows128_wins(int q_len, int kv_len, int key_offset, int heads_x_batch, int slots,
                                causal::TileOrder order) {
  const causal::TileShape t192{q_len, kv_len, 192, 128, key_offset}, t128{q_len, kv_len, 128, 128, key_offset};
  if (slots <= 0 || static_cast<long long>(t192.m_blocks()) * heads_x_batch > kCausalRows128MaxWaves * 1LL * slots)
    return false;
  const causal::TileOrder o = order == causal::TileOrder::head_major ? order : causal::TileOrder::longest_first;
  const double c192 = causal::cta_loads(o, heads_x_batch, t192, heads_x_batch, slots).busiest * 192.0;
  const double c128 = causal::cta_loads(o, heads_x_batch, t128, heads_x_batch, slots).busiest * 128.0 /
                      kCausalRows128RelativeRate;
  return c128 < c192;
}
#endif

// Non-causal, automatic policy: the split tile where its key splits won on one H200
// (docs/attention.md §Short sequences): launches short of a wave (every tile split, parts of at
// least kMinFillPartBlocks key blocks), and at d = 128 a split last wave from
// kMinTailSplitKeyBlocks key blocks on (1.01-1.31x the staged tile; at 8 key blocks the split
// tile is 0.92x the staged one unsplit, and its split of 4-block parts loses another 2-6 %).
// d = 64 keeps the 192-row tile there (it beat the split 128-row tile on 5 of 6 such shapes).
// slots: the CTAs the launch may use (one per SM, or num_ctas).
constexpr int kMinTailSplitKeyBlocks = 16;
inline bool split_wins(int head_dim, int q_len, int kv_len, int heads_x_batch, int slots) {
  const TileConfig t = split_tile_config(head_dim);
  const long long tiles = (q_len + t.block_m - 1LL) / t.block_m * heads_x_batch;
  const int kv_blocks = (kv_len + t.block_n - 1) / t.block_n;
  const TailSplitPlan plan = tail_split_plan(tiles, slots, kv_blocks, slots);
  if (plan.splits < 2) return false;
  if (plan.full == 0) return true;
  return head_dim == 128 && kv_blocks >= kMinTailSplitKeyBlocks;
}

// What one instantiation is, for logs, benchmarks and tests.
struct KernelInfo {
  TileConfig tile;
  int threads;            // per CTA: 128 producer + 128 per consumer warp group
  int smem_bytes;         // dynamic shared memory per CTA
  int producer_regs;      // setmaxnreg of the producer warp group
  int consumer_regs;      // setmaxnreg of the consumer warp groups
  bool intra_wg_overlap;  // softmax of block j overlaps the QK^T GEMM of block j+1
  bool pingpong;          // consumer warp groups take turns issuing GEMMs
};

cudaError_t attention_fwd_bf16_d64_causal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d64_noncausal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d128_causal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d128_noncausal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_causal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_noncausal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_causal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_noncausal(const AttentionParams& p, cudaStream_t stream);

// d = 64, rows128_d64_tile_config() (staged epilogue).
cudaError_t attention_fwd_bf16_d64_causal_rows128(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d64_noncausal_rows128(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_causal_rows128(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_noncausal_rows128(const AttentionParams& p, cudaStream_t stream);
KernelInfo attention_fwd_bf16_d64_rows128_info();
KernelInfo attention_fwd_fp16_d64_rows128_info();

// d = 128, non-causal, long_kv_tile_config() (registers -> global epilogue).
cudaError_t attention_fwd_bf16_d128_noncausal_longkv(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_noncausal_longkv(const AttentionParams& p, cudaStream_t stream);

// non-causal, split_tile_config(d) (registers -> global epilogue, key splits).
cudaError_t attention_fwd_bf16_d128_noncausal_split(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_noncausal_split(const AttentionParams& p, cudaStream_t stream);
KernelInfo attention_fwd_bf16_d128_split_info();
KernelInfo attention_fwd_fp16_d128_split_info();
cudaError_t attention_fwd_bf16_d64_noncausal_split(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_noncausal_split(const AttentionParams& p, cudaStream_t stream);
KernelInfo attention_fwd_bf16_d64_split_info();
KernelInfo attention_fwd_fp16_d64_split_info();

KernelInfo attention_fwd_bf16_d128_longkv_info();
KernelInfo attention_fwd_fp16_d128_longkv_info();
KernelInfo attention_fwd_bf16_d64_info();
KernelInfo attention_fwd_bf16_d128_info();
KernelInfo attention_fwd_fp16_d64_info();
KernelInfo attention_fwd_fp16_d128_info();

// Tiles of one launch (q tiles of block_m rows x heads x batch): the persistent grid never
// exceeds it. Without block_m: the head dim's staged tile (tile_config).
inline long long attention_num_tiles(const AttentionParams& p, int block_m) {
  return static_cast<long long>((p.q_len + block_m - 1) / block_m) * p.heads * p.batch;
}
inline long long attention_num_tiles(const AttentionParams& p) {
  return attention_num_tiles(p, tile_config(p.head_dim).block_m);
}

// The persistent grid of a launch: p.num_ctas, or (0) one CTA per SM of the current device;
// never more CTAs than tiles. The launcher and the tail-split workspace both size by it.
inline cudaError_t attention_grid(const AttentionParams& p, int block_m, int& ctas) {
  return persistent_grid(p.num_ctas, attention_num_tiles(p, block_m), ctas);
}
inline cudaError_t attention_grid(const AttentionParams& p, int& ctas) {
  return attention_grid(p, tile_config(p.head_dim).block_m, ctas);
}

}  // namespace xstage::kernels::attention
