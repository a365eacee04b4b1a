// An epilogue policy for this GPU's O that hands each warp group's finished 64-row slice to a TMA
// store (CMake option XSTAGE_ATTN_TMA_STORE; docs/attention.md §Epilogue "TMA store").
//
// Per slice: the fp32 accumulators are converted and written with stmatrix into the group's own
// 128-byte-swizzled staging (64 rows x d, the layout the TMA box reads), the writers fence the
// async proxy, the group meets, and one thread issues the bulk tensor store and commits it. The
// hardware clips rows past q_len. Against TileStoreEpilogue's staging (32-bit shared stores, then
// per 16-byte chunk a shared load, a global store and their address arithmetic) this is 4
// (d = 64) or 8 (d = 128) stmatrix per thread and one instruction of one thread, the step cuDNN's
// kernel ends with (docs/attention.md §Key groups, "One round of tiles").
//
// The issuing thread (thread 0 of the group) keeps the store's bulk group: before the group writes
// its staging again it waits until the store has read it, and finish() waits once more before the
// CTA exits (shared memory must outlive the store's reads). LSE goes straight to global memory as
// in TileStoreEpilogue. Only the local destination: O's strides are TMA-aligned by the operator's
// checks (src/ops/attention_op.cpp, check_tensor).
#pragma once
#include <cstdint>

#include <cute/arch/copy_sm90.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_conversion.h>

#include "kernels/attention/epilogue.cuh"
#include "kernels/attention/mainloop.cuh"
#include "kernels/attention/params.hpp"

namespace xstage::kernels::attention {

using namespace cute;

template <class Traits>
struct TmaStoreEpilogue {
  using T = Traits;
  using Element = typename T::Element;
  static constexpr int kBlockM = T::kBlockM;
  static constexpr int kHeadDim = T::kHeadDim;
  using Destination = LocalDestination<Element>;

