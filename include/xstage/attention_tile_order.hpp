// Causal attention work as pure functions of a list position, shared by the kernel's
// persistent scheduler (src/kernels/attention/tile_scheduler.cuh), its mainloop (which key
// blocks a q tile loads and which it masks) and the CPU tests, so the order the tests check is
// the order the kernel runs. No allocation, no CUDA types; __host__ __device__ under nvcc.
//
// A work item is one q tile (block_m query rows) of one (batch, head). Causal query i sees keys
// j <= i + key_offset (and j < kv_len): key_offset = 0 is top-left alignment (torch's
// is_causal), kv_len - q_len bottom-right (FlashAttention's, for decoding-style callers). The
// item's cost is its number of visible key blocks, non-decreasing in the q tile and the same
// for every (batch, head), so sorting by cost needs no list (docs/attention.md §Persistent
// scheduler):
//
// * head_major: q tiles of one head, heaviest first, then the next head; CTA c takes
//   positions c, c + grid, ... (round robin). Heads run one after another, so every round
//   mixes the long tiles of one head with the short ones of the previous head.
// * longest_first: all items by cost, descending (q tile slowest, then batch and
//   head, so items of equal cost are the heads of one q tile), dealt out serpentine: round r
//   gives position r*grid + c to CTA c when r is even and to CTA grid-1-c when r is odd. Over a
//   descending list the serpentine evens out what the round robin leaves: the CTA that got the
//   heaviest item of one round gets the lightest of the next.
// * grouped: longest_first within groups of `group` (batch, head) pairs, one group after the
//   other, dealt out by the same serpentine. Fewer heads are in flight at once (their K/V stay
//   in L2); the host picks the smallest group whose per-CTA load stays balanced
//   (plan_group below).
// * claimed: the grouped list, but each CTA claims its next position from a launch-wide counter
//   when its producer reaches the next tile (positions 0 .. grid-1 first, one each). Greedy claiming
//   balances the CTAs without the serpentine, so the groups can be small (one or two heads at
//   S >= 16384, plan_claimed_group below): fewer heads' K/V in flight, fewer DRAM re-reads
//   (docs/attention.md §Persistent scheduler, "claimed").
#pragma once

#include <functional>
#include <queue>
#include <vector>

#if !defined(XS_TILE_HD)
#if defined(__CUDACC__)
#define XS_TILE_HD __host__ __device__ __forceinline__
#else
#define XS_TILE_HD inline
#endif
#endif

namespace xstage::causal {

// automatic: the operator's choice between grouped and claimed for the call (ops::causal_order_for);
// kernels only ever see the four concrete orders.
enum class TileOrder : int { head_major = 0, longest_first = 1, grouped = 2, claimed = 3, automatic = 4 };
enum class Align : int { top_left = 0, bottom_right = 1 };

// The orders that walk the grouped list and so take a group (host-planned or forced).
XS_TILE_HD bool takes_group(TileOrder order) {
  return order == TileOrder::grouped || order == TileOrder::claimed || order == TileOrder::automatic;
}

// Query i sees keys j <= i + key_offset(...).
XS_TILE_HD int key_offset(Align align, int q_len, int kv_len) {
  return align == Align::bottom_right ? kv_len - q_len : 0;
}

// The key blocks of q tile m under the causal mask; key_offset >= 0 (validated by the operator).
struct TileShape {
  int q_len;
  int kv_len;
  int block_m;
  int block_n;
  int key_offset;

