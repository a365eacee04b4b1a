// The causal tile orders of the attention kernel's persistent scheduler and its key-block
// bounds (xstage/attention_tile_order.hpp, the functions the kernel runs): every work item
// exactly once, longest-first non-increasing in cost, the per-CTA load of the serpentine deal
// against the round robin on the issue's shapes, and the visible / masked key blocks against the
// mask itself (both alignments).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "xstage/attention_tile_order.hpp"

using namespace xstage;
using causal::Align;
using causal::TileOrder;
using causal::TileShape;

namespace {

struct Launch {
  TileShape shape;
  int heads;
  int batch;
  int grid;  // CTAs (the kernel uses min(#SMs, #items))
  int items() const { return shape.m_blocks() * heads * batch; }
};

// The positions CTA c walks, exactly as the kernel's loop: first = c, then next_position while
// the position is below the item count.
std::vector<int> walk(TileOrder order, const Launch& l, int cta) {  // the group does not change the deal
  std::vector<int> pos;
  for (int p = cta; p < l.items(); p = causal::next_position(order, p, cta, l.grid)) pos.push_back(p);
  return pos;
}

// Key blocks each CTA computes (the cost model of the order: a tile costs its visible blocks).
std::vector<long long> cta_loads(TileOrder order, const Launch& l, int group = 0) {
  std::vector<long long> load(l.grid, 0);
  for (int c = 0; c < l.grid; ++c)
    for (int p : walk(order, l, c))
      load[c] += l.shape.key_blocks(causal::item_at(order, group, l.shape.m_blocks(), l.heads, l.batch, p).m_block);
  return load;
}

Launch issue_launch(int s, int heads, int d, int sms = 132) {
  // The staged tiles of docs/attention.md: d = 128 128 x 128, d = 64 192 x 128.
  Launch l{TileShape{s, s, d == 128 ? 128 : 192, 128, 0}, heads, 1, sms};
  l.grid = std::min(sms, l.items());
  return l;
}

const std::vector<Launch>& mixed_launches() {
  static const std::vector<Launch> v = {
      {TileShape{77, 77, 128, 128, 0}, 3, 2, 5},             // one tile per head
      {TileShape{4680, 4680, 192, 128, 0}, 5, 2, 7},         // q tail (4680 = 24 x 192 + 72)
      {TileShape{1000, 3000, 128, 128, 2000}, 4, 3, 13},     // bottom-right, q != kv
      {TileShape{3000, 1000, 128, 128, 0}, 2, 1, 11},        // top-left, q > kv (capped costs)
      {TileShape{8191, 8191, 192, 128, 0}, 16, 1, 132},      // the issue's d = 64 shape
      {TileShape{16384, 16384, 128, 128, 0}, 24, 1, 132},    // the issue's d = 128 shape
      {TileShape{2048, 2048, 128, 128, 0}, 8, 1, 16},        // grid divides the items
  };
  return v;
}

}  // namespace

TEST(AttentionTileOrder, EveryItemExactlyOnce) {
  struct OrderGroup {
    TileOrder order;
    int group;
  };
  // grouped: one pair per group, two (groups cross the batch boundary), five (a partial last
  // group on most launches), all pairs.
  for (OrderGroup og : {OrderGroup{TileOrder::head_major, 0}, OrderGroup{TileOrder::longest_first, 0},
                        OrderGroup{TileOrder::grouped, 1}, OrderGroup{TileOrder::grouped, 2},
                        OrderGroup{TileOrder::grouped, 5}, OrderGroup{TileOrder::grouped, 1000}})
    for (const Launch& l : mixed_launches()) {
      const TileOrder order = og.order;
      std::vector<int> seen_pos(l.items(), 0);
      std::set<std::tuple<int, int, int>> items;
      for (int c = 0; c < l.grid; ++c)
        for (int p : walk(order, l, c)) {
          ASSERT_GE(p, 0);
          ASSERT_LT(p, l.items());
          ++seen_pos[p];
          const causal::Item it = causal::item_at(order, og.group, l.shape.m_blocks(), l.heads, l.batch, p);
          ASSERT_GE(it.m_block, 0);
          ASSERT_LT(it.m_block, l.shape.m_blocks());
          ASSERT_GE(it.head, 0);
          ASSERT_LT(it.head, l.heads);
          ASSERT_GE(it.batch, 0);
          ASSERT_LT(it.batch, l.batch);
          EXPECT_TRUE(items.insert({it.m_block, it.head, it.batch}).second)
              << "item twice, position " << p << " group " << og.group;
        }
      EXPECT_EQ(static_cast<int>(items.size()), l.items());
      for (int p = 0; p < l.items(); ++p) EXPECT_EQ(seen_pos[p], 1) << "position " << p << " grid " << l.grid;
    }
}

