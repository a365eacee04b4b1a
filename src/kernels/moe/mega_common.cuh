// What the Mega-MoE kernels of both weight formats share around their GEMM roles
// (docs/megamoe.md "The kernel"): decoding a list position into a work tile, the producer's
// tile slots, the per-tile trace record, and the publish + reduce after the tile loop.
// Included by mega_kernel.cuh (W8A8), mega_w4a8_kernel.cuh (W4A8, row layout) and
// mega_w4a8_rs_kernel.cuh and mega_w4a8_tok_kernel.cuh (W4A8, register operand).
#pragma once
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "kernels/common/clock.cuh"
#include "kernels/moe/ep_device.cuh"
#include "kernels/moe/ep_reduce.cuh"
#include "kernels/moe/mega_args.hpp"
#include "kernels/moe/mega_prologue.cuh"
#include "kernels/moe/tile_queue.cuh"
#include "kernels/moe/tile_scheduler.cuh"
#include "xstage/moe_tile_order.hpp"

namespace xstage::kernels::moe {

// Tile slots (docs/megamoe.md "The kernel"). The producer, which decodes every claimed
// position anyway, leaves the decoded tile in a ring of kMegaTileSlots slots; the consumers
// (and the W8A8 scale warp) read it instead of decoding the position again (binary searches and
// integer divisions). Slot k % 8 of push k is rewritten only by push k + 8, which needs every
// queue reader to have popped k + 4 (a 4-deep queue), i.e. finished tile k + 3.
struct MegaTileSlot {
  WorkTile t;
  int is_l1;
};
inline constexpr int kMegaTileSlots = 8;
// Static shared variables the Mega-MoE kernels may declare (trace clocks, publish and reduce
// flags, the prologue's): the dynamic request must leave them room.
inline constexpr int kMegaStaticSmem = 256;
inline constexpr int kMegaQueueDepth = 4;
static_assert(kMegaTileSlots >= 2 * kMegaQueueDepth, "a slot outlives every reader of its tile");

// The tile order of this call (moe_tile_order.hpp), from the parameters and the layout.
__device__ __forceinline__ ::xstage::moe::TileOrder mega_order(const MegaMoeArgs& m, int n1, int n2,
                                                             MegaLayoutSmem const& ly) {
  ::xstage::moe::TileOrder o;
  o.kind = static_cast<::xstage::moe::OrderKind>(m.order);
  o.experts = m.ep.experts_per_rank;
  o.block_start = ly.block_start;
  o.wave_first = ly.wave_first;
  o.wave_last = ly.wave_last;
  o.n1 = n1;
  o.n2 = n2;
  o.l1_per_l2 = m.l1_per_l2;
  o.lead = m.lead;
  ::xstage::moe::set_tail_tiles(o, m.tail_l2);
  return o;
}

// List position -> the GEMM's work tile (tag: the block for Linear-1, the Linear-2 index).
// The order is rebuilt from the parameters and shared memory at every call so that nothing
// of it stays live in registers across the mainloop.
// kFold: the blocks' tails fold (xstage::moe::mega_blocks; the prologue's layout used the same).
template <int kBlockM, int kFold = 0>
__device__ __forceinline__ WorkTile mega_work_tile(const MegaMoeArgs& m, int n1, int n2, MegaLayoutSmem const& ly,
                                                   int pos, bool& is_l1) {
  const ::xstage::moe::TileOrder o = mega_order(m, n1, n2, ly);
  const ::xstage::moe::OrderedTile ot = ::xstage::moe::tile_at(o, pos);
  const int e = ::xstage::moe::expert_of_block(o, ot.block);
  const int mb = ot.block - ly.block_start[e];
  WorkTile t;
  t.expert = e;
  t.m_block = mb;
  t.n_block = ot.n_block;
  t.row_begin = ly.offset[e] + mb * kBlockM;
  t.rows = ::xstage::moe::mega_block_rows(ly.rows[e], mb, kBlockM, kFold);
  is_l1 = ot.kind == 1;
  t.tag = is_l1 ? ot.block : ot.block * o.n2 + ot.n_block;
  return t;
}

// The producer's gate before it hands a tile over (both waits bounded): a Linear-1 tile waits
// until every row this rank computes arrived (once per call, rows_here), a Linear-2 tile until
// its block's Linear-1 count reached l1_target; then fence.proxy.async so TMA sees the data.
__device__ __forceinline__ void mega_wait_inputs(const MegaMoeArgs& m, MegaLayoutSmem const& ly, uint32_t* l1_done,
                                                 bool is_l1, int tag, int n2, uint32_t l1_target, bool& rows_here) {
  const EpMoeArgs& a = m.ep;
  if (is_l1) {
    if (!rows_here) {
      // Every row this rank computes arrived (remote pushes, released per CTA).
      dev::wait_geq(a.rows_flag_at[a.rank], ly.rows_expected, a.status, WaitId::moe_rows, a.rank, a.timeout_ns);
      dev::fence_proxy_async_global();
      rows_here = true;
    }
  } else {
    // All n1 Linear-1 tiles of the block, every epilogue piece of each (mega_tile.hpp).
    dev::wait_geq_gpu(l1_done + tag / n2, l1_target, a.status, WaitId::moe_linear1, a.rank, a.timeout_ns);
    dev::fence_proxy_async_global();
  }
}

// The CTA's start stamp (clock64 and globaltimer) for the phase breakdown, when asked for.
__device__ __forceinline__ void mega_stamp_start(const MegaMoeArgs& m) {
  if (m.cta_clock != nullptr && threadIdx.x == 0) {
    m.cta_clock[blockIdx.x * kMegaClockWords + 0] = clock64();
    m.cta_clock[blockIdx.x * kMegaClockWords + 1] = dev::global_ns();
  }
}

// The producer thread's i-th claim (docs/megamoe.md "Tile claiming"): the next list position
// (dynamic: one atomic, in time order; static: c, c + K, ...), decoded, gated on its inputs
// (mega_wait_inputs; the wait goes into trace word 4), left in tile slot i, then handed over to
// the queue's readers — only now, so they may read the tile's in-kernel-written scales (x pushed
// by peers, h by other CTAs) as soon as they have the position. False, after pushing the end
// (-1), once the list is exhausted. The register-operand kernels call it; the W8A8 and row-layout
// W4A8 kernels keep the same steps inline: calling this instead moved ptxas's instruction
// schedule of those measured kernels, their K loops included (tools/sass_diff.py, session 38).
template <int kBlockM, int kFold, class Queue, class QueueState>
__device__ __forceinline__ bool mega_claim_tile(const MegaMoeArgs& m, MegaLayoutSmem const& ly, int n1, int n2,
                                                int total, int parity, uint32_t* l1_done, uint32_t l1_target, int i,
                                                bool& rows_here, MegaTileSlot* slots, Queue const& queue,
                                                QueueState& qs, WorkTile& t, bool& is_l1, int& pos) {
#ifdef XSTAGE_MEGA_PRODUCER_TRACE
  const uint64_t claim_clk = clock64();
#endif
  pos = m.dynamic_claim ? static_cast<int>(atomicAdd(m.tile_next + parity, 1u))
                                  : static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x);
  if (pos >= total) {
    queue.push(qs, -1);
    return false;
  }
  t = mega_work_tile<kBlockM, kFold>(m, n1, n2, ly, pos, is_l1);
  const uint64_t w0 = m.trace != nullptr ? clock64() : 0;
  mega_wait_inputs(m, ly, l1_done, is_l1, t.tag, n2, l1_target, rows_here);
  if (m.trace != nullptr) m.trace[size_t(pos) * kMegaTraceWords + 4] = static_cast<uint32_t>(clock64() - w0);
  slots[i & (kMegaTileSlots - 1)] = MegaTileSlot{t, is_l1 ? 1 : 0};  // before the push that publishes it
#ifdef XSTAGE_MEGA_PRODUCER_TRACE
  if (m.trace != nullptr) {
    const uint64_t base = m.cta_clock[blockIdx.x * kMegaClockWords + 0];  // this thread's own start stamp
    m.trace[size_t(pos) * kMegaTraceWords + 8] = static_cast<uint32_t>(claim_clk - base);
    m.trace[size_t(pos) * kMegaTraceWords + 9] = static_cast<uint32_t>(clock64() - base);
  }
#endif
  queue.push(qs, pos);
  return true;
}

