// Cross-rank barrier with a timeout, on the team's control window. Called by one whole
// thread block on every rank with the same epoch (Team::next_epoch). Rank r announces
// epoch e by a release store into slot r of every peer's control window, then waits
// (acquire) until every peer's slot in its own window reaches e. Ordering: everything this
// block wrote before the barrier (and everything earlier kernels on the stream wrote) is
// visible to peers after they pass it.
#pragma once
#include "kernels/common/flags.cuh"
#include "kernels/common/store.cuh"
#include "xstage/team.hpp"

namespace xstage::dev {

__device__ __forceinline__ uint64_t* ctrl_slot(const TeamDevice& t, size_t offset, int peer) {
  return static_cast<uint64_t*>(t.ctrl.at(peer, offset));
}

// Returns false if it timed out (reported in t.status).
__device__ inline bool team_barrier_block(const TeamDevice& t, uint64_t epoch) {
  __syncthreads();
  __shared__ int ok;
  if (threadIdx.x == 0) {
    fence_sys();
    for (int p = 0; p < t.world; ++p)
      flag_store_release(ctrl_slot(t, CtrlLayout::kBarrierSlots + sizeof(uint64_t) * t.rank, p), epoch);
    bool good = true;
    for (int p = 0; p < t.world && good; ++p)
      good = wait_geq(ctrl_slot(t, CtrlLayout::kBarrierSlots + sizeof(uint64_t) * p, t.rank), epoch, t.status,
                      WaitId::barrier, t.rank, t.timeout_ns);
    ok = good ? 1 : 0;
  }
  __syncthreads();
  return ok != 0;
}

}  // namespace xstage::dev
