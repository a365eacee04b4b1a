// The Mega-MoE kernel's overlapped dispatch (docs/megamoe.md "Overlapped dispatch"; build option
// XSTAGE_MEGA_OVERLAP_DISPATCH): the rows of each CTA's slice are pushed by warps 2-3 of the
// producer warp group while the tile loop runs (64 x 256: nothing else to do; 128 x 256: between
// the Linear-2 copy-outs, which come first), in the order mega_prologue<true> left (local expert
// first, then owner), and each owner counts the arrived rows per local expert, so a Linear-1
// tile waits only for its own expert's rows instead of all of them.
#pragma once
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "kernels/common/flags.cuh"
#include "kernels/common/store.cuh"
#include "kernels/moe/ep_device.cuh"
#include "kernels/moe/mega_args.hpp"
#include "kernels/moe/mega_prologue.cuh"

namespace xstage::kernels::moe {

// Push warp w (of kMegaPushWarps) pushes rows w, w + kMegaPushWarps, ... of the CTA's list, one
// per push_one(); its state lives in MegaPushSmem. After the rows of one expert it releases
// their count to the owner's arrival counter (one fence and one add per expert and warp; the
// list holds each expert's rows together). finish() releases the rest and, once both push warps
// are done (named barrier), adds the CTA's rows per owner to the owners' rows flag as the
// undeferred prologue does, so the flag stays in step with rows_base whichever kernel the next
// call runs.
template <int kU>
struct MegaPusher {
  const MegaMoeArgs& m;
  MegaPushSmem* ps;  // null in kernels without the overlapped dispatch (then never used)
  const int w, lane;

  // Rows left for this warp (ok: the prologue's cross-rank waits succeeded).
  __device__ bool more(bool ok) const { return ok && ps->next[w] < ps->rows; }

  __device__ void release() const {
    const EpMoeArgs& a = m.ep;
    __syncwarp();
    const uint32_t n = ps->pending[w];
    if (lane == 0 && n != 0u) {
      const int epr = a.experts_per_rank;
      const int cur = ps->cur[w];
      const int dst = cur / epr;
      if (dst == a.rank) asm volatile("fence.acq_rel.gpu;" ::: "memory");
      else dev::fence_sys();
      dev::add_relaxed_sys(m.arrived_at[dst] + static_cast<int>(a.epoch & 1u) * epr + cur % epr, n);
      atomicAdd(&ps->sent[dst], n);
      ps->pending[w] = 0u;
    }
    __syncwarp();
  }

  __device__ void push_one() const {
    const EpMoeArgs& a = m.ep;
    const int j = ps->next[w];
    const int i = m.push_order[ps->first + j];
    const int e = a.topk_experts[i];
    if (e != ps->cur[w]) {
      release();
      if (lane == 0) ps->cur[w] = e;
    }
    ep_push_row<kU>(a, i, e / a.experts_per_rank, a.row_slot[i], lane);
    if (lane == 0) {
      ps->pending[w] += 1u;
      ps->next[w] = j + kMegaPushWarps;
    }
    __syncwarp();
  }

  // Both push warps call it once, after their last rows (barrier: a CUTLASS named barrier id).
  __device__ void finish(bool ok, uint32_t barrier) const {
    release();
    cutlass::arch::NamedBarrier::sync(32 * kMegaPushWarps, barrier);
    if (w == 0 && lane == 0 && ok) {
      dev::fence_sys();
      for (int p = 0; p < m.ep.world; ++p)
        if (ps->sent[p] != 0u) dev::flag_add_release(m.ep.rows_flag_at[p], ps->sent[p]);
    }
  }
};

// Push warps with nothing else to do (the 64 x 256 kernel's warps 2-3): every row, then finish.
template <int kU>
__device__ __forceinline__ void mega_push_rows(const MegaMoeArgs& m, bool ok, MegaPushSmem& ps, int w, int lane,
                                               uint32_t barrier) {
  const MegaPusher<kU> pu{m, &ps, w, lane};
  while (pu.more(ok)) pu.push_one();
  pu.finish(ok, barrier);
}

// OR of v over the `threads` threads meeting on CUTLASS named barrier `id` (user numbering): one
// barrier with a reduction, so that they all take the same branch after it.
__device__ __forceinline__ bool named_barrier_or(uint32_t id, uint32_t threads, bool v) {
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 q, %1, 0;\n barrier.cta.red.or.pred p, %2, %3, q;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(v)), "r"(id + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount), "r"(threads)
      : "memory");
  return r != 0u;
}

// The producer's gate of a Linear-1 tile of local expert le (deferred push): every row of le
// arrived from every rank, then fence.proxy.async so TMA sees them. ready_le: the expert this
// CTA last waited for (its Linear-1 tiles come in expert order, so one wait per expert).
__device__ __forceinline__ void mega_wait_expert_rows(const MegaMoeArgs& m, MegaLayoutSmem const& ly, int le,
                                                      int& ready_le) {
  if (le == ready_le) return;
  const EpMoeArgs& a = m.ep;
  const int half = static_cast<int>(a.epoch & 1u) * a.experts_per_rank;
  dev::wait_geq_sys(m.arrived_at[a.rank] + half + le, static_cast<uint32_t>(ly.rows[le]), a.status,
                    WaitId::moe_expert_rows, a.rank, a.timeout_ns);
  dev::fence_proxy_async_global();
  ready_le = le;
}

}  // namespace xstage::kernels::moe
