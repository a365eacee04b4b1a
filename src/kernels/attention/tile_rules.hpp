// The automatic tile policy's shape rules (host only): which attention instantiation a call's
// shape runs best on, by the busiest CTA of each candidate's launch (docs/attention.md §Short
// sequences, §Partial tiles). Read by the operator (src/ops/attention_op.cpp) and its tests; no
// kernel includes this file, so a rule's constants rebuild no kernel.
#pragma once
#include "kernels/attention/launch.hpp"
#include "kernels/attention/split_plan.hpp"
#include "xstage/attention_tile_order.hpp"

namespace xstage::kernels::attention {

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
// A q tile whose first `busy` of `groups` consumer warp groups hold query rows (the others idle,
// Mainloop::idle), as a share of a whole tile's time. Measured on one H200 (docs/attention.md
// §Partial tiles): one tile per CTA, 4096 keys, q_len 64 / 128 against a whole tile.
constexpr double kPartialCost192One = 0.55;  // 192-row tile, one of three groups busy
constexpr double kPartialCost192Two = 0.80;  // 192-row tile, two of three
constexpr double kPartialCost128One = 0.65;  // 128-row tile, one of two
constexpr double partial_tile_cost(int busy, int groups) {
  if (busy >= groups) return 1.0;
  if (groups == 3) return busy == 1 ? kPartialCost192One : kPartialCost192Two;
  return kPartialCost128One;
}

// The busiest CTA of a non-causal launch of q tiles of block_m rows (whole tiles count 1, the
// sequence's partial last tile partial_tile_cost), in the order the kernel deals them (head-major
// round robin, or partial tiles last and serpentine where partial_tiles_last). partial_tiles
// false (AttentionArgs::partial_tiles): every tile counts 1, head-major. Launches of more than
// kBusiestMaxWaves rounds count their rounds (the walk costs one step per tile).
constexpr int kBusiestMaxWaves = 8;
inline double noncausal_busiest(int q_len, int block_m, int heads_x_batch, int slots, bool partial_tiles = true) {
  const long long m_blocks = (q_len + block_m - 1LL) / block_m, tiles = m_blocks * heads_x_batch;
  if (tiles <= 0 || slots <= 0) return 0.0;
  const int grid = tiles < slots ? static_cast<int>(tiles) : slots;
  const long long rounds = (tiles + grid - 1) / grid;
  if (rounds > kBusiestMaxWaves) return static_cast<double>(rounds);
  const int rem = q_len % block_m;
  const double partial = rem == 0 || !partial_tiles ? 1.0 : partial_tile_cost((rem + 63) / 64, block_m / 64);
  const bool last = partial_tiles && partial_tiles_last(q_len, block_m, tiles, slots);
  const long long first_partial = (m_blocks - 1) * heads_x_batch;
  double busiest = 0.0;
  for (int c = 0; c < grid; ++c) {
    double load = 0.0;
    for (long long r = 0; r < rounds; ++r) {
      const long long pos = r * grid + (last && (r & 1) ? grid - 1 - c : c);
      if (pos >= tiles) break;
      const bool is_partial = last ? pos >= first_partial : pos % m_blocks == m_blocks - 1;
      load += is_partial ? partial : 1.0;
    }
    busiest = load > busiest ? load : busiest;
  }
  return busiest;
}

// Non-causal d = 64, automatic policy: the 128-row tile wins when its busiest CTA, at its lower
// rate, finishes before the 192-row tile's. sms: the CTAs the launch may use (one per SM, or
// num_ctas).
inline bool rows128_wins(int q_len, int heads_x_batch, int sms, bool partial_tiles = true) {
  return noncausal_busiest(q_len, 128, heads_x_batch, sms, partial_tiles) * 128.0 / kRows128RelativeRate <
         noncausal_busiest(q_len, 192, heads_x_batch, sms, partial_tiles) * 192.0;
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

}  // namespace xstage::kernels::attention
