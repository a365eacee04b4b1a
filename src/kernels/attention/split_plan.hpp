// Key splits of the attention tiles (host and device): how many parts the tiles of a launch are
// cut into along the keys, planned on the host and passed to the kernel as a parameter.
// docs/attention.md §Tail split, §Short sequences.
#pragma once

// Stream fill (docs/attention.md §Stream fill): an experiment behind a build option, off by default.
#ifndef XSTAGE_ATTN_STREAM_FILL
#define XSTAGE_ATTN_STREAM_FILL 0
#endif

namespace xstage::kernels::attention {

inline constexpr bool kStreamFillBuilt = XSTAGE_ATTN_STREAM_FILL != 0;

// Most parts a tail tile is split into: more parts cost more merging for little gain.
constexpr int kMaxTailSplit = 4;
// Most parts a tile of an under-filled launch (fewer tiles than CTA slots) is split into.
constexpr int kMaxFillSplit = 8;
// Fewest key blocks per part when every tile of an under-filled launch is split: on one H200 parts
// of 2-4 key blocks lost 3-14 % to the whole tiles, parts of 8 won 7-13 % (docs/attention.md
// §Short sequences).
constexpr int kMinFillPartBlocks = 8;
// The merge kernel's bound on the parts of one tile.
constexpr int kMaxSplitParts = kMaxFillSplit > kMaxTailSplit ? kMaxFillSplit : kMaxTailSplit;

// kTailSplit: the host plans (tail_split_plan) and passes the plan as a kernel parameter, so no
// register holds it. Two cases, both merged afterwards by a small kernel (DirectStoreEpilogue):
// - the last wave would leave most CTA slots idle (tiles % slots <= slots / 2): its tiles are
//   split along the keys into k = min(slots / remainder, kMaxTailSplit, key blocks) parts;
// - the whole launch is short of a wave (tiles < slots, docs/attention.md §Short
//   sequences): every tile is split into k = min(slots / tiles, kMaxFillSplit, key blocks /
//   kMinFillPartBlocks) parts.
// The launch then runs min(slots, work items) CTAs.
// The stream fill's field exists only where it is built, so that the default build's kernels
// (their parameters, their registers) are the ones before it.
struct TailSplitPlan {
  int full;    // work items [0, full) are whole tiles
  int splits;  // parts per remaining tile (1: no split)
#if XSTAGE_ATTN_STREAM_FILL
  int kb = 0;  // stream fill (stream_fill_plan): key blocks per tile; 0: not a stream plan
#endif
};
// The plan's stream-fill key blocks (0: not a stream plan, or not built).
constexpr int stream_kb([[maybe_unused]] TailSplitPlan const& plan) {
#if XSTAGE_ATTN_STREAM_FILL
  return plan.kb;
#else
  return 0;
#endif
}
// slots: the CTAs the launch may use (one per SM, or the caller's num_ctas); capacity: the parts
// the workspace holds (nothing is split unless it holds `slots`).
inline TailSplitPlan tail_split_plan(long long tiles, int slots, int kv_blocks, int capacity) {
  const TailSplitPlan none{static_cast<int>(tiles), 1};
  if (slots <= 0 || tiles <= 0 || capacity < slots) return none;
  if (tiles < slots) {
    int k = static_cast<int>(slots / tiles);
    if (k > kMaxFillSplit) k = kMaxFillSplit;
    if (k > kv_blocks / kMinFillPartBlocks) k = kv_blocks / kMinFillPartBlocks;
    if (k < 2) return none;
    return TailSplitPlan{0, k};
  }
  const int rem = static_cast<int>(tiles % slots);
  if (rem == 0) return none;
  int k = slots / rem;
  if (k > kMaxTailSplit) k = kMaxTailSplit;
  if (k > kv_blocks) k = kv_blocks;
  if (k < 2) return none;
  return TailSplitPlan{static_cast<int>(tiles) - rem, k};
}
// Work items of a plan: the whole tiles, then the parts (stream fill: the key blocks of all tiles,
// at least one per CTA slot).
inline long long split_work_items(long long tiles, TailSplitPlan plan) {
  if (stream_kb(plan) > 0) return tiles * stream_kb(plan);
  return plan.full + (tiles - plan.full) * plan.splits;
}

// Stream fill: a launch of fewer tiles than CTA slots whose tiles are too short for the fill
// split's parts (tail_split_plan returns none). The key blocks of all tiles, in tile order, are
// one sequence of `steps` = tiles x kb; CTA c runs [stream_begin(c), stream_begin(c + 1)), so
// every CTA runs ⌈steps / grid⌉ blocks at most instead of a whole tile's kb. A CTA's range cuts
// at most its first and its last tile; such a segment leaves its O and LSE in the workspace at
// slot c + t (t: the tile; a tile's segments get consecutive slots), and the segment that
// arrives last (per-tile counters) merges them in slot order. No CTA waits for another.
// kMinStreamSavedBlocks: the fewest key blocks the busiest CTA must save (each cut segment costs
// a Q load and a part store).
constexpr int kMinStreamSavedBlocks = 2;
constexpr long long stream_begin(int c, long long steps, int grid) { return c * steps / grid; }
// The CTA whose range holds step x (0 <= x < steps): the largest c with stream_begin(c) <= x.
constexpr int stream_cta_of(long long x, long long steps, int grid) {
  return static_cast<int>(((x + 1) * grid - 1) / steps);
}
// CTA c's work item idx (a step in its range): tile idx / kb from block idx % kb to the tile's or
// the range's end; a cut segment (not the whole tile) also gets its place among the tile's
// segments and its workspace slot. The scheduler's decode (tile_scheduler.cuh) and the tests.
struct StreamSegment {
  int tile, kv_first, kv_end;
  int split = 0, splits = 1, slot = 0;  // splits 1: the whole tile
};
constexpr StreamSegment stream_segment(int idx, int c, long long steps, int grid, int kb) {
  const int t = idx / kb, f = idx - t * kb;
  const long long room = stream_begin(c + 1, steps, grid) - static_cast<long long>(t) * kb;
  const int e = room < kb ? static_cast<int>(room) : kb;
  StreamSegment s{t, f, e};
  if (f == 0 && e == kb) return s;
  const int lo = stream_cta_of(static_cast<long long>(t) * kb, steps, grid);
  s.split = c - lo;
  s.splits = stream_cta_of(static_cast<long long>(t) * kb + kb - 1, steps, grid) - lo + 1;
  s.slot = c + t;
  return s;
}
// The CTA's next item: the next tile's first block.
constexpr int stream_next(int idx, int kb) { return (idx / kb + 1) * kb; }
// The key blocks per tile of the stream plan (TailSplitPlan::kb), or 0 where the stream fill does
// not cut the launch. capacity: the parts the workspace holds (segments take slots up to grid +
// tiles - 2). Pure: the callers apply it only where kStreamFillBuilt.
inline int stream_fill_plan(long long tiles, int slots, int kv_blocks, int capacity) {
  constexpr int none = 0;
  if (slots <= 0 || tiles <= 0 || tiles >= slots || kv_blocks <= 0) return none;
  if (capacity < slots + tiles) return none;
  const long long steps = tiles * kv_blocks;
  const long long least = steps / slots, most = (steps + slots - 1) / slots;
  if (least < 1 || kv_blocks - most < kMinStreamSavedBlocks) return none;
  // A tile's segments: at most ⌈(kb - 1) / least⌉ + 1 CTAs meet it; the merge bounds them.
  if ((kv_blocks - 1 + least - 1) / least + 1 > kMaxSplitParts) return none;
  return kv_blocks;
}

}  // namespace xstage::kernels::attention
