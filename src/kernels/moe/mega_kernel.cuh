// The Mega-MoE persistent kernel (issue 8; docs/megamoe.md "The kernel"): one launch per MoE
// layer and rank, one CTA per SM (co-resident: cooperative launch), doing
//   prologue (mega_prologue.cuh): routing histogram, count exchange, push dispatch;
//   tile loop: Linear-1 (gate/up, SwiGLU x router weight, fp8 h) and Linear-2 (bf16 rows
//     stored straight into the token owners' combine buffers) tiles in the order of
//     moe_tile_order.hpp (expert-wave or interleaved); each CTA's producer claims the next list
//     position (tile_queue.cuh: dynamic, one atomic per tile; or statically c, c + K, ...);
//   publish: the last CTA of the rank tells every owner how many row pieces it sent;
//   reduce: once all pieces for this rank's tokens arrived, out[t] = sum of its k rows.
// Roles in the tile loop as in the grouped GEMM (kernel.cuh): warp group 0 produces (thread 0:
// TMA; warp 1: the stages' scales; warps 2-3 with 128 x 256 tiles: the Linear-2 copy-out,
// mega_store.cuh), warp groups 1 and 2 compute the tile: 64 x 128 halves of a 64 x 256 tile (MegaTraits64), or
// 64 rows x both 128-column pieces of a 128 x 256 tile (MegaTraits128, the grouped GEMM's
// kDual tile; a block of <= 64 rows: both groups on its rows, one piece each, "Half blocks";
// xstage/mega_tile.hpp, docs/megamoe.md "Tile configurations"). The producer gates each
// tile on its inputs: a Linear-1 tile on this call's rows having arrived (cross-rank), a
// Linear-2 tile on its block's Linear-1 count (local); both waits are bounded. A Linear-2
// tile's inputs come earlier in the list, every CTA takes its tiles in increasing list order
// and all lower positions are claimed before a higher one (both claim modes), so the lowest
// unfinished tile can always progress: no deadlock whatever the order.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/clock.cuh"
#include "kernels/common/kernel_entry.cuh"
#include "kernels/moe/ep_device.cuh"
#include "kernels/moe/epilogue.cuh"
#include "kernels/moe/mainloop.cuh"
#include "kernels/moe/mega_common.cuh"
#include "kernels/moe/mega_epilogue.cuh"
#include "kernels/moe/mega_prologue.cuh"
#include "kernels/moe/mega_store.cuh"
#include "kernels/moe/tile_queue.cuh"
#include "xstage/mega_tile.hpp"
#include "xstage/moe_tile_order.hpp"

