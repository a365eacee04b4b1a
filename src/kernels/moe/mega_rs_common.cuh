// What the register-operand Mega-MoE kernels (mega_w4a8_rs_kernel.cuh, mega_w4a8_tok_kernel.cuh)
// share beyond mega_common.cuh: their start (stage barriers, conversion table, tile queue) and
// token boxes sized to the rows a tile holds (docs/megamoe.md "Per-token activations in the fused
// kernel"): a token piece of few rows is loaded by a 32- or 64-row TMA box of its own
// descriptor into the start of the piece's slot instead of the full kPieceT-row box. The
// 128-byte swizzle is by address, so its rows land where the full box puts them; the slot's other
// rows are stale, and their token columns of the products are never stored. With few rows per
// expert every block is such a piece, and a full token box per K block would move as many bytes
// through L2 as the weights it multiplies, or more.
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "kernels/moe/params_w4a8.hpp"
#include "kernels/moe/w4a8_convert.cuh"

namespace xstage::kernels::moe {

// T: the kernel's W4RsTraits (Element, kBlockK, kPieceT, ShapeX, StrideX).
template <class T>
struct MegaTokenBoxes {
  template <int kRows>
  using SmemLayoutRows = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<typename T::Element>{},
                                                      cute::Shape<cute::Int<kRows>, cute::Int<T::kBlockK>>{}));
  template <int kRows>
  using TmaRows = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{},
      cute::make_tensor(cute::make_gmem_ptr(static_cast<typename T::Element const*>(nullptr)), typename T::ShapeX{},
                        typename T::StrideX{}),
      SmemLayoutRows<kRows>{}, cute::Shape<cute::Int<kRows>, cute::Int<T::kBlockK>>{}, cute::Int<1>{}));

  static constexpr bool kSmall64 = T::kPieceT > 64;  // a 64-row box is smaller than the piece
  TmaRows<32> x32;
  TmaRows<64> x64;  // used where kSmall64 (else never read: the piece's own box serves)

  // Host: both boxes over the GEMM's token matrix g.a [m_total, k].
  static MegaTokenBoxes make(MoeW4A8Params const& g) {
    using namespace cute;
    Tensor mX = make_tensor(make_gmem_ptr(static_cast<typename T::Element const*>(g.a)), make_shape(g.m_total, g.k),
                            make_stride(static_cast<int64_t>(g.k), _1{}));
    return MegaTokenBoxes{make_tma_copy(SM90_TMA_LOAD{}, mX, SmemLayoutRows<32>{}, Shape<_32, Int<T::kBlockK>>{}, Int<1>{}),
                          make_tma_copy(SM90_TMA_LOAD{}, mX, SmemLayoutRows<64>{}, Shape<_64, Int<T::kBlockK>>{}, Int<1>{})};
  }

  // The box height for a piece of `rows` (1..kPieceT) tokens.
  __device__ static int rows_for(int rows) { return rows <= 32 ? 32 : (rows <= 64 || T::kPieceT <= 64) ? 64 : T::kPieceT; }

  // A box of kRows x kBlockK of the token matrix (rows row0.., K block kb) into the slot at `slot`
  // (shared memory, 1024-byte aligned), completing on barrier `full`.
  template <int kRows, class Tma, class ShapeX>
  __device__ static void load(Tma const& tma, ShapeX const& shape_x, void* slot, uint64_t* full, int row0, int kb) {
    using namespace cute;
    Tensor mX = tma.get_tma_tensor(shape_x);
    Tensor gX = local_tile(domain_offset(make_coord(row0, 0), mX), Shape<Int<kRows>, Int<T::kBlockK>>{},
                           make_coord(_0{}, kb));
    Tensor sX = make_tensor(make_smem_ptr(reinterpret_cast<typename T::Element*>(slot)), SmemLayoutRows<kRows>{});
    auto cta = tma.get_slice(0);
    copy(tma.with(*full), cta.partition_S(gX), cta.partition_D(sX));
  }
  // The piece's box: 32 or 64 rows through load, else false (the caller's full box).
  template <class ShapeX>
  __device__ bool load_small(ShapeX const& shape_x, int box, void* slot, uint64_t* full, int row0, int kb) const {
    if (box == 32) load<32>(x32, shape_x, slot, full, row0, kb);
    else if (box == 64 && T::kPieceT > 64) load<64>(x64, shape_x, slot, full, row0, kb);
    else return false;
    return true;
  }
};

// Thread 0 at the kernel's start: each stage's full barrier (full_arrivals: the TMA thread plus
// any scale lanes) and empty barrier (one arrival per consumer warp), the conversion table (INT4:
// e4m3(0..7), unused by the two-level format whose rows bring their own; MXFP4:
// e4m3({0, 1/2, 1, 3/2, 2, 3, 4, 6} * 2^6), shifted per sub-block: w4a8_rs.cuh), the tile queue
// with `readers` reading every position, both GEMMs' token descriptors (full and small boxes)
// prefetched.
template <bool kMx, class RsStorage, class Queue, class GemmParams, class Boxes>
__device__ __forceinline__ void mega_rs_setup(RsStorage& rs, int stages, uint32_t full_arrivals, uint32_t consumer_warps,
                                              typename Queue::Storage& queue, uint32_t readers, GemmParams const& l1,
                                              GemmParams const& l2, Boxes const& b1, Boxes const& b2) {
  for (int i = 0; i < stages; ++i) {
    cutlass::arch::ClusterTransactionBarrier::init(&rs.full[i], full_arrivals);
    cutlass::arch::ClusterBarrier::init(&rs.empty[i], consumer_warps);
  }
  const W4Lut l = int4_lut();
  rs.lut[0] = rs.lut[2] = kMx ? 0x6C686000u : l.p0;
  rs.lut[1] = rs.lut[3] = kMx ? 0x7C787470u : l.p1;
  Queue::init(queue, readers);
  cute::prefetch_tma_descriptor(l1.tma_x.get_tma_descriptor());
  cute::prefetch_tma_descriptor(l2.tma_x.get_tma_descriptor());
  for (Boxes const* b : {&b1, &b2}) {
    cute::prefetch_tma_descriptor(b->x32.get_tma_descriptor());
    if constexpr (Boxes::kSmall64) cute::prefetch_tma_descriptor(b->x64.get_tma_descriptor());
  }
}

}  // namespace xstage::kernels::moe
