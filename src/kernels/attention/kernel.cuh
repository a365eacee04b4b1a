// The attention forward kernel, assembled from its parts: tile scheduler, mainloop
// (producer + consumers), softmax, epilogue policy. One CTA per SM (persistent), 128
// producer threads + 128 per consumer warp group, all shared memory in one struct.
// Included only by the launch_<dtype>_d<dim>.cu files, which instantiate it.
#pragma once
#include <cstdint>
#include <limits>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/attention/direct_epilogue.cuh"
#include "kernels/attention/epilogue.cuh"
#include "kernels/attention/key_groups.cuh"
#include "kernels/attention/launch.hpp"
#include "kernels/attention/mainloop.cuh"
#include "kernels/attention/params.hpp"
#include "kernels/attention/softmax.cuh"
#include "kernels/attention/tile_scheduler.cuh"
#include "kernels/common/kernel_entry.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/common/shared_storage.cuh"

namespace xstage::kernels::attention {

// Whether an epilogue policy stores nothing for a warp group without query rows (kSkipsEmptyGroups,
// false where the policy does not say).
template <class Epilogue>
constexpr bool skips_empty_groups() {
  if constexpr (requires { Epilogue::kSkipsEmptyGroups; })
    return Epilogue::kSkipsEmptyGroups;
  else
    return false;
}

// kClaimed: the claimed causal order (xstage/attention_tile_order.hpp): the producer claims each
// next list position from a launch-wide counter and hands it to the consumers with the tile's Q
// buffer; its own instantiation, so the static-order kernels compile as before.
// kPartialTiles (non-causal, an epilogue with kSkipsEmptyGroups): consumer warp groups without
// query rows in a tile run Mainloop::idle, and the scheduler deals the partial tiles last,
// serpentine (docs/attention.md §Partial tiles); its own instantiation too (the idle path in the
// shipped kernels cost them 0.6-2.4 %: ptxas rescheduled their step loops).
template <class Traits, template <class> class EpiloguePolicy, bool kClaimed = false, bool kPartialTiles = false>
struct AttentionKernel {
  using T = Traits;
  using Element = typename T::Element;
  using Mainloop = AttentionMainloop<T>;
  using Epilogue = EpiloguePolicy<T>;
  using Pipeline = typename Mainloop::Pipeline;
  using State = typename Mainloop::State;
  using Scheduler = StaticPersistentScheduler<T::kBlockM, T::kCausal, Epilogue::kTailSplit, kPartialTiles>;
  static constexpr int kThreads = T::kThreads;
  static constexpr bool kIsClaimed = kClaimed;
  static constexpr int kRows = 2;  // accumulator rows per consumer thread (checked in the softmax)

