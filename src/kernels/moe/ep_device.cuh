// Device pieces of the expert-parallel MoE transport shared by the unfused kernels
// (ep_transport.cu) and the Mega-MoE kernels (mega_prologue.cuh, mega_common.cuh): routing-entry
// check, the call's count matrix and per-expert totals, the push of one row to its expert's
// owner and the origin encoding of received rows (the top-k sum: ep_reduce.cuh). Protocol in
// docs/megamoe.md.
#pragma once
#include <cstdint>

#include "kernels/common/flags.cuh"
#include "kernels/moe/ep_args.hpp"

namespace xstage::kernels::moe {

// A received row's origin: (source rank, index t * k + j among the source's rows). Rows per rank
// stay below 2^24 (validate_ep_moe).
inline constexpr int kEpOriginShift = 24;
__device__ __forceinline__ int32_t ep_origin(int src, int row) { return (src << kEpOriginShift) | row; }
__device__ __forceinline__ int ep_origin_rank(int32_t o) { return o >> kEpOriginShift; }
__device__ __forceinline__ int ep_origin_row(int32_t o) { return o & ((1 << kEpOriginShift) - 1); }

// The expert of routing entry i, or -1 after reporting an id outside [0, experts) as bad input.
__device__ __forceinline__ int ep_row_expert(const EpMoeArgs& a, int i) {
  const int e = a.topk_experts[i];
  if (e >= 0 && e < a.experts) return e;
  dev::report_bad_input(a.status, WaitId::moe_bad_expert, a.rank, uint64_t(a.experts), uint64_t(uint32_t(e)));
  return -1;
}

// Bounded wait (one thread) for every rank's counts of this call; false (reported) on timeout.
__device__ __forceinline__ bool ep_wait_counts(const EpMoeArgs& a) {
  return dev::wait_geq(a.counts_flag_at[a.rank], a.epoch * uint64_t(a.world), a.status, WaitId::moe_counts, a.rank,
                       a.timeout_ns);
}

// ep_wait_counts, then every rank's announcement of this call (its receive buffers are free).
__device__ __forceinline__ bool ep_wait_call(const EpMoeArgs& a) {
  bool good = ep_wait_counts(a);
  for (int p = 0; good && p < a.world; ++p)
    good = dev::wait_geq(&a.ready[p], a.epoch, a.status, WaitId::moe_ready, a.rank, a.timeout_ns);
  return good;
}

// This call's count matrix [P][E] (every source rank's rows per expert) in this rank's window;
// written by the peers, read through L2 after ep_wait_counts.
__device__ __forceinline__ const int32_t* ep_call_counts(const EpMoeArgs& a) {
  return a.counts_at[a.rank] + size_t(a.epoch & 1u) * a.world * a.experts;
}
// Rows of expert e over all source ranks; *before = those of source ranks below this one.
__device__ __forceinline__ int ep_expert_rows(const EpMoeArgs& a, const int32_t* cnt, int e, int* before) {
  int b = 0, total = 0;
  for (int s = 0; s < a.world; ++s) {
    const int c = __ldcg(cnt + s * a.experts + e);
    if (s < a.rank) b += c;
    total += c;
  }
  *before = b;
  return total;
}

// One warp pushes routing entry i (token i / k) to receive row `pos` of rank `dst`: the fp8 row,
// its per-128 scales, the router weight and the origin.
// kTokScales: a.x_scales holds one scale per token [T] (per-token W4A8: the fused kernel's
// prologue and the unfused layer's dispatch); only the first group of the receive scales
// ([H/128, cap], the one the per-token Linear-1 reads) is written.
template <bool kTokScales = false>
__device__ __forceinline__ void ep_push_row(const EpMoeArgs& a, int i, int dst, int pos, int lane) {
  const int t = i / a.top_k;
  const uint4* src_row = reinterpret_cast<const uint4*>(a.x + size_t(t) * a.hidden);
  uint4* dst_row = reinterpret_cast<uint4*>(a.recv_x_at[dst] + size_t(pos) * a.hidden);
  // kU loads in flight per lane before their stores: the compiler may not move a load above a
  // store that could alias it, so a plain copy loop waits one load latency per 16 bytes (profiled
  // in the Mega-MoE prologue, where 12 warps per SM push the rows; docs/megamoe.md "The kernel").
  constexpr int kU = 8;
  const int n = a.hidden / 16;
  for (int v0 = lane; v0 < n; v0 += 32 * kU) {
    uint4 r[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (v0 + 32 * u < n) r[u] = src_row[v0 + 32 * u];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (v0 + 32 * u < n) dst_row[v0 + 32 * u] = r[u];
  }
  if constexpr (kTokScales) {
    if (lane == 0) a.recv_xs_at[dst][pos] = a.x_scales[t];
  } else {
    for (int b = lane; b < a.hidden / 128; b += 32)
      a.recv_xs_at[dst][size_t(b) * a.cap + pos] = a.x_scales[size_t(b) * a.tokens + t];
  }
  if (lane == 0) {
    a.recv_w_at[dst][pos] = a.topk_weights[i];
    a.recv_src_at[dst][pos] = ep_origin(a.rank, i);
  }
}

}  // namespace xstage::kernels::moe
