// Arguments of the Ulysses attention kernels (fused epilogues, tile copier, completion
// wait, permutation): plain pointers and sizes that the host operator (src/ops/ulysses_op.cpp)
// fills; no CUDA types, no templates. Read together with docs/ulysses.md.
//
// Data: rank r computes attention for all S query rows of its H/P heads; query row q of the
// full sequence belongs to rank q / rows_per_rank, at row q % rows_per_rank of that rank's
// output [B, S/P, H, D] (head index head_offset + local head). Completion: every sender adds
// the number of (row, head) pairs it delivered to the receiver's counter (release, system
// scope) after the rows' stores; the receiver waits until its counter reaches
// epoch * B * S/P * H. Ready: at the start of call `epoch` each rank announces `epoch` in
// every peer's ready array (slot = its rank); a sender stores into rank r only after r
// announced the same epoch, so a call never overwrites output a peer is still reading.
#pragma once
#include <cstdint>

#include "xstage/device_status.hpp"

#if defined(__CUDACC__)
#define XS_ULY_HD __host__ __device__
#else
#define XS_ULY_HD
#endif

namespace xstage::kernels::ulysses {

inline constexpr int kMaxRanks = 8;

struct UlyssesArgs {
  void* out[kMaxRanks] = {};               // each rank's output base, mapped in this GPU
  uint64_t* counter[kMaxRanks] = {};       // each rank's receive counter, mapped in this GPU
  uint64_t* ready_at_peer[kMaxRanks] = {}; // slot `rank` of each rank's ready array
  const uint64_t* ready = nullptr;         // this rank's ready array (slot p: epoch p announced)
  uint64_t epoch = 0;                      // 1, 2, ... per call of this operator
  int rank = 0;
  int world = 1;
  int batch = 0;
  int rows_per_rank = 0;  // S / P
  int heads_local = 0;    // H / P
  int head_dim = 0;
  int block_m = 0;        // tile rows of the attention instantiation
  int num_m_blocks = 0;   // ceil(S / block_m)
  int consumer_wgs = 0;   // 64-row slices per tile
  DeviceStatus* status = nullptr;
  uint64_t timeout_ns = 0;
  // fused-shaped: 16-byte stores per thread per chunk (>= 1); chunk c leaves at step hook call
  // c << chunk_shift (a chunk every 2^chunk_shift calls), the last call sends what is left.
  int chunk_vecs = 0;
  int chunk_shift = 0;
  int chunk_calls = 1;  // hook calls that may carry a chunk: ((chunks - 1) << chunk_shift) + 1
  // The one-chunk kernel (shaped_epilogue.cuh): 0 = send each slice in its epilogue (fused),
  // 1 = before the next tile's first GEMM (fused-shaped with a one-chunk plan).
  int defer_slices = 0;
  // The receive counter value that means this rank's shard of this call is complete
  // (epoch * B * S/P * H); one thread of CTA 0 waits for it before the kernel ends.
  uint64_t expect_rows = 0;
  // comm-sm: one flag per 64-row slice of the local output; value = epoch once written.
  uint64_t* slice_flags = nullptr;
  // Optional (nullptr: off): per 64-row slice, SM cycles its warp group spent issuing the
  // slice's stores (one value per slice; for fused-shaped the sum over its chunks).
  uint64_t* spans = nullptr;

  XS_ULY_HD int64_t out_stride_b() const { return int64_t(rows_per_rank) * heads_local * world * head_dim; }
  XS_ULY_HD int64_t out_stride_s() const { return int64_t(heads_local) * world * head_dim; }
  XS_ULY_HD int num_slices() const { return batch * heads_local * num_m_blocks * consumer_wgs; }
};

}  // namespace xstage::kernels::ulysses
