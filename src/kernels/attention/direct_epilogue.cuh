// An epilogue policy without shared-memory staging: every consumer thread writes its O
// accumulator pairs straight to this GPU's output (4-byte stores of two 16-bit values).
//
// Why it exists: the staged TileStoreEpilogue needs block_m x d (+ 8 padded) elements of shared
// memory, which the 128 x 192 long-key tile (2 x 48 KiB of K and of V) leaves no room for. For long
// sequences the output is a tiny share of the traffic (32 KiB per 128-row tile against
// ~1 GFLOP of work), so the coalescing the staging buys does not matter there.
//
// Destinations (epilogue.cuh's interface): each row's address comes from destination(t, row)
// (a row of a Ulysses slice may belong to another rank than the next). A destination with the
// tile-stored hook gets, per 64-row slice, the warp group's barrier after its stores and then
// tile_stored; one with a service thread also gets the handshake of epilogue.cuh: the first
// stores wait for the receivers' readiness, and every slice is handed over for publishing
// (three words in this policy's 16 bytes of shared memory). Only the local destination splits
// tiles (the parts and their merge write this GPU's output).
//
// Tail split (kTailSplit, see tile_scheduler.cuh): a part of a split tile leaves its
// normalised O and its LSE in the workspace, in the thread's own register order (no shuffles),
// thread index fastest: the warp's 32 float2 stores of one register pair are one 256-byte line,
// and so are the merge's loads (in a thread-major layout every access of a warp is its own
// sector). A second, small
// kernel (merge_split_parts, launched after the attention kernel on the same stream) merges
// each split tile's parts in part order and stores O and LSE as a whole tile would. The
// merge used to run in the attention kernel (the last part to finish merged, found with
// per-tile counters): its code alone cost the hot loop 14 uniform moves per key block and
// slowed every long shape (docs/attention.md §Tail split); storing the parts costs nothing there.
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

template <class Traits, class Destination_>
struct DirectStoreEpilogueTo {
  using T = Traits;
  using Element = typename T::Element;
  using Destination = Destination_;
  static constexpr bool kLocal = std::is_same_v<Destination, LocalDestination<Element>>;
  static constexpr int kBlockM = T::kBlockM;
  static constexpr int kHeadDim = T::kHeadDim;
  static constexpr int kSmemElems = 8;  // 16 bytes: the service thread's handshake words

  struct Params {
    Destination dest;
    int q_len;
    float* ws = nullptr;
    int capacity = 0;  // parts the workspace holds (0: no split)
  };
  static Params to_params(AttentionParams const& p) requires kLocal {
    return Params{Destination::from(p), p.q_len, p.split_workspace,
                  p.split_workspace != nullptr ? p.split_capacity : 0};
  }

  static constexpr bool kHasStepHook = false;
  static constexpr bool kHasBeforeMainloop = false;
  static constexpr bool kHasServiceThread = HasService<Destination>;
  static_assert(!kHasServiceThread || Destination::kNeedsTileStoredHook, "the service thread needs slice hand-overs");
  // The workspace layout below: 2 consumer warp groups of 64 rows (block_m = 128), d <= 128
  // (split_part_floats sizes parts for d = 128; d = 64 parts are half as large).
  static constexpr bool kTailSplit = kLocal && (kHeadDim == 128 || kHeadDim == 64) && kBlockM == 128 && !T::kCausal;
  static int host_split_capacity(Params const& ep) { return ep.capacity; }
  // Handshake words (kHasServiceThread): [0] receivers ready, [1 + wg] slices handed over.
  __device__ static uint32_t* word(Element* smem, int i) { return reinterpret_cast<uint32_t*>(smem) + i; }
  static_assert(kSmemElems * sizeof(Element) >= (1 + kBlockM / 64) * sizeof(uint32_t), "handshake words");
  __device__ static void kernel_start(Params const& ep) {
    if constexpr (HasKernelStart<Destination>) ep.dest.kernel_start();
  }
  __device__ static void init_shared(Element* smem) {
    if constexpr (kHasServiceThread)
      for (int i = 0; i <= kBlockM / 64; ++i) *word(smem, i) = 0;
  }
  template <class Scheduler>
  __device__ static void service(Params const& ep, Element* smem, Scheduler const& sched) {
    if constexpr (kHasServiceThread)
      run_service_thread<kBlockM>(ep.dest, ep.q_len, sched, word(smem, 0), [&](int wg) { return word(smem, 1 + wg); });
  }
  __device__ void step(Params const&, Element const*, int, bool) {}
  __device__ void finish(Params const&, Element const*) {}