namespace xstage::kernels::moe {

// The Mega-MoE tiles carry their scales in the stages as the grouped GEMM does: warp 1 of the
// producer warp group copies each K block's scales (MoeMainloop::copy_scales_in_kernel) instead
// of each consumer thread reading them from L2 per K block (profiled on one H200: the consumers'
// scale products waited on those loads for ~11 % of the kernel's warp samples; docs/megamoe.md
// "The kernel").
template <class Base>
struct MegaSmemScales : Base {
  static constexpr bool kSmemScales = true;
  static constexpr int kFullArrivals = 1 + 32;  // the TMA thread and the scale warp's lanes
  struct ScaleStorage {
    typename Base::StageScales stage[Base::kStages];
  };
};
// 64 x 256 tiles, 4 stages, gate/up capable, h scales written while the kernel runs; without
// the overlap schedule's second per-K-block accumulator (64 registers), which the extra state
// of the tile loop cannot afford next to it (ptxas spilled ~1.4 KB with it; and schedule 0 was
// the grouped GEMM's fastest in most cells anyway, docs/moe-gemm.md).
struct MegaTraits64 : MegaSmemScales<MoeTraits<64, 256, 4, true, 1, 1, true>> {
  static constexpr bool kOverlapAllowed = false;
  static constexpr ::xstage::moe::MegaTile kTile = ::xstage::moe::MegaTile::m64n256;
};
// 128 x 256 tiles (each warp group 64 rows x gate and up, or x two 128-column pieces): per FLOP
// the operand traffic of a 128-row tile. 3 stages of 48 KiB: a fourth does not fit next to the
// Linear-2 staging (64 KiB: the whole tile, for the store warps) and the tile layout (10 KiB).
struct MegaTraits128 : MegaSmemScales<MoeTraits<128, 256, 3, true, 1, 1, true>> {
  static constexpr ::xstage::moe::MegaTile kTile = ::xstage::moe::MegaTile::m128n256;
};


template <class Traits>
struct MegaMoeKernel {
  using T = Traits;
  using Mainloop = MoeMainloop<T>;
  static constexpr bool kDual = T::kDual;
  using L1Epilogue = cute::conditional_t<kDual, SwiGluDualQuantEpilogue<T, HDestination>,
                                         SwiGluQuantEpilogue<T, HDestination>>;
  using L2Epilogue = Bf16TileEpilogue<T, CombineDestination>;
  // The 128 x 256 tile hands its Linear-2 copy-out to two store warps (mega_store.cuh).
  static constexpr bool kStoreWarps = kDual;
  static_assert(::xstage::moe::mega_tile_shape(T::kTile).block_m == T::kBlockM &&
                    ::xstage::moe::mega_tile_shape(T::kTile).l2_n == T::kBlockN &&
                    ::xstage::moe::mega_tile_shape(T::kTile).l1_pieces == T::kWgM,
                "xstage/mega_tile.hpp describes this tile");
  using Pipeline = typename Mainloop::Pipeline;
  using State = typename Mainloop::State;
  using Queue = TileQueue<kMegaQueueDepth>;
  static constexpr int kTileSlots = kMegaTileSlots;  // mega_common.cuh
  static constexpr int kThreads = T::kThreads;
  static constexpr int kL2Smem = kStoreWarps ? MegaStoreWarps::kSmemBytes : L2Epilogue::kSmemBytes;
  static constexpr int kEpiSmem = L1Epilogue::kSmemBytes > kL2Smem ? L1Epilogue::kSmemBytes : kL2Smem;
  // Both consumer warp groups: between epilogues of different kinds in the 64 x 256 tile (their
  // staging overlaps), before its publish, and before the reduce (both tiles).
  // User barrier 7: the grouped GEMM's ping-pong tokens use 5 + warp group (two groups here).
  static constexpr uint32_t kConsumersBarrier = 7;
  static_assert(T::kConsumerWGs == 2, "ping-pong ids 5, 6 and the consumers' barrier 7");
  // setmaxnreg moves registers inside the CTA's launch allocation (168 per thread at 384 threads,
  // a multiple of 8): a consumer warp group's increase past it would block forever.
  static_assert(128 * T::kProducerRegs + T::kConsumerThreads * T::kConsumerRegs <= (65536 / kThreads) / 8 * 8 * kThreads,
                "setmaxnreg budget");
  // The store warps' own barrier and the publish barrier (consumers + store warps): ids no
  // 128 x 256 epilogue uses (a third consumer group's, none here; the 64 x 256 tile's up hand-over).
  // User ids 0..7 are hardware barriers 8..15, all 16 then taken (CUTLASS reserves 0..7).
  static constexpr uint32_t kStoreBarrier = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + 2;
  static constexpr uint32_t kPublishBarrier = static_cast<uint32_t>(NamedBarrierId::swiglu_full);
  static_assert(kStoreBarrier + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount < 16 &&
                    kPublishBarrier + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount < 16 &&
                    kConsumersBarrier + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount < 16,
                "16 hardware named barriers");
  static_assert(!kStoreWarps || (MegaStoreWarps::kConsumerThreads == T::kConsumerThreads &&
                                 MegaStoreWarps::kRows == T::kBlockM && T::kBlockN == 256),
                "mega_store.cuh stages whole 128 x 256 tiles of two consumer warp groups");
  static constexpr int kPublishThreads = 256 + (kStoreWarps ? MegaStoreWarps::kStoreThreads : 0);
  // Half blocks (docs/megamoe.md §Half blocks): a 128 x 256 tile of <= 64 rows runs both warp
  // groups on its rows, one N piece each (mma_dual_split); 2 also skips loading A chunk 1.
  // Compiled in by XSTAGE_MEGA_HALF_SPLIT (the 128 x 256 translation unit only).
#ifndef XSTAGE_MEGA_HALF_SPLIT
#define XSTAGE_MEGA_HALF_SPLIT 0
#endif
  static constexpr bool kHalfSplit = kDual && XSTAGE_MEGA_HALF_SPLIT >= 1;
  static constexpr bool kHalfSkipA = kHalfSplit && XSTAGE_MEGA_HALF_SPLIT >= 2;
  // The up values of a half block's Linear-1 tile, handed from warp group 1 to warp group 0 in
  // warp group 1's half of the staging (64 fp32 per thread: 32 KiB).
  static_assert(!kHalfSplit || 128 * 64 * 4 <= MegaStoreWarps::kHalfBytes, "the up hand-over fits a staging half");
  __device__ __forceinline__ static bool half_block(WorkTile const& t) {
    // Warp-uniform for the compiler (a branch it takes as divergent around wgmmas costs spills).
    return kHalfSplit && __shfl_sync(0xffffffffu, t.rows, 0) <= 64;
  }

