// The Mega-MoE kernel's prologue, run by every CTA with all its threads before the GEMM roles
// split (docs/megamoe.md, "The kernel"): the routing histogram (each CTA its slice of the
// rows, CTA 0 sends the rank's counts to every rank), the count exchange, the receive layout,
// the push dispatch of this CTA's rows to the experts' owners, and this rank's tile layout
// (blocks and waves of its local experts) for the tile loop.
#pragma once
#include <cstdint>

#include "kernels/common/flags.cuh"
#include "kernels/common/store.cuh"
#include "kernels/moe/ep_device.cuh"
#include "kernels/moe/mega_args.hpp"
#include "xstage/mega_tile.hpp"
#include "xstage/moe_tile_order.hpp"

namespace xstage::kernels::moe {

// Scratch of the prologue only (shares shared memory with the GEMM's stage buffers).
struct MegaPrologueSmem {
  int hist[kEpMaxExperts];      // this CTA's rows per expert, then their first slot at the owner
  int pos0[kEpMaxExperts];      // where this rank's rows of expert e start at e's owner
  int excl[kEpMaxExperts + 1];  // exclusive prefix over experts of the rows all ranks send
  int before[kEpMaxExperts];    // rows of e from ranks below this one
  unsigned sent[kEpMaxRanks];
};

// This rank's tile layout; lives through the tile loop.
struct MegaLayoutSmem {
  int block_start[kMegaMaxLocalExperts + 1];
  int wave_first[kMegaMaxLocalExperts];
  int wave_last[kMegaMaxLocalExperts];
  int offset[kMegaMaxLocalExperts];  // first receive row of local expert le
  int rows[kMegaMaxLocalExperts];
  uint64_t rows_expected;            // the rows flag value once this call's rows all arrived
  int ok;                            // the prologue's cross-rank waits succeeded
};

// Exclusive prefix sum of in[0, n) into out[0, n] (out[n] = total) by warp 0; in may be out.
__device__ __forceinline__ void warp0_exclusive_scan(const int* in, int* out, int n) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  const int per = (n + 31) / 32;
  const int b = min(n, lane * per), e = min(n, b + per);
  int sum = 0;
  for (int i = b; i < e; ++i) sum += in[i];
  int incl = sum;
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  int run = incl - sum;
  const int total = __shfl_sync(0xffffffffu, incl, 31);
  for (int i = b; i < e; ++i) {
    const int v = in[i];
    out[i] = run;
    run += v;
  }
  if (lane == 0) out[n] = total;
}