// This call's tile list once the prologue is done: total positions (0 when a cross-rank wait gave
// up: nothing to compute), the call's parity and its half of the Linear-1 counters.
struct MegaCallTiles {
  bool ok;
  int total;
  int parity;
  uint32_t* l1_done;
};
__device__ __forceinline__ MegaCallTiles mega_call_tiles(const MegaMoeArgs& m, MegaLayoutSmem const& ly, int n1,
                                                         int n2) {
  MegaCallTiles c;
  c.ok = ly.ok != 0;
  c.total = c.ok ? ly.block_start[m.ep.experts_per_rank] * (n1 + n2) : 0;
  c.parity = static_cast<int>(m.ep.epoch & 1u);
  c.l1_done = m.l1_done + c.parity * m.max_blocks;
  return c;
}

// The producer thread's whole list (the register-operand kernels): every claim of
// mega_claim_tile in turn, produce(t, is_l1, pos) loading each tile's K blocks, until the end is
// pushed.
template <int kBlockM, int kFold, class Queue, class Produce>
__device__ __forceinline__ void mega_produce_all(const MegaMoeArgs& m, MegaLayoutSmem const& ly, int n1, int n2,
                                                 MegaCallTiles const& c, uint32_t l1_target, MegaTileSlot* slots,
                                                 Queue const& queue, Produce&& produce) {
  auto qs = Queue::producer_start();
  bool rows_here = false;
  for (int i = 0;; ++i) {
    WorkTile t;
    bool is_l1;
    int pos;
    if (!mega_claim_tile<kBlockM, kFold>(m, ly, n1, n2, c.total, c.parity, c.l1_done, l1_target, i, rows_here, slots, queue,
                                  qs, t, is_l1, pos))
      break;
    produce(t, is_l1, pos);
#ifdef XSTAGE_MEGA_PRODUCER_TRACE
    if (m.trace != nullptr)
      m.trace[size_t(pos) * kMegaTraceWords + 10] =
          static_cast<uint32_t>(clock64() - m.cta_clock[blockIdx.x * kMegaClockWords + 0]);
#endif
  }
}

