// Expert-parallel MoE transport over symmetric memory (docs/megamoe.md, "Unfused
// expert-parallel layer"): counts, dispatch (push), owner layout, combine (push), top-k sum.
// Every cross-GPU wait is bounded (dev::wait_geq) and reports through the team's status.
#include <cuda_runtime.h>

#include "kernels/common/flags.cuh"
#include "kernels/common/store.cuh"
#include "kernels/moe/ep_device.cuh"
#include "kernels/moe/ep_reduce.cuh"
#include "kernels/moe/ep_transport.hpp"

namespace xstage::kernels::moe {
namespace {

// K1, one block: announce, histogram with per-row slots, counts to every rank.
__global__ void __launch_bounds__(1024) ep_counts_kernel(EpMoeArgs a) {
  __shared__ int hist[kEpMaxExperts];
  if (threadIdx.x == 0)
    for (int p = 0; p < a.world; ++p) dev::flag_store_release(a.ready_at_peer[p], a.epoch);
  for (int e = threadIdx.x; e < a.experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int rows = a.tokens * a.top_k;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    // A bad expert id is reported (the host's check turns it into an error); the row is not
    // sent, so this call's waits for it give up once they see the report.
    const int e = ep_row_expert(a, i);
    a.row_slot[i] = e < 0 ? -1 : atomicAdd(&hist[e], 1);
  }
  __syncthreads();
  const int parity = static_cast<int>(a.epoch & 1u);
  for (int p = 0; p < a.world; ++p) {
    int32_t* dst = a.counts_at[p] + (size_t(parity) * a.world + a.rank) * a.experts;
    for (int e = threadIdx.x; e < a.experts; e += blockDim.x) dst[e] = hist[e];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    dev::fence_sys();
    for (int p = 0; p < a.world; ++p) dev::flag_add_release(a.counts_flag_at[p], 1);
  }
}

// K2: rows to their experts' owners, a warp per row. kTokScales: x's scales are per token [T]
// (per-token activations): one float per row goes into the first group of the receive scales.
template <bool kTokScales>
__device__ __forceinline__ void ep_dispatch(const EpMoeArgs& a) {
  __shared__ int pos0[kEpMaxExperts];   // where this rank's rows of expert e start at its owner
  __shared__ int total[kEpMaxExperts];  // rows of expert e over all source ranks
  __shared__ unsigned sent[kEpMaxRanks];
  __shared__ int ok;
  if (threadIdx.x == 0) {
    ok = ep_wait_call(a);
    for (int p = 0; p < kEpMaxRanks; ++p) sent[p] = 0;
  }
  __syncthreads();
  if (!ok) return;
  // Owner o's receive rows: its experts in order, each expert's rows by source rank. The
  // per-expert sums are read in parallel; one thread runs the (shared-memory) prefix.
  const int32_t* cnt = ep_call_counts(a);
  for (int e = threadIdx.x; e < a.experts; e += blockDim.x) total[e] = ep_expert_rows(a, cnt, e, &pos0[e]);
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int e = 0; e < a.experts; ++e) {
      if (e % a.experts_per_rank == 0) run = 0;
      pos0[e] += run;
      run += total[e];
    }
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  const int rows = a.tokens * a.top_k;
  for (int i = blockIdx.x * warps + threadIdx.x / 32; i < rows; i += gridDim.x * warps) {
    const int slot = a.row_slot[i];
    if (slot < 0) continue;  // a bad expert id (reported by the counts kernel)
    const int e = a.topk_experts[i];
    const int dst = e / a.experts_per_rank;
    ep_push_row<kTokScales>(a, i, dst, pos0[e] + slot, lane);
    if (lane == 0) atomicAdd(&sent[dst], 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    dev::fence_sys();
    for (int p = 0; p < a.world; ++p)
      if (sent[p] != 0u) dev::flag_add_release(a.rows_flag_at[p], sent[p]);
  }
}
__global__ void __launch_bounds__(256) ep_dispatch_kernel(EpMoeArgs a) { ep_dispatch<false>(a); }
__global__ void __launch_bounds__(256) ep_dispatch_tok_kernel(EpMoeArgs a) { ep_dispatch<true>(a); }

// K3, one block: local experts' counts and offsets, then wait for all of this call's rows.
__global__ void __launch_bounds__(256) ep_layout_kernel(EpMoeArgs a) {
  if (threadIdx.x != 0) return;
  if (!ep_wait_counts(a)) return;
  const int32_t* cnt = ep_call_counts(a);
  int run = 0;
  for (int le = 0; le < a.experts_per_rank; ++le) {
    int before = 0;
    const int total = ep_expert_rows(a, cnt, a.rank * a.experts_per_rank + le, &before);
    a.expert_counts[le] = total;
    a.expert_offsets[le] = run;
    run += total;
  }
  const uint64_t expected = *a.rows_expected + uint64_t(run);
  *a.rows_expected = expected;
  dev::wait_geq(a.rows_flag_at[a.rank], expected, a.status, WaitId::moe_rows, a.rank, a.timeout_ns);
}

// K4: every received row's output to its token's owner, a warp per row.
__global__ void __launch_bounds__(256) ep_combine_kernel(EpMoeArgs a) {
  __shared__ unsigned sent[kEpMaxRanks];
  __shared__ int total;
  if (threadIdx.x == 0) {
    int t = 0;
    for (int le = 0; le < a.experts_per_rank; ++le) t += a.expert_counts[le];
    total = t;
    for (int p = 0; p < kEpMaxRanks; ++p) sent[p] = 0;
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  const int vecs = a.hidden * 2 / 16;
  // The receive buffer is read after ep_layout_kernel's acquire (earlier on this stream).
  const int32_t* recv_src = a.recv_src_at[a.rank];
  for (int i = blockIdx.x * warps + threadIdx.x / 32; i < total; i += gridDim.x * warps) {
    const int32_t origin = recv_src[i];
    const int src = ep_origin_rank(origin);
    const int r = ep_origin_row(origin);
    const uint4* y_row = reinterpret_cast<const uint4*>(a.y + size_t(i) * a.hidden);
    uint4* dst = reinterpret_cast<uint4*>(a.combine_at[src] + size_t(r) * a.hidden);
    for (int v = lane; v < vecs; v += 32) dst[v] = y_row[v];
    if (lane == 0) atomicAdd(&sent[src], 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    dev::fence_sys();
    for (int p = 0; p < a.world; ++p)
      if (sent[p] != 0u) dev::flag_add_release(a.combine_flag_at[p], sent[p]);
  }
}

// K5: out[t] = sum over the token's k combined rows (fp32), rounded to bf16.
__global__ void __launch_bounds__(256) ep_reduce_kernel(EpMoeArgs a) {
  __shared__ int ok;
  if (threadIdx.x == 0)
    ok = dev::wait_geq(a.combine_flag_at[a.rank], a.epoch * uint64_t(a.tokens) * a.top_k, a.status,
                       WaitId::moe_combine, a.rank, a.timeout_ns);
  __syncthreads();
  if (!ok) return;
  ep_reduce(a, blockIdx.x * (long long)blockDim.x + threadIdx.x, (long long)gridDim.x * blockDim.x);
}

}  // namespace

cudaError_t ep_launch_counts(const EpMoeArgs& a, cudaStream_t s) {
  if (a.experts > kEpMaxExperts || a.world > kEpMaxRanks) return cudaErrorInvalidValue;
  ep_counts_kernel<<<1, 1024, 0, s>>>(a);
  return cudaGetLastError();
}
cudaError_t ep_launch_dispatch(const EpMoeArgs& a, int ctas, cudaStream_t s, bool token_scales) {
  if (token_scales) ep_dispatch_tok_kernel<<<ctas, 256, 0, s>>>(a);
  else ep_dispatch_kernel<<<ctas, 256, 0, s>>>(a);
  return cudaGetLastError();
}
cudaError_t ep_launch_layout(const EpMoeArgs& a, cudaStream_t s) {
  ep_layout_kernel<<<1, 32, 0, s>>>(a);
  return cudaGetLastError();
}
cudaError_t ep_launch_combine(const EpMoeArgs& a, int ctas, cudaStream_t s) {
  ep_combine_kernel<<<ctas, 256, 0, s>>>(a);
  return cudaGetLastError();
}
cudaError_t ep_launch_reduce(const EpMoeArgs& a, int ctas, cudaStream_t s) {
  ep_reduce_kernel<<<ctas, 256, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace xstage::kernels::moe
