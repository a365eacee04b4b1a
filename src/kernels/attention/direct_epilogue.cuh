// An epilogue policy without shared-memory staging: every consumer thread writes its O
// accumulator pairs straight to this GPU's output (4-byte stores of two 16-bit values).
//
// Why it exists: the staged TileStoreEpilogue needs block_m x (d + 8) elements of shared
// memory, which a 128 x 192 key block leaves no room for. For long sequences the output is a
// tiny share of the traffic (32 KiB per 128-row tile against ~1 GFLOP of work), so the
// coalescing the staging buys does not matter there. Local output only: destinations that
// need whole rows (Ulysses' remote stores) keep the staged policy.
//
// Tail split (kTailSplit, see tile_scheduler.cuh): a part of a split tile leaves its
// normalised O and its LSE in the workspace, in the thread's own register order (each
// thread writes and later reads only its own 64 + 2 floats, so the layout needs no
// shuffles), then counts itself in the tile's counter. The part that arrives last merges:
//   lse = log(sum_s exp(lse_s)),  O = sum_s exp(lse_s - lse) O_s,
// resets the counter to 0 for the next launch, and stores O and LSE as a whole tile would.
// Ordering: stores, __threadfence, group barrier, one atomic (writer); atomic, group
// barrier, __threadfence, L2 loads (the last one). No CTA ever waits for another.
#pragma once
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_conversion.h>

#include "kernels/attention/epilogue.cuh"
#include "kernels/attention/mainloop.cuh"
#include "kernels/attention/params.hpp"
#include "kernels/attention/softmax.cuh"
#include "kernels/attention/tile_scheduler.cuh"

namespace xstage::kernels::attention {

using namespace cute;

template <class Traits>
struct DirectStoreEpilogue {
  using T = Traits;
  using Element = typename T::Element;
  using Destination = LocalDestination<Element>;
  static constexpr int kBlockM = T::kBlockM;
  static constexpr int kHeadDim = T::kHeadDim;
  static constexpr int kSmemElems = 8;  // 16 bytes: one broadcast word per consumer warp group

  struct Params {
    Destination dest;
    int q_len;
    float* ws;
    int* counters;
    int capacity;  // parts the workspace holds (0: no split)
  };
  static Params to_params(AttentionParams const& p) {
    return Params{Destination::from(p), p.q_len, p.split_workspace, p.split_counters,
                  p.split_workspace != nullptr && p.split_counters != nullptr ? p.split_capacity : 0};
  }

  static constexpr bool kHasStepHook = false;
  static constexpr bool kHasServiceThread = false;
  // The workspace layout below is sized for d = 128, block_m = 128 (split_workspace_floats).
  static constexpr bool kTailSplit = kHeadDim == 128 && kBlockM == 128 && !T::kCausal;
  __device__ static int split_capacity(Params const& ep) { return ep.capacity; }
  __device__ static void kernel_start(Params const&) {}
  __device__ static void init_shared(Element*) {}
  template <class Scheduler>
  __device__ static void service(Params const&, Element*, Scheduler const&) {}
  __device__ void step(Params const&, Element const*, int, bool) {}
  __device__ void finish(Params const&, Element const*) {}