// The tile trace record of list position pos (consumers' first thread): words 0-3 and 6-7,
// and word 5 unless the store warps write it (with_tail false).
__device__ __forceinline__ void mega_trace_tile(const MegaMoeArgs& m, int pos, bool is_l1, uint64_t c0, uint64_t c1,
                                                bool with_tail) {
  uint32_t* tr = m.trace + size_t(pos) * kMegaTraceWords;
  tr[0] = blockIdx.x | (static_cast<uint32_t>(is_l1 ? 1 : 2) << 16);
  tr[1] = static_cast<uint32_t>(c0 - m.cta_clock[blockIdx.x * kMegaClockWords + 0]);
  tr[2] = static_cast<uint32_t>(c1 - c0);
  tr[3] = static_cast<uint32_t>(clock64() - c1);
  // Written by this thread's hooks during the epilogue (a Linear-2 tile's store tail, with
  // the store warps: by them).
  if (with_tail) tr[5] = m.trace_hook[blockIdx.x];
  tr[6] = is_l1 ? m.trace_hook[gridDim.x + blockIdx.x] - static_cast<uint32_t>(c1) : 0u;
  tr[7] = is_l1 ? m.trace_hook[2 * gridDim.x + blockIdx.x] - static_cast<uint32_t>(c1) : 0u;
}