  // Workspace floats per thread and part: d / 2 O values (2 rows x d / 4 columns), then the 2
  // row LSEs. One warp group's block: [O pair q][thread] float2s, then [row][thread] LSEs.
  static constexpr int kPartO = kHeadDim / 2;
  static constexpr int kPerThread = kPartO + 2;
  static constexpr int kWgFloats = 128 * kPerThread;
  // Floats of one part (2 warp groups x 128 threads); params.hpp sizes parts for d = 128.
  static constexpr long long kPartFloats = 2LL * kWgFloats;
  static_assert(split_part_floats() >= kPartFloats, "params.hpp sizes the workspace for at most d = 128");

  // All 128 threads of each consumer warp group, with the normalised fp32 O fragment.
  template <class FrgO, int kRows>
  __device__ void store(Params const& ep, Element* smem, FrgO const& tOrO, float const (&lse)[kRows],
                        WorkTile const& tile) const {
    uint32_t tid_x;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
    const int ct = static_cast<int>(tid_x) - 128;
    Tensor o = make_tensor(tOrO.data(), acc_rowcol_layout(tOrO.layout()));
    static_assert(decltype(size<0>(o))::value == kRows);
    constexpr int kCols = decltype(size<1>(o))::value;
    static_assert(kCols % 2 == 0, "columns come in pairs c, c+1");
    if constexpr (kTailSplit) {
      if (tile.splits > 1) {
        // A part: its O and LSE to the workspace; merge_split_parts does the rest.
        static_assert(kCols * kRows == kPartO && kRows == 2, "workspace layout (kPartO)");
        float* wg = wg_base(ep, tile.slot, ct);
        const int t = ct % 128;
        CUTE_UNROLL
        for (int mi = 0; mi < kRows; ++mi) {
          CUTE_UNROLL
          for (int ni = 0; ni < kCols; ni += 2)
            *reinterpret_cast<float2*>(wg + pair_offset((mi * kCols + ni) / 2, t)) = make_float2(o(mi, ni), o(mi, ni + 1));
          wg[lse_offset(mi, t)] = lse[mi];
        }
        return;
      }
    }
    const EpilogueTile t = slice_of(ep, tile, ct);
    typename T::TiledMmaPV mma_pv;
    Tensor tOcO = mma_pv.get_thread_slice(ct).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor c = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
    cutlass::NumericArrayConverter<Element, float, 2, cutlass::FloatRoundStyle::round_to_nearest> cvt;
    const bool lse_owner = get<1>(c(0, 0)) == 0;  // the quad's column-0 thread writes the row's LSE
    [[maybe_unused]] const uint32_t bar = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + ct / 128;
    [[maybe_unused]] uint64_t issue_begin = 0;
    if constexpr (kHasServiceThread) wait_service_ready(word(smem, 0), bar, ct % 128);
    if constexpr (Destination::kNeedsTileStoredHook) issue_begin = clock64();
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const int row = tile.m_block * kBlockM + get<0>(c(mi, 0));
      if (row >= t.row_end) continue;
      Element* dst = static_cast<Element*>(ep.dest.destination(t, row).ptr);
      CUTE_UNROLL
      for (int ni = 0; ni < kCols; ni += 2) {
        cutlass::Array<float, 2> f;
        f[0] = o(mi, ni);
        f[1] = o(mi, ni + 1);
#ifdef XSTAGE_TEST_CORRUPT_ONE_ROW
        if constexpr (kLocal)
          if (test_corrupt_row(tile.batch, tile.head, row)) f[0] = -f[0], f[1] = -f[1];  // test-only (epilogue.cuh)
#endif
        *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + get<1>(c(mi, ni))) = cvt(f);
      }
      if (lse_owner) {
        float* l = ep.dest.lse_destination(t, row);
        if (l != nullptr) *l = lse[mi];
      }
    }
    if constexpr (Destination::kNeedsTileStoredHook) {
      // Every store of the slice issued: span record and (service thread) the hand-over.
      cutlass::arch::NamedBarrier::sync(128, bar);
      if (ct % 128 == 0) {
        ep.dest.tile_stored(t, clock64() - issue_begin);
        if constexpr (kHasServiceThread) hand_over_slice(word(smem, 1 + ct / 128));
      }
    }
  }

 private:
  __device__ static EpilogueTile slice_of(Params const& ep, WorkTile const& tile, int ct) {
    EpilogueTile t;
    t.batch = tile.batch;
    t.head = tile.head;
    t.m_block = tile.m_block;
    t.row_begin = tile.m_block * kBlockM + (ct / 128) * 64;
    t.row_end = min(t.row_begin + 64, ep.q_len);
    return t;
  }
  // The block of consumer thread ct's warp group in part `slot`.
  __device__ static float* wg_base(Params const& ep, int slot, int ct) {
    return ep.ws + (static_cast<long long>(slot) * 2 + ct / 128) * kWgFloats;
  }
  // Float offsets in a warp group's block: O pair q of thread t, the LSE of row mi of thread t.
  __device__ static constexpr int pair_offset(int q, int t) { return (q * 128 + t) * 2; }
  __device__ static constexpr int lse_offset(int mi, int t) { return kPartO * 128 + mi * 128 + t; }

  // Merge kernel side (one CTA of 256 threads per split tile, thread ct = the consumer
  // thread that wrote the parts): lse = m + log(sum_s exp(lse_s - m)),
  // O = sum_s exp(lse_s - lse) O_s, summed in part order (deterministic). A row's d / 4 column
  // pairs are loaded together per part (independent loads in flight).
 public:
  __device__ static void merge_parts(Params const& ep, WorkTile const& tile, int first_slot, int splits, int ct) {
    const EpilogueTile t = slice_of(ep, tile, ct);
    typename T::TiledMmaPV mma_pv;
    Tensor tOcO = mma_pv.get_thread_slice(ct).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor c = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
    constexpr int kRows = decltype(size<0>(c))::value;
    constexpr int kCols = decltype(size<1>(c))::value;
    static_assert(kRows * kCols == kPartO);
    const int th = ct % 128;
    const float* first = wg_base(ep, first_slot, ct);  // part s: first + s * kPartFloats
    cutlass::NumericArrayConverter<Element, float, 2, cutlass::FloatRoundStyle::round_to_nearest> cvt;
    const bool lse_owner = get<1>(c(0, 0)) == 0;
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const int row = tile.m_block * kBlockM + get<0>(c(mi, 0));
      if (row >= t.row_end) continue;
      float part_lse[kMaxSplitParts];
      float m = -INFINITY;
      CUTE_UNROLL
      for (int s = 0; s < kMaxSplitParts; ++s) {
        part_lse[s] = s < splits ? first[s * kPartFloats + lse_offset(mi, th)] : -INFINITY;
        m = fmaxf(m, part_lse[s]);
      }
      float sum = 0.f;
      CUTE_UNROLL
      for (int s = 0; s < kMaxSplitParts; ++s)
        if (s < splits) sum += __expf(part_lse[s] - m);
      const float row_lse = m + __logf(sum);  // every part holds at least one key: m is finite
      float acc[kCols];
      CUTE_UNROLL
      for (int ni = 0; ni < kCols; ++ni) acc[ni] = 0.f;
      CUTE_UNROLL
      for (int s = 0; s < kMaxSplitParts; ++s) {
        if (s >= splits) break;
        const float w = __expf(part_lse[s] - row_lse);
        const float* p = first + s * kPartFloats;
        float2 v[kCols / 2];
        CUTE_UNROLL
        for (int ni = 0; ni < kCols; ni += 2)
          v[ni / 2] = *reinterpret_cast<const float2*>(p + pair_offset((mi * kCols + ni) / 2, th));
        CUTE_UNROLL
        for (int ni = 0; ni < kCols; ni += 2) {
          acc[ni] += w * v[ni / 2].x;
          acc[ni + 1] += w * v[ni / 2].y;
        }
      }
      Element* dst = static_cast<Element*>(ep.dest.destination(t, row).ptr);
      CUTE_UNROLL
      for (int ni = 0; ni < kCols; ni += 2) {
        cutlass::Array<float, 2> f;
        f[0] = acc[ni];
        f[1] = acc[ni + 1];
#ifdef XSTAGE_TEST_CORRUPT_ONE_ROW
        if (test_corrupt_row(tile.batch, tile.head, row)) f[0] = -f[0], f[1] = -f[1];  // test-only (epilogue.cuh)
#endif
        *reinterpret_cast<cutlass::Array<Element, 2>*>(dst + get<1>(c(mi, ni))) = cvt(f);
      }
      if (lse_owner) {
        float* l = ep.dest.lse_destination(t, row);
        if (l != nullptr) *l = row_lse;
      }
    }
  }
};

template <class Traits>
using DirectStoreEpilogue = DirectStoreEpilogueTo<Traits, LocalDestination<typename Traits::Element>>;

}  // namespace xstage::kernels::attention
