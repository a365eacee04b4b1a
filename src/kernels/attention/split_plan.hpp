// Key splits of the attention tiles (host and device): how many parts the tiles of a launch are
// cut into along the keys, planned on the host and passed to the kernel as a parameter.
// docs/attention.md §Tail split, §Short sequences.
#pragma once

namespace xstage::kernels::attention {

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
struct TailSplitPlan {
  int full;    // work items [0, full) are whole tiles
  int splits;  // parts per remaining tile (1: no split)
};
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
// Work items of a plan: the whole tiles, then the parts.
inline long long split_work_items(long long tiles, TailSplitPlan plan) {
  return plan.full + (tiles - plan.full) * plan.splits;
}

}  // namespace xstage::kernels::attention
