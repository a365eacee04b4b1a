// The Mega-MoE persistent kernel with W4A8 weights (issue 37; docs/megamoe.md "W4A8 in the
// fused kernel"): the W8A8 kernel's call structure (mega_kernel.cuh: prologue and dispatch,
// claimed tiles in the list order, gated on their inputs, publish, reduce; mega_common.cuh)
// around the row-layout W4A8 GEMM of the grouped GEMM (w4a8.cuh, docs/moe-gemm-w4a8.md): 4-bit
// weights in memory, converted to fp8 in shared memory inside the main loop.
//
// One tile configuration, 64 x 256 (the W4A8 grouped GEMM's SwiGLU tile): Linear-1 tiles are 64
// rows x (128 gate + 128 up) channels, Linear-2 tiles 64 rows x 256 hidden channels, warp group 1
// computes the first 128 columns and warp group 2 the second, as MegaTraits64 does. Roles:
//   thread 0: claims list positions, waits for each tile's inputs, leaves the decoded tile in
//     the slots, hands the position over, then loads the tile's K blocks into the TMA ring (A
//     chunk, packed B chunks, raw weight scales; MoeW4A8Kernel::produce_tile); an "end" header
//     after the last tile;
//   warps 1-3 (96 threads): convert every stage of the TMA ring into the converted ring (their
//     units; the stream of stages does not care which tile or GEMM it belongs to);
//   warp groups 1, 2: per tile, the W4A8 consumer loop (MoeW4A8Kernel::mma: wgmmas on converted
//     B, their share of a later stage's conversion while the wgmmas run, within the tile only
//     (a tile's end must not wait for the next tile, whose inputs may need this one's count),
//     promotion with the
//     token scale x the weight row's scale), then the W8A8 kernel's epilogues: SwiGLU + fp8 into
//     h and the block's Linear-1 count, or bf16 rows into the token owners' combine buffers.
// The token scales (x pushed by peers, h by other CTAs) are read through L2 (kInKernelScales);
// the producer hands a tile over only once they are complete, as in the W8A8 kernel.
// INT4 runs the decoupled conversion design (3 TMA stages, 3 converted buffers), MXFP4 the
// lock-step one (4 + 2), as in the grouped GEMM.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/clock.cuh"
#include "kernels/common/kernel_entry.cuh"
#include "kernels/moe/epilogue.cuh"
#include "kernels/moe/mega_common.cuh"
#include "kernels/moe/mega_epilogue.cuh"
#include "kernels/moe/mega_prologue.cuh"
#include "kernels/moe/tile_queue.cuh"
#include "kernels/moe/w4a8.cuh"
#include "xstage/mega_tile.hpp"

namespace xstage::kernels::moe {

// kMx: MXFP4 (lock-step conversion) or INT4 (decoupled).
template <bool kMx>
struct MegaW4Traits : W4Traits<64, 256, true, !kMx, true> {
  static constexpr ::xstage::moe::MegaTile kTile = ::xstage::moe::MegaTile::m64n256;
};

template <bool kMx>
struct MegaW4A8Kernel {
  using T = MegaW4Traits<kMx>;
  // The grouped GEMM's W4A8 kernel, for its producer, conversion and consumer loop (its own
  // epilogue policy is not used here).
  using W4 = MoeW4A8Kernel<T, LocalBf16Epilogue>;
  using L1Epilogue = SwiGluQuantEpilogue<T, HDestination>;
  using L2Epilogue = Bf16TileEpilogue<T, CombineDestination>;
  using Pipeline = typename W4::Pipeline;
  using State = typename W4::State;
  using Queue = TileQueue<kMegaQueueDepth>;
  static constexpr int kThreads = T::kThreads;
  static constexpr int kStages = T::kStages;
  static constexpr int kConvBufs = T::kConvBufs;
  static constexpr int kWgN = T::kWgN;
  static constexpr int kEpiSmem =
      L1Epilogue::kSmemBytes > L2Epilogue::kSmemBytes ? L1Epilogue::kSmemBytes : L2Epilogue::kSmemBytes;
  // Both consumer warp groups, between epilogues of different kinds (their staging overlaps)
  // and before the publish and the reduce: user barrier 7, as in the W8A8 kernel.
  static constexpr uint32_t kConsumersBarrier = 7;
  static_assert(T::kConsumerWGs == 2 && T::kWgM == 1 && kWgN == 2, "64 x 256: two consumer warp groups along N");
  static_assert(::xstage::moe::mega_tile_shape(T::kTile).block_m == T::kBlockM &&
                    ::xstage::moe::mega_tile_shape(T::kTile).l2_n == T::kBlockN,
                "xstage/mega_tile.hpp describes this tile");
  static_assert(128 * T::kProducerRegs + T::kConsumerThreads * T::kConsumerRegs <= (65536 / kThreads) / 8 * 8 * kThreads,
                "setmaxnreg budget");

