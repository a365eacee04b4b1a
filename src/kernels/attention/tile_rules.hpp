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
// Partial tiles (docs/attention.md §Partial tiles): where the partial-tiles kernel's order can pay,
// i.e. the last q tile of each sequence keeps one consumer warp group busy (at most 64 rows) and
// the launch has 2 .. kPartialLastMaxRounds rounds (one round: nothing to pair). tiles: q tiles x
// heads x batch; slots: the CTAs the launch may use.
constexpr int kPartialLastMaxRounds = 8;
constexpr bool partial_tiles_last(int q_len, int block_m, long long tiles, int slots) {
  const int rem = block_m > 0 ? q_len % block_m : 0;
  return rem != 0 && rem <= 64 && block_m > 64 && slots > 0 && tiles > slots &&
         tiles <= kPartialLastMaxRounds * 1LL * slots;
}

// A q tile whose first `busy` of `groups` consumer warp groups hold query rows (the others idle,
// Mainloop::idle in the partial-tiles kernel), as a share of a whole tile's time (only one busy
// group of three reaches the rule: partial_tiles_last). Fitted on one H100 (docs/attention.md
// §Partial tiles) to the two launches that pair one-group tiles against the 128-row tile: S 1024
// with 24 heads (one CTA in 11 runs two partial tiles: 1.12x the 128-row tile, so 2c = 1.29 whole
// tiles) and with 48 heads (whole + two partial: 0.96x, 1 + 2c = 2.26); both give c = 0.63-0.65.
// One-tile-per-CTA launches of 132 heads (0.89-0.93 at 1024-4096 keys) stream every head's K/V
// from DRAM without reuse and do not isolate it.
constexpr double kPartialCostOneOfThree = 0.64;
constexpr double partial_tile_cost(int busy, int groups) { return busy >= groups ? 1.0 : kPartialCostOneOfThree; }

// The busiest CTA of a non-causal launch of q tiles of block_m rows, whole tiles counting 1. With
// partial_tiles (the partial-tiles kernel, where partial_tiles_last holds): the sequences' last
// tiles count partial_tile_cost and are dealt last, serpentine; else head-major round robin, every
// tile whole. Launches of more than kBusiestMaxWaves rounds count their rounds.
constexpr int kBusiestMaxWaves = 8;
inline double noncausal_busiest(int q_len, int block_m, int heads_x_batch, int slots, bool partial_tiles) {
  const long long m_blocks = (q_len + block_m - 1LL) / block_m, tiles = m_blocks * heads_x_batch;
  if (tiles <= 0 || slots <= 0) return 0.0;
  const int grid = tiles < slots ? static_cast<int>(tiles) : slots;
  const long long rounds = (tiles + grid - 1) / grid;
  if (rounds > kBusiestMaxWaves || !partial_tiles) return static_cast<double>(rounds);
  const int rem = q_len % block_m;
  const double partial = rem == 0 ? 1.0 : partial_tile_cost((rem + 63) / 64, block_m / 64);
  const long long first_partial = (m_blocks - 1) * heads_x_batch;
  double busiest = 0.0;
  for (int c = 0; c < grid; ++c) {
    double load = 0.0;
    for (long long r = 0; r < rounds; ++r) {
      const long long pos = r * grid + ((r & 1) ? grid - 1 - c : c);
      if (pos >= tiles) break;
      load += pos >= first_partial ? partial : 1.0;
    }
    busiest = load > busiest ? load : busiest;
  }
  return busiest;
}

// Non-causal d = 64: whether the partial-tiles kernel's order applies to the 192-row launch and
// shortens its busiest CTA (S = 1024 with 24 heads: 1.28 against 2 whole tiles; with 40 heads both
// orders leave some CTA two whole tiles, and the head-major order keeps the launch as it was).
inline bool partial_tiles_pay(int q_len, int heads_x_batch, int slots) {
  return partial_tiles_last(q_len, 192, (q_len + 191LL) / 192 * heads_x_batch, slots) &&
         noncausal_busiest(q_len, 192, heads_x_batch, slots, true) < noncausal_busiest(q_len, 192, heads_x_batch, slots, false);
}