// Grouped: within a group the items run longest first and the group's pairs only; groups follow
// one another; a group of all pairs is longest_first.
TEST(AttentionTileOrder, GroupedRunsGroupsInTurn) {
  const Launch l{TileShape{1000, 1000, 128, 128, 0}, 5, 2, 13};  // 8 q tiles, 10 pairs
  const int M = l.shape.m_blocks(), G = 4;
  int prev_group = 0, prev_m = M;
  for (int p = 0; p < l.items(); ++p) {
    const causal::Item it = causal::item_at(TileOrder::grouped, G, M, l.heads, l.batch, p);
    const int group = (it.batch * l.heads + it.head) / G;
    EXPECT_GE(group, prev_group) << "position " << p;
    if (group == prev_group) {
      EXPECT_LE(it.m_block, prev_m) << "position " << p;
    }
    prev_m = group == prev_group ? it.m_block : M;
    prev_group = group;
    const causal::Item all = causal::item_at(TileOrder::grouped, l.heads * l.batch, M, l.heads, l.batch, p);
    const causal::Item lf = causal::item_at(TileOrder::longest_first, M, l.heads, l.batch, p);
    EXPECT_EQ(std::tie(all.m_block, all.head, all.batch), std::tie(lf.m_block, lf.head, lf.batch));
  }
  EXPECT_EQ(prev_group, (l.heads * l.batch - 1) / G);
}

// The planner: the group it picks keeps the cost model's busiest CTA within 1 % of the mean (or
// is all pairs), no smaller group does, and it needs fewer heads in flight than longest-first
// on the long, many-head shapes where longest-first measured below head-major
// (docs/attention.md §Persistent scheduler).
TEST(AttentionTileOrder, PlannedGroupIsTheSmallestBalancedOne) {
  for (int d : {64, 128})
    for (int s : {2048, 8192, 32768})
      for (int h : {8, 24, 40}) {
        const Launch l = issue_launch(s, h, d);
        const int g = causal::plan_group(l.shape, h, l.grid);
        ASSERT_GE(g, 1);
        ASSERT_LE(g, h);
        if (g < h) {
          EXPECT_LE(causal::cta_imbalance(TileOrder::grouped, g, l.shape, h, l.grid), 1.01);
        }
        for (int smaller = 1; smaller < g; ++smaller)
          EXPECT_GT(causal::cta_imbalance(TileOrder::grouped, smaller, l.shape, h, l.grid), 1.01) << smaller;
      }
  // Bounded search: a batch of 256 short sequences (32 q tiles x 2048 pairs) is not planned.
  EXPECT_EQ(causal::plan_group(TileShape{4096, 4096, 128, 128, 0}, 2048, 132), 2048);
  EXPECT_EQ(causal::plan_group(issue_launch(32768, 40, 128).shape, 40, 132), 8);
  EXPECT_EQ(causal::plan_group(issue_launch(16384, 40, 128).shape, 40, 132), 11);
}

TEST(AttentionTileOrder, LongestFirstIsNonIncreasingInCost) {
  for (const Launch& l : mixed_launches()) {
    int prev = 1 << 30;
    for (int p = 0; p < l.items(); ++p) {
      const causal::Item it = causal::item_at(TileOrder::longest_first, l.shape.m_blocks(), l.heads, l.batch, p);
      const int cost = l.shape.key_blocks(it.m_block);
      EXPECT_LE(cost, prev) << "position " << p;
      prev = cost;
    }
    // Equal costs in (batch, head) order: neighbouring positions of one q tile are neighbouring heads.
    const causal::Item a = causal::item_at(TileOrder::longest_first, l.shape.m_blocks(), l.heads, l.batch, 0);
    EXPECT_EQ(a.m_block, l.shape.m_blocks() - 1);
    EXPECT_EQ(a.head, 0);
    EXPECT_EQ(a.batch, 0);
  }
}

TEST(AttentionTileOrder, HeadMajorIsTodaysOrder) {
  // q tiles of a head heaviest first, then the next head, then the next batch; round robin.
  const Launch l{TileShape{500, 500, 128, 128, 0}, 3, 2, 5};
  const int M = l.shape.m_blocks();
  for (int p = 0; p < l.items(); ++p) {
    const causal::Item it = causal::item_at(TileOrder::head_major, M, l.heads, l.batch, p);
    EXPECT_EQ(it.m_block, M - 1 - p % M);
    EXPECT_EQ(it.head, (p / M) % l.heads);
    EXPECT_EQ(it.batch, p / (M * l.heads));
    EXPECT_EQ(causal::next_position(TileOrder::head_major, p, p % l.grid, l.grid), p + l.grid);
  }
}

