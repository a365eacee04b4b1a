// The plan of a causal launch whose longest tiles are cut along the keys (issue 38; docs/attention.md
// "Not done yet / next steps": the causal key split). Host only. A CTA's time is modelled as in
// causal_rows128_wins: its visible key blocks + 1 per work item, + 1 more per part of a cut tile
// (its partial O stored and its share of the merge). Tiles longer than a cap are cut into
// ceil(blocks / cap) parts (at most max_parts, each of at least min_part blocks), the cap chosen
// for the lowest busiest-CTA load; the work items are then dealt longest first to the least
// loaded CTA and laid out as a table the kernel walks (CTA c: entries c, c + grid, ...), because
// no closed-form order sorts the parts among the whole tiles. The same rule as
// tools/causal_split_model.py (the command-line view of it). The kernel side is not built yet.
#pragma once
#include <algorithm>
#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "xstage/attention_tile_order.hpp"

namespace xstage::causal {

struct SplitItem {
  int m_block = 0;
  int pair = 0;    // batch * heads + head
  int split = 0;   // part index, 0 .. splits - 1
  int splits = 0;  // 1: the whole tile; 0: an empty table entry (the CTA has no item this round)
  int slot = -1;   // workspace slot of a part (-1: whole tile)
};

// A cut tile: its parts are workspace slots [first_slot, first_slot + parts), merged in order.
struct SplitTile {
  int m_block = 0;
  int pair = 0;
  int first_slot = 0;
  int parts = 0;
};

struct SplitPlan {
  int grid = 0;                  // CTAs launched
  std::vector<SplitItem> items;  // rounds * grid entries; CTA c takes entries c, c + grid, ...
  std::vector<SplitTile> tiles;  // the cut tiles, in slot order (empty: nothing is cut)
  int parts = 0;                 // workspace slots used
  double whole_load = 0;         // the model's busiest CTA without cuts
  double split_load = 0;         // ... with this plan (= whole_load when nothing is cut)
};

namespace detail {

// Part p of k of a tile of n key blocks covers [p n / k, (p + 1) n / k): the mainloop's kv_range.
inline int part_blocks(int n, int k, int p) { return (p + 1) * n / k - p * n / k; }

inline double item_cost(int n, int k, int p) { return k == 1 ? n + 1.0 : part_blocks(n, k, p) + 2.0; }

// Longest first onto the least loaded CTA (ties: the lower CTA): each CTA's list of item indices.
inline std::vector<std::vector<int>> deal(const std::vector<double>& costs, int grid, double* busiest) {
  std::vector<int> order(costs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return costs[a] > costs[b]; });
  using Slot = std::pair<double, int>;  // (load, cta)
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
  for (int c = 0; c < grid; ++c) heap.push({0.0, c});
  std::vector<std::vector<int>> lists(grid);
  double top = 0;
  for (int i : order) {
    Slot s = heap.top();
    heap.pop();
    s.first += costs[i];
    top = std::max(top, s.first);
    lists[s.second].push_back(i);
    heap.push(s);
  }
  *busiest = top;
  return lists;
}

inline int parts_for(int n, int cap, int min_part, int max_parts) {
  if (n <= cap) return 1;
  int k = (n + cap - 1) / cap;
  k = std::min(k, max_parts);
  k = std::min(k, n / min_part);
  return std::max(k, 1);
}

}  // namespace detail

// t: the launch's tile shape; pairs: batch * heads; slots: CTAs the launch may use; capacity:
// parts the workspace holds. Nothing is cut unless the busiest CTA's load drops by min_gain.
inline SplitPlan plan_causal_split(const TileShape& t, int pairs, int slots, int capacity, int min_part = 4,
                                   int max_parts = 4, double min_gain = 0.05) {
  SplitPlan plan;
  const int mb = t.m_blocks();
  if (pairs <= 0 || slots <= 0 || mb <= 0 || min_part < 1 || max_parts < 1) return plan;
  std::vector<int> blocks(static_cast<size_t>(mb) * pairs);  // tile i: m_block i % mb, pair i / mb
  int longest = 0;
  for (int p = 0; p < pairs; ++p)
    for (int m = 0; m < mb; ++m) longest = std::max(longest, blocks[static_cast<size_t>(p) * mb + m] = t.key_blocks(m));

  auto costs_of = [&](const std::vector<int>& k) {
    std::vector<double> c;
    for (size_t i = 0; i < blocks.size(); ++i)
      for (int s = 0; s < k[i]; ++s) c.push_back(detail::item_cost(blocks[i], k[i], s));
    return c;
  };
  const int tiles_n = static_cast<int>(blocks.size());
  std::vector<int> best_k(blocks.size(), 1);
  double whole = 0;
  detail::deal(costs_of(best_k), std::min(slots, tiles_n), &whole);
  double best = whole;
  for (int cap = min_part; cap < longest; ++cap) {
    std::vector<int> k(blocks.size());
    long long parts = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      k[i] = detail::parts_for(blocks[i], cap, min_part, max_parts);
      if (k[i] > 1) parts += k[i];
    }
    if (parts == 0 || parts > capacity) continue;
    const std::vector<double> c = costs_of(k);
    double load = 0;
    detail::deal(c, std::min<int>(slots, static_cast<int>(c.size())), &load);
    if (load < best) {
      best = load;
      best_k = k;
    }
  }
  plan.whole_load = whole;
  if (!(best < whole * (1.0 - min_gain))) {
    plan.split_load = whole;
    return plan;  // nothing cut: the caller runs the whole-tile launch
  }

  // The cut tiles get consecutive slots, in tile order.
  std::vector<int> first_slot(blocks.size(), -1);
  for (size_t i = 0; i < blocks.size(); ++i)
    if (best_k[i] > 1) {
      first_slot[i] = plan.parts;
      plan.tiles.push_back(SplitTile{static_cast<int>(i) % mb, static_cast<int>(i) / mb, plan.parts, best_k[i]});
      plan.parts += best_k[i];
    }
  std::vector<SplitItem> all;
  for (size_t i = 0; i < blocks.size(); ++i)
    for (int s = 0; s < best_k[i]; ++s)
      all.push_back(SplitItem{static_cast<int>(i) % mb, static_cast<int>(i) / mb, s, best_k[i],
                              best_k[i] > 1 ? first_slot[i] + s : -1});
  const std::vector<double> c = costs_of(best_k);
  plan.grid = std::min<int>(slots, static_cast<int>(all.size()));
  const std::vector<std::vector<int>> lists = detail::deal(c, plan.grid, &plan.split_load);
  size_t rounds = 0;
  for (const auto& l : lists) rounds = std::max(rounds, l.size());
  plan.items.assign(rounds * plan.grid, SplitItem{});
  for (int cta = 0; cta < plan.grid; ++cta)
    for (size_t r = 0; r < lists[cta].size(); ++r) plan.items[r * plan.grid + cta] = all[lists[cta][r]];
  return plan;
}

}  // namespace xstage::causal