// A key-group item (docs/attention.md §Key groups) costs, besides its two-group steps, its Q load,
// merge and store: as much as one step (the model's one block per tile elsewhere).
constexpr double kKeyGroupItemCost = 1.0;

// Non-causal key groups (docs/attention.md §Key groups): on launches of about one round of 128-row
// tiles, 64-row key-group items of ⌈key blocks / 2⌉ + kKeyGroupItemCost two-group steps at `rate` of
// a 128-row step, against the 128-row tile's rounds of key blocks + 1 (S = 1024 with 8 heads: 128
// items of 5 against 64 tiles of 9; with 40 heads 5 rounds of 5 against 3 of 9, which loses). Where
// both run several rounds the key-group tile is slower per step (d = 128: 0.75-0.79x, twice the L2
// traffic per FLOP; d = 64: 0.93x), so only launches that leave SMs idle gain.
inline double rows128_rounds_cost(int q_len, int kv_len, int heads_x_batch, int slots) {
  const long long t128 = (q_len + 127LL) / 128 * heads_x_batch;
  return static_cast<double>((t128 + slots - 1) / slots) * ((kv_len + 127) / 128 + 1);
}
// Launches of more than one round of 128-row tiles get no key groups (infinite cost): there the
// model's margins are within its error (S 1024 with 24 heads at d = 64: 17.9 against 18) and the
// measured key-group tiles lost (0.79-0.90x causal d = 64, 0.75-0.95x d = 128).
// Steps count 128-key blocks at both head dims (the d = 128 key-group tile streams 64-key blocks, so
// its key tails are modelled coarsely; the fitted rates absorb that).
inline double key_group_rounds_cost(int q_len, int kv_len, int heads_x_batch, int slots, double rate) {
  if (!kKeyGroupsBuilt || (q_len + 127LL) / 128 * heads_x_batch > slots) return 1e30;
  const long long t64 = (q_len + 63LL) / 64 * heads_x_batch;
  const int kb = (kv_len + 127) / 128;
  return static_cast<double>((t64 + slots - 1) / slots) * ((kb + 1) / 2 + kKeyGroupItemCost) / rate;
}
// The rates, fitted on one H100 to the launches where the key groups win (their measured gain
// against the model's): d = 128 S 1024 with 4 / 8 heads, 1100 with 4, 2048 with 4 (1.24-1.30x the
// staged tile, tools/attn_study; predicted 1.22-1.28x at 0.68); d = 64 the same shapes against the
// 128-row tile (1.30-1.46x; 0.72-0.79 fit them). On the one-round launches the rule looks at, items
// that fit one round win once the rate exceeds (⌊(kb + 1) / 2⌋ + 1) / (kb + 1) (0.6 at 4 key blocks,
// 0.56 at 8), items in two rounds never, so the picks from 4 key blocks on do not move with it.
constexpr double kRows64NonCausalRelativeRate = 0.68;
constexpr double kRows64NonCausalD64RelativeRate = 0.75;

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

// The parts per tile the split tile's plan cuts a launch's last tiles into (1: none).
inline int split_parts(int q_len, int kv_len, int heads_x_batch, int slots) {
  const long long t128 = (q_len + 127LL) / 128 * heads_x_batch;
  return tail_split_plan(t128, slots, (kv_len + 127) / 128, slots).splits;
}
// Key groups that pay (key_groups) against a split that wins (split): the split tile keeps the
// launches it splits in 3 or more parts (more parallelism than two groups), a 2-part split gives way
// (S 2048 with 4 heads: d = 128 290.5 against 318.6 TFLOP/s with the first key-group tile; d = 64 1.31-
// 1.34x the split with key groups).
inline bool key_groups_take(bool key_groups, bool split, int q_len, int kv_len, int heads_x_batch, int slots) {
  return key_groups && (!split || split_parts(q_len, kv_len, heads_x_batch, slots) <= 2);
}