  struct Params {
    typename W4::Params l1;  // A = received x [cap, H], B = packed W1 [E/P, 2I, H/2]
    typename W4::Params l2;  // A = h [cap, I], B = packed W2 [E/P, H, I/2]
    typename L1Epilogue::Params epi1;
    typename L2Epilogue::Params epi2;
    MegaMoeArgs m;
    int n1, n2;  // Linear-1 / Linear-2 tiles per block
  };

  // The member names are the ones MoeW4A8Kernel's device functions use (they take any storage).
  struct SharedStorage {
    cute::array_aligned<typename T::Element, cute::cosize_v<typename T::SmemLayoutA>, 1024> a;  // TMA ring
    cute::array_aligned<typename T::Element, cute::cosize_v<typename T::SmemLayoutB>, 1024> b;  // converted ring
    // TMA ring: packed B; the prologue's scratch before the tile loop (mega_prologue).
    cute::array_aligned<uint8_t, T::kChunkSlots * T::kPackedBytes, 1024> bq;
    cute::array_aligned<uint8_t, T::kChunkSlots * T::kScaleBytes, 16> raw;
    cute::array_aligned<float, kWgN * kConvBufs * 128, 16> cscale;
    cute::array_aligned<uint8_t, kEpiSmem, 128> epi;
    typename Pipeline::Storage pipe;
    uint64_t cfull[kConvBufs];
    uint64_t cempty[kConvBufs];
    int header[kStages];
    uint32_t lut[2 * 2];
    typename Queue::Storage queue;
    MegaLayoutSmem layout;
    MegaTileSlot slots[kMegaTileSlots];  // the last member (kSmemBytes)
  };
  static_assert(sizeof(MegaPrologueSmem) <= T::kChunkSlots * T::kPackedBytes, "the prologue's scratch fits in bq");
  // The storage up to its last member's end (sizeof rounds up to the 1024-byte alignment: INT4's
  // storage then reached the limit exactly and the kernel's static shared variables did not fit)
  // plus the alignment slack; room left for kMegaStaticSmem bytes of static shared variables.
  static constexpr int kSmemBytes =
      static_cast<int>(offsetof(SharedStorage, slots) + sizeof(MegaTileSlot) * kMegaTileSlots) + 1024;
  static_assert(kSmemBytes + kMegaStaticSmem <= 227 * 1024, "shared memory per CTA on sm_90");

  // B rows of chunk c: Linear-1 gate rows then up rows of the tile's 128 h channels (n = 2I),
  // Linear-2 the tile's two 128-column pieces.
  __device__ __forceinline__ static void b_rows(Params const& p, WorkTile const& t, bool is_l1, int (&brow)[kWgN]) {
    CUTE_UNROLL
    for (int c = 0; c < kWgN; ++c)
      brow[c] = is_l1 ? c * (p.l1.n / 2) + t.n_block * 128 : t.n_block * T::kBlockN + c * 128;
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
      Pipeline::init(ss.pipe, T::kConsumerWarps);
      for (int s = 0; s < kConvBufs; ++s) {
        cutlass::arch::ClusterBarrier::init(&ss.cfull[s], T::kConvThreads / 32);
        cutlass::arch::ClusterBarrier::init(&ss.cempty[s], T::kConsumerWarps);
      }
      for (int i = 0; i < 4; i += 2) {
        const W4Lut l = int4_lut();
        ss.lut[i] = l.p0;
        ss.lut[i + 1] = l.n0;
      }
      Queue::init(ss.queue, T::kConsumerThreads);  // every consumer thread reads each position
      cute::prefetch_tma_descriptor(p.l1.tma_a.get_tma_descriptor());
      cute::prefetch_tma_descriptor(p.l1.tma_b.get_tma_descriptor());
      cute::prefetch_tma_descriptor(p.l2.tma_a.get_tma_descriptor());
      cute::prefetch_tma_descriptor(p.l2.tma_b.get_tma_descriptor());
    }
    cutlass::arch::fence_barrier_init();
    __syncthreads();

    mega_prologue(m, *reinterpret_cast<MegaPrologueSmem*>(ss.bq.data()), ss.layout, p.n1, T::kBlockM);
    const bool ok = ss.layout.ok != 0;
    const int total = ok ? ss.layout.block_start[m.ep.experts_per_rank] * (p.n1 + p.n2) : 0;
    const int parity = static_cast<int>(a.epoch & 1u);
    uint32_t* l1_done = m.l1_done + parity * m.max_blocks;

    Tensor sA = make_tensor(make_smem_ptr(ss.a.data()), typename T::SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(ss.b.data()), typename T::SmemLayoutB{});
    const W4 w4{};
    const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
    const Queue queue{&ss.queue};
    // The prologue's scratch (bq) is written by TMA next: order its generic accesses first.
    cutlass::arch::fence_view_async_shared();
    __syncthreads();

