// fused-shaped: an epilogue policy that does not store a finished O slice at once. It stages
// the slice in shared memory (as the plain policy does) and then issues it in chunks of
// `chunk_vecs` 16-byte stores per thread at the mainloop steps of the *next* tile (a chunk
// every 2^chunk_shift steps), so the remote stores leave in bursts separated by compute
// instead of one burst per tile. The chunking comes from the Burst-Gap model
// (src/model/ulysses_plan.cpp): a chunk of all CTAs must fit the X-Stage, and drain before
// the next one starts.
//
// Register budget: the step hook runs inside the mainloop, where the consumer warp groups
// have nothing to spare. So the policy keeps no state in registers (it lives in shared
// memory), resolves the slice's destination once in store(), and leaves nothing to do after
// the tile loop (code there made ptxas spill and serialise the wgmma instructions, which
// halved the kernel's speed; the kernel flushes inside the loop, after the last tile).
//
// The staging rows of a warp group are not touched by the next mainloop (only by the next
// store()), so they hold the pending slice. The mainloop's last hook call sends whatever is
// left, so the slice has always left when the mainloop ends, however short it is.
//
// Two instantiations (kSpread): when the plan sends a slice as several chunks they ride the
// mainloop's step hook (kSpread = true). When one chunk carries the whole slice (what the
// model gives for every shipped shape on 2 x H200), that chunk is due before the next tile's
// first GEMM, so the kernel sends it from before_mainloop() and the mainloop compiles without
// a hook (kSpread = false). That kernel is also the `fused` variant's: with
// UlyssesArgs::defer_slices = 0 its store() sends the slice at once, as the plain policy does.
// So fused and one-chunk fused-shaped run one binary and differ only in when the stores
// leave. Measured reason: two binaries with the same mainloop source got hot loops with the
// same instructions in a different order, and timings 1.5-3 % apart at S >= 16384, which
// would have been charged to the store schedule.
#pragma once
#include <cstdint>

#include "kernels/attention/epilogue.cuh"

namespace xstage::kernels::ulysses {

template <class Traits, class Destination, bool kSpread>
struct ShapedTileEpilogue : attention::TileStoreEpilogue<Traits, Destination> {
  using Base = attention::TileStoreEpilogue<Traits, Destination>;
  using Params = typename Base::Params;
  using Element = typename Base::Element;
  using EpilogueTile = attention::EpilogueTile;
  using RowSpan = attention::RowSpan;
  static constexpr bool kHasStepHook = kSpread;
  static constexpr bool kHasBeforeMainloop = !kSpread;
  static_assert(Base::kSmemPitch - Base::kHeadDim >= 16 / static_cast<int>(sizeof(Element)),
                "the pending-slice record lives in the staging rows' 16-byte padding");

  // The pending slice's record lives in the unused 16-byte padding of the warp group's
  // staging rows 0, 1, 4, 5 (rows 2 and 3 carry the service-thread handshake, see
  // epilogue.cuh): coordinates, resolved destination, a has-slice word and span cycles.
  // Only thread 0 of the group writes it; store() publishes it with a group barrier.
  //
  // Which stores leave at a hook call follows from the call index alone: chunk c (16-byte
  // store iterations [c * chunk_vecs, (c + 1) * chunk_vecs)) at call c << chunk_shift, and the
  // mainloop's last call sends whatever is left. So the per-step test needs no shared-memory
  // state and no division, and is uniform across the warp group.
  // Mainloop calls that may carry a chunk (besides the last one): the mainloop runs its
  // later steps without the hook (mainloop.cuh).
  __device__ static int hook_calls(Params const& ep) { return ep.dest.u.chunk_calls; }
  __device__ void step(Params const& ep, Element* smem_o, int call, bool last) {
    // Most calls carry nothing: one compare against a kernel parameter decides that (it is
    // on the path to the next GEMM issue, so it must cost next to nothing).
    if (call >= ep.dest.u.chunk_calls && !last) return;
    const int shift = ep.dest.u.chunk_shift;
    const int vecs = ep.dest.u.chunk_vecs;
    const bool on_grid = (call & ((1 << shift) - 1)) == 0;
    if (!last && !on_grid) return;
    // Chunks already sent: the grid calls before this one.
    const int sent = (call + (1 << shift) - 1) >> shift;
    const int begin = min(sent * vecs, Base::kIters);
    const int end = last ? Base::kIters : min(begin + vecs, Base::kIters);
    if (begin < end) issue(ep, smem_o, begin, end);
  }
  // One-chunk plan (kSpread = false): the whole pending slice, before the tile's first GEMM.
  __device__ void before_mainloop(Params const& ep, Element* smem_o) { issue(ep, smem_o, 0, Base::kIters); }
  // After the CTA's last tile (called inside the tile loop, see kernel.cuh): no mainloop
  // follows, the whole slice leaves now.
  __device__ void finish(Params const& ep, Element* smem_o) { issue(ep, smem_o, 0, Base::kIters); }
  // Thread 0, before the CTA's first __syncthreads (kernel.cuh): no slice pending.
  __device__ static void init_shared(Element* smem_o) {
    Base::init_shared(smem_o);
    for (int wg = 0; wg < Base::kBlockM / 64; ++wg) record(smem_o, 64 * wg).ints1[1] = 0;
  }

