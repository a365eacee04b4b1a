// Key groups (docs/attention.md §Key groups): a 64-row q tile whose two consumer warp groups
// share the tile's query rows and split its key blocks. The producer streams the tile's blocks
// as for any tile (last first); stream position p goes to group p mod 2, so each group runs about
// half the steps and the tile finishes in about half the time of a tile one group computes
// alone. The groups keep the ping-pong (one issues its GEMMs while the other runs its softmax),
// each K/V stage has one consumer group (its empty barriers count that group's warps; a tile with
// an odd number of blocks ends with an empty position for group 1, so that with an even stage count
// stage parity stays position parity across tiles: a consumer's parity wait on a stage is sound only
// if it saw the stage's previous phase complete), and at
// the end group 1 hands its unnormalised O, row maxima and row sums to group 0 through shared
// memory; group 0 merges them (as two parts of a key split) and stores the tile.
//
// Why: a causal launch with about one tile per CTA lasts as long as its longest tile (S = 2048,
// 8 heads, d = 64: 128 tiles of 128 rows, the last one 16 key blocks against a mean of 8.5).
// Halving the rows per tile and splitting each tile's keys over the groups cuts the longest
// work item to a quarter of that tile's block-rows and gives the scheduler twice as many items
// to balance, without a workspace round trip or a second kernel (the key split across CTAs that
// was measured and dropped, docs/attention.md §Not done yet).
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "kernels/attention/mainloop.cuh"
#include "kernels/attention/softmax.cuh"
#include "kernels/attention/tile_scheduler.cuh"

namespace xstage::kernels::attention {

using namespace cute;

// Floats per consumer thread in the exchange buffer: its O fragment, then kRows row maxima and
// kRows row sums (a thread of group 1 writes exactly what the same thread of group 0 holds: the
// two groups' accumulators have one layout over the same 64 rows).
template <class T, int kRows>
constexpr int key_group_exchange_floats() {
  return T::kKeyGroups > 1 ? (64 * T::kHeadDim / 128 + 2 * kRows) * 128 : 0;
}

template <class T>
struct KeyGroupConsumer {
  using Mainloop = AttentionMainloop<T>;
  using Pipeline = typename Mainloop::Pipeline;
  using State = typename Mainloop::State;
  using QPipeline = typename Mainloop::QPipeline;
  using QState = typename Mainloop::QState;
  static constexpr int kBlockN = T::kBlockN;
  static_assert(T::kKeyGroups == 2 && T::kBlockM == 64 && T::kConsumerWGs == 2);