// Returns with ly filled (ly.ok = 0 if a cross-rank wait gave up). All threads of the CTA.
// block_m: rows of an m-block (the tile height, xstage/mega_tile.hpp); fold: its tails fold
// (mega_blocks; 0 for every kernel but the per-token one built with it).
// kTokScales: x's scales are per token (ep_push_row).
template <bool kTokScales = false>
__device__ __forceinline__ void mega_prologue(MegaMoeArgs const& m, MegaPrologueSmem& ps, MegaLayoutSmem& ly,
                                              int n1, int block_m, int fold = 0) {
  const EpMoeArgs& a = m.ep;
  const int tid = threadIdx.x, nthr = blockDim.x, cta = blockIdx.x, grid = gridDim.x;
  const int parity = static_cast<int>(a.epoch & 1u);
  const int E = a.experts, epr = a.experts_per_rank;
  const int rows = a.tokens * a.top_k;
  const int chunk = (rows + grid - 1) / grid;
  const int r0 = min(rows, cta * chunk), r1 = min(rows, r0 + chunk);

  if (cta == 0 && tid == 0)
    for (int p = 0; p < a.world; ++p) dev::flag_store_release(a.ready_at_peer[p], a.epoch);
  // Next call's halves start at zero (this call's other half was last used by the previous,
  // finished, call).
  for (int i = cta * nthr + tid; i < E; i += grid * nthr) m.hist[(1 - parity) * E + i] = 0;
  for (int i = cta * nthr + tid; i < m.max_blocks; i += grid * nthr) m.l1_done[(1 - parity) * m.max_blocks + i] = 0u;
  if (cta == 0 && tid == 0) m.tile_next[1 - parity] = 0u;
  // This call's quantisation claims (per-token kernel only) start at zero: zeroed here, before
  // this CTA's histogram share is released, so before any CTA has the layout and its tiles; not
  // "the other half for the next call", since the next call on the layer may be another kernel's.
  if constexpr (kTokScales)
    for (int i = cta * nthr + tid; i < m.max_blocks; i += grid * nthr) m.h_qclaim[i] = 0u;
  for (int e = tid; e < E; e += nthr) ps.hist[e] = 0;
  if (tid < kEpMaxRanks) ps.sent[tid] = 0u;
  __syncthreads();

  // 1. Histogram of this CTA's rows; a row's slot among the CTA's rows of its expert.
  for (int i = r0 + tid; i < r1; i += nthr) {
    const int e = ep_row_expert(a, i);
    a.row_slot[i] = e < 0 ? -1 : atomicAdd(&ps.hist[e], 1);
  }
  __syncthreads();
  // The CTA's first slot among the rank's rows of e.
  for (int e = tid; e < E; e += nthr)
    if (ps.hist[e] > 0) ps.hist[e] = atomicAdd(&m.hist[parity * E + e], ps.hist[e]);
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    dev::add_release_gpu(m.hist_done, 1u);
  }

  // 2. CTA 0: once every CTA added its share, the rank's counts go to every rank.
  if (cta == 0) {
    __shared__ int hist_ok;
    if (tid == 0)
      hist_ok = dev::wait_geq_gpu(m.hist_done, static_cast<uint32_t>(a.epoch) * static_cast<uint32_t>(grid), a.status,
                                  WaitId::moe_histogram, a.rank, a.timeout_ns);
    __syncthreads();
    if (hist_ok) {
      for (int p = 0; p < a.world; ++p) {
        int32_t* dst = a.counts_at[p] + (size_t(parity) * a.world + a.rank) * E;
        for (int e = tid; e < E; e += nthr) dst[e] = __ldcg(m.hist + parity * E + e);
      }
      __syncthreads();
      if (tid == 0) {
        dev::fence_sys();
        for (int p = 0; p < a.world; ++p) dev::flag_add_release(a.counts_flag_at[p], 1);
      }
    }
  }

  // 3. Every rank's counts and announcement; the receive layout.
  if (tid == 0) {
    ly.ok = ep_wait_call(a);
  }
  __syncthreads();
  if (!ly.ok) return;
  const int32_t* cnt = ep_call_counts(a);
  for (int e = tid; e < E; e += nthr) ps.pos0[e] = ep_expert_rows(a, cnt, e, &ps.before[e]);  // staged for the scan
  __syncthreads();
  warp0_exclusive_scan(ps.pos0, ps.excl, E);
  __syncthreads();
  for (int e = tid; e < E; e += nthr) ps.pos0[e] = ps.excl[e] - ps.excl[(e / epr) * epr] + ps.before[e];
  // This rank's experts: rows, receive offsets, m-blocks.
  const int e0 = a.rank * epr;
  for (int le = tid; le < epr; le += nthr) {
    const int n = ps.excl[e0 + le + 1] - ps.excl[e0 + le];
    ly.rows[le] = n;
    ly.offset[le] = ps.excl[e0 + le] - ps.excl[e0];
    ly.wave_first[le] = ::xstage::moe::mega_blocks(n, block_m, fold);  // staged for the scan
  }
  __syncthreads();
  warp0_exclusive_scan(ly.wave_first, ly.block_start, epr);
  __syncthreads();
  for (int le = tid; le < epr; le += nthr)
    ::xstage::moe::wave_bounds(ly.block_start, epr, n1, grid, le, &ly.wave_first[le], &ly.wave_last[le]);
  const uint64_t base = m.rows_base[parity];
  const int my_rows = ps.excl[e0 + epr] - ps.excl[e0];
  if (tid == 0) {
    ly.rows_expected = base + uint64_t(my_rows);
    if (cta == 0) m.rows_base[1 - parity] = base + uint64_t(my_rows);
  }

  // 4. Dispatch: a warp per row, to the owner's receive row pos0[e] + slot.
  const int lane = tid % 32, warps = nthr / 32;
  for (int i = r0 + tid / 32; i < r1; i += warps) {
    const int slot = a.row_slot[i];
    if (slot < 0) continue;
    const int e = a.topk_experts[i];
    const int dst = e / epr;
    ep_push_row<kTokScales>(a, i, dst, ps.pos0[e] + ps.hist[e] + slot, lane);
    if (lane == 0) atomicAdd(&ps.sent[dst], 1u);
  }
  __syncthreads();
  if (tid == 0) {
    dev::fence_sys();
    for (int p = 0; p < a.world; ++p)
      if (ps.sent[p] != 0u) dev::flag_add_release(a.rows_flag_at[p], ps.sent[p]);
  }
  // The prologue scratch is the GEMM's stage memory from here on, written by TMA (the async
  // proxy): order this thread's generic writes to it first.
  dev::fence_proxy_async_smem();
  __syncthreads();
}

}  // namespace xstage::kernels::moe