  template <class FrgO, int kRows>
  __device__ void store(Params const& ep, Element* smem_o, FrgO const& tOrO, float const (&lse)[kRows],
                        attention::WorkTile const& tile) {
    const EpilogueTile t = Base::stage(ep, smem_o, tOrO, lse, tile);
    if (!kSpread && ep.dest.u.defer_slices == 0) {  // fused: the slice leaves now
      Base::send_staged(ep, smem_o, t);
      return;
    }
    // Thread 0 records the slice and resolves its destination once (the divisions and the
    // per-rank pointer lookup stay out of the mainloop); the barrier publishes the record.
    if (Base::thread_in_wg() == 0) {
      Record r = record(smem_o, (t.row_begin - t.m_block * Base::kBlockM));
      // The previous mainloop's last hook call sent the previous slice and cleared the word
      // (stage()'s barriers order that before this point). No __trap() check here: a
      // conditional trap anywhere in the tile loop makes ptxas assume threads may have
      // exited, and it then moves the wgmma descriptors out of uniform registers (32 more
      // R2UR per key block, measured in the SASS).
      r.ints0[0] = t.batch;
      r.ints0[1] = t.head;
      r.ints0[2] = t.m_block;
      r.ints0[3] = t.row_begin;
      r.ints1[0] = t.row_end;
      *r.cycles = 0;
      if (t.row_begin < t.row_end) {
        const RowSpan a = ep.dest.destination(t, t.row_begin);
        const int split = t.row_begin + a.rows;
        *r.base0 = static_cast<Element*>(a.ptr);
        *r.split = split;
        *r.stride = static_cast<int>(a.row_stride);
        *r.base1 = split < t.row_end ? static_cast<Element*>(ep.dest.destination(t, split).ptr) : nullptr;
      }
      r.ints1[1] = 1;
    }
    cutlass::arch::NamedBarrier::sync(128, Base::epilogue_barrier(t));
  }

 private:
  struct Record {
    int* ints0;       // batch, head, m_block, row_begin       (row 0 padding)
    int* ints1;       // row_end, has slice, cycles (u64)      (row 1 padding)
    uint64_t* cycles;
    Element** base0;  // first row's address; rows until split (row 4 padding: ptr, split, stride)
    int* split;
    int* stride;
    Element** base1;  // address of row `split` (row 5 padding)
  };
  __device__ static int* pad(Element* smem_o, int row) {
    return reinterpret_cast<int*>(smem_o + row * Base::kSmemPitch + Base::kHeadDim);
  }
  __device__ static Record record(Element* smem_o, int first_row) {
    Record r;
    r.ints0 = pad(smem_o, first_row);
    r.ints1 = pad(smem_o, first_row + 1);
    r.cycles = reinterpret_cast<uint64_t*>(r.ints1 + 2);
    r.base0 = reinterpret_cast<Element**>(pad(smem_o, first_row + 4));
    r.split = pad(smem_o, first_row + 4) + 2;
    r.stride = pad(smem_o, first_row + 4) + 3;
    r.base1 = reinterpret_cast<Element**>(pad(smem_o, first_row + 5));
    return r;
  }

  // Store iterations [begin, end) (128 x 16 B each) of the pending slice, if there is one (the
  // CTA's first mainloop has none). The call that reaches the end hands the slice on.
  __device__ void issue(Params const& ep, Element* smem_o, int begin, int end) {
    const int ct = Base::consumer_thread();
    const int wg = ct / 128;
    const int tid = ct % 128;
    const Record r = record(smem_o, wg * 64);
    // Same word for every thread; the broadcast tells ptxas so (a branch it must treat as
    // divergent here made it move the mainloop's wgmma descriptors out of uniform registers).
    if (__shfl_sync(0xffffffffu, r.ints1[1], 0) == 0) return;
    const uint32_t bar = static_cast<uint32_t>(attention::NamedBarrierId::epilogue_wg0) + wg;
    const bool record_spans = ep.dest.u.spans != nullptr;
    const uint64_t t0 = record_spans ? clock64() : 0;
    const int row_begin = r.ints0[3];
    const int row_end = r.ints1[0];
    const int split = *r.split;
    const int64_t stride = *r.stride;
    const Element* src_rows = smem_o + (wg * 64) * Base::kSmemPitch;
#pragma unroll 1
    for (int it = begin; it < end; ++it) {
      const int idx = tid + it * 128;
      const int i = idx / Base::kChunksPerRow;  // row of the slice
      const int chunk = idx % Base::kChunksPerRow;
      const int row = row_begin + i;
      if (row < row_end) {
        const uint4 v = *reinterpret_cast<const uint4*>(src_rows + i * Base::kSmemPitch + chunk * Base::kElemsPerChunk);
        Element* dst = row < split ? *r.base0 + i * stride : *r.base1 + (row - split) * stride;
        *reinterpret_cast<uint4*>(dst + chunk * Base::kElemsPerChunk) = v;
      }
    }
    const bool done = end == Base::kIters;
    // The slice is handed on only after every thread's stores were issued; span records
    // measure the whole group's chunk, so they wait for it too.
    if (done || record_spans) cutlass::arch::NamedBarrier::sync(128, bar);
    if (tid == 0) {
      if (record_spans) *r.cycles += clock64() - t0;
      if (done) {
        const EpilogueTile t{r.ints0[0], r.ints0[1], r.ints0[2], row_begin, row_end};
        Base::slice_stored(ep, smem_o, t, *r.cycles);
        r.ints1[1] = 0;
      }
    }
  }
};

}  // namespace xstage::kernels::ulysses