  XS_TILE_HD int m_blocks() const { return (q_len + block_m - 1) / block_m; }
  XS_TILE_HD int kv_blocks() const { return (kv_len + block_n - 1) / block_n; }
  // Visible key blocks [0, key_blocks(m)): up to the key the tile's last valid row sees. The
  // blocks past it are fully masked and never loaded. >= 1 (row 0 sees key 0).
  XS_TILE_HD int key_blocks(int m) const {
    int last_row = (m + 1) * block_m;  // exclusive
    if (last_row > q_len) last_row = q_len;
    const int n = (last_row + key_offset + block_n - 1) / block_n;
    return n < kv_blocks() ? n : kv_blocks();
  }
  // Key blocks >= this hold a key after the limit of the tile's first row (its most
  // restrictive one): only these need the causal mask, the ones below are fully visible.
  XS_TILE_HD int first_masked_block(int m) const { return (m * block_m + key_offset + 1) / block_n; }
};

struct Item {
  int m_block;
  int head;
  int batch;
};

// The item at list position pos (0 <= pos < m_blocks * heads * batch). group: (batch, head)
// pairs per group of the grouped and claimed orders (<= 0 or >= all pairs: one group, i.e.
// longest_first); ignored by head_major.
XS_TILE_HD Item item_at(TileOrder order, int group, int m_blocks, int heads, int batch, int pos) {
  int m, bh;
  if (order != TileOrder::head_major) {
    const int pairs = heads * batch;
    const int g_pairs = (order == TileOrder::longest_first || group <= 0 || group > pairs) ? pairs : group;
    const int per_group = g_pairs * m_blocks;  // items of a full group
    const int g = pos / per_group;
    const int local = pos - g * per_group;
    const int first = g * g_pairs;                                          // first pair of the group
    const int in_group = pairs - first < g_pairs ? pairs - first : g_pairs;  // the last may be partial
    const int r = local / in_group;                                         // items of equal cost: one q tile
    m = m_blocks - 1 - r;
    bh = first + (local - r * in_group);
  } else {
    bh = pos / m_blocks;
    m = m_blocks - 1 - (pos - bh * m_blocks);
  }
  const int b = bh / heads;
  return Item{m, bh - b * heads, b};
}
XS_TILE_HD Item item_at(TileOrder order, int m_blocks, int heads, int batch, int pos) {
  return item_at(order, 0, m_blocks, heads, batch, pos);
}

// The list position CTA `cta` of `grid` takes after `pos` (its first is position cta). Only
// the last round can be partial, so a position >= the item count ends the CTA's work. Not for
// claimed (the counter decides; its host model is claimed_loads below).
XS_TILE_HD int next_position(TileOrder order, int pos, int cta, int grid) {
  if (order == TileOrder::head_major) return pos + grid;
  const int round = pos / grid + 1;
  return round * grid + ((round & 1) ? grid - 1 - cta : cta);
}

#if !defined(__CUDA_ARCH__)
// Host planning of the grouped order and of the causal tile (the kernel only reads the result).
// The cost model: a CTA's load is the sum of its items' visible key blocks plus one block per
// item (Q load, epilogue). grid: the CTA slots (a launch never has more CTAs than items).
struct CtaLoads {
  double busiest = 0;  // key blocks of the busiest CTA
  double total = 0;    // key blocks of all CTAs
};
// claimed: each position goes to the CTA that is free first, as a counter claimed when a CTA
// finishes its tile would hand them out (the MoE order rule's list_end_idle_share walks its tile
// lists the same way).
inline CtaLoads claimed_loads(int group, const TileShape& t, int pairs, int grid) {
  const int m_blocks = t.m_blocks();
  const int items = m_blocks * pairs;
  CtaLoads r;
  if (grid <= 0 || items <= 0) return r;
  if (grid > items) grid = items;
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;  // each CTA's load
  for (int c = 0; c < grid; ++c) free_at.push(0.0);
  for (int p = 0; p < items; ++p) {
    const double cost = t.key_blocks(item_at(TileOrder::claimed, group, m_blocks, pairs, 1, p).m_block) + 1;
    const double done = free_at.top() + cost;
    free_at.pop();
    free_at.push(done);
    r.total += cost;
    r.busiest = done > r.busiest ? done : r.busiest;
  }
  return r;
}
inline CtaLoads cta_loads(TileOrder order, int group, const TileShape& t, int pairs, int grid) {
  if (order == TileOrder::claimed) return claimed_loads(group, t, pairs, grid);
  const int m_blocks = t.m_blocks();
  const int items = m_blocks * pairs;
  CtaLoads r;
  if (grid <= 0 || items <= 0) return r;
  if (grid > items) grid = items;
  for (int c = 0; c < grid; ++c) {
    double load = 0;
    for (int p = c; p < items; p = next_position(order, p, c, grid))
      load += t.key_blocks(item_at(order, group, m_blocks, pairs, 1, p).m_block) + 1;
    r.busiest = load > r.busiest ? load : r.busiest;
    r.total += load;
  }
  return r;
}
// Imbalance = busiest CTA / mean.
inline double cta_imbalance(TileOrder order, int group, const TileShape& t, int pairs, int grid) {
  const int items = t.m_blocks() * pairs;
  if (grid <= 0 || items <= 0) return 1.0;
  if (grid > items) grid = items;
  const CtaLoads l = cta_loads(order, group, t, pairs, grid);
  return l.busiest * grid / l.total;
}

// The group of the grouped order: the smallest number of (batch, head) pairs per group whose
// imbalance is within `tolerance` of perfect, else all pairs (longest_first). Groups above
// kMaxPlannedGroup pairs are not tried (their K/V no longer fit L2 anyway), nor any when the
// search would walk more than kPlanBudget items (a large batch of short sequences). Cost: one
// imbalance evaluation (items) per candidate; callers cache the answer per shape.
inline constexpr int kMaxPlannedGroup = 64;
inline constexpr long long kPlanBudget = 4000000;
inline int plan_group(const TileShape& t, int pairs, int grid, double tolerance = 0.01) {
  const int last = pairs - 1 < kMaxPlannedGroup ? pairs - 1 : kMaxPlannedGroup;
  if (static_cast<long long>(t.m_blocks()) * pairs * last > kPlanBudget) return pairs;
  for (int g = 1; g <= last; ++g)
    if (cta_imbalance(TileOrder::grouped, g, t, pairs, grid) <= 1.0 + tolerance) return g;
  return pairs;
}
// The claimed order's group: the same search with greedy claiming as the model. Claiming keeps
// the CTAs within one light item of each other where the list ends in light items, so long
// sequences get groups of one or two heads (plan_group's serpentine needed 8-15 there).
// Its search stops when the items walked so far pass kPlanBudget (not on the worst case up front,
// as plan_group: one or two candidates usually settle it, also on shapes too large for that walk).
inline int plan_claimed_group(const TileShape& t, int pairs, int grid, double tolerance = 0.01) {
  const int last = pairs - 1 < kMaxPlannedGroup ? pairs - 1 : kMaxPlannedGroup;
  const long long per_candidate = static_cast<long long>(t.m_blocks()) * pairs;
  long long walked = 0;
  for (int g = 1; g <= last && walked + per_candidate <= kPlanBudget; ++g, walked += per_candidate)
    if (cta_imbalance(TileOrder::claimed, g, t, pairs, grid) <= 1.0 + tolerance) return g;
  return pairs;
}
#endif

}  // namespace xstage::causal
