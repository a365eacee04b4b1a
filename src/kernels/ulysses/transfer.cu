// The Ulysses kernels that are not attention: the comm-sm tile copier, the serial path's
// permutation.
#include <cuda_runtime.h>

#include "kernels/common/flags.cuh"
#include "kernels/ulysses/destinations.cuh"
#include "kernels/ulysses/launch.hpp"

namespace xstage::kernels::ulysses {
namespace {

constexpr int kCopierThreads = 256;

// The copier CTAs run on SMs the attention leaves free. Every warp works on its own
// slices - warp w of CTA c takes slices (c * warps + w) + k * (grid * warps), roughly the
// order the attention finishes them in - so several slices are in flight per SM: the wait
// for a slice's flag and the copy of another overlap. A warp waits for the slice's flag,
// copies its rows to their owner, and publishes rows in batches: the system-scope fence
// before a counter update waits for the warp's stores to land, so it runs only when the
// warp's next slice is not ready yet, after 8 slices, and at the end. 16-bit elements; rows
// are head_dim * 2 bytes (a multiple of 16).
__global__ void __launch_bounds__(kCopierThreads) tile_copier_kernel(UlyssesArgs u, const char* local, int q_len) {
  if (blockIdx.x == 0 && threadIdx.x == 0) announce_ready(u);
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  const int vecs_per_row = u.head_dim * 2 / 16;
  const int64_t row_bytes = int64_t(u.head_dim) * 2;
  const int n = u.num_slices();
  const int stride = gridDim.x * warps;
  uint64_t pending[kMaxRanks] = {};  // rows copied but not yet published, per receiver (lane 0)
  int unpublished = 0;
  auto publish = [&]() {
    dev::fence_sys();
    for (int r = 0; r < u.world; ++r)
      if (pending[r] != 0) {
        dev::flag_add_release(u.counter[r], pending[r]);
        pending[r] = 0;
      }
    unpublished = 0;
  };
  bool ready_seen = false;
  for (int s = blockIdx.x * warps + threadIdx.x / 32; s < n; s += stride) {
    const int wg = s % u.consumer_wgs;
    const int tile = s / u.consumer_wgs;
    const int m_block = tile % u.num_m_blocks;
    const int bh = tile / u.num_m_blocks;
    const int head = bh % u.heads_local;
    const int batch = bh / u.heads_local;
    const int row_begin = m_block * u.block_m + wg * 64;
    const int row_end = min(row_begin + 64, q_len);
    if (row_begin >= row_end) continue;
    if (lane == 0) {
      dev::wait_geq(&u.slice_flags[s], u.epoch, u.status, WaitId::ulysses_tile, u.rank, u.timeout_ns);
      if (!ready_seen) wait_receivers_ready(u, 0, u.rows_per_rank * u.world);
      ready_seen = true;
    }
    __syncwarp();
    const int total = (row_end - row_begin) * vecs_per_row;
#pragma unroll 4
    for (int i = lane; i < total; i += 32) {
      const int row = row_begin + i / vecs_per_row;
      const int c = i % vecs_per_row;
      // L2, not L1: the scratch is rewritten every call, this SM may hold stale lines.
      const uint4 v = __ldcg(reinterpret_cast<const uint4*>(
          local + ((int64_t(batch) * q_len + row) * u.heads_local + head) * row_bytes + c * 16));
      RowSpan d = remote_row<uint16_t>(u, batch, head, row);
      *reinterpret_cast<uint4*>(static_cast<char*>(d.ptr) + c * 16) = v;
    }
    __syncwarp();
    if (lane == 0) {
      for (int r = row_begin / u.rows_per_rank; r <= (row_end - 1) / u.rows_per_rank; ++r)
        pending[r] += min(row_end, (r + 1) * u.rows_per_rank) - max(row_begin, r * u.rows_per_rank);
      const int next = s + stride;
      const bool next_ready = next < n && dev::flag_load_acquire(&u.slice_flags[next]) >= u.epoch;
      if (++unpublished >= 8 || !next_ready) publish();
    }
  }
  if (lane == 0 && unpublished > 0) publish();
  if (threadIdx.x == 0) wait_all_received(u);  // CTA 0: the call is complete when the copier ends
}

// recv [B, P, Sp, Hl, D] -> out [B, Sp, P*Hl, D]; one 16-byte vector per thread and step.
__global__ void permute_received_kernel(const uint4* recv, uint4* out, int batch, int world, int rows_per_rank,
                                        int heads_local, int vecs_per_row) {
  const int64_t total = int64_t(batch) * world * rows_per_rank * heads_local * vecs_per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t x = i;
    const int c = x % vecs_per_row;
    x /= vecs_per_row;
    const int h = x % heads_local;
    x /= heads_local;
    const int s = x % rows_per_rank;
    x /= rows_per_rank;
    const int p = x % world;
    const int b = static_cast<int>(x / world);
    const int64_t dst = ((int64_t(b) * rows_per_rank + s) * world * heads_local + int64_t(p) * heads_local + h) *
                            vecs_per_row + c;
    out[dst] = __ldcs(recv + i);
  }
}

}  // namespace

cudaError_t launch_tile_copier(const UlyssesArgs& u, const void* local, int q_len, int ctas, cudaStream_t s) {
  tile_copier_kernel<<<ctas, kCopierThreads, 0, s>>>(u, static_cast<const char*>(local), q_len);
  return cudaGetLastError();
}

cudaError_t launch_permute_received(const void* recv, void* out, int batch, int world, int rows_per_rank,
                                    int heads_local, int head_dim, cudaStream_t s) {
  const int vecs = head_dim * 2 / 16;
  const long long total = static_cast<long long>(batch) * world * rows_per_rank * heads_local * vecs;
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const long long want = (total + 255) / 256;
  const int blocks = static_cast<int>(want < sms * 8LL ? want : sms * 8LL);
  permute_received_kernel<<<blocks > 0 ? blocks : 1, 256, 0, s>>>(static_cast<const uint4*>(recv),
                                                                   static_cast<uint4*>(out), batch, world,
                                                                   rows_per_rank, heads_local, vecs);
  return cudaGetLastError();
}

}  // namespace xstage::kernels::ulysses
