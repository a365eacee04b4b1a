// The attention mainloop: the tile traits (shared-memory layouts, wgmma tiled MMAs, TMA
// copies), the TMA -> shared-memory pipeline, the producer (loads of Q, K, V) and the
// consumer (S = Q K^T, online softmax, O += P V) of one tile.
//
// Roles (warp specialisation): warp group 0 is the producer; only its warp 0 works, and
// only lane 0 of that warp issues TMA. Warp groups 1..W are consumers, each owning 64 rows of
// the block_m-row Q tile. K and V travel through two pipelines of `stages` buffers each:
// full barriers (transaction count = TMA bytes) tell consumers a buffer landed, empty
// barriers (one arrival per consumer warp) tell the producer it may be overwritten. Q has
// one buffer (a transaction barrier for "Q landed" and a named barrier for "every consumer
// is done with Q" before the next tile's Q may be loaded) or two in a ring like K's
// (T::kQStages).
//
// Consumer schedule per tile, n = key blocks from last to first (the first block handled
// carries the key-length tail and the causal diagonal, so only the first few need masks):
//   S_n = Q K_n^T; softmax(S_n) -> P_n;
//   for each next block m:  issue S_m = Q K_m^T and O += P_n V_n together, wait for S_m only,
//                           softmax(S_m) while the PV GEMM still runs, then wait for it,
//                           rescale O, P_m = bf16(S_m)                    [intra-WG overlap]
//   O += P_last V_last; O /= rowsum.
// With ping-pong the consumer warp groups pass a token (named barriers) so that one issues
// its GEMMs while the other runs its softmax.
#pragma once
#include <cstdint>

#include <cute/algorithm/copy.hpp>
#include <cute/algorithm/gemm.hpp>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include "kernels/attention/params.hpp"
#include "kernels/attention/softmax.cuh"
#include "kernels/attention/tile_scheduler.cuh"
#include "kernels/common/pipeline.cuh"

#ifndef XSTAGE_ATTN_INTRA_WG_OVERLAP
#define XSTAGE_ATTN_INTRA_WG_OVERLAP 1
#endif
#ifndef XSTAGE_ATTN_PINGPONG
#define XSTAGE_ATTN_PINGPONG 1
#endif
#ifndef XSTAGE_ATTN_LAZY_MAX_SKIP
#define XSTAGE_ATTN_LAZY_MAX_SKIP 1
#endif