    if (warp < 4) {
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (tid == 0) {
        Tensor sBq = make_tensor(make_smem_ptr(ss.bq.data()), typename T::SmemLayoutBq{});
        State write = Pipeline::producer_start();
        uint32_t it = 0;
        auto qs = Queue::producer_start();
        bool rows_here = false;
        const uint32_t l1_target = ::xstage::moe::mega_l1_target(::xstage::moe::mega_tile_shape(T::kTile), p.n1);
        for (int i = 0;; ++i) {
          // Claim the next list position (tile_queue.cuh: dynamic = in time order).
          const int pos = m.dynamic_claim ? static_cast<int>(atomicAdd(m.tile_next + parity, 1u))
                                          : static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x);
          if (pos >= total) {
            queue.push(qs, -1);
            break;
          }
          bool is_l1;
          const WorkTile t = mega_work_tile<T::kBlockM>(m, p.n1, p.n2, ss.layout, pos, is_l1);
          const uint64_t w0 = m.trace != nullptr ? clock64() : 0;
          mega_wait_inputs(m, ss.layout, l1_done, is_l1, t.tag, p.n2, l1_target, rows_here);
          if (m.trace != nullptr) m.trace[size_t(pos) * kMegaTraceWords + 4] = static_cast<uint32_t>(clock64() - w0);
          ss.slots[i & (kMegaTileSlots - 1)] = MegaTileSlot{t, is_l1 ? 1 : 0};  // before the push that publishes it
          queue.push(qs, pos);
          int brow[kWgN];
          b_rows(p, t, is_l1, brow);
          w4.produce_tile(is_l1 ? p.l1 : p.l2, ss, sA, sBq, t, brow, write, it);
        }
        W4::produce_end(ss, write);
      } else if (warp >= 1) {
        // Converter warps: every stage until the end header (a timed-out gate above still loads,
        // garbage, so nobody hangs).
        const int g = tid - 32;  // 0..95
        for (uint32_t it = 0; w4.convert_stage(p.l1, ss, W4::tma_state(it), W4::conv_state(it), g, it); ++it) {
        }
      }
      return;
    }

    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int ct = tid - 128;
    const int wg = ct / 128;
    const int wt = ct % 128;
    const int g = T::kConverterThreads + ct;
    L1Epilogue::consumer_init(wg);
    const L1Epilogue epi1{};
    const L2Epilogue epi2{};
    // The consumers convert their share of each tile's stages within the tile only
    // (MoeW4A8Kernel::mma<true>): a tile's end must not wait for the next tile's inputs.
    bool more = true;  // unused by the tile-bounded loop
    uint32_t it = 0;
    auto qs = Queue::consumer_start();
    int last_kind = 0;  // the previous tile's kind (1: Linear-1, 2: Linear-2)
    int pos;
    __shared__ uint64_t trace_c0, trace_c1;
    for (int k = 0;; ++k) {
      pos = queue.pop(qs);
      if (pos < 0) break;
      if (m.trace != nullptr && ct == 0) trace_c0 = clock64();
      const MegaTileSlot& sl = ss.slots[k & (kMegaTileSlots - 1)];
      const WorkTile t = sl.t;
      const bool is_l1 = sl.is_l1 != 0;
      Tensor acc = partition_fragment_C(typename T::TiledMma{}, Shape<_64, _128>{});
      // The gate group's router weights, loaded now so their latency hides behind the mainloop.
      typename L1Epilogue::RowWeights rw;
      if (is_l1 && wg == 0) rw = epi1.load_weights(p.epi1, t, wt);
      w4.template mma<true>(is_l1 ? p.l1 : p.l2, ss, it, more, g, t, wt, 0, wg, sA, sB, acc);
      if (m.trace != nullptr && ct == 0) trace_c1 = clock64();
      const int kind = is_l1 ? 1 : 2;
      if (kind != last_kind) cutlass::arch::NamedBarrier::sync(256, kConsumersBarrier);
      last_kind = kind;
      if (is_l1) epi1.store_with(p.epi1, ss.epi.data(), acc, t, wt, 0, wg, rw);
      else epi2.store(p.epi2, ss.epi.data(), acc, t, wt, 0, wg);
      if (m.trace != nullptr && ct == 0) mega_trace_tile(m, pos, is_l1, trace_c0, trace_c1, true);
    }
    if (pos == Queue::kTimedOut) __trap();  // the producer never handed a tile over: a bug (pipeline.cuh)
    mega_publish_and_reduce(m, ok, ct, 256, kConsumersBarrier, kConsumersBarrier);
  }
};

template <bool kMx>
__global__ void __launch_bounds__(MegaW4A8Kernel<kMx>::kThreads, 1)
    mega_moe_w4a8_kernel(CUTE_GRID_CONSTANT typename MegaW4A8Kernel<kMx>::Params const params) {
  XSTAGE_RUN_KERNEL(MegaW4A8Kernel<kMx>, params);
}

}  // namespace xstage::kernels::moe
