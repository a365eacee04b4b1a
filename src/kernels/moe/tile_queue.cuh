// The Mega-MoE kernel's hand-off of tile positions from the producer thread (which claims
// them) to the consumer warp groups: a small ring in shared memory with a full and an empty
// mbarrier per slot. The producer may run ahead by kDepth tiles; its TMA stages bound it
// anyway. A position < 0 ends the tile loop (kTimedOut: the producer never handed one over).
//
// Why claims go through the producer: with dynamic claiming (one atomic per tile on a
// per-call counter) the CTAs take list positions in time order, so a Linear-2 tile placed
// `lead` positions after its inputs also starts about `lead` claims after them, whatever the
// mix of short and long tiles before it. A static c, c + K, ... split lets CTAs drift apart
// in list position when tiles differ in length (docs/megamoe.md, "Tile claiming").
#pragma once
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "kernels/moe/pipeline.cuh"

namespace xstage::kernels::moe {

template <int kDepth>
struct TileQueue {
  struct Storage {
    uint64_t full[kDepth];
    uint64_t empty[kDepth];
    int pos[kDepth];
  };
  Storage* s;

  // One thread, before the CTA-wide sync that follows barrier initialisation. Every consumer
  // thread releases a slot after reading it (so no thread reads a refilled slot).
  __device__ static void init(Storage& st, int consumer_threads) {
    for (int i = 0; i < kDepth; ++i) {
      cutlass::arch::ClusterBarrier::init(&st.full[i], 1);
      cutlass::arch::ClusterBarrier::init(&st.empty[i], consumer_threads);
    }
  }
  // The producer first waits on empty slots (they start free), the consumers on full ones.
  __device__ static PipeState<kDepth> producer_start() { return PipeState<kDepth>{0, 1u}; }
  __device__ static PipeState<kDepth> consumer_start() { return PipeState<kDepth>{0, 0u}; }

  // Producer: publish the next position (mbarrier arrive orders the store before it).
  __device__ void push(PipeState<kDepth>& st, int pos) const {
    bounded_wait(&s->empty[st.index], st.phase);
    asm volatile("" ::: "memory");  // cutlass's mbarrier asm has no memory clobber
    *reinterpret_cast<volatile int*>(&s->pos[st.index]) = pos;
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(&s->full[st.index]);
    st.advance();
  }
  // Every consumer thread: the next position, or kTimedOut when none came within
  // dev::kWaitTimeoutNs (the caller traps, after its tile loop). No trap in here: a trap inside
  // the consumers' tile loop made ptxas keep their register allocation near the launch bound's
  // 168 instead of setmaxnreg's 232 (the 128 x 256 tile spilled ~1 KB; docs/megamoe.md
  // "The kernel", registers).
  static constexpr int kTimedOut = -2;
  __device__ int pop(PipeState<kDepth>& st) const {
    if (!cutlass::arch::ClusterBarrier::try_wait(&s->full[st.index], st.phase)) {
      const uint64_t t0 = dev::global_ns();
      uint32_t polls = 0;
      while (!cutlass::arch::ClusterBarrier::try_wait(&s->full[st.index], st.phase))
        if ((++polls & 1023u) == 0u && dev::global_ns() - t0 > dev::kWaitTimeoutNs) return kTimedOut;
    }
    asm volatile("" ::: "memory");
    const int pos = *reinterpret_cast<volatile int*>(&s->pos[st.index]);
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(&s->empty[st.index]);
    st.advance();
    return pos;
  }
};

}  // namespace xstage::kernels::moe