namespace xstage::kernels::attention {

using namespace cute;

// ---------------------------------------------------------------------------------------
// Named barriers (user ids; CUTLASS adds its reserved count of 8, so these are hardware ids 8..15).
enum class NamedBarrierId : uint32_t {
  query_empty = 0,   // consumers (arrive) -> producer warp (sync): Q buffer may be reloaded
  pingpong_wg0 = 1,  // 1..3: token of consumer warp group w
  epilogue_wg0 = 4,  // 4..6: the 128 threads of consumer warp group w
  // Key-group tiles only (two consumer groups: the third group's ids 6 (epilogue) and 3 (token) are
  // free there; key_groups.cuh):
  key_merge_full = 6,   // group 1 (arrive) -> group 0 (sync): group 1's partial O is in shared memory
  key_merge_empty = 7,  // group 0 (arrive) -> group 1 (sync): the exchange buffer may be rewritten
};

// ---------------------------------------------------------------------------------------
// Tile traits: everything static about one instantiation.
// kKeyGroups_ = 2 (64-row tiles only): two consumer warp groups share the tile's 64 query rows and
// split its key blocks between them, merged at the end (key_groups.cuh; docs/attention.md §Key groups).
template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kCausal_,
          int kLazyRescale_ = 0, int kQStages_ = 1, int kKeyGroups_ = 1>
struct AttentionTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kCausal = kCausal_;
  // O's per-block rescale (see OnlineSoftmax::update_max): 0 = always; 1 = skipped in a warp
  // whose rows all kept their running max (the factor is exactly 1); 2 = as 1, and a row's
  // reference max is only raised when a block exceeds it by more than 2^8 (so almost never
  // after the first block; the probabilities then stay below 256, exact after normalising).
  static constexpr int kLazyRescale = kLazyRescale_;
  static_assert(kLazyRescale >= 0 && kLazyRescale <= 2);
  static constexpr bool kIntraWGOverlap = XSTAGE_ATTN_INTRA_WG_OVERLAP != 0;
  static constexpr int kKeyGroups = kKeyGroups_;
  static_assert(kKeyGroups == 1 || (kKeyGroups == 2 && kBlockM_ == 64 && kStages_ % 2 == 0),
                "key groups: two, on a 64-row tile, an even stage count (a stage keeps its consumer group)");
  static constexpr int kRowGroups = kBlockM / 64;  // warp groups the tiled MMAs spread the rows over
  static constexpr int kConsumerWGs = kRowGroups * kKeyGroups;
  static constexpr bool kPingPong = XSTAGE_ATTN_PINGPONG != 0 && kConsumerWGs >= 2;
  // Unmasked lazy steps exponentiate against the reference first and take the row max only when
  // a probability could exceed 2^8 (OnlineSoftmax::exponentiate_at_reference). Needs 64 more
  // registers per consumer thread for the probabilities next to the scores: d = 64 tiles of two
  // consumer groups only, the 128-row tile and the key-group tile (docs/attention.md §Softmax
  // instruction budget; on by default).
  static constexpr bool kSkipMax =
      XSTAGE_ATTN_LAZY_MAX_SKIP != 0 && kHeadDim == 64 && kConsumerWGs == 2 && kLazyRescale == 2;
  // Partial max / sum chains per softmax row: d = 64 only; at d = 128 two chains made the long
  // tiles 2-8 % slower (docs/attention.md §Softmax instruction budget).
  static constexpr int kSoftmaxWays = kHeadDim == 64 ? XSTAGE_ATTN_ROW_REDUCE_WAYS : 1;
  static constexpr int kConsumerThreads = kConsumerWGs * 128;
  static constexpr int kConsumerWarps = kConsumerThreads / 32;
  static constexpr int kThreads = kConsumerThreads + 128;
  // setmaxnreg budgets: 128*producer + kConsumerThreads*consumer <= 65536.
  static constexpr int kProducerRegs = kConsumerWGs == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;

  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim 64 or 128");
  static_assert(kBlockM % 64 == 0 && kConsumerWGs >= 1 && kConsumerWGs <= 3, "1-3 consumer warp groups");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "key block: multiple of 16, at most 256");
  static_assert(kStages >= 2, "at least two K/V buffers (the producer runs one block ahead)");
  static_assert(128 * kProducerRegs + kConsumerThreads * kConsumerRegs <= 65536, "register file");
  // Q buffers (docs/attention.md §Design "Q buffers"): with two, the producer loads the next
  // tile's Q as soon as it reaches that tile, while this tile's last key blocks still run; with
  // one, only after every consumer's last QK^T. The kernel's shared-memory check says whether two fit.
  static constexpr int kQStages = kQStages_;
  static_assert(kQStages == 1 || kQStages == 2, "one or two Q buffers");

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // S = Q K^T: (M, N, K=d)
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // O = P V:   (M, N=d, K)
  using AtomLayout = Layout<Shape<Int<kRowGroups>, _1, _1>>;             // warp group w: rows 64w..64w+63

  // S: both operands from shared memory, K-major (d contiguous for Q and K).
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, TileShapeQK, GMMA::Major::K, GMMA::Major::K>(), AtomLayout{}));
  // O: P from registers, V from shared memory, MN-major (V is [kv, d] with d contiguous).
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileShapePV, GMMA::Major::K, GMMA::Major::MN>(), AtomLayout{}));

  // 128-byte swizzled shared-memory tiles (TMA writes them, wgmma reads them).
  using SmemLayoutQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // V seen transposed, (d, n, stage), d contiguous: a 64-wide d slab holds all n rows.
  using SmemLayoutVt = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{},
                                              Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{}));

  // Global tensors as TMA sees them: (seq, d, head, batch) and, for V, (d, seq, head, batch).
  using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;
  using GmemStrideQK = Stride<int64_t, _1, int64_t, int64_t>;
  using GmemStrideVt = Stride<_1, int64_t, int64_t, int64_t>;

  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShape{},
                                                  GmemStrideQK{}),
                                      SmemLayoutQ{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShape{},
                                                  GmemStrideQK{}),
                                      take<0, 2>(SmemLayoutK{}), Shape<Int<kBlockN>, Int<kHeadDim>>{}, _1{}));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShape{},
                                                  GmemStrideVt{}),
                                      take<0, 2>(SmemLayoutVt{}), Shape<Int<kHeadDim>, Int<kBlockN>>{}, _1{}));

  // Bytes each TMA transaction delivers (out-of-bounds rows are zero-filled and still count).
  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesK = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kBytesV = kBlockN * kHeadDim * sizeof(Element);
  static_assert(cosize_v<SmemLayoutQ> == kBlockM * kHeadDim);
  static_assert(cosize_v<SmemLayoutK> == kBlockN * kHeadDim * kStages);
  static_assert(cosize_v<SmemLayoutVt> == kBlockN * kHeadDim * kStages);
};

