// Epilogue policies: where a finished O tile (and its log-sum-exp) goes.
//
// The kernel hands every consumer warp group's finished 64-row slice of O (fp32, already
// normalised) to the epilogue policy together with the tile coordinates; the mainloop knows
// nothing about destinations. A policy is TileStoreEpilogue<Traits, Destination>: the store
// machinery (registers -> shared-memory staging, padded or swizzled -> 16-byte row stores) is shared and
// the Destination decides, per row, where the bytes land. So:
//   * LocalStoreEpilogue  = TileStoreEpilogue<Traits, LocalDestination<Element>>: O and LSE
//                           in this GPU's BSHD / [B, H, Sq] buffers;
//   * a RemoteTileEpilogue (Ulysses, later) = TileStoreEpilogue<Traits, RemoteDestination>
//     whose destination() maps (batch, head, q row) to a peer GPU's buffer (rank = row /
//     rows_per_rank, offset inside that rank's [B, S/P, H, D] slab) and whose tile_stored()
//     publishes a flag once a tile's stores are issued. No mainloop change is needed.
//
// Destination interface (all __device__, const):
//   RowSpan destination(EpilogueTile const& t, int row) const;
//       where row `row` of the tile (absolute q index, t.row_begin <= row < t.row_end) goes:
//       ptr = address of element (row, d=0); the next span.rows - 1 rows follow at
//       span.row_stride elements each (span.rows >= 1, a span never crosses t.row_end).
//   float* lse_destination(EpilogueTile const& t, int row) const;   // nullptr: no LSE
//   static constexpr bool kNeedsTileStoredHook;
//   void tile_stored(EpilogueTile const& t, uint64_t issue_begin_cycles) const;
//       one thread, after all its warp group's stores of this tile were issued (the cycle
//       count read just before the first of them, for store-span records)
// Optional (detected with requires-expressions, so LocalDestination needs none of them):
//   void kernel_start() const;                         thread 0 of CTA 0, once per launch
//   void service_start() const; void publish(EpilogueTile const& t) const;
//       a destination with these gets a *service thread* (lane 0 of the producer warp group's
//       idle warp 1) that runs service_start() once (e.g. wait until every receiver is
//       ready; the consumers' stores wait for it), then publish(t) for every slice of the CTA,
//       in tile order, as soon as its warp group's stores are issued. The slow system-scope
//       fence and flag update of publishing thus never stall a consumer warp group. The
//       service thread moves no data. An optional service_end() runs after the last publish.
//       With `static constexpr bool kPublishAtEnd = true` the destination publishes once, after
//       the CTA's last slice was issued: publish_all(for_each_slice) instead of publish(t).
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>

#include "kernels/attention/mainloop.cuh"
#include "kernels/attention/params.hpp"

namespace xstage::kernels::attention {

using namespace cute;

// One warp group's slice of an O tile: q rows [row_begin, row_end) (clipped to q_len; may be
// empty for the last tile) of head `head` in batch `batch`.
struct EpilogueTile {
  int batch;
  int head;
  int m_block;
  int row_begin;
  int row_end;
};

struct RowSpan {
  void* ptr;
  int64_t row_stride;  // elements
  int rows;
};

// O and LSE into this GPU's memory, at the strides the caller gave.
template <class Element>
struct LocalDestination {
  Element* o;
  int64_t o_stride_b, o_stride_s, o_stride_h;
  float* lse;
  int64_t lse_stride_b, lse_stride_h;

  static constexpr bool kNeedsTileStoredHook = false;

  static LocalDestination from(AttentionParams const& p) {
    return LocalDestination{static_cast<Element*>(p.o), p.o_stride_b, p.o_stride_s, p.o_stride_h,
                            p.lse,                      p.lse_stride_b, p.lse_stride_h};
  }

