// Persistent tile scheduler: grid = min(#SMs, #work items) CTAs, each walking the work list
// round-robin (item i goes to CTA i % grid), optionally splitting tiles along the keys. A tile is one block_m-row slice of Q for one
// (head, batch). The producer and the consumer warp groups of a CTA each run their own
// copy of the scheduler and see the same sequence, so no shared state is needed.
//
// Order: the q-tile index varies fastest, then head, then batch, so the CTAs running at the
// same time share the K/V of a few heads in L2. Causal: the run-time order of the launch
// (xstage/attention_tile_order.hpp): head_major runs the q tiles of each head heaviest first,
// round robin as above; longest_first sorts all tiles by their key blocks and deals them out
// serpentine; grouped does the same within groups of heads.
// kPartialLast (the partial-tiles kernels, non-causal): the whole q tiles first (head-major), then
// every sequence's partial last tile, dealt serpentine (round r to CTA c when r is even, to
// grid-1-c when odd), so that two partial tiles share a CTA where a whole one would
// (docs/attention.md §Partial tiles).
#pragma once
#include <cstdint>

#include "kernels/attention/split_plan.hpp"
#include "xstage/attention_tile_order.hpp"


namespace xstage::kernels::attention {

struct WorkTile {
  int m_block;  // q-tile index: rows [m_block*block_m, (m_block+1)*block_m)
  int head;
  int batch;
  // Tail split (kTailSplit schedulers only): this work item covers key blocks part `split`
  // of `splits` of the tile; `slot` numbers the parts of the launch (0 .. #parts-1).
  int split = 0;
  int splits = 1;
  int slot = 0;
};

template <int kBlockM, bool kCausal, bool kTailSplit = false, bool kPartialLast = false>
struct StaticPersistentScheduler {
  int num_m_blocks;
  int heads;
  int total;  // work items
  // The kernel parameter itself (constant bank), read where needed: two more live values
  // across the mainloop cost the long-key kernel 15 uniform moves per key block.
  TailSplitPlan const* plan;
  // Causal only, also read from the kernel parameter where needed (one order per launch).
  causal::TileOrder const* order;
  int const* group;  // grouped order: (batch, head) pairs per group
  int batches;

  __device__ StaticPersistentScheduler(int q_len, int heads_, int batch, TailSplitPlan const* plan_ = nullptr,
                                       causal::TileOrder const* order_ = nullptr, int const* group_ = nullptr)
      : num_m_blocks((q_len + kBlockM - 1) / kBlockM),
        heads(heads_),
        plan(plan_),
        order(order_),
        group(group_),
        batches(batch) {
    total = num_m_blocks * heads_ * batch;
    if constexpr (kTailSplit && !kCausal) {
      if (plan->splits > 1) total = plan->full + (total - plan->full) * plan->splits;
    }
  }

  __device__ int first() const { return static_cast<int>(blockIdx.x); }
  __device__ int next(int idx) const {
    if constexpr (kCausal)
      return causal::next_position(*order, idx, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
    if constexpr (kPartialLast) {
      const int grid = static_cast<int>(gridDim.x);
      const int round = idx / grid + 1;
      return round * grid + ((round & 1) ? grid - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x));
    }
    return idx + static_cast<int>(gridDim.x);
  }
  __device__ bool valid(int idx) const { return idx < total; }

  __device__ WorkTile decode(int idx) const {
    if constexpr (kTailSplit && !kCausal) {
      const int full = plan->full;
      if (plan->splits > 1 && idx >= full) {
        const int splits = plan->splits;
        const int u = idx - full;
        WorkTile t = decode_tile(full + u / splits);
        t.split = u % splits;
        t.splits = splits;
        t.slot = u;
        return t;
      }
    }
    return decode_tile(idx);
  }

  // Whole tile number idx (the order described above).
  __device__ WorkTile decode_tile(int idx) const {
    if constexpr (kCausal) {
      const causal::Item it = causal::item_at(*order, *group, num_m_blocks, heads, batches, idx);
      return WorkTile{it.m_block, it.head, it.batch};
    }
    if constexpr (kPartialLast) {
      // Whole tiles (m < num_m_blocks - 1) head-major, then the last tile of every head.
      const int whole = num_m_blocks - 1;
      const int first_last = whole * heads * batches;
      int bh = idx - first_last, m = whole;
      if (idx < first_last) {
        bh = idx / whole;
        m = idx - bh * whole;
      }
      const int b = bh / heads;
      return WorkTile{m, bh - b * heads, b};
    }
    const int bh = idx / num_m_blocks;
    const int m = idx - bh * num_m_blocks;
    const int b = bh / heads;
    return WorkTile{m, bh - b * heads, b};
  }
};

}  // namespace xstage::kernels::attention