  struct Params {
    typename Mainloop::Params l1;  // A = received x [cap, H], B = W1 [E/P, 2I, H]
    typename Mainloop::Params l2;  // A = h [cap, I], B = W2 [E/P, H, I]
    typename L1Epilogue::Params epi1;
    typename L2Epilogue::Params epi2;
    MegaMoeArgs m;
    int n1, n2;  // Linear-1 / Linear-2 tiles per block
  };

  struct SharedStorage {
    union Stage {
      struct Buffers {
        cute::array_aligned<typename T::Element, cute::cosize_v<typename T::SmemLayoutA>, 1024> a;
        cute::array_aligned<typename T::Element, cute::cosize_v<typename T::SmemLayoutB>, 1024> b;
      } buf;
      MegaPrologueSmem prologue;
    } stage;
    cute::array_aligned<uint8_t, kEpiSmem, 128> epi;
    typename T::ScaleStorage scales;  // each stage's scales (copy_scales_in_kernel)
    typename Pipeline::Storage pipe;
    typename Queue::Storage queue;
    MegaLayoutSmem layout;
    MegaStoreWarps::Storage sw;  // used with kStoreWarps
    MegaTileSlot slots[kTileSlots];
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;
  static_assert(kSmemBytes + kMegaStaticSmem <= 227 * 1024, "shared memory per CTA on sm_90 (static variables too)");

  // List position -> the GEMM's work tile (mega_common.cuh).
  __device__ __forceinline__ static WorkTile work_tile(Params const& p, MegaLayoutSmem const& ly, int pos,
                                                       bool& is_l1) {
    return mega_work_tile<T::kBlockM>(p.m, p.n1, p.n2, ly, pos, is_l1);
  }

  // The store warps (warps 2, 3 of the producer warp group, thread st = 0..63): each staged
  // Linear-2 tile to the combine buffers (mega_store.cuh), until the consumers stage "no more".
  __device__ __forceinline__ static void store_warps(Params const& p, SharedStorage& ss, int st) {
    const MegaMoeArgs& m = p.m;
    uint32_t full_phase = 0;
    for (;;) {
      MegaStoreWarps::wait(&ss.sw.full, full_phase);
      full_phase ^= 1u;
      const int pos = ss.sw.pos;
      if (pos < 0) break;
      bool is_l1;
      const WorkTile w = work_tile(p, ss.layout, pos, is_l1);
      const EpilogueTile t{w.expert, w.m_block, w.n_block, w.row_begin, w.rows, w.n_block * T::kBlockN, w.tag};
      const uint32_t cycles = MegaStoreWarps::copy_out(p.epi2.dest, t, p.epi2.n, ss.epi.data(), ss.sw, st, kStoreBarrier);
      // The store tail of the trace: the whole copy-out, by the thread that timed it.
      if (m.trace != nullptr && st == 0) m.trace[size_t(pos) * kMegaTraceWords + 5] = static_cast<uint32_t>(cycles);
      MegaStoreWarps::arrive(&ss.sw.free);
    }
    // Publish (operator()) counts this CTA done only after these stores.
    asm volatile("" ::: "memory");
    cutlass::arch::NamedBarrier::sync(kPublishThreads, kPublishBarrier);
  }

