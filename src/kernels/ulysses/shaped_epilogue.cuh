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
  static constexpr int kIters = Base::kIters;
  static constexpr bool kHasStepHook = true;
  static_assert(Base::kSmemPitch - Base::kHeadDim >= 16 / static_cast<int>(sizeof(Element)),
                "the pending-slice record lives in the staging rows' 16-byte padding");

  // Progress of this warp group's pending slice: the only register this policy keeps across
  // the mainloop (the d64 kernel has none to spare). The slice's coordinates and span cycles
  // live in the unused 16-byte padding of the warp group's first two staging rows.
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
    // Thread 0 records the slice; the barrier makes it visible to the warp group.
    if (Base::thread_in_wg() == 0) {
      int* rec = record(smem_o, t);
      rec[0] = t.batch;
      rec[1] = t.head;
      rec[2] = t.m_block;
      rec[3] = t.row_begin;
      rec[kRecordRow1 + 0] = t.row_end;
      *cycles_slot(smem_o, t) = 0;
    }
    cutlass::arch::NamedBarrier::sync(128, Base::epilogue_barrier(t));
    next_it = 0;
  }

 private:
  static constexpr int kRecordRow1 = Base::kSmemPitch * static_cast<int>(sizeof(Element)) / 4;  // ints per row

  // Padding of the warp group's first staging row (row 1's padding follows one pitch later).
  __device__ static int* record_at(Element* smem_o, int wg_first_row) {
    return reinterpret_cast<int*>(smem_o + wg_first_row * Base::kSmemPitch + Base::kHeadDim);
  }
  __device__ static int* record(Element* smem_o, EpilogueTile const& t) {
    return record_at(smem_o, t.row_begin - t.m_block * Base::kBlockM);
  }
  __device__ static uint64_t* cycles_slot(Element* smem_o, EpilogueTile const& t) {
    return reinterpret_cast<uint64_t*>(record(smem_o, t) + kRecordRow1 + 2);
  }
  __device__ static EpilogueTile pending(Element* smem_o) {
    const int wg = Base::consumer_thread() / 128;
    const int* rec = record_at(smem_o, wg * 64);
    return EpilogueTile{rec[0], rec[1], rec[2], rec[3], rec[kRecordRow1 + 0]};
  }

  __device__ void issue(Params const& ep, Element* smem_o, int n) {
    const int tid = Base::thread_in_wg();
    const EpilogueTile t = pending(smem_o);
    const int end = min(next_it + n, kIters);
    const bool record_spans = ep.dest.u.spans != nullptr;
    const uint64_t t0 = record_spans ? clock64() : 0;
    Base::copy_out(ep, smem_o, t, tid, next_it, end);
    next_it = end;
    const uint32_t bar = Base::epilogue_barrier(t);
    if (record_spans) {
      // Span records only (a separate, untimed pass): the chunk counts once all 128
      // threads issued it, as the plain policy's span does.
      cutlass::arch::NamedBarrier::sync(128, bar);
      if (tid == 0) *cycles_slot(smem_o, t) += clock64() - t0;
    }
    if (next_it == kIters) {
      cutlass::arch::NamedBarrier::sync(128, bar);
      if (tid == 0) ep.dest.tile_stored(t, *cycles_slot(smem_o, t));
    }
  }
};

}  // namespace xstage::kernels::ulysses
