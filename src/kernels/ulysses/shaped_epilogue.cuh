// fused-shaped: an epilogue policy that does not store a finished O slice at once. It stages
// the slice in shared memory (as the plain policy does) and then issues `chunk_vecs` 16-byte
// stores per thread at every mainloop step of the *next* tile, right after that step's GEMMs
// were issued, so the remote stores leave in small bursts separated by compute instead of one
// burst per tile. chunk_vecs comes from the Burst-Gap model (src/model/ulysses_plan.cpp): a
// chunk of all CTAs must fit the X-Stage and drain within one step.
//
// The staging rows of a warp group are not touched by the next mainloop (only by the next
// store()), so they hold the pending slice; whatever is still pending when the next tile's
// epilogue starts (short tiles) or when the CTA runs out of tiles is flushed then.
#pragma once
#include <cstdint>

#include "kernels/attention/epilogue.cuh"

namespace xstage::kernels::ulysses {

template <class Traits, class Destination>
struct ShapedTileEpilogue : attention::TileStoreEpilogue<Traits, Destination> {
  using Base = attention::TileStoreEpilogue<Traits, Destination>;
  using Params = typename Base::Params;
  using Element = typename Base::Element;
  using EpilogueTile = attention::EpilogueTile;
  using RowSpan = attention::RowSpan;
  static constexpr int kIters = Base::kIters;
  static constexpr bool kHasStepHook = true;
  static_assert(Base::kSmemPitch - Base::kHeadDim >= 16 / static_cast<int>(sizeof(Element)),
                "the pending-slice record lives in the staging rows' 16-byte padding");

  // Progress of this warp group's pending slice: the only register this policy keeps across
  // the mainloop (the d64 kernel has none to spare). The slice's coordinates, its resolved
  // destination (at most two row spans: a slice may straddle a shard border) and its span
  // cycles live in the unused 16-byte padding of the warp group's staging rows 0, 1, 4, 5
  // (rows 2 and 3 carry the service-thread handshake, see epilogue.cuh).
  int next_it = kIters;  // kIters: nothing pending

  __device__ void step(Params const& ep, Element* smem_o) {
    if (next_it < kIters) issue(ep, smem_o, ep.dest.u.chunk_vecs);
  }
  __device__ void finish(Params const& ep, Element* smem_o) {
    if (next_it < kIters) issue(ep, smem_o, kIters);
  }

  template <class FrgO, int kRows>
  __device__ void store(Params const& ep, Element* smem_o, FrgO const& tOrO, float const (&lse)[kRows],
                        attention::WorkTile const& tile) {
    finish(ep, smem_o);  // the previous slice must leave the staging rows first
    const EpilogueTile t = Base::stage(ep, smem_o, tOrO, lse, tile);
    // Thread 0 records the slice and resolves its destination once (the divisions and the
    // per-rank pointer lookup stay out of the mainloop); the barrier publishes the record.
    if (Base::thread_in_wg() == 0) {
      Record r = record(smem_o, (t.row_begin - t.m_block * Base::kBlockM));
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
      } else {
        *r.split = t.row_end;
      }
    }
    cutlass::arch::NamedBarrier::sync(128, Base::epilogue_barrier(t));
    next_it = 0;
  }

 private:
  struct Record {
    int* ints0;       // batch, head, m_block, row_begin       (row 0 padding)
    int* ints1;       // row_end, -, cycles (u64)              (row 1 padding)
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

  __device__ void issue(Params const& ep, Element* smem_o, int n) {
    const int ct = Base::consumer_thread();
    const int wg = ct / 128;
    const int tid = ct % 128;
    const Record r = record(smem_o, wg * 64);
    const int row_begin = r.ints0[3];
    const int row_end = r.ints1[0];
    const int split = *r.split;
    const int64_t stride = *r.stride;
    Element* const base0 = *r.base0;
    Element* const base1 = *r.base1;
    const Element* src_rows = smem_o + (wg * 64) * Base::kSmemPitch;
    const int end = min(next_it + n, kIters);
    const bool record_spans = ep.dest.u.spans != nullptr;
    const uint64_t t0 = record_spans ? clock64() : 0;
#pragma unroll 1
    for (int it = next_it; it < end; ++it) {
      const int idx = tid + it * 128;
      const int row = row_begin + idx / Base::kChunksPerRow;
      const int chunk = idx % Base::kChunksPerRow;
      if (row < row_end) {
        const uint4 v = *reinterpret_cast<const uint4*>(src_rows + (row - row_begin) * Base::kSmemPitch +
                                                        chunk * Base::kElemsPerChunk);
        Element* dst = row < split ? base0 + (row - row_begin) * stride : base1 + (row - split) * stride;
        *reinterpret_cast<uint4*>(dst + chunk * Base::kElemsPerChunk) = v;
      }
    }
    next_it = end;
    const uint32_t bar = static_cast<uint32_t>(attention::NamedBarrierId::epilogue_wg0) + wg;
    if (record_spans) {
      // Span records only (a separate, untimed pass): the chunk counts once all 128
      // threads issued it, as the plain policy's span does.
      cutlass::arch::NamedBarrier::sync(128, bar);
      if (tid == 0) *r.cycles += clock64() - t0;
    }
    if (next_it == kIters) {
      cutlass::arch::NamedBarrier::sync(128, bar);
      if (tid == 0) {
        const EpilogueTile t{r.ints0[0], r.ints0[1], r.ints0[2], row_begin, row_end};
        Base::slice_stored(ep, smem_o, t, *r.cycles);
      }
    }
  }
};

}  // namespace xstage::kernels::ulysses