// After the tile loop, the 256 consumer threads (ct) and, through the publish barrier, any
// other thread that stored combine rows (publish_threads in all):
// Publish: this CTA's combine stores are done; the rank's last CTA tells each owner how many
// (row, 128-column) pieces it sent there (the whole rank's, from the counts).
// Reduce: wait for all (row, 128-column) pieces of this rank's T * k rows, then sum them.
__device__ __forceinline__ void mega_publish_and_reduce(const MegaMoeArgs& m, bool ok, int ct, int publish_threads,
                                                        uint32_t publish_barrier, uint32_t consumers_barrier) {
  const EpMoeArgs& a = m.ep;
  asm volatile("" ::: "memory");
  cutlass::arch::NamedBarrier::sync(publish_threads, publish_barrier);
  __shared__ int last_cta;
  if (ct == 0) {
    dev::fence_sys();
    const uint32_t before = atomicAdd(m.ctas_done, 1u);
    last_cta = before + 1u == static_cast<uint32_t>(a.epoch) * gridDim.x;
    if (last_cta) {
      __threadfence();
      const int E = a.experts, epr = a.experts_per_rank;
      const int32_t* cnt = ep_call_counts(a);
      for (int s = 0; s < a.world; ++s) {
        uint64_t rows = 0;
        if (ok)
          for (int le = 0; le < epr; ++le) rows += uint64_t(__ldcg(cnt + s * E + a.rank * epr + le));
        dev::flag_add_release(a.combine_flag_at[s], rows * uint64_t(a.hidden / 128));
      }
    }
  }

  __shared__ int comb_ok;
  if (ct == 0)
    comb_ok = dev::wait_geq(a.combine_flag_at[a.rank], a.epoch * uint64_t(a.tokens) * a.top_k * uint64_t(a.hidden / 128),
                            a.status, WaitId::moe_combine, a.rank, a.timeout_ns);
  cutlass::arch::NamedBarrier::sync(256, consumers_barrier);
  if (m.cta_clock != nullptr && ct == 0) m.cta_clock[blockIdx.x * kMegaClockWords + 4] = clock64();
  if (comb_ok) ep_reduce(a, static_cast<long long>(blockIdx.x) * 256 + ct, static_cast<long long>(gridDim.x) * 256);
  if (m.cta_clock != nullptr && ct == 0) {
    m.cta_clock[blockIdx.x * kMegaClockWords + 2] = clock64();
    m.cta_clock[blockIdx.x * kMegaClockWords + 3] = dev::global_ns();
  }
}

// The consumers' whole list (the register-operand kernels; the 256 consumer threads, ct): each
// handed-over position's tile, copied from its slot, through tile(t, is_l1, mainloop_done) —
// which calls mainloop_done() when its main loop ends (the trace's clock) —, the tile's trace
// record, then after the end the publish and reduce (mega_publish_and_reduce, barrier for both).
// A hand-over that timed out traps: the producer never handed a tile over, a bug (pipeline.cuh).
// The W8A8 and row-layout W4A8 kernels keep these steps inline (their measured SASS).
// With kStoreWarps (the per-token kernel's Linear-2 store warps): tile(t, is_l1, mainloop_done,
// pos) returns whether the trace's store tail is the consumers' (false: the store warps write
// it), finish() runs after the last tile (the store warps' "no more"), and the publish barrier
// `publish_barrier` counts publish_threads (the consumers and the store warps).
struct MegaNothing {
  __device__ void operator()() const {}
};
template <bool kStoreWarps = false, class Queue, class Tile, class Finish = MegaNothing>
__device__ __forceinline__ void mega_consume_all(const MegaMoeArgs& m, MegaTileSlot const* slots, Queue const& queue,
                                                 int ct, bool ok, uint32_t barrier, Tile&& tile,
                                                 Finish&& finish = MegaNothing{}, int publish_threads = 256,
                                                 uint32_t publish_barrier = 0) {
  auto qs = Queue::consumer_start();
  int pos;
  // The trace's clocks of the consumers' first thread, in shared memory (not live in registers
  // across the main loop).
  __shared__ uint64_t trace_c0, trace_c1;
  for (int k = 0;; ++k) {
    pos = queue.pop(qs);
    if (pos < 0) break;
    if (m.trace != nullptr && ct == 0) trace_c0 = clock64();
    const MegaTileSlot& sl = slots[k & (kMegaTileSlots - 1)];
    const WorkTile t = sl.t;
    const bool is_l1 = sl.is_l1 != 0;
    auto done = [&] {
      if (m.trace != nullptr && ct == 0) trace_c1 = clock64();
    };
    bool with_tail = true;
    if constexpr (kStoreWarps) with_tail = tile(t, is_l1, done, pos);
    else tile(t, is_l1, done);
    if (m.trace != nullptr && ct == 0) mega_trace_tile(m, pos, is_l1, trace_c0, trace_c1, with_tail);
  }
  if (pos == Queue::kTimedOut) __trap();
  finish();
  mega_publish_and_reduce(m, ok, ct, publish_threads, kStoreWarps ? publish_barrier : barrier, barrier);
}

}  // namespace xstage::kernels::moe