// Non-causal d = 64, automatic policy. Where the 192-row tile's partial tiles pay (partial_tiles
// on): the 128-row tile if its busiest CTA at its lower rate finishes first, else the partial-tiles
// kernel. Elsewhere: the 128-row tile when its better-filled waves outweigh its lower rate, else
// the staged 192-row tile. sms: the CTAs the launch may use (one per SM, or num_ctas).
// Before both: the key-group tile (rows64) where its rounds finish before the 128-row tile's and
// the 192-row tile's (key_group_rounds_cost above; kv_len sets the items' key blocks), and the split
// tile where its key splits win (split_wins, with tail_split), in key_groups_take's order.
enum class NonCausalD64Tile { staged, rows128, partial, rows64, split };
inline NonCausalD64Tile noncausal_d64_tile(int q_len, int kv_len, int heads_x_batch, int sms,
                                           bool partial_tiles = true, bool tail_split = true) {
  if (sms <= 0 || heads_x_batch <= 0) return NonCausalD64Tile::staged;
  const long long t192 = (q_len + 191LL) / 192 * heads_x_batch, t128 = (q_len + 127LL) / 128 * heads_x_batch;
  // The 192-row tile's rounds in 128-row steps at the 128-row tile's rate (1.5 x the rows at 1 / 0.92).
  const double staged = static_cast<double>((t192 + sms - 1) / sms) * ((kv_len + 127) / 128 + 1) * 1.5 *
                        kRows128RelativeRate;
  const double groups = key_group_rounds_cost(q_len, kv_len, heads_x_batch, sms, kRows64NonCausalD64RelativeRate);
  const bool key_groups = groups < rows128_rounds_cost(q_len, kv_len, heads_x_batch, sms) && groups < staged;
  const bool split = tail_split && split_wins(64, q_len, kv_len, heads_x_batch, sms);
  if (key_groups_take(key_groups, split, q_len, kv_len, heads_x_batch, sms)) return NonCausalD64Tile::rows64;
  if (split) return NonCausalD64Tile::split;
  if (partial_tiles && partial_tiles_pay(q_len, heads_x_batch, sms))
    return noncausal_busiest(q_len, 128, heads_x_batch, sms, false) * 128.0 / kRows128RelativeRate <
                   noncausal_busiest(q_len, 192, heads_x_batch, sms, true) * 192.0
               ? NonCausalD64Tile::rows128
               : NonCausalD64Tile::partial;
  return wave_efficiency(t128, sms) * kRows128RelativeRate > wave_efficiency(t192, sms) ? NonCausalD64Tile::rows128
                                                                                         : NonCausalD64Tile::staged;
}

// Non-causal d = 128 below the long-key threshold, automatic policy: the key-group tile where its
// rounds finish first (above) and the split tile where its key splits win, in key_groups_take's order.
enum class NonCausalD128Tile { staged, split, rows64 };
inline NonCausalD128Tile noncausal_d128_tile(int q_len, int kv_len, int heads_x_batch, int slots, bool tail_split) {
  if (slots <= 0 || heads_x_batch <= 0) return NonCausalD128Tile::staged;
  const bool key_groups = key_group_rounds_cost(q_len, kv_len, heads_x_batch, slots, kRows64NonCausalRelativeRate) <
                          rows128_rounds_cost(q_len, kv_len, heads_x_batch, slots);
  const bool split = tail_split && split_wins(128, q_len, kv_len, heads_x_batch, slots);
  if (key_groups_take(key_groups, split, q_len, kv_len, heads_x_batch, slots)) return NonCausalD128Tile::rows64;
  return split ? NonCausalD128Tile::split : NonCausalD128Tile::staged;
}
// Causal d = 64: a causal launch lasts as long as its busiest CTA (at least its longest tile: S =
// 2048 with 8 heads gives 88 192-row tiles for 132 SMs, and the last one sees every key). The
// model (causal::cta_loads: visible key blocks + 1 per tile, the launch's order, grouped taken as
// longest-first) weighs a 128-row tile's key block at 128 / kCausalRows128RelativeRate against the
// 192-row tile's 192. Launches of more than kCausalRows128MaxWaves waves of 192-row tiles keep that
// tile without the walk (their rounds balance; the walk costs one step per tile).
constexpr int kCausalRows128MaxWaves = 4;

