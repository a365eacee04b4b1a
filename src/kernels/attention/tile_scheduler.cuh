// Persistent tile scheduler: grid = min(#SMs, #tiles) CTAs, each walking the tile list
// round-robin (tile i goes to CTA i % grid). A tile is one block_m-row slice of Q for one
// (head, batch). The producer and the consumer warp groups of a CTA each run their own
// copy of the scheduler and see the same sequence, so no shared state is needed.
//
// Order: the q-tile index varies fastest, then head, then batch, so the CTAs running at the
// same time share the K/V of a few heads in L2. Causal: within each head the q tiles run
// heaviest first (the last q tile sees the most keys), so long tiles start early and the
// short ones fill the tail of the schedule.
#pragma once
#include <cstdint>


namespace xstage::kernels::attention {

struct WorkTile {
  int m_block;  // q-tile index: rows [m_block*block_m, (m_block+1)*block_m)
  int head;
  int batch;
};

template <int kBlockM, bool kCausal>
struct StaticPersistentScheduler {
  int num_m_blocks;
  int heads;
  int total;

  __device__ StaticPersistentScheduler(int q_len, int heads_, int batch)
      : num_m_blocks((q_len + kBlockM - 1) / kBlockM), heads(heads_), total(num_m_blocks * heads_ * batch) {}

  __device__ int first() const { return static_cast<int>(blockIdx.x); }
  __device__ int next(int idx) const { return idx + static_cast<int>(gridDim.x); }
  __device__ bool valid(int idx) const { return idx < total; }

  __device__ WorkTile decode(int idx) const {
    const int bh = idx / num_m_blocks;
    int m = idx - bh * num_m_blocks;
    if constexpr (kCausal) m = num_m_blocks - 1 - m;
    const int b = bh / heads;
    return WorkTile{m, bh - b * heads, b};
  }
};

}  // namespace xstage::kernels::attention
