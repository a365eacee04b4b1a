// fused-shaped: an epilogue policy that does not store a finished O slice at once. It stages
// the slice in shared memory (as the plain policy does) and then, at every mainloop step of
// the *next* tile, hands `chunk` of its rows to the TMA engine (one cp.async.bulk per row,
// shared -> the owner rank's output over NVLink), so the remote stores leave in small bursts
// separated by compute instead of one burst per tile. The chunk comes from the Burst-Gap
// model (src/model/ulysses_plan.cpp): a chunk of all CTAs must fit the X-Stage and drain
// within one step.
//
// Why bulk copies: the step hook runs inside the mainloop, where the consumer warp groups
// have no registers to spare (a 16-byte st.global loop there made ptxas serialise the wgmma
// instructions and halved the kernel's speed). A bulk copy is one instruction per row for
// one lane, with three operands.
//
// The staging rows of a warp group are not touched by the next mainloop (only by the next
// store()), so they hold the pending slice. The chunk grows at the last steps of a short
// mainloop so that every row has been issued when the mainloop ends; the copies' completion
// is awaited one hook later (or in the next store()), then the slice goes to the service
// thread for publication.
#pragma once
#include <cstdint>

#include "kernels/attention/epilogue.cuh"
#include "kernels/common/store.cuh"

namespace xstage::kernels::ulysses {

template <class Traits, class Destination>
struct ShapedTileEpilogue : attention::TileStoreEpilogue<Traits, Destination> {
  using Base = attention::TileStoreEpilogue<Traits, Destination>;
  using Params = typename Base::Params;
  using Element = typename Base::Element;
  using EpilogueTile = attention::EpilogueTile;
  using RowSpan = attention::RowSpan;
  static constexpr bool kHasStepHook = true;
  static constexpr int kRowBytes = Base::kHeadDim * static_cast<int>(sizeof(Element));
  static constexpr int kVecsPerRow = kRowBytes / 16;  // the plan counts 16-byte stores per thread
  static_assert(Base::kSmemPitch - Base::kHeadDim >= 16 / static_cast<int>(sizeof(Element)),
                "the pending-slice record lives in the staging rows' 16-byte padding");

  // State of the warp group's pending slice, kept in shared memory, not in a register: the
  // consumer warp groups have none to spare across the mainloop (one more live register made
  // ptxas serialise the wgmma instructions and halved the kernel's speed). `issued` = rows
  // already issued, or kAwaiting (all issued, completion not yet awaited), or kIdle. It and
  // the slice's coordinates, resolved destination and span cycles live in the unused 16-byte
  // padding of the warp group's staging rows 0, 1, 4, 5 (rows 2 and 3 carry the
  // service-thread handshake, see epilogue.cuh). Only thread 0 of the group writes it, each
  // write followed by a group barrier before anyone reads it again.
  static constexpr int kIdle = 1 << 20;
  static constexpr int kAwaiting = 1 << 19;

  // steps_left: hook calls left in this mainloop, this one included (1 = the last).
  __device__ void step(Params const& ep, Element* smem_o, int steps_left) {
    const int issued = *issued_slot(smem_o);
    if (issued == kIdle) return;
    if (issued == kAwaiting) {
      complete(ep, smem_o);
      return;
    }
    issue(ep, smem_o, issued, steps_left);
  }
  __device__ void finish(Params const& ep, Element* smem_o) {
    const int issued = *issued_slot(smem_o);
    if (issued == kIdle) return;
    if (issued != kAwaiting) issue(ep, smem_o, issued, 1);
    complete(ep, smem_o);
  }
  // Thread 0, before the CTA's first __syncthreads (kernel.cuh): no slice pending.
  __device__ static void init_shared(Element* smem_o) {
    Base::init_shared(smem_o);
    for (int wg = 0; wg < Base::kBlockM / 64; ++wg) pad(smem_o, 64 * wg + 1)[1] = kIdle;
  }

  template <class FrgO, int kRows>
  __device__ void store(Params const& ep, Element* smem_o, FrgO const& tOrO, float const (&lse)[kRows],
                        attention::WorkTile const& tile) {
    // Every row of the previous slice was issued by the mainloop's last hook call; its
    // copies must have read the staging rows before stage() overwrites them.
    if (*issued_slot(smem_o) == kAwaiting) complete(ep, smem_o);
    const EpilogueTile t = Base::stage(ep, smem_o, tOrO, lse, tile);
    dev::fence_proxy_async_smem();  // the staging writes, before the bulk copies read them
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
      }
      r.ints1[1] = t.row_begin < t.row_end ? 0 : kAwaiting;
    }
    cutlass::arch::NamedBarrier::sync(128, Base::epilogue_barrier(t));
  }

 private:
  __device__ static int* issued_slot(Element* smem_o) { return pad(smem_o, Base::consumer_thread() / 128 * 64 + 1) + 1; }

  struct Record {
    int* ints0;       // batch, head, m_block, row_begin       (row 0 padding)
    int* ints1;       // row_end, issued, cycles (u64)         (row 1 padding)
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

  // Issues the next rows: the planned chunk, or more when the steps left would not suffice.
  __device__ void issue(Params const& ep, Element* smem_o, int issued, int steps_left) {
    const int ct = Base::consumer_thread();
    const int wg = ct / 128;
    const int tid = ct % 128;
    const Record r = record(smem_o, wg * 64);
    const int row_begin = r.ints0[3];
    const int rows = r.ints1[0] - row_begin;
    const int chunk_rows = max(1, ep.dest.u.chunk_vecs * 128 / kVecsPerRow);
    const int need = (rows - issued + steps_left - 1) / steps_left;
    const int n = min(max(chunk_rows, need), rows - issued);
    const bool record_spans = ep.dest.u.spans != nullptr;
    const uint64_t t0 = record_spans ? clock64() : 0;
    if (tid < n) {
      const int i = issued + tid;  // row of the slice this lane sends
      const int row = row_begin + i;
      const int split = *r.split;
      Element* dst = row < split ? *r.base0 + int64_t(i) * *r.stride : *r.base1 + int64_t(row - split) * *r.stride;
      dev::bulk_s2g(dst, smem_o + (wg * 64 + i) * Base::kSmemPitch, kRowBytes);
      dev::bulk_commit();
    }
    issued += n;
    // Everyone has read the state; thread 0 writes the new one, seen after the next barrier
    // (the mainloop's barriers, or the ones in store()/complete()).
    cutlass::arch::NamedBarrier::sync(128, static_cast<uint32_t>(attention::NamedBarrierId::epilogue_wg0) + wg);
    if (tid == 0) {
      if (record_spans) *r.cycles += clock64() - t0;
      r.ints1[1] = issued == rows ? kAwaiting : issued;
    }
  }

  // All rows issued: wait for this thread's copies, then hand the slice to the service thread.
  __device__ void complete(Params const& ep, Element* smem_o) {
    dev::bulk_wait_all();
    dev::fence_proxy_async_global();
    const int ct = Base::consumer_thread();
    const int wg = ct / 128;
    cutlass::arch::NamedBarrier::sync(128, static_cast<uint32_t>(attention::NamedBarrierId::epilogue_wg0) + wg);
    if (ct % 128 == 0) {
      const Record r = record(smem_o, wg * 64);
      const EpilogueTile t{r.ints0[0], r.ints0[1], r.ints0[2], r.ints0[3], r.ints1[0]};
      Base::slice_stored(ep, smem_o, t, *r.cycles);
      r.ints1[1] = kIdle;
    }
  }
};

}  // namespace xstage::kernels::ulysses