  __device__ RowSpan destination(EpilogueTile const& t, int row) const {
    Element* p = o + t.batch * o_stride_b + t.head * o_stride_h + static_cast<int64_t>(row) * o_stride_s;
    return RowSpan{p, o_stride_s, t.row_end - row};
  }
  __device__ float* lse_destination(EpilogueTile const& t, int row) const {
    return lse == nullptr ? nullptr : lse + t.batch * lse_stride_b + t.head * lse_stride_h + row;
  }
  __device__ void tile_stored(EpilogueTile const&, uint64_t) const {}
};

#ifdef XSTAGE_TEST_CORRUPT_ONE_ROW
// Test-only (CMake option XSTAGE_TEST_CORRUPT_ONE_ROW, OFF by default; issue 33): the local O
// stores (LocalStoreEpilogue, DirectStoreEpilogue) negate query row XSTAGE_TEST_CORRUPT_ONE_ROW
// of batch 0, head 0, so the benches and GPU tests can show that one wrong row fails them.
__device__ __forceinline__ bool test_corrupt_row(int batch, int head, int row) {
  return batch == 0 && head == 0 && row == XSTAGE_TEST_CORRUPT_ONE_ROW;
}
#endif

// Optional hooks of a destination, detected at compile time.
template <class D>
concept HasKernelStart = requires(D const& d) { d.kernel_start(); };
template <class D>
concept HasService = requires(D const& d, EpilogueTile const& t) {
  d.service_start();
  d.publish(t);
};
template <class D>
concept HasServiceEnd = requires(D const& d) { d.service_end(); };
// A destination that publishes once per CTA (after its last slice) instead of per slice:
// publish_all(for_each_slice) gets a callable that enumerates the CTA's slices.
template <class D>
concept PublishesAtEnd = requires { requires D::kPublishAtEnd; };

// Shared-memory words of the consumer <-> service-thread handshake (see HasService).
__device__ __forceinline__ uint32_t ld_acquire_cta(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.cta.shared.u32 %0, [%1];" : "=r"(v) : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_cta(uint32_t* p, uint32_t v) {
  asm volatile("st.release.cta.shared.u32 [%0], %1;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))), "r"(v) : "memory");
}

// The service thread's work (see HasService), for any epilogue of 64-row warp-group slices:
// service_start, then `ready` set (the consumers' stores wait for it); for every slice of the
// CTA in tile order, wait until its warp group handed it over (slices_done(wg) counts them,
// hand_over_slice) and publish it, or publish all at the end (PublishesAtEnd); service_end.
template <int kBlockM, class Destination, class Scheduler, class SlicesDone>
__device__ void run_service_thread(Destination const& dest, int q_len, Scheduler const& sched, uint32_t* ready,
                                   SlicesDone&& slices_done) {
  dest.service_start();
  st_release_cta(ready, 1u);
  auto slice_of = [&](WorkTile const& tile, int wg) {
    EpilogueTile t;
    t.batch = tile.batch;
    t.head = tile.head;
    t.m_block = tile.m_block;
    t.row_begin = tile.m_block * kBlockM + wg * 64;
    t.row_end = min(t.row_begin + 64, q_len);
    return t;
  };
  uint32_t k = 0;
  for (int idx = sched.first(); sched.valid(idx); idx = sched.next(idx), ++k) {
    const WorkTile tile = sched.decode(idx);
    for (int wg = 0; wg < kBlockM / 64; ++wg) {
      // Consumers always finish their slices (every wait they run is bounded). The
      // back-off keeps this thread from taking issue slots from the consumers.
      for (uint32_t ns = 32; ld_acquire_cta(slices_done(wg)) <= k; ns = min(2 * ns, 1024u)) __nanosleep(ns);
      if constexpr (!PublishesAtEnd<Destination>) dest.publish(slice_of(tile, wg));
    }
  }
  if constexpr (PublishesAtEnd<Destination>) {
    dest.publish_all([&](auto&& visit) {
      for (int idx = sched.first(); sched.valid(idx); idx = sched.next(idx))
        for (int wg = 0; wg < kBlockM / 64; ++wg) visit(slice_of(sched.decode(idx), wg));
    });
  }
  if constexpr (HasServiceEnd<Destination>) dest.service_end();
}

// One thread of a warp group, after the group's stores of a slice were issued and the group
// synchronised: the slice goes to the service thread (its counter word, in shared memory).
__device__ __forceinline__ void hand_over_slice(uint32_t* slices_done) { st_release_cta(slices_done, *slices_done + 1u); }

// A consumer warp group waits (thread 0 polls, then the group's barrier) until the service
// thread saw every receiver ready; bounded because the service thread's own wait is.
__device__ __forceinline__ void wait_service_ready(const uint32_t* ready, uint32_t barrier_id, int tid_in_wg) {
  if (tid_in_wg == 0)
    while (ld_acquire_cta(ready) == 0u) __nanosleep(32);
  cutlass::arch::NamedBarrier::sync(128, barrier_id);
}

// kSwizzled: the staging tile without padding, its 16-byte chunks swizzled per row (the local
// store at d = 128 with two Q buffers: the 2 KiB of padding are what the second 32 KiB Q buffer
// lacks under 227 KiB). Policies that keep words in the padding (the service thread's handshake,
// ulysses/shaped_epilogue) keep the padded rows.
template <class Traits, class Destination, bool kSwizzled = false>
struct TileStoreEpilogue {
  using T = Traits;
  using Element = typename T::Element;
  static constexpr int kBlockM = T::kBlockM;
  static constexpr int kHeadDim = T::kHeadDim;
  static constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(Element));
  // The 32-bit stores of a warp (8 rows x 4 column pairs of one 16-byte chunk) must hit 32
  // different banks: padded rows (16 bytes more each) or chunk j of row r at j ^ (r mod 8).
  // Either way every row stays 16-byte aligned.
  static constexpr int kSmemPitch = kSwizzled ? kHeadDim : kHeadDim + kElemsPerChunk;
  static constexpr int kSmemElems = kBlockM * kSmemPitch;
  static constexpr int kChunksPerRow = kHeadDim / kElemsPerChunk;
  static_assert(kChunksPerRow * kElemsPerChunk == kHeadDim);
  static_assert((64 * kChunksPerRow) % 128 == 0);
  static_assert(128 % kChunksPerRow == 0, "a copy-out thread keeps one chunk column");

  struct Params {
    Destination dest;
    int q_len;
  };
  static Params to_params(AttentionParams const& p) { return Params{Destination::from(p), p.q_len}; }

  // Kernel-level hooks (kernel.cuh): once per launch, before each tile's mainloop, and once
  // per mainloop step (none here: this policy stores each tile right after its mainloop).
  static constexpr bool kHasStepHook = false;
  static constexpr bool kHasBeforeMainloop = false;
  static constexpr bool kHasServiceThread = HasService<Destination>;
  static constexpr bool kTailSplit = false;  // whole tiles only (tile_scheduler.cuh)
  // A warp group without query rows may skip the tile (kernel.cuh): it would store nothing, and
  // a local destination keeps no per-slice count that expects its call.
  static constexpr bool kSkipsEmptyGroups = std::is_same_v<Destination, LocalDestination<Element>> && !kHasServiceThread;
  static_assert(!(kSwizzled && kHasServiceThread), "the handshake words live in the padding");
  __device__ static void kernel_start(Params const& ep) {
    if constexpr (HasKernelStart<Destination>) ep.dest.kernel_start();
  }

  // Handshake words, in the 16-byte padding of staging rows no policy uses otherwise:
  // row 64 wg + 2: slices of warp group wg whose stores are issued; row 3: receivers ready.
  __device__ static uint32_t* slices_done_word(Element* smem_o, int wg) {
    return reinterpret_cast<uint32_t*>(smem_o + (64 * wg + 2) * kSmemPitch + kHeadDim);
  }
  __device__ static uint32_t* ready_word(Element* smem_o) {
    return reinterpret_cast<uint32_t*>(smem_o + 3 * kSmemPitch + kHeadDim);
  }
  // Thread 0, before the CTA's first __syncthreads.
  __device__ static void init_shared(Element* smem_o) {
    if constexpr (kHasServiceThread) {
      for (int wg = 0; wg < kBlockM / 64; ++wg) *slices_done_word(smem_o, wg) = 0;
      *ready_word(smem_o) = 0;
    }
  }

  // The service thread (see HasService): lane 0 of one otherwise idle producer warp.
  template <class Scheduler>
  __device__ static void service(Params const& ep, Element* smem_o, Scheduler const& sched) {
    if constexpr (kHasServiceThread)
      run_service_thread<kBlockM>(ep.dest, ep.q_len, sched, ready_word(smem_o),
                                  [&](int wg) { return slices_done_word(smem_o, wg); });
  }

  // One thread of the warp group, after the group's stores of slice t were issued and the
  // group synchronised: span record, and hand the slice to the service thread.
  __device__ static void slice_stored(Params const& ep, Element* smem_o, EpilogueTile const& t, uint64_t cycles) {
    ep.dest.tile_stored(t, cycles);
    if constexpr (kHasServiceThread) hand_over_slice(slices_done_word(smem_o, (t.row_begin - t.m_block * kBlockM) / 64));
  }
  __device__ void step(Params const&, Element const*, int, bool) {}
  __device__ void finish(Params const&, Element const*) {}

  // Called by all 128 threads of each consumer warp group (consumer threads are 128..) with
  // the normalised fp32 O fragment of the tile and the LSE of the thread's rows.
  template <class FrgO, int kRows>
  __device__ void store(Params const& ep, Element* smem_o, FrgO const& tOrO, float const (&lse)[kRows],
                        WorkTile const& tile) const {
    static_assert(!kHasServiceThread || Destination::kNeedsTileStoredHook, "the service thread needs slice_stored");
    send_staged(ep, smem_o, stage(ep, smem_o, tOrO, lse, tile));
  }

  // The staged slice t to its destination at once, then (destinations with the hook) the
  // group's barrier and slice_stored with the issue span.
  __device__ static void send_staged(Params const& ep, Element* smem_o, EpilogueTile const& t) {
    const int tid = thread_in_wg();
    const uint64_t issue_begin = Destination::kNeedsTileStoredHook ? clock64() : 0;
    copy_out(ep, smem_o, t, tid, 0, kIters);
    if constexpr (Destination::kNeedsTileStoredHook) {
      cutlass::arch::NamedBarrier::sync(128, epilogue_barrier(t));
      if (tid == 0) slice_stored(ep, smem_o, t, clock64() - issue_begin);
    }
  }

  // --- pieces, shared with policies that issue the copy-out later (ulysses/shaped_epilogue) ---
  // The swizzle as an offset: element offset o = r * kHeadDim + c of a row r lands at
  // o ^ swizzle_bits(r). kHeadDim is a multiple of 64 elements, so the row term leaves bits of
  // the chunk index free.
  static constexpr int kChunkMask = 7 * kElemsPerChunk;  // the low 3 bits of the chunk index
  static_assert(!kSwizzled || kChunksPerRow % 8 == 0, "the swizzle permutes groups of 8 chunks");
  __device__ static int swizzle_bits(int r) { return kSwizzled ? (r & 7) * kElemsPerChunk : 0; }
  // Offset o (relative to a base whose chunk bits are 0) with the per-thread swizzle x: the
  // high part is a compile-time constant after unrolling, the low part one XOR of 8 values.
  __device__ static int swizzled(int o, int x) { return kSwizzled ? (o & ~kChunkMask) + ((o & kChunkMask) ^ x) : o; }
  // 16-byte copy-out iterations per thread for one warp group's 64-row slice.
  static constexpr int kIters = 64 * kChunksPerRow / 128;

  // The thread index is read afresh (volatile) so the compiler does not keep the
  // epilogue's thread-dependent offsets alive in registers across the whole mainloop.
  __device__ static int consumer_thread() {
    uint32_t tid_x;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
    return static_cast<int>(tid_x) - 128;
  }
  __device__ static int thread_in_wg() { return consumer_thread() % 128; }
  // Warp group wg owns tile rows [64 wg, 64 wg + 64) (AtomLayout of the tiled MMAs).
  __device__ static uint32_t epilogue_barrier(EpilogueTile const& t) {
    const int wg = (t.row_begin - t.m_block * kBlockM) / 64;
    return static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + wg;
  }

  // LSE to its destination, O registers -> this warp group's rows of the staging buffer,
  // then (with a service thread) the wait for its go. Ends with the warp group's
  // barrier: staging complete, copy-out may start. The caller must have finished the
  // previous copy-out of this warp group's staging rows (the first barrier ensures every
  // thread did).
  template <class FrgO, int kRows>
  __device__ EpilogueTile stage(Params const& ep, Element* smem_o, FrgO const& tOrO, float const (&lse)[kRows],
                                WorkTile const& tile) const {
    const int ct = consumer_thread();
    const int wg = ct / 128;
    const int tid = ct % 128;
    const uint32_t bar = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + wg;
    EpilogueTile t;
    t.batch = tile.batch;
    t.head = tile.head;
    t.m_block = tile.m_block;
    t.row_begin = tile.m_block * kBlockM + wg * 64;
    t.row_end = min(t.row_begin + 64, ep.q_len);

    typename T::TiledMmaPV mma_pv;
    auto thr = mma_pv.get_thread_slice(ct);
    Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));  // (row, col)
    static_assert(decltype(size(tOcO))::value == decltype(size(tOrO))::value);
    static_assert(decltype(size<0, 0>(tOrO))::value == 2, "accumulator pairs: columns c, c+1");