  // One tile for group g (thread t of 128): the group's key blocks, stream positions g, g + 2, ...
  // Leaves O unnormalised (against the group's reference maxima) and the softmax state as is; a
  // group without blocks (one-block tiles, group 1) leaves O = 0, maxima -inf, sums 0. Both
  // groups pass the ping-pong token equally often per tile (group 1 pads with empty passes).
  template <class SmemQ, class SmemK, class SmemVt, class FrgO, int kRows>
  __device__ static void mma(typename Mainloop::Params const& mp, Pipeline const& pk, Pipeline const& pv,
                             QPipeline const& pq, QState q_read, State& read, WorkTile const& tile, int g, int t,
                             SmemQ const& sQ, SmemK const& sK, SmemVt const& sVt, FrgO& tOrO,
                             OnlineSoftmax<kRows, T::kSoftmaxWays>& softmax, float* pin_slot) {
    typename T::TiledMmaQK mma_qk;
    typename T::TiledMmaPV mma_pv;
    auto thr_qk = mma_qk.get_slice(t);
    auto thr_pv = mma_pv.get_slice(t);
    Tensor tSrQ = thr_qk.partition_fragment_A(sQ);
    Tensor tSrK = thr_qk.partition_fragment_B(sK);
    Tensor tOrV = thr_pv.partition_fragment_B(sVt);
    Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<64>, Int<kBlockN>>{}));
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<64>, Int<kBlockN>>{});
    Tensor tSrS_as_a = make_tensor(tSrS.data(), acc_to_operand_a_layout(tSrS.layout()));
    Tensor tOrP = make_tensor<typename T::Element>(tSrS_as_a.layout());
    Tensor tSrPf = make_fragment_like(tSrS);
    Tensor tSrPf_as_a = make_tensor(tSrPf.data(), acc_to_operand_a_layout(tSrPf.layout()));

    const int m_block = tile.m_block;
    const int kv_len = mp.kv_len;
    auto mask_all = [&](auto& s, int n) {
      mask_scores<T::kCausal, 64, kBlockN>(s, tScS, m_block, n, kv_len, mp.causal_key_offset);
    };
    const int kb = Mainloop::n_block_max(mp, m_block);
    const int own = (kb - g + 1) / 2;     // this group's blocks
    const int tokens = (kb + 1) / 2 - 1;  // token passes per group: group 0's blocks after its first
    clear(tOrO);
    pq.consumer_wait(q_read);
    // Group 1 of a tile with an odd block count takes the empty position the producer appends.
    auto take_pad = [&](State st) {
      pk.consumer_wait(st);
      pk.consumer_release(st);
      pv.consumer_wait(st);
      pv.consumer_release(st);
    };
    if (own == 0) {  // group 1 of a one-block tile: nothing to compute
      Mainloop::release_query(pq, q_read);
      CUTE_UNROLL
      for (int mi = 0; mi < kRows; ++mi) {
        softmax.row_max[mi] = -INFINITY;
        softmax.row_sum[mi] = 0.f;
      }
      State pad = read;
      pad.advance();
      take_pad(pad);
      read.advance();
      read.advance();
      return;
    }
    // Blocks at or above this one need the causal mask; the key tail (the last block, stream
    // position 0) is always group 0's first block, which is masked anyway.
    const int n_mask_min = T::kCausal ? Mainloop::n_block_causal_mask_min(mp, m_block) : kb;
    State cur = read;
    if (g == 1) cur.advance();
    int n = kb - 1 - g;

    // First block of the group: S only, masked where needed, rows may be fully masked.
    pk.consumer_wait(cur);
    wgmma_tile<true, 0>(mma_qk, tSrQ, tSrK(_, _, _, cur.index), tSrS);
    pk.consumer_release(cur);
    if ((g == 0 && Mainloop::tail_block_masked(kv_len)) || n >= n_mask_min) mask_all(tSrS, n);
    float rescale[kRows];
    softmax.template update_max<true, true>(tSrS, rescale);
    softmax.template exponentiate<true, true>(tSrS);
    convert_fragment<typename T::Element>(tSrS_as_a, tOrP);

    static_assert(T::kIntraWGOverlap, "key groups: the overlapped step only");
    // As AttentionMainloop::mma's step, two stream positions on: S of block nb and P V of the
    // group's previous block.
    auto step = [&](int nb, auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
      const State prev = cur;
      cur.advance();
      cur.advance();
      pk.consumer_wait(cur);
      Mainloop::pingpong_sync(g);
      wgmma_tile<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, cur.index), tSrS);
      pv.consumer_wait(prev);
      wgmma_tile<false, -1>(mma_pv, tOrP, tOrV(_, _, _, prev.index), tOrO);
      Mainloop::pingpong_pass(g);
      warpgroup_wait<1>();
      warpgroup_fence_operand(tSrS);
      pk.consumer_release(cur);
      if constexpr (kMasked) mask_all(tSrS, nb);
      constexpr bool kSkip = T::kSkipMax && !kMasked;
      bool moved = false;
      if (!kSkip || !softmax.exponentiate_at_reference(tSrS, tSrPf)) {
        softmax.template update_max<false, kMasked, T::kLazyRescale == 2>(tSrS, rescale);
        moved = true;
        softmax.template exponentiate<false, kMasked>(tSrS);
        if constexpr (kSkip) copy(tSrS, tSrPf);
      }
      pin_before_wait(pin_slot, softmax.row_sum[0] + softmax.row_sum[kRows - 1]);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP);
      pv.consumer_release(prev);
      if constexpr (kSkip)
        convert_fragment<typename T::Element>(tSrPf_as_a, tOrP);
      else
        convert_fragment<typename T::Element>(tSrS_as_a, tOrP);
      if (T::kLazyRescale == 0 || (moved && any_rescale(rescale))) softmax.rescale_o(tOrO, rescale);
    };
    n -= 2;
    if constexpr (T::kCausal)
      for (; n >= n_mask_min; n -= 2) step(n, cute::true_type{});
    for (; n >= 0; n -= 2) step(n, cute::false_type{});
    for (int pass = own - 1; pass < tokens; ++pass) {  // group 1 of an odd block count: one empty turn
      Mainloop::pingpong_sync(g);
      Mainloop::pingpong_pass(g);
    }
    Mainloop::release_query(pq, q_read);
    pv.consumer_wait(cur);
    wgmma_tile<false, -1>(mma_pv, tOrP, tOrV(_, _, _, cur.index), tOrO);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    pv.consumer_release(cur);
    if (g == 1 && (kb & 1)) {  // cur is at position kb - 2, the pad at kb
      cur.advance();
      cur.advance();
      take_pad(cur);
    }
    for (int i = 0; i < kb + (kb & 1); ++i) read.advance();
  }

  // After mma: group 1 writes its part into `xchg` (key_group_exchange_floats) and goes on to
  // its next tile; group 0 waits for it and merges it into its own (both against the larger
  // reference), leaving what one group would have after all the tile's blocks. first: group 1's
  // first tile of the launch (nothing to wait for); more: group 0 has another tile after this one
  // (group 1 will write again).
  template <class FrgO, int kRows>
  __device__ static void merge(int g, int t, FrgO& tOrO, OnlineSoftmax<kRows, T::kSoftmaxWays>& softmax, float* xchg,
                               bool first, bool more) {
    constexpr int kO = decltype(size(tOrO))::value;
    static_assert(key_group_exchange_floats<T, kRows>() == (kO + 2 * kRows) * 128);
    // Both groups walk their accumulators in the same (row, column) order: element (mi, ni) of
    // thread t sits at word (mi * columns + ni) * 128 + t (consecutive threads, no bank conflict).
    if (g == 1) {
      if (!first) cutlass::arch::NamedBarrier::sync(256, static_cast<uint32_t>(NamedBarrierId::key_merge_empty));
      Tensor o1 = make_tensor(tOrO.data(), acc_rowcol_layout(tOrO.layout()));
      CUTE_UNROLL
      for (int mi = 0; mi < kRows; ++mi) {
        CUTE_UNROLL
        for (int ni = 0; ni < size<1>(o1); ++ni) xchg[(mi * size<1>(o1) + ni) * 128 + t] = o1(mi, ni);
      }
      CUTE_UNROLL
      for (int mi = 0; mi < kRows; ++mi) {
        xchg[(kO + mi) * 128 + t] = softmax.row_max[mi];
        xchg[(kO + kRows + mi) * 128 + t] = softmax.row_sum[mi];
      }
      cutlass::arch::NamedBarrier::arrive(256, static_cast<uint32_t>(NamedBarrierId::key_merge_full));
      return;
    }
    cutlass::arch::NamedBarrier::sync(256, static_cast<uint32_t>(NamedBarrierId::key_merge_full));
    float f0[kRows], f1[kRows];
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const float m0 = softmax.row_max[mi], m1 = xchg[(kO + mi) * 128 + t];
      const float m = fmaxf(m0, m1);
      const float m_ref = m == -INFINITY ? 0.f : m;  // no key seen by either group: both factors 0
      f0[mi] = fast_exp2((m0 - m_ref) * softmax.scale_log2);
      f1[mi] = fast_exp2((m1 - m_ref) * softmax.scale_log2);
      softmax.row_max[mi] = m;
      softmax.row_sum[mi] = softmax.row_sum[mi] * f0[mi] + xchg[(kO + kRows + mi) * 128 + t] * f1[mi];
    }
    Tensor o = make_tensor(tOrO.data(), acc_rowcol_layout(tOrO.layout()));
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(o); ++ni)
        o(mi, ni) = o(mi, ni) * f0[mi] + xchg[(mi * size<1>(o) + ni) * 128 + t] * f1[mi];
    }
    if (more) cutlass::arch::NamedBarrier::arrive(256, static_cast<uint32_t>(NamedBarrierId::key_merge_empty));
  }
};

}  // namespace xstage::kernels::attention
