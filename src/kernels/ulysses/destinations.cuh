// Where the Ulysses kernels put a finished O slice (a warp group's 64 rows of a tile): the
// Destination policies plugged into the attention epilogue (kernels/attention/epilogue.cuh).
//   RemoteDestination  (fused, fused-shaped): each row straight into its owner rank's output
//                      [B, S/P, H, D] over NVLink (local rows locally); afterwards the
//                      epilogue's service thread adds the row count to each receiver's
//                      counter (fence + release, system scope), off the consumers' path.
//   FlaggedLocalDestination (comm-sm): rows into this GPU's [B, S, H/P, D] scratch; afterwards
//                      the slice's flag is set to the epoch, for the copier CTAs.
#pragma once
#include <cstdint>

#include "kernels/attention/epilogue.cuh"
#include "kernels/common/flags.cuh"
#include "kernels/common/store.cuh"
#include "kernels/ulysses/args.hpp"

namespace xstage::kernels::ulysses {

using attention::EpilogueTile;
using attention::RowSpan;

// Index of a 64-row slice: tiles in scheduler order (q tile fastest, then head, then batch),
// consumer warp groups inside a tile.
__device__ __forceinline__ int slice_index(UlyssesArgs const& u, EpilogueTile const& t) {
  const int wg = (t.row_begin - t.m_block * u.block_m) / 64;
  return ((t.batch * u.heads_local + t.head) * u.num_m_blocks + t.m_block) * u.consumer_wgs + wg;
}

// Announces, in every rank's ready array, that this rank's output may be written for
// u.epoch (everything earlier on this rank's stream, e.g. the consumer of the last call's
// output, is complete when the kernel that calls this starts).
__device__ __forceinline__ void announce_ready(UlyssesArgs const& u) {
  for (int p = 0; p < u.world; ++p) dev::flag_store_release(u.ready_at_peer[p], u.epoch);
}

// Waits until every rank that receives rows [row_begin, row_end) announced u.epoch.
__device__ __forceinline__ void wait_receivers_ready(UlyssesArgs const& u, int row_begin, int row_end) {
  if (row_end <= row_begin) return;  // an empty slice past the sequence end
  const int r0 = row_begin / u.rows_per_rank;
  const int r1 = (row_end - 1) / u.rows_per_rank;
  for (int r = r0; r <= r1; ++r)
    dev::wait_geq(&u.ready[r], u.epoch, u.status, WaitId::ulysses_ready, u.rank, u.timeout_ns);
}

// Rows of [row_begin, row_end) that rank r owns.
__device__ __forceinline__ int rows_for_rank(UlyssesArgs const& u, int r, int row_begin, int row_end) {
  return max(0, min(row_end, (r + 1) * u.rows_per_rank) - max(row_begin, r * u.rows_per_rank));
}

// After the stores of rows [row_begin, row_end) of one head were issued by the calling
// thread's block/warp group (and the caller synchronised them): tell each receiver.
__device__ __forceinline__ void publish_rows(UlyssesArgs const& u, int row_begin, int row_end) {
  if (row_end <= row_begin) return;
  dev::fence_sys();
  const int r0 = row_begin / u.rows_per_rank;
  const int r1 = (row_end - 1) / u.rows_per_rank;
  for (int r = r0; r <= r1; ++r) {
    const int lo = max(row_begin, r * u.rows_per_rank);
    const int hi = min(row_end, (r + 1) * u.rows_per_rank);
    dev::flag_add_release(u.counter[r], static_cast<uint64_t>(hi - lo));
  }
}

// Receiver side, one thread of CTA 0: bounded wait until this rank's shard is complete.
__device__ __forceinline__ void wait_all_received(UlyssesArgs const& u) {
  if (blockIdx.x == 0)
    dev::wait_geq(u.counter[u.rank], u.expect_rows, u.status, WaitId::ulysses_receive, u.rank, u.timeout_ns);
}

// Address of element (row, head, 0) of the full problem in its owner's output.
template <class Element>
__device__ __forceinline__ RowSpan remote_row(UlyssesArgs const& u, int batch, int head, int row) {
  const int r = row / u.rows_per_rank;
  const int local_row = row - r * u.rows_per_rank;
  Element* p = static_cast<Element*>(u.out[r]) + batch * u.out_stride_b() + int64_t(local_row) * u.out_stride_s() +
               int64_t(u.rank * u.heads_local + head) * u.head_dim;
  return RowSpan{p, u.out_stride_s(), (r + 1) * u.rows_per_rank - row};
}

template <class Element>
struct RemoteDestination {
  UlyssesArgs u;

  static constexpr bool kNeedsTileStoredHook = true;
  // One system fence per CTA, after its last slice, instead of one per slice: a fence.sys
  // waits until the SM's earlier remote stores are visible, i.e. until a whole wave's burst
  // has crossed NVLink, and per slice that wait was paid once per tile (docs/ulysses.md).
  // The receiver only needs the total, so nothing is lost.
  static constexpr bool kPublishAtEnd = true;

  __device__ RowSpan destination(EpilogueTile const& t, int row) const {
    RowSpan s = remote_row<Element>(u, t.batch, t.head, row);
    s.rows = min(s.rows, t.row_end - row);
    return s;
  }
  __device__ float* lse_destination(EpilogueTile const&, int) const { return nullptr; }
  __device__ void kernel_start() const { announce_ready(u); }
  // Service thread (epilogue.cuh, HasService): receivers ready before any store; each
  // slice's rows published after its stores.
  __device__ void service_start() const { wait_receivers_ready(u, 0, u.rows_per_rank * u.world); }
  __device__ void publish(EpilogueTile const& t) const { publish_rows(u, t.row_begin, t.row_end); }
  template <class ForEachSlice>
  __device__ void publish_all(ForEachSlice&& for_each_slice) const {
    dev::fence_sys();
    for (int r = 0; r < u.world; ++r) {
      uint64_t rows = 0;
      for_each_slice([&](EpilogueTile const& t) { rows += rows_for_rank(u, r, t.row_begin, t.row_end); });
      if (rows > 0) dev::flag_add_release(u.counter[r], rows);
    }
  }
  // After this CTA published everything: CTA 0 also waits until every rank's rows for this
  // rank arrived, so the call is complete when the kernel ends (no separate wait kernel).
  __device__ void service_end() const { wait_all_received(u); }
  __device__ void tile_stored(EpilogueTile const& t, uint64_t issue_cycles) const {
    if (u.spans != nullptr) u.spans[slice_index(u, t)] = issue_cycles;
  }
};

template <class Element>
struct FlaggedLocalDestination {
  Element* o;  // [B, S, H/P, D] dense
  UlyssesArgs u;

  static constexpr bool kNeedsTileStoredHook = true;

  __device__ RowSpan destination(EpilogueTile const& t, int row) const {
    const int64_t stride_s = int64_t(u.heads_local) * u.head_dim;
    const int64_t stride_b = stride_s * u.rows_per_rank * u.world;
    Element* p = o + t.batch * stride_b + int64_t(row) * stride_s + int64_t(t.head) * u.head_dim;
    return RowSpan{p, stride_s, t.row_end - row};
  }
  __device__ float* lse_destination(EpilogueTile const&, int) const { return nullptr; }
  __device__ void tile_stored(EpilogueTile const& t, uint64_t issue_cycles) const {
    __threadfence();
    dev::flag_store_release(&u.slice_flags[slice_index(u, t)], u.epoch);
    if (u.spans != nullptr) u.spans[slice_index(u, t)] = issue_cycles;
  }
};

}  // namespace xstage::kernels::ulysses