    // LSE: one thread per row (the quad's column-0 thread), straight to global memory.
    {
      Tensor cRow = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
      static_assert(decltype(size<0>(cRow))::value == kRows);
      if (get<1>(cRow(0, 0)) == 0) {
        CUTE_UNROLL
        for (int mi = 0; mi < kRows; ++mi) {
          const int row = tile.m_block * kBlockM + get<0>(cRow(mi, 0));
          if (row < t.row_end) {
            float* dst = ep.dest.lse_destination(t, row);
            if (dst != nullptr) *dst = lse[mi];
          }
        }
      }
    }

    // Registers -> staging (the previous tile's copy-out of this warp group must be done).
    // A thread's accumulator rows are r0 + 8 k and its columns c0 + 8 j with c0 < 8 (wgmma's C
    // layout), so every row shares r0's swizzle and the base r0 * pitch + c0 has no chunk bits.
    const int r0 = get<0>(tOcO(0));
    const int c0 = get<1>(tOcO(0));
    const int base = r0 * kSmemPitch + c0;
    const int x = swizzle_bits(r0);
    cutlass::arch::NamedBarrier::sync(128, bar);
    cutlass::NumericArrayConverter<Element, float, 2, cutlass::FloatRoundStyle::round_to_nearest> cvt;
    CUTE_UNROLL
    for (int i = 0; i < size(tOrO); i += 2) {
      const int r = get<0>(tOcO(i));
      const int c = get<1>(tOcO(i));
      cutlass::Array<float, 2> f;
      f[0] = tOrO(i);
      f[1] = tOrO(i + 1);
#ifdef XSTAGE_TEST_CORRUPT_ONE_ROW
      if constexpr (std::is_same_v<Destination, LocalDestination<Element>>)
        if (test_corrupt_row(tile.batch, tile.head, tile.m_block * kBlockM + r)) f[0] = -f[0], f[1] = -f[1];
#endif
      cutlass::Array<Element, 2> h = cvt(f);
      *reinterpret_cast<cutlass::Array<Element, 2>*>(smem_o + base + swizzled((r - r0) * kSmemPitch + (c - c0), x)) = h;
    }
    if constexpr (kHasServiceThread) {
      // Stores may start once the service thread saw every receiver ready (normally long
      // before the first tile is done; its own wait is bounded, so this one is too).
      if (tid == 0)
        while (ld_acquire_cta(ready_word(smem_o)) == 0u) __nanosleep(32);
    }
    cutlass::arch::NamedBarrier::sync(128, bar);
    return t;
  }

  // Staging -> destination for copy-out iterations [it_begin, it_end) of this thread:
  // 16-byte chunks, consecutive threads along a row.
  __device__ static void copy_out(Params const& ep, Element const* smem_o, EpilogueTile const& t, int tid,
                                  int it_begin, int it_end) {
    if (t.row_end <= t.row_begin) return;
    const Element* src_rows = smem_o + (t.row_begin - t.m_block * kBlockM) * kSmemPitch;
    // The destination is asked once for the slice's first row; its span covers the rows up
    // to `split` (all of them for a local store; up to the shard border for Ulysses). Only
    // rows past a border are resolved one by one.
    const RowSpan first = ep.dest.destination(t, t.row_begin);
    const int split = t.row_begin + first.rows;
    // A thread reads one chunk column; its rows step by 128 / kChunksPerRow (a multiple of 8)
    // from a slice start (a multiple of 64), so one swizzled column serves every iteration.
    static_assert(!kSwizzled || (128 / kChunksPerRow) % 8 == 0, "copy-out rows keep their swizzle");
    const int src_col = swizzled((tid % kChunksPerRow) * kElemsPerChunk, swizzle_bits(tid / kChunksPerRow));
    for (int it = it_begin; it < it_end; ++it) {
      const int idx = tid + it * 128;
      const int r = idx / kChunksPerRow;
      const int chunk = idx % kChunksPerRow;
      const int row = t.row_begin + r;
      if (row < t.row_end) {
        const uint4 v = *reinterpret_cast<const uint4*>(src_rows + r * kSmemPitch + src_col);
        Element* dst = row < split ? static_cast<Element*>(first.ptr) + r * first.row_stride
                                   : static_cast<Element*>(ep.dest.destination(t, row).ptr);
        *reinterpret_cast<uint4*>(dst + chunk * kElemsPerChunk) = v;
      }
    }
  }
};

template <class Traits>
using LocalStoreEpilogue = TileStoreEpilogue<Traits, LocalDestination<typename Traits::Element>,
                                             /*kSwizzled=*/Traits::kHeadDim == 128 && Traits::kQStages == 2>;

}  // namespace xstage::kernels::attention