// ---------------------------------------------------------------------------------------
// The TMA pipeline of K and V (and of two Q buffers; the bounded wait on one Q barrier): shared with the MoE
// GEMMs (kernels/common/pipeline.cuh); attention uses it without clusters and with one
// producer arrival per stage.
using dev::bounded_wait;
using dev::PipeState;
using dev::TmaPipeline;

// ptxas schedules a wgmma wait as early as its dependencies allow, and arithmetic carries
// none: left alone it hoists the "P V done" wait above the softmax and the overlap of the
// softmax with the P V GEMM is lost (seen in the SASS of CUDA 13.0). It keeps shared-memory
// stores and wgmma waits in order, so a store of a value that depends on every exponential
// pins the wait behind the softmax. The slot is private to the thread and never read.
__device__ __forceinline__ void pin_before_wait(float* slot, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(cute::cast_smem_ptr_to_uint(slot)), "f"(v) : "memory");
}

// ---------------------------------------------------------------------------------------
// wgmma over all k-blocks of one tile: C (+)= A B. zero_init: C = A B. wait >= 0: wait until
// at most `wait` wgmma groups are pending (-1: leave it in flight).
template <bool kZeroInit, int kWait, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma_tile(TiledMma& mma, TA const& tCrA, TB const& tCrB, TC& tCrC) {
  constexpr bool kRegA = !is_base_of<GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value;
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(tCrA));
  warpgroup_fence_operand(tCrC);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(tCrA); ++k) {
    cute::gemm(mma, tCrA(_, _, k), tCrB(_, _, k), tCrC);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(tCrC);
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(tCrA));
}

// ---------------------------------------------------------------------------------------
template <class Traits>
struct AttentionMainloop {
  using T = Traits;
  using Element = typename T::Element;
  static constexpr int kBlockM = T::kBlockM;
  static constexpr int kBlockN = T::kBlockN;
  static constexpr int kHeadDim = T::kHeadDim;
  static constexpr int kStages = T::kStages;
  using Pipeline = TmaPipeline<kStages>;
  using State = PipeState<kStages>;
  // Two Q buffers: a ring like K's (one arrival per consumer warp after its last QK^T). One
  // buffer keeps the transaction barrier and the query_empty named barrier.
  static constexpr int kQStages = T::kQStages;
  using QPipeline = TmaPipeline<kQStages>;
  using QState = PipeState<kQStages>;

  struct Params {
    typename T::TmaQ tma_q;
    typename T::TmaK tma_k;
    typename T::TmaV tma_v;
    typename T::GmemShape shape_q;   // (q_len, d, H, B)
    typename T::GmemShape shape_k;   // (kv_len, d, H, B)
    typename T::GmemShape shape_vt;  // (d, kv_len, H, B)
    float scale_log2;                // softmax_scale * log2(e)
    int q_len;
    int kv_len;
    int causal_key_offset;           // causal: query i sees keys j <= i + offset (0: top-left)
  };