  // All 128 threads of each consumer warp group, with the normalised fp32 O fragment.
  template <class FrgO, int kRows>
  __device__ void store(Params const& ep, Element* smem, FrgO const& tOrO, float const (&lse)[kRows],
                        WorkTile const& tile) const {
    uint32_t tid_x;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
    const int ct = static_cast<int>(tid_x) - 128;
    const int wg = ct / 128;
    const int tid = ct % 128;
    EpilogueTile t;
    t.batch = tile.batch;
    t.head = tile.head;
    t.m_block = tile.m_block;
    t.row_begin = tile.m_block * kBlockM + wg * 64;
    t.row_end = min(t.row_begin + 64, ep.q_len);

    Tensor o = make_tensor(tOrO.data(), acc_rowcol_layout(tOrO.layout()));
    static_assert(decltype(size<0>(o))::value == kRows);
    constexpr int kCols = decltype(size<1>(o))::value;
    static_assert(kCols % 2 == 0, "columns come in pairs c, c+1");

    // Per row: the factor of this part's O and the tile's LSE (1 and lse for a whole tile).
    float self_w[kRows], row_lse[kRows];
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      self_w[mi] = 1.f;
      row_lse[mi] = lse[mi];
    }
    const float* others = nullptr;  // workspace of the tile's first part (merging part only)
    int first_slot = 0;
    if constexpr (kTailSplit) {
      if (tile.splits > 1) {
        static_assert(kCols * kRows == 64 && kRows == 2, "workspace sized for d = 128 (split_workspace_floats)");
        constexpr int kPerThread = kCols * kRows + kRows;  // 66 floats
        auto slot_base = [&](int slot) { return ep.ws + ((static_cast<long long>(slot) * 2 + wg) * 128 + tid) * kPerThread; };
        float* mine = slot_base(tile.slot);
        CUTE_UNROLL
        for (int mi = 0; mi < kRows; ++mi) {
          CUTE_UNROLL
          for (int ni = 0; ni < kCols; ni += 2)
            *reinterpret_cast<float2*>(mine + mi * kCols + ni) = make_float2(o(mi, ni), o(mi, ni + 1));
          mine[kCols * kRows + mi] = lse[mi];
        }
        __threadfence();
        const uint32_t bar = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + wg;
        cutlass::arch::NamedBarrier::sync(128, bar);
        first_slot = tile.slot - tile.split;
        int* counter = ep.counters + (first_slot / tile.splits) * 2 + wg;
        int* word = reinterpret_cast<int*>(smem) + wg;
        if (tid == 0) {
          const int arrived = atomicAdd(counter, 1);
          const bool last = arrived == tile.splits - 1;
          if (last) *counter = 0;  // every part has counted itself: ready for the next launch
          *word = last ? 1 : 0;
        }
        cutlass::arch::NamedBarrier::sync(128, bar);
        // (Thread 0 rewrites the word only after the next split tile's first barrier, which
        // every thread reaches after this read.)
        const bool last = *word != 0;
        if (!last) return;
        __threadfence();
        others = slot_base(first_slot);
        // Merge the LSEs: m = max, sum = sum exp(lse_s - m).
        CUTE_UNROLL
        for (int mi = 0; mi < kRows; ++mi) {
          float m = lse[mi];
          for (int s = 0; s < tile.splits; ++s)
            if (s != tile.split) m = fmaxf(m, __ldcg(others + s * (2 * 128 * kPerThread) + kCols * kRows + mi));
          if (m == -INFINITY) {  // no key at all (rows past q_len): nothing to merge
            self_w[mi] = 0.f;
            row_lse[mi] = -INFINITY;
            continue;
          }
          float sum = __expf(lse[mi] - m);
          for (int s = 0; s < tile.splits; ++s)
            if (s != tile.split) sum += __expf(__ldcg(others + s * (2 * 128 * kPerThread) + kCols * kRows + mi) - m);
          self_w[mi] = __expf(lse[mi] - m) / sum;
          row_lse[mi] = m + __logf(sum);
        }
      }
    }

    typename T::TiledMmaPV mma_pv;
    Tensor tOcO = mma_pv.get_thread_slice(ct).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor c = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
    cutlass::NumericArrayConverter<Element, float, 2, cutlass::FloatRoundStyle::round_to_nearest> cvt;
    const bool lse_owner = get<1>(c(0, 0)) == 0;  // the quad's column-0 thread writes the row's LSE
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const int row = tile.m_block * kBlockM + get<0>(c(mi, 0));
      if (row >= t.row_end) continue;
      Element* dst = static_cast<Element*>(ep.dest.destination(t, row).ptr);
      CUTE_UNROLL
      for (int ni = 0; ni < kCols; ni += 2) {
        cutlass::Array<float, 2> f;
        f[0] = o(mi, ni) * self_w[mi];
        f[1] = o(mi, ni + 1) * self_w[mi];
        if constexpr (kTailSplit) {
          if (others != nullptr && row_lse[mi] != -INFINITY) {
            constexpr int kPerThread = kCols * kRows + kRows;
            for (int s = 0; s < tile.splits; ++s) {
              if (s == tile.split) continue;
              const float* p = others + s * (2 * 128 * kPerThread);
              const float w = __expf(__ldcg(p + kCols * kRows + mi) - row_lse[mi]);
              const float2 v = __ldcg(reinterpret_cast<const float2*>(p + mi * kCols + ni));
              f[0] += w * v.x;
              f[1] += w * v.y;
            }
          }
        }
        *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + get<1>(c(mi, ni))) = cvt(f);
      }
      if (lse_owner) {
        float* l = ep.dest.lse_destination(t, row);
        if (l != nullptr) *l = row_lse[mi];
      }
    }
  }
};

}  // namespace xstage::kernels::attention
