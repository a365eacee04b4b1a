// The Mega-MoE 128 x 256 tile's Linear-2 copy-out by two store warps (docs/megamoe.md "Store
// warps"). The consumers stage the whole bf16 tile in shared memory, arrive on `full` and go on
// to their next tile's wgmmas; warps 2 and 3 of the producer warp group (otherwise idle) copy the
// staged rows to the token owners' combine buffers, record the pieces' spans and arrive on
// `free`. Before the consumers write the staging again (the next Linear-2 tile, or a Linear-1
// epilogue, which stages its rows in the same memory) they wait on `free`. Measured before (one
// H200, DSv4-Flash 8192 tokens): the consumers spent 7.0 us per Linear-2 tile in the epilogue
// against a 16 us main loop, with the tensor cores idle. The Linear-1 copy-out stays with the
// consumers: in the store warps it delayed each block's Linear-1 count (docs/perf-log.md).
#pragma once
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "kernels/common/pipeline.cuh"
#include "kernels/common/store.cuh"
#include "kernels/moe/epilogue.cuh"

namespace xstage::kernels::moe {

struct MegaStoreWarps {
  static constexpr int kRows = 128;
  static constexpr int kRowBytes = 256 * 2;  // 256 bf16 columns
  static constexpr int kSmemBytes = kRows * kRowBytes;
  static constexpr int kStoreThreads = 64;  // warps 2 and 3 of the producer warp group
  static constexpr int kConsumerThreads = 256;
  static constexpr int kBatch = 2;  // rows loaded before their stores (store warps run at 40 registers)
  // copy_out's rows r0 + 4 (k + q), k a multiple of kBatch, stay below kRows.
  static_assert((kRows / 4) % kBatch == 0, "copy_out row steps");

  // A Linear-1 epilogue stages warp group g's fp8 rows at byte 32 KiB x g, inside the half its
  // Linear-2 rows use, so a warp group never writes where the other one stages.
  static constexpr int kHalfBytes = kSmemBytes / 2;
  static_assert(64 * SwiGluRowsEpilogueBase<LocalQuantDestination>::kPitch <= kHalfBytes);

  struct Storage {
    uint64_t full;             // every consumer thread staged its values (256 arrivals)
    uint64_t free;             // every store thread read the staging (64 arrivals)
    int pos;                   // the staged tile's list position; -1: no more tiles
    uint8_t* row_dst[kRows];   // destination of each staged row at the tile's first column
  };

  __device__ static void init(Storage& s) {
    cutlass::arch::ClusterBarrier::init(&s.full, kConsumerThreads);
    cutlass::arch::ClusterBarrier::init(&s.free, kStoreThreads);
  }
  // The barrier waits and arrivals pin the shared-memory accesses around them (pipeline.cuh).
  __device__ static void arrive(uint64_t* bar) { write_then_arrive(bar); }
  __device__ static void wait(uint64_t const* bar, uint32_t phase) { wait_then_read(bar, phase); }
  // The consumers' wait after their tile loop, not inlined: inlined, its clock-bounded poll cost
  // the 128 x 256 consumers ~700 B of spills.
  __device__ __noinline__ static void wait_cold(uint64_t const* bar, uint32_t phase) { wait(bar, phase); }
  // The store threads meet (named barrier `bar`), their shared-memory accesses pinned around it.
  __device__ static void sync_store_threads(uint32_t bar) {
    compiler_fence();
    cutlass::arch::NamedBarrier::sync(kStoreThreads, bar);
    compiler_fence();
  }

  // Byte offset of row r's 16-byte chunk j: chunks XOR-swizzled by r % 8, so both the
  // consumers' 4-byte writes (a warp: 8 rows x 4 words of one chunk) and the store warps'
  // 16-byte reads (16 consecutive chunks of a row) are free of bank conflicts.
  __device__ static uint32_t offset(int r, int j) {
    return static_cast<uint32_t>(r * kRowBytes + ((j ^ (r & 7)) << 4));
  }

  // Consumer thread wt of warp group wg: its 64 values of 128-column piece `piece` (m64n128
  // accumulator layout, epilogue.cuh acc_row / acc_col) as bf16 into rows [64 wg, 64 wg + 64).
  template <class Frg>
  __device__ static void stage(uint8_t* smem, Frg const& acc, int wt, int wg, int piece) {
    constexpr int kVals = decltype(size(acc))::value;
    static_assert(kVals == 64, "m64n128 accumulators");
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    const int r7 = (wt & 31) >> 2;  // acc_row(wt, i) % 8 for every i
    CUTE_UNROLL
    for (int i = 0; i < kVals; i += 2) {
      const int r = 64 * wg + acc_row(wt, i);
      const int j = 16 * piece + i / 4;  // acc_col(wt, i) / 8
      const __nv_bfloat162 h = __floats2bfloat162_rn(acc(i), acc(i + 1));
      const uint32_t v = *reinterpret_cast<const uint32_t*>(&h);
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(base + static_cast<uint32_t>(r * kRowBytes + ((j ^ r7) << 4) +
                                                                                (wt & 3) * 4)),
                   "r"(v)
                   : "memory");
    }
  }

  // Store thread st (0..63): the staged tile t (row_begin, rows, col_begin = its first column,
  // tag) to dest, one 128-column piece after the other (a piece ends past column n); after
  // each piece the store threads meet on named barrier `bar` and thread 0 reports the piece
  // (tile_stored: its span). Returns the SM cycles of the whole copy-out.
  template <class Destination>
  __device__ __forceinline__ static uint32_t copy_out(Destination const& dest, EpilogueTile const& t, int n, const uint8_t* smem,
                                       Storage& s, int st, uint32_t bar) {
    const uint32_t c_start = static_cast<uint32_t>(clock());
    for (int r = st; r < kRows; r += kStoreThreads)
      s.row_dst[r] = r < t.rows ? static_cast<uint8_t*>(dest.row_ptr(t, t.row_begin + r)) : nullptr;
    sync_store_threads(bar);
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    const int lane = st & 31;
    const int r0 = 2 * (lane >> 4) + (st >> 5);  // rows r0 + 4k: a warp covers two rows per step
    for (int piece = 0; piece < 2; ++piece) {
      if (t.col_begin + 128 * piece >= n) break;
      const uint32_t c0 = static_cast<uint32_t>(clock());
      const int j = 16 * piece + (lane & 15);
      // kBatch rows' loads per thread in flight before their stores (a store may alias a later
      // load for the compiler, so it would otherwise wait one shared-memory round trip per store).
      for (int k = 0; 4 * k + r0 < t.rows; k += kBatch) {
        uint4 v[kBatch];
        uint8_t* d[kBatch];
        CUTE_UNROLL
        for (int q = 0; q < kBatch; ++q) {
          const int r = 4 * (k + q) + r0;
          d[q] = r < t.rows ? s.row_dst[r] : nullptr;
          asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v[q].x), "=r"(v[q].y), "=r"(v[q].z), "=r"(v[q].w)
                       : "r"(base + offset(r, j))
                       : "memory");
        }
        CUTE_UNROLL
        for (int q = 0; q < kBatch; ++q)
          if (d[q] != nullptr) dev::st_v4(d[q] + 16 * j, v[q]);
      }
      sync_store_threads(bar);
      if (st == 0) {
        EpilogueTile tp = t;
        tp.col_begin += 128 * piece;
        dest.tile_stored(tp, static_cast<uint32_t>(clock()) - c0);
      }
    }
    return static_cast<uint32_t>(clock()) - c_start;
  }

};

}  // namespace xstage::kernels::moe
