// The Mega-MoE kernel's overlapped dispatch (docs/megamoe.md "Overlapped dispatch"; build option
// XSTAGE_MEGA_OVERLAP_DISPATCH, 64 x 256 tiles): the rows of each CTA's slice are pushed by two
// warps of the producer warp group while the tile loop runs, in the order mega_prologue<true>
// left (local expert first, then owner), and each owner counts the arrived rows per local
// expert, so a Linear-1 tile waits only for its own expert's rows instead of all of them.
#pragma once
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "kernels/common/flags.cuh"
#include "kernels/common/store.cuh"
#include "kernels/moe/ep_device.cuh"
#include "kernels/moe/mega_args.hpp"
#include "kernels/moe/mega_prologue.cuh"

namespace xstage::kernels::moe {

// Warp w of the `warps` push warps (threads of them: `threads`, meeting on named barrier
// `barrier` at the end) pushes rows w, w + warps, ... of the CTA's list. After the rows of one
// expert it releases their count to the owner's arrival counter (one fence and one add per
// expert and warp; the list holds each expert's rows together). At the end the CTA's rows per
// owner go to the owners' rows flag as the undeferred prologue does, so the flag stays in step
// with rows_base whichever kernel the next call runs.
template <int kU>
__device__ __forceinline__ void mega_push_rows(const MegaMoeArgs& m, bool ok, MegaPushSmem& ps, int w, int warps, int lane,
                                               int threads, uint32_t barrier) {
  const EpMoeArgs& a = m.ep;
  const int epr = a.experts_per_rank;
  const int half = static_cast<int>(a.epoch & 1u) * epr;
  int cur = -1;    // the expert of the rows counted in n
  uint32_t n = 0;  // rows of expert cur pushed by this warp, not yet released
  auto release = [&] {
    __syncwarp();
    if (lane == 0 && n != 0u) {
      const int dst = cur / epr;
      if (dst == a.rank) asm volatile("fence.acq_rel.gpu;" ::: "memory");
      else dev::fence_sys();
      dev::add_relaxed_sys(m.arrived_at[dst] + half + cur % epr, n);
      atomicAdd(&ps.sent[dst], n);
    }
    n = 0u;
  };
  if (ok) {
    const int32_t* list = m.push_order + ps.first;
    for (int j = w; j < ps.rows; j += warps) {
      const int i = list[j];
      const int e = a.topk_experts[i];
      if (e != cur) {
        release();
        cur = e;
      }
      ep_push_row<kU>(a, i, e / epr, a.row_slot[i], lane);
      ++n;
    }
    release();
  }
  cutlass::arch::NamedBarrier::sync(threads, barrier);
  if (w == 0 && lane == 0 && ok) {
    dev::fence_sys();
    for (int p = 0; p < a.world; ++p)
      if (ps.sent[p] != 0u) dev::flag_add_release(a.rows_flag_at[p], ps.sent[p]);
  }
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