TEST(AttentionTileOrder, SerpentineReversesOddRounds) {
  const int grid = 4;
  std::vector<int> expect_cta1 = {1, 6, 9, 14, 17};
  std::vector<int> got;
  for (int p = 1; p < 20; p = causal::next_position(TileOrder::longest_first, p, 1, grid)) got.push_back(p);
  EXPECT_EQ(got, expect_cta1);
}

// On the shapes of issue 38 (S 2048..32768, 8..40 heads, d 64/128, B = 1, 132 SMs): the
// busiest CTA of the serpentine longest-first deal never has more work than the round robin's,
// and its CTAs differ by at most one (the heaviest) tile.
TEST(AttentionTileOrder, LongestFirstBoundsThePerCtaImbalance) {
  for (int d : {64, 128})
    for (int s : {2048, 4096, 8191, 8192, 16384, 32768})
      for (int h : {8, 16, 24, 40}) {
        const Launch l = issue_launch(s, h, d);
        const std::vector<long long> lpt = cta_loads(TileOrder::longest_first, l);
        const std::vector<long long> rr = cta_loads(TileOrder::head_major, l);
        const long long lpt_max = *std::max_element(lpt.begin(), lpt.end());
        const long long lpt_min = *std::min_element(lpt.begin(), lpt.end());
        const long long rr_max = *std::max_element(rr.begin(), rr.end());
        const long long heaviest = l.shape.key_blocks(l.shape.m_blocks() - 1);
        EXPECT_EQ(std::accumulate(lpt.begin(), lpt.end(), 0ll), std::accumulate(rr.begin(), rr.end(), 0ll));
        EXPECT_LE(lpt_max, rr_max) << "S " << s << " H " << h << " d " << d;
        EXPECT_LE(lpt_max - lpt_min, heaviest) << "S " << s << " H " << h << " d " << d;
      }
  // The issue's causal shapes: the round robin's busiest CTA has >= 25 % more than the mean
  // (S = 16384, 24 heads, d = 128) and >= 60 % (S = 8191, 16 heads, d = 64); longest-first <= 3 %.
  for (auto [s, h, d, rr_min_excess] : {std::tuple{16384, 24, 128, 0.25}, std::tuple{8191, 16, 64, 0.60}}) {
    const Launch l = issue_launch(s, h, d);
    const std::vector<long long> lpt = cta_loads(TileOrder::longest_first, l);
    const std::vector<long long> rr = cta_loads(TileOrder::head_major, l);
    const double mean = double(std::accumulate(lpt.begin(), lpt.end(), 0ll)) / l.grid;
    EXPECT_GE(*std::max_element(rr.begin(), rr.end()) / mean, 1.0 + rr_min_excess) << s;
    EXPECT_LE(*std::max_element(lpt.begin(), lpt.end()) / mean, 1.03) << s;
  }
}

// key_blocks / first_masked_block against the mask itself: query i (< q_len) sees key j iff
// j < kv_len and j <= i + key_offset.
TEST(AttentionTileOrder, KeyBlocksMatchTheMask) {
  for (Align align : {Align::top_left, Align::bottom_right})
    for (auto [sq, skv, bm, bn] : {std::tuple{77, 77, 128, 128}, std::tuple{300, 1000, 128, 128},
                                   std::tuple{1000, 1000, 192, 128}, std::tuple{200, 1337, 192, 128},
                                   std::tuple{129, 255, 128, 128}, std::tuple{1000, 300, 128, 128},
                                   std::tuple{64, 4000, 128, 192}, std::tuple{383, 383, 192, 128}}) {
      if (align == Align::bottom_right && sq > skv) continue;  // refused by the operator
      const TileShape t{sq, skv, bm, bn, causal::key_offset(align, sq, skv)};
      for (int m = 0; m < t.m_blocks(); ++m) {
        const int row0 = m * bm, row_end = std::min(row0 + bm, sq);
        auto visible = [&](int i, int j) { return j < skv && j <= i + t.key_offset; };
        auto any_visible = [&](int n) {
          for (int i = row0; i < row_end; ++i)
            for (int j = n * bn; j < (n + 1) * bn; ++j)
              if (visible(i, j)) return true;
          return false;
        };
        auto needs_mask = [&](int n) {
          for (int i = row0; i < row_end; ++i)
            for (int j = n * bn; j < (n + 1) * bn; ++j)
              if (!visible(i, j)) return true;
          return false;
        };
        const int nb = t.key_blocks(m);
        ASSERT_GE(nb, 1);
        EXPECT_TRUE(any_visible(nb - 1)) << "m " << m;
        for (int n = nb; n < t.kv_blocks(); ++n) EXPECT_FALSE(any_visible(n)) << "loaded a fully masked block";
        // The kernel masks block nb - 1 (the first it runs: key tail, diagonal) and the blocks
        // from first_masked_block on; every other block must need no mask, and those from
        // first_masked_block on do need one.
        for (int n = 0; n < nb - 1; ++n)
          EXPECT_EQ(needs_mask(n), n >= t.first_masked_block(m)) << "m " << m << " n " << n << " sq " << sq;
      }
    }
}

