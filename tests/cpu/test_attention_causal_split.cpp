// The causal key split's plan (include/xstage/attention_causal_split.hpp; the kernel side is not
// built yet): every tile's key blocks covered exactly once by its items, parts within their
// bounds, dense workspace slots matching the cut tiles, every CTA used, the table's loads equal to
// the plan's, the launch where every CTA holds one tile (S = 2048, 8 heads) cut and a long one not,
// and a workspace too small for the cut refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "xstage/attention_causal_split.hpp"

using namespace xstage::causal;

namespace {

TileShape shape(int s, int block_m) { return TileShape{s, s, block_m, 128, 0}; }

// Checks the invariants of a plan that cuts something.
void check_plan(const SplitPlan& p, const TileShape& t, int pairs, int slots, int min_part,
                               int max_parts) {
  EXPECT_GT(p.parts, 0);
  ASSERT_GT(p.grid, 0);
  EXPECT_LE(p.grid, slots);
  EXPECT_EQ(p.items.size() % p.grid, 0u);
  // Key blocks covered per tile, and the slots of the parts.
  std::map<std::pair<int, int>, std::vector<int>> covered;  // (pair, m_block) -> count per key block
  std::vector<int> slot_seen(p.parts, 0);
  std::vector<double> load(p.grid, 0.0);
  for (size_t e = 0; e < p.items.size(); ++e) {
    const SplitItem& it = p.items[e];
    if (it.splits == 0) continue;
    const int n = t.key_blocks(it.m_block);
    auto& c = covered[{it.pair, it.m_block}];
    c.resize(n, 0);
    const int b0 = it.split * n / it.splits, b1 = (it.split + 1) * n / it.splits;
    for (int b = b0; b < b1; ++b) ++c[b];
    EXPECT_LE(it.splits, max_parts);
    if (it.splits > 1) {
      EXPECT_GE(b1 - b0, min_part) << "a part shorter than min_part";
      ASSERT_GE(it.slot, 0);
      ASSERT_LT(it.slot, p.parts);
      ++slot_seen[it.slot];
    } else {
      EXPECT_EQ(it.slot, -1);
    }
    load[e % p.grid] += it.splits == 1 ? n + 1.0 : (b1 - b0) + 2.0;
  }
  EXPECT_EQ(covered.size(), static_cast<size_t>(pairs) * t.m_blocks()) << "every tile has items";
  for (const auto& [key, c] : covered)
    for (int x : c) EXPECT_EQ(x, 1) << "pair " << key.first << " tile " << key.second;
  for (int s : slot_seen) EXPECT_EQ(s, 1) << "each slot once";
  int next = 0;
  for (const SplitTile& st : p.tiles) {
    EXPECT_EQ(st.first_slot, next);
    EXPECT_GE(st.parts, 2);
    next += st.parts;
  }
  EXPECT_EQ(next, p.parts);
  for (double l : load) EXPECT_GT(l, 0.0) << "every CTA of the grid has work";
  EXPECT_DOUBLE_EQ(*std::max_element(load.begin(), load.end()), p.split_load);
}

}  // namespace

TEST(CausalSplit, OneTilePerCtaLaunchIsCutAndLoadsDrop) {
  for (int block_m : {128, 192}) {
    const TileShape t = shape(2048, block_m);
    const SplitPlan p = plan_causal_split(t, 8, 132, 1 << 20);
    EXPECT_EQ(p.whole_load, 17.0);  // the longest tile: 16 key blocks + 1
    EXPECT_LT(p.split_load, p.whole_load * 0.95);
    check_plan(p, t, 8, 132, 4, 4);
  }
}

TEST(CausalSplit, FullWavesAreLeftWhole) {
  const SplitPlan p = plan_causal_split(shape(16384, 128), 16, 132, 1 << 20);
  EXPECT_EQ(p.parts, 0);
  EXPECT_TRUE(p.items.empty());
  EXPECT_EQ(p.split_load, p.whole_load);
}

TEST(CausalSplit, PartBoundsAndFewCtas) {
  for (int slots : {3, 17, 132})
    for (int min_part : {2, 4, 8})
      for (int max_parts : {2, 4}) {
        const TileShape t = shape(4096, 192);
        const SplitPlan p = plan_causal_split(t, 2, slots, 1 << 20, min_part, max_parts, 0.0);
        if (p.parts == 0) continue;
        check_plan(p, t, 2, slots, min_part, max_parts);
      }
}

TEST(CausalSplit, AWorkspaceTooSmallForTheCutCutsLessOrNothing) {
  const TileShape t = shape(2048, 128);
  const SplitPlan big = plan_causal_split(t, 8, 132, 1 << 20);
  ASSERT_GT(big.parts, 2);
  const SplitPlan small = plan_causal_split(t, 8, 132, big.parts - 1);
  EXPECT_LE(small.parts, big.parts - 1);
  if (small.parts > 0) check_plan(small, t, 8, 132, 4, 4);
  EXPECT_EQ(plan_causal_split(t, 8, 132, 0).parts, 0);
}

TEST(CausalSplit, BadArgumentsPlanNothing) {
  EXPECT_EQ(plan_causal_split(shape(2048, 128), 0, 132, 100).parts, 0);
  EXPECT_EQ(plan_causal_split(shape(2048, 128), 8, 0, 100).parts, 0);
  EXPECT_EQ(plan_causal_split(shape(2048, 128), 8, 132, 100, 0).parts, 0);
}