  // One warp group's slice: 64 rows x d, 128-byte swizzled (d = 128: two 64-column halves one
  // after the other), each slice 1024-byte aligned as the swizzle needs.
  using SmemLayoutSlice = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<_64, Int<kHeadDim>>{}));
  static constexpr int kSliceElems = 64 * kHeadDim;
  static constexpr int kSmemElems = kBlockM * kHeadDim;
  static constexpr int kSmemAlign = 1024;
  static_assert(cosize_v<SmemLayoutSlice> == kSliceElems);
  static_assert(kSliceElems * sizeof(Element) % 1024 == 0, "every slice keeps the swizzle's alignment");

  using GmemShape = typename T::GmemShape;  // (q_len, d, H, B), as Q
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{},
                                      make_tensor(make_gmem_ptr(static_cast<Element*>(nullptr)), GmemShape{},
                                                  typename T::GmemStrideQK{}),
                                      SmemLayoutSlice{}, Shape<_64, Int<kHeadDim>>{}, _1{}));

  struct Params {
    TmaO tma_o;
    GmemShape shape_o;
    Destination dest;  // LSE (and its strides); O goes through tma_o
    int q_len;
  };
  static Params to_params(AttentionParams const& p) {
    auto shape_o = make_shape(p.q_len, p.head_dim, p.heads, p.batch);
    Tensor mO = make_tensor(make_gmem_ptr(static_cast<Element*>(p.o)), shape_o,
                            make_stride(p.o_stride_s, _1{}, p.o_stride_h, p.o_stride_b));
    return Params{make_tma_copy(SM90_TMA_STORE{}, mO, SmemLayoutSlice{}, Shape<_64, Int<kHeadDim>>{}, _1{}), shape_o,
                  Destination::from(p), p.q_len};
  }

  static constexpr bool kHasStepHook = false;
  static constexpr bool kHasBeforeMainloop = false;
  static constexpr bool kHasServiceThread = false;
  static constexpr bool kTailSplit = false;
  static constexpr bool kSkipsEmptyGroups = true;  // nothing to store, no per-slice count

  __device__ static void kernel_start(Params const&) {}
  __device__ static void init_shared(Element*) {}
  // Thread 0 of every CTA, next to the mainloop's descriptors: the first store does not wait for it.
  __device__ static void prefetch(Params const& ep) { cute::prefetch_tma_descriptor(ep.tma_o.get_tma_descriptor()); }
  template <class Scheduler>
  __device__ static void service(Params const&, Element*, Scheduler const&) {}
  __device__ void step(Params const&, Element const*, int, bool) {}
  // After the CTA's last tile (kernel.cuh calls it for every consumer thread, also where that tile
  // was idle for its group): the issuing threads wait until their stores have read the staging,
  // which must outlive them. A thread without a pending store passes at once.
  __device__ void finish(Params const&, Element const*) {}

  // The thread index read afresh (volatile), as TileStoreEpilogue does: otherwise the compiler
  // computes the staging addresses before the mainloop and keeps them alive (spills) across it.
  __device__ static int consumer_thread() {
    uint32_t tid_x;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
    return static_cast<int>(tid_x) - 128;
  }
  __device__ static int thread_in_wg() { return consumer_thread() % 128; }
  // After the CTA's last slice, every consumer thread: the issuing threads wait until their
  // stores have read the staging.

  // Packs two fp32 values into one 32-bit register of two Elements (round to nearest).
  __device__ static uint32_t pack2(float x, float y) {
    cutlass::Array<float, 2> f;
    f[0] = x;
    f[1] = y;
    cutlass::NumericArrayConverter<Element, float, 2, cutlass::FloatRoundStyle::round_to_nearest> cvt;
    const cutlass::Array<Element, 2> h = cvt(f);
    return reinterpret_cast<uint32_t const&>(h);
  }

  // Registers -> this group's staging slice with stmatrix (m8n8, four matrices per instruction).
  // wgmma's C layout: value v of a thread is row 16 w + l / 4 + 8 ((v / 2) % 2), column 8 (v / 4)
  // + 2 (l % 4) + v % 2 (warp w, lane l), so packed pair p = v / 2 is matrix-fragment register p of
  // 8 x 8 matrix p (rows 0-7 / 8-15 alternate, then the next 8 columns). One stmatrix.x4 covers
  // the warp's 16 rows x 16 columns k: pairs 4k .. 4k + 3; lane l addresses row l % 8 of its
  // matrix l / 8. The 128-byte swizzle puts 16-byte chunk c of row r at c ^ (r % 8), and a d = 128
  // slice holds two 64-column halves of 8 KiB one after the other (SmemLayoutSlice).
  template <class FrgO, class CoordO>
  __device__ static void write_slice(Element* slice, FrgO const& tOrO, int tid, WorkTile const& tile,
                                     CoordO const& tOcO) {
    constexpr int kPairs = decltype(size(tOrO))::value / 2;
    static_assert(kPairs == kHeadDim / 4, "a thread holds 2 rows x d / 4 columns of its warp's 16 rows");
    const int lane = tid % 32;
    const int m = lane / 8;
    const int row = 16 * (tid / 32) + 8 * (m % 2) + lane % 8;
    const uint32_t base = cute::cast_smem_ptr_to_uint(slice) + row * 128;
    const uint32_t x = static_cast<uint32_t>(((m / 2) ^ (lane % 8)) * 16);
    [[maybe_unused]] const int row0 = tile.m_block * kBlockM + get<0>(tOcO(0));  // the thread's first row
    CUTE_UNROLL
    for (int k = 0; k < kHeadDim / 16; ++k) {
      uint32_t r[4];
      CUTE_UNROLL
      for (int j = 0; j < 4; ++j) {
        float f0 = tOrO(8 * k + 2 * j);
        float f1 = tOrO(8 * k + 2 * j + 1);
#ifdef XSTAGE_TEST_CORRUPT_ONE_ROW
        if (test_corrupt_row(tile.batch, tile.head, row0 + 8 * (j % 2))) f0 = -f0, f1 = -f1;
#endif
        r[j] = pack2(f0, f1);
      }
      const uint32_t addr = base + (k / 4) * (64 * 128) + ((static_cast<uint32_t>(32 * k) & 0x70u) ^ x);
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
                   "r"(r[1]), "r"(r[2]), "r"(r[3])
                   : "memory");
    }
  }

  // The bulk tensor store(s) of a slice, issued by the lane whose `issue` is set while the whole warp
  // runs this code: the predicate lives inside the instruction's asm. A branch around it that only
  // one lane takes (even an empty one, with any asm inside) cost the step loop its uniform datapath:
  // 3 % more instructions and 7 % slower steps (docs/attention.md §Epilogue policy "TMA store").
  // Coordinates and shared-memory address per instruction come from CuTe's partition, as its own
  // SM90_TMA_STORE copy reads them: its first mode holds every box of the slice (d = 128: two boxes
  // of 64 columns, ((64, 64), 2)), one instruction per kBoxElems elements in its order.
  static constexpr int kBoxElems = 64 * (128 / static_cast<int>(sizeof(Element)));  // 64 rows x 128 bytes
  template <class SrcTensor, class DstTensor>
  __device__ static void store_predicated(void const* desc, SrcTensor const& src, DstTensor const& dst, bool issue) {
    static_assert(decltype(size(src))::value == kSliceElems && decltype(size(dst))::value == kSliceElems);
    static_assert(kSliceElems % kBoxElems == 0);
    const uint64_t desc_addr = reinterpret_cast<uint64_t>(desc);
    const uint32_t pred = issue ? 1u : 0u;
    CUTE_UNROLL
    for (int i = 0; i < kSliceElems / kBoxElems; ++i) {
      const uint32_t smem = cute::cast_smem_ptr_to_uint(raw_pointer_cast(src.data() + src.layout()(i * kBoxElems)));
      const auto c = dst(i * kBoxElems);
      constexpr int kRank = decltype(rank(c))::value;
      static_assert(kRank == 4 || kRank == 5, "O is (q_len, d, H, B): 4 or 5 tensor-map dimensions");
      if constexpr (kRank == 4) {
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
            " @p cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n}\n" ::"l"(desc_addr),
            "r"(smem), "r"(static_cast<int32_t>(get<0>(c))), "r"(static_cast<int32_t>(get<1>(c))),
            "r"(static_cast<int32_t>(get<2>(c))), "r"(static_cast<int32_t>(get<3>(c))), "r"(pred)
            : "memory");
      } else {
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %7, 0;\n"
            " @p cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n}\n" ::"l"(desc_addr),
            "r"(smem), "r"(static_cast<int32_t>(get<0>(c))), "r"(static_cast<int32_t>(get<1>(c))),
            "r"(static_cast<int32_t>(get<2>(c))), "r"(static_cast<int32_t>(get<3>(c))),
            "r"(static_cast<int32_t>(get<4>(c))), "r"(pred)
            : "memory");
      }
    }
  }

  template <class FrgO, int kRows>
  __device__ void store(Params const& ep, Element* smem_o, FrgO const& tOrO, float const (&lse)[kRows],
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
    Tensor tOcO = mma_pv.get_thread_slice(ct).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    store_lse_rows(ep.dest, t, tOcO, lse, tile.m_block * kBlockM);

    // The group's previous store has read the staging (its issuing thread waits), then all write.
    // Warp 0 of the group as a whole (a warp-uniform branch): the store's issue and waits.
    const bool issuer_warp = __shfl_sync(0xffffffffu, tid / 32, 0) == 0;
    if (issuer_warp) tma_store_wait<0>();
    cutlass::arch::NamedBarrier::sync(128, bar);
    write_slice(smem_o + wg * kSliceElems, tOrO, tid, tile, tOcO);
    cutlass::arch::fence_view_async_shared();  // the writes, visible to the TMA unit
    cutlass::arch::NamedBarrier::sync(128, bar);
    // A slice wholly past q_len (the 192-row tile's last group) issues nothing; its writes are
    // harmless. (An early return here, around the barriers, cost the step loop its uniform
    // datapath, as a one-lane branch does: store_predicated.)
    if (issuer_warp) {
      Tensor sO = make_tensor(make_smem_ptr(smem_o + wg * kSliceElems), SmemLayoutSlice{});
      Tensor mO = ep.tma_o.get_tma_tensor(ep.shape_o)(_, _, tile.head, tile.batch);
      Tensor gO = local_tile(mO, Shape<_64, Int<kHeadDim>>{}, make_coord(t.row_begin / 64, _0{}));
      auto tma = ep.tma_o.get_slice(_0{});
      store_predicated(ep.tma_o.get_tma_descriptor(), tma.partition_S(sO), tma.partition_D(gO),
                       tid == 0 && t.row_end > t.row_begin);
      tma_store_arrive();  // every lane: empty bulk groups for all but the issuing one
    }
  }
};

// The local-output kernels' epilogue (kernel.cuh): the TMA store with XSTAGE_ATTN_TMA_STORE, else the
// staged 16-byte row stores.
#ifndef XSTAGE_ATTN_TMA_STORE
#define XSTAGE_ATTN_TMA_STORE 0
#endif
template <class Traits>
using LocalStoreEpilogue =
    cute::conditional_t<XSTAGE_ATTN_TMA_STORE != 0, TmaStoreEpilogue<Traits>, LocalStagedEpilogue<Traits>>;

}  // namespace xstage::kernels::attention