  __device__ void operator()(Params const& p, char* smem_buf) const {
    const uint32_t base = cute::cast_smem_ptr_to_uint(smem_buf);
    SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem_buf + ((1024u - (base & 1023u)) & 1023u));
    const MegaMoeArgs& m = p.m;
    const EpMoeArgs& a = m.ep;
    const int tid = threadIdx.x;
    if (m.cta_clock != nullptr && tid == 0) {
      m.cta_clock[blockIdx.x * kMegaClockWords + 0] = clock64();
      m.cta_clock[blockIdx.x * kMegaClockWords + 1] = dev::global_ns();
    }
    if (tid == 0) {
      Pipeline::init(ss.pipe, T::kConsumerWarps, T::kFullArrivals);
      // Every consumer thread reads each queued position, and so does the scale warp.
      Queue::init(ss.queue, T::kConsumerWGs * 128 + 32);
      if constexpr (kStoreWarps) MegaStoreWarps::init(ss.sw);
      Mainloop::prefetch_descriptors(p.l1);
      Mainloop::prefetch_descriptors(p.l2);
    }
    cutlass::arch::fence_barrier_init();
    __syncthreads();

    mega_prologue(m, ss.stage.prologue, ss.layout, p.n1, T::kBlockM);
    const bool ok = ss.layout.ok != 0;
    const int total = ok ? ss.layout.block_start[m.ep.experts_per_rank] * (p.n1 + p.n2) : 0;
    const int parity = static_cast<int>(a.epoch & 1u);
    uint32_t* l1_done = m.l1_done + parity * m.max_blocks;