  struct Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    int q_len;
    int heads;
    int batch;
    TailSplitPlan tail;  // set by launch_attention (whole tiles unless the epilogue splits)
    causal::TileOrder order;  // causal kernels: the persistent tile order of the launch
    int group;                // grouped / claimed order: (batch, head) pairs per group (host-planned)
    int* claim;               // claimed order: {next position - grid, CTAs done}, zero at launch
  };

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<typename T::SmemLayoutQ> * T::kQStages, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<typename T::SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<typename T::SmemLayoutVt>, 1024> v;
    cute::array_aligned<Element, Epilogue::kSmemElems, 128> o;
    // Scheduling scratch (pin_before_wait), one word per consumer thread; key-group tiles: then the
    // exchange buffer of the groups' merge (key_groups.cuh; none elsewhere).
    float pin[T::kConsumerThreads + key_group_exchange_floats<T, kRows>()];
    alignas(16) uint64_t q_full;
    typename Pipeline::Storage pipe_k;
    typename Pipeline::Storage pipe_v;
    typename Mainloop::QPipeline::Storage pipe_q;  // used with two Q buffers only (one: q_full, q_phase)
  };
  static constexpr int kSmemBytes = xstage::kernels::shared_storage_bytes<SharedStorage>();
  // The d = 128 staged tile with two Q buffers and the long-key tile fill the 227 KiB exactly.
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on sm_90");
  static_assert(cute::cosize_v<typename T::SmemLayoutQ> * sizeof(Element) % 1024 == 0,
                "every Q buffer keeps the 1024-byte alignment of the 128-byte swizzle");

  // Every role builds the same scheduler (same work list, same tail-split decision).
  __device__ static Scheduler make_scheduler(Params const& params) {
    return Scheduler(params.q_len, params.heads, params.batch, &params.tail, &params.order, &params.group);
  }

  // slots: the CTAs the launch may use (the split plan depends on them; tile_scheduler.cuh).
  static Params to_params(AttentionParams const& p, typename Epilogue::Params const& ep, int slots) {
    const long long tiles = attention_num_tiles(p, T::kBlockM);
    TailSplitPlan tail{static_cast<int>(tiles), 1};
    if constexpr (Epilogue::kTailSplit)
      tail = tail_split_plan(tiles, slots, (p.kv_len + T::kBlockN - 1) / T::kBlockN, Epilogue::host_split_capacity(ep));
    return Params{Mainloop::to_params(p), ep, p.q_len, p.heads, p.batch, tail, p.causal_order, p.causal_group,
                  p.claim_counter};
  }

  static KernelInfo info() {
    return KernelInfo{TileConfig{T::kBlockM, T::kBlockN, T::kStages, T::kConsumerWGs, T::kLazyRescale, T::kQStages},
                      kThreads,
                      kSmemBytes,
                      T::kProducerRegs,
                      T::kConsumerRegs,
                      T::kIntraWGOverlap,
                      T::kPingPong};
  }

  static_assert(!kClaimed || (T::kCausal && T::kQStages == 2 && !Epilogue::kTailSplit && !Epilogue::kHasServiceThread),
                "the claimed order: causal, two Q buffers, an epilogue without split or service thread");
  static_assert(T::kKeyGroups == 1 || (T::kQStages == 2 && !kClaimed && !kPartialTiles && !Epilogue::kTailSplit &&
                                        !Epilogue::kHasStepHook && !Epilogue::kHasBeforeMainloop &&
                                        !Epilogue::kHasServiceThread),
                "key groups: two Q buffers, a static order, an epilogue that stores each tile after its mainloop");
  static_assert(!kPartialTiles || (!T::kCausal && !kClaimed && !Epilogue::kTailSplit && skips_empty_groups<Epilogue>()),
                "partial tiles: non-causal, whole tiles, an epilogue that stores nothing for an empty group");

  __device__ void operator()(Params const& params, char* smem_buf) const {
    SharedStorage& ss = XSTAGE_SHARED_STORAGE(SharedStorage, smem_buf);
    // Claimed order: each Q buffer's list position. The word of q_full, which two Q buffers leave
    // unused (the d = 128 staged tile has no shared byte to spare).
    volatile int* const q_slots = reinterpret_cast<volatile int*>(&ss.q_full);
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
    const int warp_group = warp / 4;

    if (threadIdx.x == 0) {
      // (The claimed order keeps its Q buffers' positions in this word: no barrier there.)
      if constexpr (!kClaimed) cutlass::arch::ClusterTransactionBarrier::init(&ss.q_full, 1);
      // A K/V stage is released by every consumer warp, or (key groups) by its one group's warps.
      Pipeline::init(ss.pipe_k, T::kConsumerWarps / T::kKeyGroups);
      Pipeline::init(ss.pipe_v, T::kConsumerWarps / T::kKeyGroups);
      if constexpr (T::kQStages > 1) Mainloop::QPipeline::init(ss.pipe_q, T::kConsumerWarps);
      Mainloop::prefetch_descriptors(params.mainloop);
    }
    cutlass::arch::fence_barrier_init();
    // The epilogue's once-per-launch hook (e.g. a remote destination announcing that this
    // rank's output may be written).
    if (blockIdx.x == 0 && threadIdx.x == 0) Epilogue::kernel_start(params.epilogue);
    if (threadIdx.x == 0) Epilogue::init_shared(ss.o.data());
    __syncthreads();

    Pipeline pk{&ss.pipe_k};
    Pipeline pv{&ss.pipe_v};
    const typename Mainloop::QPipeline pq{&ss.pipe_q};
    // Q buffer i of the ring (one buffer: always 0, the layout's own tensor).
    auto query_buffer = [&](int i) {
      return make_tensor(make_smem_ptr(ss.q.data() + i * cute::cosize_v<typename T::SmemLayoutQ>), typename T::SmemLayoutQ{});
    };
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename T::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename T::SmemLayoutVt{});
    const Mainloop mainloop{};

    if (warp_group == 0) {
      // Producer: give registers away; warp 0 loads, warps 1-3 are done.
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (warp == 0) {
        const Scheduler sched = make_scheduler(params);
        State write = Pipeline::producer_start();
        typename Mainloop::QState q_write = Mainloop::QPipeline::producer_start();
        if constexpr (kClaimed) {
          produce_claimed(params, sched, mainloop, pk, pv, ss, pq, q_write, write, query_buffer, sK, sVt, q_slots);
        } else {
          for (int idx = sched.first(); sched.valid(idx); idx = sched.next(idx)) {
            auto sQ = query_buffer(T::kQStages == 1 ? 0 : q_write.index);
            mainloop.load(params.mainloop, pk, pv, ss.q_full, pq, q_write, write, sched.decode(idx), sQ, sK, sVt);
          }
        }
      } else if (warp == 1 && (threadIdx.x % 32) == 0) {
        // The epilogue's service thread, if the policy has one (flags and fences only).
        if constexpr (Epilogue::kHasServiceThread) {
          const Scheduler sched = make_scheduler(params);
          Epilogue::service(params.epilogue, ss.o.data(), sched);
        }
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
      const Scheduler sched = make_scheduler(params);
      const int ct = static_cast<int>(threadIdx.x) - 128;
      Mainloop::consumer_init(ct / 128);
      Epilogue epilogue{};  // policies that spread a tile's stores keep their progress here
      State read{};
      uint32_t q_phase = 0;
      typename Mainloop::QState q_read{};
      // Static orders: the CTA's own sequence. Claimed: the position the producer published
      // with the tile's Q buffer (negative: no more tiles); mma's own wait on it then passes.
      auto next_claimed = [&]() {
        pq.consumer_wait(q_read);
        return q_slots[q_read.index];
      };
      if constexpr (T::kKeyGroups > 1) {
        consume_key_groups(params, sched, ss, pk, pv, pq, query_buffer, sK, sVt, ct);
        return;
      }
      int idx = kClaimed ? next_claimed() : sched.first();
      for (; kClaimed ? idx >= 0 : sched.valid(idx); idx = kClaimed ? next_claimed() : sched.next(idx)) {
        const WorkTile tile = sched.decode(idx);
        if constexpr (kPartialTiles) {
          // The group index through a shuffle, so that the compiler sees the branch warp-uniform
          // (on the raw thread index it was divergent around the mainloop, and the step loops spilled).
          const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0) - 1;
          if (tile.m_block * T::kBlockM + wg * 64 >= params.q_len) {
            mainloop.idle(params.mainloop, pk, pv, ss.q_full, q_phase, pq, q_read, read, tile, wg);
            q_phase ^= 1u;
            q_read.advance();
            continue;  // nothing to store (kSkipsEmptyGroups; the epilogue's finish is empty)
          }
        }
        Tensor tOrO = partition_fragment_C(typename T::TiledMmaPV{}, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});
        OnlineSoftmax<kRows, T::kSoftmaxWays> softmax(params.mainloop.scale_log2);
        float lse[kRows];
        // Once per key block, while that block's GEMMs run: the epilogue's step hook (a
        // policy that spreads the previous tile's stores over this mainloop issues a chunk).
        auto step_hook = [&](int call, bool last) {
          if constexpr (Epilogue::kHasStepHook) epilogue.step(params.epilogue, ss.o.data(), call, last);
        };
        // A policy that sends a pending slice as one chunk before the next tile's first GEMM
        // does it here, outside the mainloop, so the mainloop compiles exactly as without it.
        if constexpr (Epilogue::kHasBeforeMainloop) epilogue.before_mainloop(params.epilogue, ss.o.data());
        int hook_calls = 0;
        if constexpr (Epilogue::kHasStepHook) hook_calls = Epilogue::hook_calls(params.epilogue);
        auto sQ = query_buffer(T::kQStages == 1 ? 0 : q_read.index);
        mainloop.template mma<Epilogue::kHasStepHook, Epilogue::kTailSplit>(params.mainloop, pk, pv, ss.q_full, q_phase, pq, q_read,
                                                      read, tile, ct, sQ, sK, sVt, tOrO, softmax, lse, &ss.pin[ct],
                                                      step_hook, hook_calls);
        q_phase ^= 1u;
        q_read.advance();
        // Split kernels decode the tile again (fewer values live across the mainloop); the
        // others keep the tile, as their hot loop was tuned with it.
        if constexpr (Epilogue::kTailSplit)
          epilogue.store(params.epilogue, ss.o.data(), tOrO, lse, sched.decode(idx));
        else
          epilogue.store(params.epilogue, ss.o.data(), tOrO, lse, tile);
        // After the CTA's last tile: whatever the policy still holds leaves now.
        if constexpr (!kClaimed) {
          if (!sched.valid(sched.next(idx))) epilogue.finish(params.epilogue, ss.o.data());
        }
      }
      if constexpr (kClaimed) epilogue.finish(params.epilogue, ss.o.data());
    }
  }

  // Key groups (key_groups.cuh), consumer thread ct: both groups run every tile of the CTA's
  // sequence on their halves of its key blocks; group 1 hands its part over, group 0 merges,
  // normalises and stores.
  template <class QueryBuffer, class SmemK, class SmemVt>
  __device__ static void consume_key_groups(Params const& params, Scheduler const& sched, SharedStorage& ss,
                                            Pipeline const& pk, Pipeline const& pv,
                                            typename Mainloop::QPipeline const& pq, QueryBuffer&& query_buffer,
                                            SmemK const& sK, SmemVt const& sVt, int ct) {
    using Groups = KeyGroupConsumer<T>;
    // The group index through a shuffle, so the compiler sees the group branches warp-uniform.
    const int g = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0) - 1;
    const int t = ct % 128;
    Epilogue epilogue{};
    State read{};
    typename Mainloop::QState q_read{};
    bool first = true;
    for (int idx = sched.first(); sched.valid(idx); idx = sched.next(idx)) {
      const WorkTile tile = sched.decode(idx);
      Tensor tOrO = partition_fragment_C(typename T::TiledMmaPV{}, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});
      OnlineSoftmax<kRows, T::kSoftmaxWays> softmax(params.mainloop.scale_log2);
      Groups::mma(params.mainloop, pk, pv, pq, q_read, read, tile, g, t, query_buffer(q_read.index), sK, sVt, tOrO,
                  softmax, &ss.pin[ct]);
      q_read.advance();
      Groups::merge(g, t, tOrO, softmax, ss.pin + T::kConsumerThreads, first, sched.valid(sched.next(idx)));
      first = false;
      if (g == 0) {
        float normalize[kRows], lse[kRows];
        softmax.finalize(normalize, lse);
        softmax.rescale_o(tOrO, normalize);
        epilogue.store(params.epilogue, ss.o.data(), tOrO, lse, tile);
      }
    }
    if (g == 0) epilogue.finish(params.epilogue, ss.o.data());
  }

  // Claimed order, producer warp: positions 0 .. grid-1 go one to each CTA, every further one to
  // the CTA whose producer claims it (lane 0, one atomic per tile, when the producer reaches its
  // next tile, i.e. while the consumers run the current tile's last key blocks). Each CTA makes
  // exactly one claim past the end; the CTA that counts itself done last sets both counters back
  // to zero for the next launch on the stream (no other CTA touches them after its count).
  template <class QueryBuffer, class SmemK, class SmemVt>
  __device__ static void produce_claimed(Params const& params, Scheduler const& sched, Mainloop const& mainloop,
                                         Pipeline const& pk, Pipeline const& pv, SharedStorage& ss,
                                         typename Mainloop::QPipeline const& pq, typename Mainloop::QState& q_write,
                                         State& write, QueryBuffer&& query_buffer, SmemK& sK, SmemVt& sVt,
                                         volatile int* q_slots) {
    const bool leader = (threadIdx.x & 31u) == 0u;
    for (int idx = sched.first(); sched.valid(idx);) {
      auto sQ = query_buffer(q_write.index);
      mainloop.template load<true>(params.mainloop, pk, pv, ss.q_full, pq, q_write, write, sched.decode(idx), sQ, sK,
                                   sVt, q_slots, idx);
      int next = 0;
      if (leader) next = static_cast<int>(gridDim.x) + atomicAdd(&params.claim[0], 1);
      idx = __shfl_sync(0xffffffffu, next, 0);
    }
    if (leader) {
      Mainloop::publish_end(pq, q_write, q_slots);
      __threadfence();  // this CTA's claims before its done count
      if (atomicAdd(&params.claim[1], 1) == static_cast<int>(gridDim.x) - 1) {
        __threadfence();  // every other CTA's claims before the reset
        params.claim[0] = 0;
        params.claim[1] = 0;
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    attention_fwd_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
  XSTAGE_RUN_KERNEL(Kernel, params);
}

// Tail split, second step: one CTA of 256 threads (the consumer threads' numbering) per
// split tile merges that tile's parts from the workspace (DirectStoreEpilogue::merge_parts).
template <class Kernel>
__global__ void __launch_bounds__(256, 1) attention_merge_split_parts_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (Kernel::Epilogue::kTailSplit) {
    const typename Kernel::Scheduler sched = Kernel::make_scheduler(params);
    const int g = static_cast<int>(blockIdx.x);  // split tile g: whole tile full + g
    const WorkTile tile = sched.decode_tile(params.tail.full + g);
    Kernel::Epilogue::merge_parts(params.epilogue, tile, g * params.tail.splits, params.tail.splits,
                                  static_cast<int>(threadIdx.x));
  }
#endif
}

// Host: builds the TMA descriptors and launches the persistent grid on `stream`. The
// epilogue's parameters come from the caller: a fused kernel (e.g. Ulysses with a remote-tile
// epilogue) passes its own; the local store derives them from p (overload below).
template <class Kernel>
cudaError_t launch_attention(AttentionParams const& p, typename Kernel::Epilogue::Params const& ep,
                             cudaStream_t stream) {
  if (p.head_dim != Kernel::T::kHeadDim || p.causal != Kernel::T::kCausal) return cudaErrorInvalidValue;
  if (p.causal && p.causal_key_offset < 0) return cudaErrorInvalidValue;  // a query row would see no key
  if (p.causal && Kernel::kIsClaimed != (p.causal_order == causal::TileOrder::claimed)) return cudaErrorInvalidValue;
  if (Kernel::kIsClaimed && p.claim_counter == nullptr) return cudaErrorInvalidValue;
  const long long tiles = attention_num_tiles(p, Kernel::T::kBlockM);
  if (tiles <= 0) return cudaErrorInvalidValue;
  int slots = 0;  // one CTA per SM, or the caller's num_ctas
  cudaError_t e = persistent_grid(p.num_ctas, std::numeric_limits<long long>::max(), slots);
  if (e != cudaSuccess) return e;
  const typename Kernel::Params kp = Kernel::to_params(p, ep, slots);
  const long long items = split_work_items(tiles, kp.tail);
  const int ctas = items < slots ? static_cast<int>(items) : slots;
  auto* fn = attention_fwd_kernel<Kernel>;
  e = launch_persistent<1>(fn, kp, ctas, Kernel::kThreads, Kernel::kSmemBytes, stream);
  if (e != cudaSuccess) return e;
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if constexpr (Kernel::Epilogue::kTailSplit) {
    if (kp.tail.splits > 1) {
      const int split_tiles = static_cast<int>(tiles - kp.tail.full);
      attention_merge_split_parts_kernel<Kernel><<<split_tiles, 256, 0, stream>>>(kp);
      e = cudaGetLastError();
    }
  }
  return e;
}

template <class Kernel>
cudaError_t launch_attention(AttentionParams const& p, cudaStream_t stream) {
  return launch_attention<Kernel>(p, Kernel::Epilogue::to_params(p), stream);
}

// Q buffers of the local-output kernels whose shared memory holds two (docs/attention.md §Design
// "Q buffers"); the long-key tile's 2 x 48 KiB K/V stages leave room for one.
#ifndef XSTAGE_ATTN_Q_STAGES
#define XSTAGE_ATTN_Q_STAGES 2
#endif
inline constexpr int kLocalQStages = XSTAGE_ATTN_Q_STAGES;

template <class Element, int kHeadDim, bool kCausal>
using ShippedKernel =
    AttentionKernel<AttentionTraits<Element, kHeadDim, tile_config(kHeadDim).block_m, tile_config(kHeadDim).block_n,
                                    tile_config(kHeadDim).stages, kCausal, tile_config(kHeadDim).lazy_rescale,
                                    kLocalQStages>,
                    LocalStoreEpilogue>;

template <class Element, bool kCausal>
using Rows128Kernel =
    AttentionKernel<AttentionTraits<Element, 64, rows128_d64_tile_config().block_m, rows128_d64_tile_config().block_n,
                                    rows128_d64_tile_config().stages, kCausal, rows128_d64_tile_config().lazy_rescale,
                                    kLocalQStages>,
                    LocalStoreEpilogue>;

// The staged causal tiles with the claimed order (d = 64: the 192-row tile only). Always two Q
// buffers (the order hands positions over through them), also in an XSTAGE_ATTN_Q_STAGES=1 build.
template <class Element, int kHeadDim>
using ClaimedCausalKernel =
    AttentionKernel<AttentionTraits<Element, kHeadDim, tile_config(kHeadDim).block_m, tile_config(kHeadDim).block_n,
                                    tile_config(kHeadDim).stages, true, tile_config(kHeadDim).lazy_rescale, 2>,
                    LocalStoreEpilogue, true>;

// The staged causal launcher of one dtype and head dim: the claimed order's instantiation or the
// static orders' one.
template <class Element, int kHeadDim>
cudaError_t launch_staged_causal(const AttentionParams& p, cudaStream_t stream) {
  if (p.causal_order == causal::TileOrder::claimed) return launch_attention<ClaimedCausalKernel<Element, kHeadDim>>(p, stream);
  return launch_attention<ShippedKernel<Element, kHeadDim, true>>(p, stream);
}

// The 192-row d = 64 staged tile with idle groups and partial tiles last (non-causal): what the
// automatic policy runs where tile_rules.hpp noncausal_d64_tile picks it, and tile policy partial.
template <class Element>
using PartialTilesKernel = AttentionKernel<AttentionTraits<Element, 64, tile_config(64).block_m, tile_config(64).block_n,
                                                           tile_config(64).stages, /*causal=*/false,
                                                           tile_config(64).lazy_rescale, kLocalQStages>,
                                           LocalStoreEpilogue, false, true>;

// The 64-row tiles whose two consumer warp groups split each tile's key blocks (key_groups.cuh;
// tile policy rows64): d = 64 causal and non-causal, non-causal d = 128. Two Q buffers in every build.
template <class Element, int kHeadDim, bool kCausal>
using KeyGroupsKernel =
    AttentionKernel<AttentionTraits<Element, kHeadDim, rows64_tile_config(kHeadDim).block_m,
                                    rows64_tile_config(kHeadDim).block_n, rows64_tile_config(kHeadDim).stages, kCausal,
                                    rows64_tile_config(kHeadDim).lazy_rescale, 2, 2>,
                    LocalStoreEpilogue>;

template <class Element>
using LongKvKernel = AttentionKernel<AttentionTraits<Element, 128, long_kv_tile_config().block_m,
                                                     long_kv_tile_config().block_n, long_kv_tile_config().stages,
                                                     /*causal=*/false, long_kv_tile_config().lazy_rescale>,
                                     DirectStoreEpilogue>;

template <class Element, int kHeadDim>
using SplitKernel =
    AttentionKernel<AttentionTraits<Element, kHeadDim, split_tile_config(kHeadDim).block_m,
                                    split_tile_config(kHeadDim).block_n, split_tile_config(kHeadDim).stages,
                                    /*causal=*/false, split_tile_config(kHeadDim).lazy_rescale, kLocalQStages>,
                    DirectStoreEpilogue>;

}  // namespace xstage::kernels::attention
