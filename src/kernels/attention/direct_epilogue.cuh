// An epilogue policy without shared-memory staging: every consumer thread writes its O
// accumulator pairs straight to this GPU's output (4-byte stores of two 16-bit values).
//
// Why it exists: the staged TileStoreEpilogue needs block_m x (d + 8) elements of shared
// memory, which the 128 x 192 long-key tile (2 x 48 KiB of K and of V) leaves no room for. For long
// sequences the output is a tiny share of the traffic (32 KiB per 128-row tile against
// ~1 GFLOP of work), so the coalescing the staging buys does not matter there. Local output
// only: destinations that need whole rows (Ulysses' remote stores) keep the staged policy.
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

#include "kernels/attention/epilogue.cuh"
#include "kernels/attention/mainloop.cuh"
#include "kernels/attention/params.hpp"

namespace xstage::kernels::attention {

using namespace cute;

template <class Traits>
struct DirectStoreEpilogue {
  using T = Traits;
  using Element = typename T::Element;
  using Destination = LocalDestination<Element>;
  static constexpr int kBlockM = T::kBlockM;
  static constexpr int kHeadDim = T::kHeadDim;
  static constexpr int kSmemElems = 8;  // nothing staged; a token array keeps the storage struct simple

  struct Params {
    Destination dest;
    int q_len;
  };
  static Params to_params(AttentionParams const& p) { return Params{Destination::from(p), p.q_len}; }

  static constexpr bool kHasStepHook = false;
  static constexpr bool kHasServiceThread = false;
  __device__ static void kernel_start(Params const&) {}
  __device__ static void init_shared(Element*) {}
  template <class Scheduler>
  __device__ static void service(Params const&, Element*, Scheduler const&) {}
  __device__ void step(Params const&, Element const*, int, bool) {}
  __device__ void finish(Params const&, Element const*) {}

  // All 128 threads of each consumer warp group, with the normalised fp32 O fragment.
  template <class FrgO, int kRows>
  __device__ void store(Params const& ep, Element*, FrgO const& tOrO, float const (&lse)[kRows],
                        WorkTile const& tile) const {
    uint32_t tid_x;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
    const int ct = static_cast<int>(tid_x) - 128;
    EpilogueTile t;
    t.batch = tile.batch;
    t.head = tile.head;
    t.m_block = tile.m_block;
    t.row_begin = tile.m_block * kBlockM + (ct / 128) * 64;
    t.row_end = min(t.row_begin + 64, ep.q_len);
    if (t.row_end <= t.row_begin) return;

    typename T::TiledMmaPV mma_pv;
    Tensor tOcO = mma_pv.get_thread_slice(ct).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor o = make_tensor(tOrO.data(), acc_rowcol_layout(tOrO.layout()));
    Tensor c = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
    static_assert(decltype(size<0>(o))::value == kRows);
    static_assert(decltype(size<1>(o))::value % 2 == 0, "columns come in pairs c, c+1");
    cutlass::NumericArrayConverter<Element, float, 2, cutlass::FloatRoundStyle::round_to_nearest> cvt;
    const bool lse_owner = get<1>(c(0, 0)) == 0;  // the quad's column-0 thread writes the row's LSE
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const int row = tile.m_block * kBlockM + get<0>(c(mi, 0));
      if (row >= t.row_end) continue;
      Element* dst = static_cast<Element*>(ep.dest.destination(t, row).ptr);
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(o); ni += 2) {
        cutlass::Array<float, 2> f;
        f[0] = o(mi, ni);
        f[1] = o(mi, ni + 1);
        *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + get<1>(c(mi, ni))) = cvt(f);
      }
      if (lse_owner) {
        float* l = ep.dest.lse_destination(t, row);
        if (l != nullptr) *l = lse[mi];
      }
    }
  }
};

}  // namespace xstage::kernels::attention