    Pipeline pipe{&ss.pipe};
    Tensor sA = make_tensor(make_smem_ptr(ss.stage.buf.a.data()), typename T::SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(ss.stage.buf.b.data()), typename T::SmemLayoutB{});
    const Mainloop mainloop{};
    const int warp_group = __shfl_sync(0xffffffffu, tid / 128, 0);
    const Queue queue{&ss.queue};

    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (tid == 0) {
        State write = Pipeline::producer_start();
        auto qs = Queue::producer_start();
        bool rows_here = false;
        for (int i = 0;; ++i) {
          // Claim the next list position (tile_queue.cuh: dynamic = in time order).
          int pos = m.dynamic_claim ? static_cast<int>(atomicAdd(m.tile_next + parity, 1u))
                                    : static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x);
          if (pos >= total) {
            queue.push(qs, -1);
            break;
          }
          bool is_l1;
          const WorkTile t = work_tile(p, ss.layout, pos, is_l1);
          const uint64_t w0 = m.trace != nullptr ? clock64() : 0;
          mega_wait_inputs(m, ss.layout, l1_done, is_l1, t.tag, p.n2,
                           ::xstage::moe::mega_l1_target(::xstage::moe::mega_tile_shape(T::kTile), p.n1), rows_here);
          if (m.trace != nullptr) m.trace[size_t(pos) * kMegaTraceWords + 4] = static_cast<uint32_t>(clock64() - w0);
          ss.slots[i & (kTileSlots - 1)] = MegaTileSlot{t, is_l1 ? 1 : 0};  // before the push that publishes it
          // Handed over only now: the consumers may read the tile's in-kernel-written scales
          // (x pushed by peers, h by other CTAs) as soon as they have the position.
          queue.push(qs, pos);
          mainloop.template load<kHalfSkipA>(is_l1 ? p.l1 : p.l2, pipe, write, t, 0, sA, sB);
        }
      } else if (tid / 32 == 1) {
        // The scale warp: the tiles in the queue's order, each K block's scales into its stage.
        State write = Pipeline::producer_start();
        auto qs = Queue::consumer_start();
        for (int k = 0;; ++k) {
          const int pos = queue.pop(qs);
          if (pos < 0) break;  // the end, or kTimedOut (the consumers trap on it)
          const WorkTile t = ss.slots[k & (kTileSlots - 1)].t;
          const bool is_l1 = ss.slots[k & (kTileSlots - 1)].is_l1 != 0;
          mainloop.copy_scales_in_kernel(is_l1 ? p.l1 : p.l2, pipe, write, t, ss.scales);
        }
      } else if (kStoreWarps && tid / 32 >= 2) {
        store_warps(p, ss, tid - 64);
      }
      return;  // a timed-out wait above still loads (garbage) so the consumers never hang
    }

    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int ct = tid - 128;
    const int wg = ct / 128;
    const int wt = ct % 128;
    L1Epilogue::consumer_init(wg);
    // The 128 x 256 tile always runs the ping-pong token (mma_dual<true>).
    Mainloop::consumer_init(kDual ? Mainloop::kSchedulePingPong : p.l1.schedule, wg);
    const L1Epilogue epi1{};
    const L2Epilogue epi2{};
    State read{};
    auto qs = Queue::consumer_start();
    // The previous tile's kind (64 x 256 tile) or, with store warps, the parity of their `free`
    // barrier to wait for (bit 2; a fresh barrier passes at parity 1).
    int last_kind = kStoreWarps ? 4 : 0;
    int pos;
    // This thread's pops so far mod 8, in bits 3-5 of last_kind (one register): the slot of the
    // current tile. The kind and the `free` parity read bits 0-2 only (kind_bits).
    static_assert(kTileSlots == 8, "three bits of last_kind");
    auto current_tile = [&](bool& l1) -> WorkTile {
      const MegaTileSlot& sl = ss.slots[(last_kind >> 3) & 7];
      l1 = sl.is_l1 != 0;
      return sl.t;
    };
    auto kind_bits = [](int v) { return v & 7; };
    // The tile trace's clocks of the consumers' first thread (ct == 0, the trace's writer), kept
    // in shared memory: in registers they stay live across the mainloop and the epilogue (ptxas
    // spilled 8 B more in the 128 x 256 kernel).
    __shared__ uint64_t trace_c0, trace_c1;
    for (;;) {
      pos = queue.pop(qs);
      if (pos < 0) break;
      if (m.trace != nullptr && ct == 0) trace_c0 = clock64();
      bool is_l1;
      if constexpr (kDual) {
        // Warp group wg: rows [64 wg, 64 wg + 64), both pieces (gate / up, or two column halves).
        // The work tile is decoded again after the mainloop: nothing of it stays live in
        // registers next to the 192 accumulator registers (ptxas spilled otherwise).
        Tensor acc0 = partition_fragment_C(typename T::TiledMma{}, Shape<_64, _128>{});
        Tensor acc1 = partition_fragment_C(typename T::TiledMma{}, Shape<_64, _128>{});
        typename L1Epilogue::RowWeights rw;  // loaded now: the latency hides behind the mainloop
        {
          const WorkTile t = current_tile(is_l1);
          if (is_l1) rw = epi1.load_weights(p.epi1, t, wt, wg);
          const auto& mp = is_l1 ? p.l1 : p.l2;
          if (half_block(t)) mainloop.template mma_dual_split<true>(mp, pipe, read, wt, wg, sA, sB, acc0, &ss.scales);
          else mainloop.template mma_dual<true>(mp, pipe, read, wt, wg, sA, sB, acc0, acc1, &ss.scales);
        }
        if (m.trace != nullptr && ct == 0) trace_c1 = clock64();
        const WorkTile t = current_tile(is_l1);
        // A warp group stages only in its own half of the staging (Linear-1 rows at 32 KiB x wg,
        // Linear-2 rows 64 wg ..), so the groups need not meet between tile kinds; the store
        // warps must have read the last staged Linear-2 tile. A half block's warp group 1 writes
        // half 0 (Linear-2 rows 0..63, piece 1) or the up hand-over in half 1: only after its
        // tile's first issue, which waited for group 0's token, i.e. after group 0's last epilogue.
        MegaStoreWarps::wait(&ss.sw.free, static_cast<uint32_t>(kind_bits(last_kind) >> 2));
        const bool half = half_block(t);
        if (is_l1) {
          if (half) {
            // Warp group 1 computed the up piece of rows 0..63 (acc0): into warp group 0's acc1.
            // Group 1 writes its staging half again only after its next tile's first issue, which
            // waits for group 0's token: after group 0 read these.
            float4* xch = reinterpret_cast<float4*>(ss.epi.data() + MegaStoreWarps::kHalfBytes) + wt;
            if (wg == 1) {
              CUTE_UNROLL
              for (int i = 0; i < 64; i += 4) xch[(i / 4) * 128] = make_float4(acc0(i), acc0(i + 1), acc0(i + 2), acc0(i + 3));
            }
            compiler_fence();  // CUTLASS's bar.sync has no memory clobber
            cutlass::arch::NamedBarrier::sync(256, kConsumersBarrier);
            compiler_fence();
            if (wg == 0) {
              CUTE_UNROLL
              for (int i = 0; i < 64; i += 4) {
                const float4 v = xch[(i / 4) * 128];
                acc1(i) = v.x, acc1(i + 1) = v.y, acc1(i + 2) = v.z, acc1(i + 3) = v.w;
              }
            }
          }
          // A half block's warp group 1 has no rows of its own: it only counts its piece.
          epi1.store_dual_with(p.epi1, ss.epi.data(), acc0, acc1, t, wt, wg, rw, MegaStoreWarps::kHalfBytes);
        } else {
          if (half) {
            MegaStoreWarps::stage(ss.epi.data(), acc0, wt, 0, wg);  // rows 0..63, piece wg
          } else {
            MegaStoreWarps::stage(ss.epi.data(), acc0, wt, wg, 0);
            MegaStoreWarps::stage(ss.epi.data(), acc1, wt, wg, 1);
          }
          if (ct == 0) ss.sw.pos = pos;
          MegaStoreWarps::arrive(&ss.sw.full);
          last_kind ^= 4;
        }
      } else {
        const WorkTile t = current_tile(is_l1);
        const auto& mp = is_l1 ? p.l1 : p.l2;
        Tensor acc = partition_fragment_C(typename T::TiledMma{}, Shape<_64, _128>{});
        // The gate group's router weights, loaded now so their latency hides behind the mainloop.
        typename L1Epilogue::RowWeights rw;
        if (is_l1 && wg == 0) rw = epi1.load_weights(p.epi1, t, wt);
        mainloop.mma(mp, pipe, read, mp.schedule, wt, 0, wg, sA, sB, acc, &ss.scales);
        if (m.trace != nullptr && ct == 0) trace_c1 = clock64();
        const int kind = is_l1 ? 1 : 2;
        if (kind != (last_kind & 3)) cutlass::arch::NamedBarrier::sync(256, kConsumersBarrier);
        last_kind = (last_kind & ~3) | kind;
        if (is_l1) epi1.store_with(p.epi1, ss.epi.data(), acc, t, wt, 0, wg, rw);
        else epi2.store(p.epi2, ss.epi.data(), acc, t, wt, 0, wg);
      }
      if (m.trace != nullptr && ct == 0) mega_trace_tile(m, pos, is_l1, trace_c0, trace_c1, is_l1 || !kStoreWarps);
      last_kind = (last_kind & 7) | ((last_kind + 8) & (7 << 3));  // the next tile's slot
    }

    if constexpr (kStoreWarps) {
      // No more tiles: the store warps leave once they read the last staged one.
      MegaStoreWarps::wait_cold(&ss.sw.free, static_cast<uint32_t>(kind_bits(last_kind) >> 2));
      if (ct == 0) ss.sw.pos = -1;
      MegaStoreWarps::arrive(&ss.sw.full);
    }
    if (pos == Queue::kTimedOut) __trap();  // the producer never handed a tile over: a bug (pipeline.cuh)

    // Publish and reduce (mega_common.cuh); the store warps join the publish barrier.
    mega_publish_and_reduce(m, ok, ct, kPublishThreads, kStoreWarps ? kPublishBarrier : kConsumersBarrier,
                            kConsumersBarrier);
  }
};

template <class Traits>
__global__ void __launch_bounds__(MegaMoeKernel<Traits>::kThreads, 1)
    mega_moe_kernel(CUTE_GRID_CONSTANT typename MegaMoeKernel<Traits>::Params const params) {
  XSTAGE_RUN_KERNEL(MegaMoeKernel<Traits>, params);
}

}  // namespace xstage::kernels::moe