// Causal d = 64 with key groups (rows64_tile_config(64), docs/attention.md §Key groups): a 64-row
// item's two warp groups split its key blocks, so it lasts about half of them in two-group steps
// (the 128-row tile's step), plus kKeyGroupItemCost. The busiest CTA of the launch in 128-row
// steps, the order as above.
constexpr double kCausalRows64RelativeRate = kCausalRows128RelativeRate;
#if !defined(__CUDA_ARCH__)
inline double causal_key_groups_busiest(int q_len, int kv_len, int key_offset, int heads_x_batch, int slots,
                                        causal::TileOrder order) {
  const causal::TileShape t{q_len, kv_len, 64, 128, key_offset};
  const causal::TileOrder o = order == causal::TileOrder::head_major ? order : causal::TileOrder::longest_first;
  const int m_blocks = t.m_blocks();
  const long long items = static_cast<long long>(m_blocks) * heads_x_batch;
  if (slots <= 0 || items <= 0) return 0.0;
  const int grid = items < slots ? static_cast<int>(items) : slots;
  double busiest = 0.0;
  for (int c = 0; c < grid; ++c) {
    double load = 0.0;
    for (int p = c; p < items; p = causal::next_position(o, p, c, grid)) {
      const int kb = t.key_blocks(causal::item_at(o, 0, m_blocks, heads_x_batch, 1, p).m_block);
      load += (kb + 1) / 2 + kKeyGroupItemCost;
    }
    busiest = load > busiest ? load : busiest;
  }
  return busiest;
}

// Causal d = 64, automatic policy: the tile whose modelled busiest CTA finishes first, each weighed
// as above (192-row steps at 192, 128-row steps at 128 / kCausalRows128RelativeRate,
// key-group steps at 128 / kCausalRows64RelativeRate); launches of more than
// kCausalRows128MaxWaves waves of 192-row tiles keep that tile without the walks.
enum class CausalD64Tile { staged, rows128, rows64 };
inline CausalD64Tile causal_d64_tile(int q_len, int kv_len, int key_offset, int heads_x_batch, int slots,
                                     causal::TileOrder order) {
  const causal::TileShape t192{q_len, kv_len, 192, 128, key_offset}, t128{q_len, kv_len, 128, 128, key_offset};
  if (slots <= 0 || static_cast<long long>(t192.m_blocks()) * heads_x_batch > kCausalRows128MaxWaves * 1LL * slots)
    return CausalD64Tile::staged;
  const causal::TileOrder o = order == causal::TileOrder::head_major ? order : causal::TileOrder::longest_first;
  const double c192 = causal::cta_loads(o, heads_x_batch, t192, heads_x_batch, slots).busiest * 192.0;
  const double c128 = causal::cta_loads(o, heads_x_batch, t128, heads_x_batch, slots).busiest * 128.0 /
                      kCausalRows128RelativeRate;
  const double c64 = !kKeyGroupsBuilt ? 1e30 : causal_key_groups_busiest(q_len, kv_len, key_offset, heads_x_batch, slots, order) * 128.0 /
                     kCausalRows64RelativeRate;
  if (c64 < c128 && c64 < c192) return CausalD64Tile::rows64;
  return c128 < c192 ? CausalD64Tile::rows128 : CausalD64Tile::staged;
}
#endif

}  // namespace xstage::kernels::attention