TEST(AttentionTileOrder, KeyOffsetOfTheAlignments) {
  EXPECT_EQ(causal::key_offset(Align::top_left, 100, 300), 0);
  EXPECT_EQ(causal::key_offset(Align::bottom_right, 100, 300), 200);
  EXPECT_EQ(causal::key_offset(Align::bottom_right, 300, 300), 0);
}

// cta_loads against a hand count (the causal d = 64 tile rule weighs the busiest CTA): S = 2048,
// 192-row tiles of 128-key blocks, 8 heads on 132 slots: 88 tiles, one per CTA; tile m sees
// ceil(min(192 (m + 1), 2048) / 128) key blocks = 2 3 5 6 8 9 11 12 14 15 16 (sum 101), + 1 each.
TEST(AttentionTileOrder, CtaLoadsHandCount) {
  const causal::TileShape t{2048, 2048, 192, 128, 0};
  for (TileOrder o : {TileOrder::head_major, TileOrder::longest_first, TileOrder::grouped}) {
    const causal::CtaLoads l = causal::cta_loads(o, 8, t, 8, 132);
    EXPECT_DOUBLE_EQ(l.busiest, 17.0) << static_cast<int>(o);
    EXPECT_DOUBLE_EQ(l.total, 8.0 * (101 + 11)) << static_cast<int>(o);
  }
  // Two CTAs, one head: longest-first serpentine deals 16+1, 15+1 | 14+1, 12+1 (reversed) | ...
  const causal::CtaLoads two = causal::cta_loads(TileOrder::longest_first, 1, t, 1, 2);
  EXPECT_DOUBLE_EQ(two.total, 101.0 + 11.0);
  EXPECT_GE(two.busiest, two.total / 2);
  EXPECT_LE(two.busiest, two.total / 2 + 17.0);
}

// The claimed order's host model (greedy claiming over the grouped list) against a hand count,
// and its planner: groups of one or two heads at S >= 8192, d = 128, where the serpentine's plan
// needs 8-31 (docs/attention.md §Persistent scheduler, "claimed").
TEST(AttentionTileOrder, ClaimedLoadsAndPlan) {
  // One head of 4 q tiles (costs 4, 3, 2, 1 blocks + 1 each) on two CTAs: 5 | 4, then 3 goes to
  // the CTA at 4 (7), 2 to the one at 5 (7).
  const causal::TileShape t{512, 512, 128, 128, 0};
  const causal::CtaLoads two = causal::claimed_loads(1, t, 1, 2);
  EXPECT_DOUBLE_EQ(two.total, 14.0);
  EXPECT_DOUBLE_EQ(two.busiest, 7.0);
  EXPECT_DOUBLE_EQ(causal::cta_loads(TileOrder::claimed, 1, t, 1, 2).busiest, 7.0);
  // More CTAs than items: one each, the busiest carries the heaviest.
  EXPECT_DOUBLE_EQ(causal::claimed_loads(1, t, 1, 9).busiest, 5.0);
  for (int s : {16384, 32768})
    for (int h : {8, 16, 24, 40}) {
      const Launch l = issue_launch(s, h, 128);
      const int g = causal::plan_claimed_group(l.shape, h, l.grid);
      EXPECT_EQ(g, 1) << s << " " << h;
      EXPECT_LE(causal::cta_imbalance(TileOrder::claimed, g, l.shape, h, l.grid), 1.01);
    }
  EXPECT_EQ(causal::plan_claimed_group(issue_launch(8192, 24, 128).shape, 24, 132), 2);
  // A shape whose full search is over the budget (S = 65536, 128 pairs: 512 q tiles x 128 x 64
  // candidates) still gets its one-head groups (plan_group would give all pairs there).
  EXPECT_EQ(causal::plan_claimed_group(TileShape{65536, 65536, 128, 128, 0}, 128, 132), 1);
  EXPECT_EQ(causal::plan_group(TileShape{65536, 65536, 128, 128, 0}, 128, 132), 128);
  // Every item is claimed once: the model's total is the list's.
  const Launch l = issue_launch(4096, 16, 64);
  EXPECT_DOUBLE_EQ(causal::claimed_loads(3, l.shape, 16, l.grid).total,
                   causal::cta_loads(TileOrder::longest_first, 0, l.shape, 16, l.grid).total);
}