  // Host: TMA descriptors for this call's tensors (validated by the operator beforehand).
  static Params to_params(AttentionParams const& p) {
    auto shape_q = make_shape(p.q_len, p.head_dim, p.heads, p.batch);
    auto shape_k = make_shape(p.kv_len, p.head_dim, p.heads, p.batch);
    auto shape_vt = make_shape(p.head_dim, p.kv_len, p.heads, p.batch);
    Tensor mQ = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.q)), shape_q,
                            make_stride(p.q_stride_s, _1{}, p.q_stride_h, p.q_stride_b));
    Tensor mK = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.k)), shape_k,
                            make_stride(p.k_stride_s, _1{}, p.k_stride_h, p.k_stride_b));
    Tensor mVt = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.v)), shape_vt,
                             make_stride(_1{}, p.v_stride_s, p.v_stride_h, p.v_stride_b));
    auto tma_q = make_tma_copy(SM90_TMA_LOAD{}, mQ, typename T::SmemLayoutQ{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}, _1{});
    auto tma_k = make_tma_copy(SM90_TMA_LOAD{}, mK, take<0, 2>(typename T::SmemLayoutK{}),
                               Shape<Int<kBlockN>, Int<kHeadDim>>{}, _1{});
    auto tma_v = make_tma_copy(SM90_TMA_LOAD{}, mVt, take<0, 2>(typename T::SmemLayoutVt{}),
                               Shape<Int<kHeadDim>, Int<kBlockN>>{}, _1{});
    return Params{tma_q, tma_k, tma_v, shape_q, shape_k, shape_vt,
                  p.softmax_scale * 1.44269504088896340736f, p.q_len, p.kv_len, p.causal_key_offset};
  }

  __device__ static void prefetch_descriptors(Params const& mp) {
    cute::prefetch_tma_descriptor(mp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_v.get_tma_descriptor());
  }

  // The causal key blocks of this launch's q tiles (xstage/attention_tile_order.hpp).
  __device__ static causal::TileShape causal_shape(Params const& mp) {
    return causal::TileShape{mp.q_len, mp.kv_len, kBlockM, kBlockN, mp.causal_key_offset};
  }
  // Key blocks a q tile visits: [0, n_block_max). Causal: keys up to the one the tile's last
  // valid row sees (fully masked blocks are never loaded). Always >= 1.
  __device__ static int n_block_max(Params const& mp, int m_block) {
    if constexpr (T::kCausal) return causal_shape(mp).key_blocks(m_block);
    return (mp.kv_len + kBlockN - 1) / kBlockN;
  }
  // Key blocks of one work item, [first, end): all of the tile's, or one part of a split
  // tile (non-causal only; parts differ by at most one block).
  struct KvRange {
    int first;
    int end;
  };
  __device__ static KvRange kv_range(Params const& mp, WorkTile const& tile) {
    const int n = n_block_max(mp, tile.m_block);
    if (tile.splits <= 1) return KvRange{0, n};
    return KvRange{tile.split * n / tile.splits, (tile.split + 1) * n / tile.splits};
  }
  // Blocks at or above this index hold a key after some query of the tile (causal).
  __device__ static int n_block_causal_mask_min(Params const& mp, int m_block) {
    return causal_shape(mp).first_masked_block(m_block);
  }
  // Whether a tile's first block (the key tail) needs the mask: always when causal (the
  // diagonal), else only if kv_len ends inside it. Skipping the ~130 compares and selects per
  // thread of a whole tail block shortens a one-round launch's fixed cost (docs/attention.md
  // §Key groups, "One round of tiles").
  __device__ static bool tail_block_masked(int kv_len) { return T::kCausal || kv_len % kBlockN != 0; }

  // ---------------------------------------------------------------------------------
  // Producer: run by all 32 lanes of the producer warp (one Q buffer: the named barrier needs
  // the whole warp); lane 0 issues the copies. Load order = the consumers' order of use:
  //   K[last], Q, then per step K[n] and V[n+1], finally V[0].
  // kPublish (the claimed order, two Q buffers): the tile's list position goes into the Q
  // buffer's slot q_slots[buffer] once the buffer is free and before its Q barrier is armed, so a
  // consumer reads it after that barrier's phase completes (AttentionKernel's claimed loops).
  template <bool kPublish = false, class SmemQ, class SmemK, class SmemVt>
  __device__ void load(Params const& mp, Pipeline const& pk, Pipeline const& pv, uint64_t& q_full, QPipeline const& pq,
                       QState& q_write, State& write, WorkTile const& tile, SmemQ& sQ, SmemK& sK, SmemVt& sVt,
                       volatile int* q_slots = nullptr, int position = 0) const {
    const bool leader = (threadIdx.x & 31u) == 0u;
    Tensor mQ = mp.tma_q.get_tma_tensor(mp.shape_q)(_, _, tile.head, tile.batch);    // (q_len, d)
    Tensor mK = mp.tma_k.get_tma_tensor(mp.shape_k)(_, _, tile.head, tile.batch);    // (kv_len, d)
    Tensor mVt = mp.tma_v.get_tma_tensor(mp.shape_vt)(_, _, tile.head, tile.batch);  // (d, kv_len)
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(tile.m_block, _0{}));  // (M, d)
    Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));          // (N, d, n)
    Tensor gVt = local_tile(mVt, Shape<Int<kHeadDim>, Int<kBlockN>>{}, make_coord(_0{}, _));        // (d, N, n)

    auto cta_q = mp.tma_q.get_slice(_0{});
    auto cta_k = mp.tma_k.get_slice(_0{});
    auto cta_v = mp.tma_v.get_slice(_0{});
    Tensor tQgQ = cta_q.partition_S(gQ);
    Tensor tQsQ = cta_q.partition_D(sQ);
    Tensor tKgK = group_modes<0, 3>(cta_k.partition_S(gK));    // (TMA, n)
    Tensor tKsK = group_modes<0, 3>(cta_k.partition_D(sK));    // (TMA, stage)
    Tensor tVgV = group_modes<0, 3>(cta_v.partition_S(gVt));   // (TMA, n)
    Tensor tVsV = group_modes<0, 3>(cta_v.partition_D(sVt));   // (TMA, stage)

    auto load_k = [&](int n, State st) {
      if (leader) {
        pk.producer_acquire(st, T::kBytesK);
        copy(mp.tma_k.with(pk.full_barrier(st), 0, TMA::CacheHintSm90::EVICT_LAST), tKgK(_, n), tKsK(_, st.index));
      }
    };
    auto load_v = [&](int n, State st) {
      if (leader) {
        pv.producer_acquire(st, T::kBytesV);
        copy(mp.tma_v.with(pv.full_barrier(st), 0, TMA::CacheHintSm90::EVICT_LAST), tVgV(_, n), tVsV(_, st.index));
      }
    };

    const KvRange kv = kv_range(mp, tile);
    int n = kv.end - 1;
    if constexpr (kQStages == 1) {
      load_k(n, write);
      // Q of the previous tile must be fully consumed before it is overwritten.
      __syncwarp();
      cutlass::arch::NamedBarrier::sync(T::kConsumerThreads + 32, static_cast<uint32_t>(NamedBarrierId::query_empty));
      if (leader) {
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&q_full, T::kBytesQ);
        copy(mp.tma_q.with(q_full, 0, TMA::CacheHintSm90::EVICT_FIRST), tQgQ, tQsQ);
      }
    } else {
      // The order of one buffer (a launch's first tile loads as before); the buffer was
      // released by the tile before the previous one, so Q only waits for K[last]'s stage.
      load_k(n, write);
      if (leader) {
        if constexpr (kPublish) publish_position(pq, q_write, q_slots, position);
        pq.producer_acquire(q_write, T::kBytesQ);
        copy(mp.tma_q.with(pq.full_barrier(q_write), 0, TMA::CacheHintSm90::EVICT_FIRST), tQgQ, tQsQ);
      }
      q_write.advance();
    }
    int n_prev = n;
    for (--n; n >= kv.first; --n) {
      State write_v = write;  // V trails K by one block
      write.advance();
      load_k(n, write);
      load_v(n_prev, write_v);
      n_prev = n;
    }
    load_v(n_prev, write);
    write.advance();
    if constexpr (T::kKeyGroups > 1) {
      // Key groups (key_groups.cuh): every tile takes an even number of stream positions, so that
      // with an even stage count a stage always has the same consumer group (a parity wait is sound
      // only for a consumer that saw the stage's previous phase complete). A tile with an odd number
      // of blocks ends with an empty position (no bytes) that group 1 takes.
      if ((kv.end - kv.first) & 1) {
        if (leader) {
          pk.producer_acquire(write, 0u);
          pv.producer_acquire(write, 0u);
        }
        write.advance();
      }
    }
  }

  // Claimed order, producer lane 0: wait until Q buffer q_write is free, then write the list
  // position into its slot; the caller then arms the buffer's barrier (arrive = release at CTA
  // scope), which the consumers' wait acquires. A negative position ends the consumers' loop.
  __device__ static void publish_position(QPipeline const& pq, QState q_write, volatile int* q_slots, int position) {
    static_assert(kQStages == 2, "the claimed order hands positions over through the two Q buffers");
    pq.producer_wait_empty(q_write);
    q_slots[q_write.index] = position;
    asm volatile("" ::: "memory");
  }
  // Claimed order, producer lane 0, after the last tile: the end mark in the next Q buffer, whose
  // barrier completes its phase without bytes.
  __device__ static void publish_end(QPipeline const& pq, QState q_write, volatile int* q_slots) {
    publish_position(pq, q_write, q_slots, -1);
    pq.producer_acquire(q_write, 0u);
  }

  // ---------------------------------------------------------------------------------
  // Consumer side.
  __device__ static void pingpong_sync(int wg) {
    if constexpr (T::kPingPong)
      cutlass::arch::NamedBarrier::sync(2 * 128, static_cast<uint32_t>(NamedBarrierId::pingpong_wg0) + wg);
  }
  __device__ static void pingpong_pass(int wg) {
    if constexpr (T::kPingPong) {
      const int next = wg + 1 == T::kConsumerWGs ? 0 : wg + 1;
      cutlass::arch::NamedBarrier::arrive(2 * 128, static_cast<uint32_t>(NamedBarrierId::pingpong_wg0) + next);
    }
  }
  // Once per consumer thread at kernel start: the producer may load the first Q, and
  // consumer warp group 0 holds the first ping-pong token.
  __device__ static void consumer_init(int wg) {
    if constexpr (kQStages == 1)
      cutlass::arch::NamedBarrier::arrive(T::kConsumerThreads + 32, static_cast<uint32_t>(NamedBarrierId::query_empty));
    if constexpr (T::kPingPong) {
      if (wg == 0) cutlass::arch::NamedBarrier::arrive(2 * 128, static_cast<uint32_t>(NamedBarrierId::pingpong_wg0));
    }
  }

  // After this warp group's last QK^T of a tile: its Q buffer may be reloaded.
  __device__ static void release_query(QPipeline const& pq, QState q_read) {
    if constexpr (kQStages == 1)
      cutlass::arch::NamedBarrier::arrive(T::kConsumerThreads + 32, static_cast<uint32_t>(NamedBarrierId::query_empty));
    else
      pq.consumer_release(q_read);
  }

  // One tile for one consumer thread (ct = index among consumer threads). Leaves the
  // normalised O in tOrO and the row LSEs in lse (rows as in the accumulator layout).
  // pin_slot: this thread's shared-memory scratch word (see pin_before_wait).
  // step_hook(call, last): where an epilogue policy may issue deferred stores. Called once
  // before the tile's first GEMM (no accumulator live yet, and with one Q buffer the group may
  // be waiting for the tile's Q anyway) and once per further key block after its softmax, where the fewest
  // registers are live (the other warp group's GEMMs keep the tensor cores busy meanwhile).
  // call = 0, 1, ... counts the calls of this tile; last marks the final one. Both are
  // derived from the loop counter, so a policy's "is a chunk due" test stays on uniform
  // values (a test on per-thread data here cost ptxas its uniform-register descriptors).
  //
  // hook_calls: only calls 0 .. hook_calls-1 and the last one can carry work (kHasHook false:
  // none). The unmasked key blocks past them run a copy of the step without the hook, so the
  // hot loop of a hooked kernel is the plain one (measured: the per-step test alone cost the
  // shaped Ulysses kernel 3-5% once the lazy rescale had made the step leaner).
  //
  // kSplit: the scheduler may hand out parts of a tile (tail split). Kernels without it keep
  // the whole-tile loop form: the part-aware count changed ptxas's schedule of their hot loop
  // (6 more uniform moves per key block in the staged d = 64 kernels).
  template <bool kHasHook = true, bool kSplit = false, class SmemQ, class SmemK, class SmemVt, class FrgO, int kRows, class StepHook>
  __device__ void mma(Params const& mp, Pipeline const& pk, Pipeline const& pv, uint64_t const& q_full,
                      uint32_t q_phase, QPipeline const& pq, QState q_read, State& read, WorkTile const& tile, int ct, SmemQ const& sQ, SmemK const& sK,
                      SmemVt const& sVt, FrgO& tOrO, OnlineSoftmax<kRows, T::kSoftmaxWays>& softmax, float (&lse)[kRows],
                      float* pin_slot, StepHook&& step_hook, int hook_calls = 0) const {
    const int wg = ct / 128;
    typename T::TiledMmaQK mma_qk;
    typename T::TiledMmaPV mma_pv;
    auto wg_qk = mma_qk.get_slice(wg * 128);
    auto wg_pv = mma_pv.get_slice(wg * 128);
    Tensor tSrQ = wg_qk.partition_fragment_A(sQ);   // (MMA, MMA_M, MMA_K) descriptors
    Tensor tSrK = wg_qk.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stage)
    Tensor tOrV = wg_pv.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stage)
    // This thread's (row, col) inside the tile for every score it holds.
    Tensor tScS = mma_qk.get_thread_slice(ct).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));

    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
    // P reuses the accumulator's register order, read as the A operand of O += P V.
    Tensor tSrS_as_a = make_tensor(tSrS.data(), acc_to_operand_a_layout(tSrS.layout()));
    Tensor tOrP = make_tensor<Element>(tSrS_as_a.layout());
    static_assert(decltype(size(tScS))::value == decltype(size(tSrS))::value);
    // kSkipMax: the probabilities of unmasked steps, next to the scores they came from.
    Tensor tSrPf = make_fragment_like(tSrS);
    Tensor tSrPf_as_a = make_tensor(tSrPf.data(), acc_to_operand_a_layout(tSrPf.layout()));

    const int m_block = tile.m_block;
    const int kv_len = mp.kv_len;
    auto mask_all = [&](auto& s, int n) {
      mask_scores<T::kCausal, kBlockM, kBlockN>(s, tScS, m_block, n, kv_len, mp.causal_key_offset);
    };

    const KvRange kv = kSplit ? kv_range(mp, tile) : KvRange{0, n_block_max(mp, m_block)};
    const int n_first = kv.first;  // 0 unless this is a part of a split tile
    const int n_blocks = kv.end - kv.first;
    if constexpr (kHasHook) step_hook(0, n_blocks == 1);
    clear(tOrO);
    float rescale[kRows];
    int n = kv.end - 1;

    if constexpr (kQStages == 1)
      bounded_wait(&q_full, q_phase);
    else
      pq.consumer_wait(q_read);

    // First block (the key tail / causal diagonal): masked where needed, rows may be fully masked.
    pk.consumer_wait(read);
    wgmma_tile<true, 0>(mma_qk, tSrQ, tSrK(_, _, _, read.index), tSrS);
    pk.consumer_release(read);
    if (tail_block_masked(kv_len)) mask_all(tSrS, n);
    softmax.template update_max<true, true>(tSrS, rescale);
    softmax.template exponentiate<true, true>(tSrS);
    convert_fragment<Element>(tSrS_as_a, tOrP);
    --n;

    if constexpr (T::kIntraWGOverlap) {
      auto step = [&](int nb, auto masked, auto hooked) {
        constexpr bool kMasked = decltype(masked)::value;
        State read_v = read;
        read.advance();
        pk.consumer_wait(read);
        pingpong_sync(wg);
        wgmma_tile<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, read.index), tSrS);
        pv.consumer_wait(read_v);
        wgmma_tile<false, -1>(mma_pv, tOrP, tOrV(_, _, _, read_v.index), tOrO);
        pingpong_pass(wg);
        warpgroup_wait<1>();  // S of block nb is ready; P V of the previous block may still run
        warpgroup_fence_operand(tSrS);
        pk.consumer_release(read);
        if constexpr (kMasked) mask_all(tSrS, nb);
        constexpr bool kSkip = T::kSkipMax && !kMasked;
        bool moved = false;  // the row max was taken (a skipped step keeps every factor at 1)
        if (!kSkip || !softmax.exponentiate_at_reference(tSrS, tSrPf)) {
          softmax.template update_max<false, kMasked, T::kLazyRescale == 2>(tSrS, rescale);
          moved = true;
          softmax.template exponentiate<false, kMasked>(tSrS);
          if constexpr (kSkip) copy(tSrS, tSrPf);
        }
        pin_before_wait(pin_slot, softmax.row_sum[0] + softmax.row_sum[kRows - 1]);
        warpgroup_wait<0>();  // P V done: V buffer and the P registers are free
        warpgroup_fence_operand(tOrO);
        warpgroup_fence_operand(tOrP);
        pv.consumer_release(read_v);
        if constexpr (kSkip)
          convert_fragment<Element>(tSrPf_as_a, tOrP);
        else
          convert_fragment<Element>(tSrS_as_a, tOrP);
        if (T::kLazyRescale == 0 || (moved && any_rescale(rescale))) softmax.rescale_o(tOrO, rescale);
        // Fewest live registers here: S is already packed into P.
        if constexpr (decltype(hooked)::value) step_hook(kv.end - 1 - nb, nb == n_first);
      };
      if constexpr (T::kCausal) {
        const int n_mask_min = n_block_causal_mask_min(mp, m_block);
        for (; n >= n_mask_min; --n) step(n, cute::true_type{}, cute::bool_constant<kHasHook>{});
      }
      if constexpr (kHasHook) {
        for (; n >= n_first && kv.end - 1 - n < hook_calls; --n) step(n, cute::false_type{}, cute::true_type{});
        const bool last_pending = n >= n_first;  // the final call falls in the unhooked part
        for (; n >= n_first; --n) step(n, cute::false_type{}, cute::false_type{});
        if (last_pending) step_hook(n_blocks - 1, true);
      } else {
        if constexpr (kSplit) {
          // A plain count: the block index is not needed in unmasked, hook-free steps, and
          // n_first would otherwise stay live in a register through the hot loop.
          for (int left = n - n_first + 1; left > 0; --left) step(0, cute::false_type{}, cute::false_type{});
        } else {
          for (; n >= 0; --n) step(n, cute::false_type{}, cute::false_type{});
        }
      }
      // Every QK^T GEMM of this tile is complete: the producer may load the next Q.
      release_query(pq, q_read);
      pv.consumer_wait(read);
      wgmma_tile<false, -1>(mma_pv, tOrP, tOrV(_, _, _, read.index), tOrO);
      float normalize[kRows];
      softmax.finalize(normalize, lse);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      pv.consumer_release(read);
      read.advance();
      softmax.rescale_o(tOrO, normalize);
    } else {
      // Plain schedule: each block's P V follows its softmax (no overlap inside the group).
      auto pv_step = [&](State st) {
        pv.consumer_wait(st);
        pingpong_sync(wg);
        wgmma_tile<false, -1>(mma_pv, tOrP, tOrV(_, _, _, st.index), tOrO);
        pingpong_pass(wg);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrO);
        warpgroup_fence_operand(tOrP);
        pv.consumer_release(st);
      };
      auto step = [&](int nb, auto masked, auto hooked) {
        constexpr bool kMasked = decltype(masked)::value;
        pv_step(read);  // previous block
        read.advance();
        pk.consumer_wait(read);
        pingpong_sync(wg);
        wgmma_tile<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, read.index), tSrS);
        pingpong_pass(wg);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tSrS);
        pk.consumer_release(read);
        if constexpr (kMasked) mask_all(tSrS, nb);
        softmax.template update_max<false, kMasked, T::kLazyRescale == 2>(tSrS, rescale);
        softmax.template exponentiate<false, kMasked>(tSrS);
        convert_fragment<Element>(tSrS_as_a, tOrP);
        if (T::kLazyRescale == 0 || any_rescale(rescale)) softmax.rescale_o(tOrO, rescale);
        if constexpr (decltype(hooked)::value) step_hook(kv.end - 1 - nb, nb == n_first);
      };
      if constexpr (T::kCausal) {
        const int n_mask_min = n_block_causal_mask_min(mp, m_block);
        for (; n >= n_mask_min; --n) step(n, cute::true_type{}, cute::bool_constant<kHasHook>{});
      }
      for (; n >= n_first; --n) step(n, cute::false_type{}, cute::bool_constant<kHasHook>{});
      release_query(pq, q_read);
      pv_step(read);
      read.advance();
      float normalize[kRows];
      softmax.finalize(normalize, lse);
      softmax.rescale_o(tOrO, normalize);
    }
  }

  // One tile for a consumer warp group none of whose 64 rows is a query row (the last q tile
  // of a sequence that is not a multiple of block_m; docs/attention.md §Partial tiles): the
  // same waits, releases and ping-pong passes as mma, in mma's order, without GEMMs or
  // softmax, so the other groups' pipelines and tokens see what they always see, and the
  // tile costs the SM only its busy groups' work.
  __device__ void idle(Params const& mp, Pipeline const& pk, Pipeline const& pv, uint64_t const& q_full,
                       uint32_t q_phase, QPipeline const& pq, QState q_read, State& read, WorkTile const& tile,
                       int wg) const {
    const int n_blocks = n_block_max(mp, tile.m_block);  // whole tiles only (no key split)
    if constexpr (kQStages == 1)
      bounded_wait(&q_full, q_phase);
    else
      pq.consumer_wait(q_read);
    pk.consumer_wait(read);
    pk.consumer_release(read);
    if constexpr (T::kIntraWGOverlap) {
      for (int i = 1; i < n_blocks; ++i) {
        State read_v = read;
        read.advance();
        pk.consumer_wait(read);
        pingpong_sync(wg);
        pv.consumer_wait(read_v);
        pingpong_pass(wg);
        pk.consumer_release(read);
        pv.consumer_release(read_v);
      }
      release_query(pq, q_read);
      pv.consumer_wait(read);
      pv.consumer_release(read);
      read.advance();
    } else {
      auto pv_step = [&](State st) {
        pv.consumer_wait(st);
        pingpong_sync(wg);
        pingpong_pass(wg);
        pv.consumer_release(st);
      };
      for (int i = 1; i < n_blocks; ++i) {
        pv_step(read);
        read.advance();
        pk.consumer_wait(read);
        pingpong_sync(wg);
        pingpong_pass(wg);
        pk.consumer_release(read);
      }
      release_query(pq, q_read);
      pv_step(read);
      read.advance();
    }
  }
};

}  // namespace xstage::kernels::attention
