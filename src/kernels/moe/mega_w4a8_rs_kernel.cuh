// The Mega-MoE persistent kernel on the register-operand W4A8 GEMM (issue 37; docs/megamoe.md
// "W4A8 on the register-operand GEMM"): the W8A8 kernel's call structure (prologue and push
// dispatch, claimed tiles in the list order gated on their inputs, tile slots, publish, reduce;
// mega_common.cuh) around the main loop of w4a8_rs.cuh, where each consumer thread converts its
// own A fragment of 4-bit weights in registers (no converted ring, no converter warps).
//
// The GEMMs run transposed (weights on wgmma's M, tokens on N). One tile shape serves both, the
// grouped GEMM's SwiGLU tile w4a8rs_lut_swiglu_m64n256 (W4RsTraits: 64 tokens, two 128-row
// weight chunks per K block, consumer warp group g owns rows [64 g, 64 g + 64) of both chunks):
//   Linear-1: chunk 0 = the gate rows, chunk 1 = the up rows of the tile's 128 h channels; the
//     grouped kernel's SwiGLU epilogue (W4RsEpilogue::store_swiglu: fp8 h and one scale per token
//     and 128 channels, at the places HDestination names), then this tile's count into its block's
//     Linear-1 counter;
//   Linear-2: chunk c = hidden channels [256 n + 128 c, + 128) (the last tile of a hidden size
//     with H % 256 == 128 loads chunk 0 twice and stores 128 columns); bf16 rows staged
//     token-major (stmatrix), then every consumer thread stores 16-byte pieces straight into the
//     token owners' combine buffers (CombineDestination).
// So the m-blocks, tile counts, counter target and tile order are MegaTile::m64n256's.
// Activations keep W8A8's per-128 scales (x as dispatched, h as the Linear-1 epilogue writes it):
// the promotion multiplies each K block's partial sums by the token's scale from the stage.
//
// Roles (384 threads):
//   thread 0: claims list positions, waits for each tile's inputs, fills the tile slot, hands the
//     position over, then per K block the token tile (TMA) and the two prepacked weight chunks
//     (bulk copies; MXFP4 also their block scales);
//   warp 1 (scale warp): per K block the tile's 64 token scales into the stage, read through L2
//     (they are written while the kernel runs: x by peers' pushes, h by other CTAs), one K block
//     ahead; each lane arrives on the stage's full barrier (33 arrivals: TMA thread + 32 lanes);
//   warp groups 1, 2: MoeW4A8RsKernel::mma, then the epilogue of the tile's kind.
// INT4 runs the two-level format (ops::quantize_int4_lut, prepacked int4_rs_lut: the group scale
// in each row's conversion table, a channel scale in the epilogue); MXFP4 the mxfp4_rs format
// (block scales in the promotion).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/clock.cuh"
#include "kernels/common/kernel_entry.cuh"
#include "kernels/moe/mega_common.cuh"
#include "kernels/moe/mega_epilogue.cuh"
#include "kernels/moe/mega_prologue.cuh"
#include "kernels/moe/mega_rs_common.cuh"
#include "kernels/moe/tile_queue.cuh"
#include "kernels/moe/w4a8_rs.cuh"
#include "xstage/mega_tile.hpp"

namespace xstage::kernels::moe {

// 6 stages, as w4a8rs_lut_swiglu_m64n256 (configs.def); kPieces 1, per-128 token scales.
template <bool kMx>
struct MegaW4RsTraits : W4RsTraits<6, true, 0, kMx, 1, !kMx> {
  static constexpr ::xstage::moe::MegaTile kTile = ::xstage::moe::MegaTile::m64n256;
};

template <bool kMx>
struct MegaW4A8RsKernel {
  using T = MegaW4RsTraits<kMx>;
  using Rs = MoeW4A8RsKernel<T>;
  using Epi = W4RsEpilogue<Rs>;
  using Acc = typename Rs::Acc;
  using State = typename Rs::State;
  using Queue = TileQueue<kMegaQueueDepth>;
  static constexpr int kThreads = T::kThreads;
  static constexpr int kStages = T::kStages;
  static constexpr int kBlockM = T::kBlockT;  // tokens per tile = rows of an m-block
  static constexpr ::xstage::moe::MegaTileShape kShape = ::xstage::moe::mega_tile_shape(T::kTile);
  static_assert(kBlockM == kShape.block_m && kShape.l1_n == 128 && kShape.l2_n == 256 && kShape.l1_pieces == 1 &&
                    Rs::kAccs == 2 && !T::kTok && T::kScaleLanes == 32,
                "64-token tiles of two 128-row weight chunks, per-128 token scales copied by one warp");
  // Both consumer warp groups: the Linear-2 epilogue's staging, the Linear-1 count, publish and
  // reduce. User barrier 7 (the SwiGLU epilogue uses swiglu_full, 256 threads); taken through
  // W4RsEpilogue::named_sync, whose memory clobber keeps the shared reads after it.
  static constexpr uint32_t kConsumersBarrier = 7;
  static_assert(128 * T::kProducerRegs + 256 * T::kConsumerRegs <= (65536 / kThreads) / 8 * 8 * kThreads,
                "setmaxnreg budget");
  // Linear-2 staging: 64 tokens x 256 bf16 columns; 528-byte rows (132 words, 4 mod 32: the
  // stmatrix rows and the 16-byte copy-out reads are free of bank conflicts).
  static constexpr int kOutPitch = 256 * 2 + 16;
  static constexpr int kOutBytes = kBlockM * kOutPitch;
  static_assert(sizeof(MegaPrologueSmem) <= kOutBytes, "the prologue's scratch fits in the Linear-2 staging");

  struct Params {
    typename Rs::Params l1;  // x = received rows [cap, H], W1 prepacked (n = 2I), out = h
    typename Rs::Params l2;  // x = h [cap, I], W2 prepacked (n = H)
    struct {
      HDestination dest;  // the Linear-1 counter (and the trace hooks); h itself is l1.out
      const float* row_weights;
    } epi1;
    struct {
      CombineDestination dest;
      int n;  // hidden
    } epi2;
    MegaMoeArgs m;
    int n1, n2;  // Linear-1 / Linear-2 tiles per block
    MegaTokenBoxes<T> b1, b2;  // x's and h's 32-row boxes (a block of <= 32 rows loads only those)
  };

  struct SharedStorage {
    typename Rs::SharedStorage rs;  // stages (token tiles, weight chunks, token scales), the SwiGLU staging
    cute::array_aligned<uint8_t, kOutBytes, 128> out;  // Linear-2 staging; the prologue's scratch before
    typename Queue::Storage queue;
    MegaLayoutSmem layout;
    MegaTileSlot slots[kMegaTileSlots];  // the last member (kSmemBytes)
  };
  static constexpr int kSmemBytes =
      static_cast<int>(offsetof(SharedStorage, slots) + sizeof(MegaTileSlot) * kMegaTileSlots) + 1024;
  static_assert(kSmemBytes + kMegaStaticSmem <= 227 * 1024, "shared memory per CTA on sm_90");

  // First weight row of chunk c: Linear-1 the gate (c = 0) and up rows of the tile's 128
  // channels; Linear-2 the tile's two 128-column pieces (a piece past the hidden size: chunk 0
  // again, its columns are not stored).
  __device__ static int chunk_row(typename Rs::Params const& gp, bool is_l1, int n_block, int c) {
    if (is_l1) return c * (gp.n / 2) + n_block * 128;
    const int r = n_block * 256 + c * 128;
    return r < gp.n ? r : n_block * 256;
  }

  // Thread 0: the tile's K blocks into the ring (the scale warp adds the token scales). A block
  // of <= 32 rows loads a 32-row token box (MegaTokenBoxes).
  template <class SmemX>
  __device__ static void produce_tile(typename Rs::Params const& gp, MegaTokenBoxes<T> const& bx, bool is_l1,
                                      SharedStorage& ss, SmemX& sX, WorkTile const& t, State& write) {
    const int box = MegaTokenBoxes<T>::rows_for(t.rows);
    const uint32_t tx = T::kTxBytes - static_cast<uint32_t>(kBlockM - box) * T::kBlockK;
    Tensor mX = gp.tma_x.get_tma_tensor(gp.shape_x);
    auto cta_x = gp.tma_x.get_slice(0);
    Tensor tXsX = group_modes<0, 3>(cta_x.partition_D(sX));  // (TMA, stage)
    const uint8_t* wsrc[2];
    [[maybe_unused]] const float* ssrc[2];
    CUTE_UNROLL
    for (int c = 0; c < 2; ++c) {
      const int row = chunk_row(gp, is_l1, t.n_block, c);
      wsrc[c] = gp.w + (static_cast<int64_t>(t.expert) * (gp.n / 128) + row / 128) * gp.k_blocks * T::kChunkBytes;
      ssrc[c] = gp.w_scales + static_cast<int64_t>(t.expert) * gp.k_blocks * gp.n + row;
    }
    for (int kb = 0; kb < gp.k_blocks; ++kb) {
      uint64_t* full = &ss.rs.full[write.index];
      bounded_wait(&ss.rs.empty[write.index], write.phase);
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(full, tx);
      if (!bx.load_small(gp.shape_x, box, ss.rs.x.data() + write.index * kBlockM * T::kBlockK, full, t.row_begin, kb)) {
        Tensor gX = local_tile(domain_offset(make_coord(t.row_begin, 0), mX), Shape<Int<kBlockM>, Int<T::kBlockK>>{},
                               make_coord(_0{}, kb));
        copy(gp.tma_x.with(*full), group_modes<0, 3>(cta_x.partition_S(gX)), tXsX(_, write.index));
      }
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        SM90_BULK_COPY_G2S::copy(wsrc[c] + static_cast<int64_t>(kb) * T::kChunkBytes, full,
                                 ss.rs.w.data() + (write.index * 2 + c) * T::kChunkBytes, T::kChunkBytes);
        if constexpr (kMx)
          SM90_BULK_COPY_G2S::copy(ssrc[c] + static_cast<int64_t>(kb) * gp.n, full,
                                   ss.rs.ws.data() + (write.index * 2 + c) * 128, 512);
      }
      write.advance();
    }
  }

  // The scale warp, one tile: token scales of K block kb (rows past the block's: zero; their
  // outputs are never stored), in the order the consumers read them (W4RsTraits::as_index).
  __device__ static void tile_scales(typename Rs::Params const& gp, SharedStorage& ss, WorkTile const& t, int lane,
                                     State& write) {
    const float* sa = gp.a_scales + t.row_begin + lane;
    float a0 = 0.f, a1 = 0.f;
    auto fetch = [&](int kb) {
      const float* s = sa + static_cast<int64_t>(kb) * gp.m_total;
      a0 = lane < t.rows ? __ldcg(s) : 0.f;
      a1 = lane + 32 < t.rows ? __ldcg(s + 32) : 0.f;
    };
    fetch(0);
    for (int kb = 0; kb < gp.k_blocks; ++kb) {
      bounded_wait(&ss.rs.empty[write.index], write.phase);
      float* as = ss.rs.as.data() + write.index * T::kAsStage;
      as[T::as_index(lane)] = a0;
      as[T::as_index(lane + 32)] = a1;
      write_then_arrive(&ss.rs.full[write.index]);
      if (kb + 1 < gp.k_blocks) fetch(kb + 1);
      write.advance();
    }
  }

  // At a tile's start (consumer thread ct): its epilogue's channel scales (INT4 two-level; the
  // weights, so cp.async) into rs.epi_cs, waited for in the epilogue; a Linear-1 tile's router
  // weight of row ct < 64 (pushed by peers: read through L2), returned for the epilogue.
  __device__ static float prefetch_epilogue(Params const& p, SharedStorage& ss, WorkTile const& t, bool is_l1, int ct) {
    if constexpr (T::kLut) {
      const auto& gp = is_l1 ? p.l1 : p.l2;
      // Linear-1: gate channel ct (< 128), up channel ct - 128; Linear-2: hidden column 256 n + ct.
      const int col = is_l1 ? (ct < 128 ? t.n_block * 128 + ct : gp.n / 2 + t.n_block * 128 + ct - 128)
                            : t.n_block * 256 + ct;
      const bool ok = col < gp.n;
      cp_async_4(cute::cast_smem_ptr_to_uint(ss.rs.epi_cs.data() + ct),
                 gp.w_scales + static_cast<int64_t>(t.expert) * gp.n + (ok ? col : 0), ok ? 4u : 0u);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    return is_l1 && ct < t.rows ? __ldcg(p.epi1.row_weights + t.row_begin + ct) : 0.f;
  }

  // Linear-2 epilogue: both warp groups stage their 64 x 64 pieces of the 64 x 256 bf16 tile
  // token-major (stmatrix, times the channel scales), then all 256 threads store 16-byte pieces
  // straight into the token owners' combine buffers, each thread 8 rows of one 16-byte column
  // (the rows' addresses taken before the first store). Returns the SM cycles of the stores.
  __device__ static long long store_l2(Params const& p, SharedStorage& ss, Acc const* acc, WorkTile const& t, int g,
                                       int wt) {
    const int ct = g * 128 + wt;
    const int lane = wt % 32, w = wt / 32, q = lane % 4;
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    // Every thread's channel scales have landed; the previous Linear-2 tile's copy-out is done
    // with the staging.
    Epi::named_sync(256, kConsumersBarrier);
    const int m = lane / 8, r = lane % 8;
    const uint32_t base = cute::cast_smem_ptr_to_uint(ss.out.data()) + (8 * (m >> 1) + r) * kOutPitch;
    CUTE_UNROLL
    for (int b = 0; b < 2; ++b) {
      const int col = 128 * b + 64 * g + 16 * w;  // this warp's first column in the tile
      float cs0 = 1.f, cs1 = 1.f;
      if constexpr (T::kLut) {
        cs0 = ss.rs.epi_cs[col + lane / 4];
        cs1 = ss.rs.epi_cs[col + lane / 4 + 8];
      }
      Epi::template stage_bf16_piece<kOutPitch>(acc[b], base + (col + 8 * (m & 1)) * 2, cs0, cs1, nullptr, q);
    }
    Epi::named_sync(256, kConsumersBarrier);
    const long long c0 = clock64();
    const int c = ct % 32;  // 16-byte column: hidden columns 256 n + 8 c .. + 7
    const EpilogueTile et{t.expert, t.m_block, t.n_block, t.row_begin, t.rows, t.n_block * 256, t.tag};
    if (t.n_block * 256 + 8 * c < p.epi2.n) {
      constexpr int kRowsPerThread = kBlockM / 8;
      uint16_t* dst[kRowsPerThread];
      CUTE_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int tok = ct / 32 + 8 * i;
        dst[i] = tok < t.rows ? static_cast<uint16_t*>(p.epi2.dest.row_ptr(et, t.row_begin + tok)) + 8 * c : nullptr;
      }
      CUTE_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int tok = ct / 32 + 8 * i;
        if (dst[i] != nullptr) *reinterpret_cast<uint4*>(dst[i]) = *reinterpret_cast<const uint4*>(ss.out.data() + tok * kOutPitch + 16 * c);
      }
    }
    return clock64() - c0;
  }

  __device__ void operator()(Params const& p, char* smem_buf) const {
    const uint32_t base = cute::cast_smem_ptr_to_uint(smem_buf);
    SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem_buf + ((1024u - (base & 1023u)) & 1023u));
    const MegaMoeArgs& m = p.m;
    const int tid = threadIdx.x;
    mega_stamp_start(m);
    // Full barriers: the TMA thread and the scale warp's 32 lanes; queue readers: every consumer
    // thread and the scale warp.
    if (tid == 0)
      mega_rs_setup<kMx, typename Rs::SharedStorage, Queue>(ss.rs, kStages, 1 + T::kScaleLanes, T::kConsumerWarps,
                                                            ss.queue, 256 + 32, p.l1, p.l2, p.b1, p.b2);
    cutlass::arch::fence_barrier_init();
    __syncthreads();

    mega_prologue(m, *reinterpret_cast<MegaPrologueSmem*>(ss.out.data()), ss.layout, p.n1, kBlockM);
    const MegaCallTiles call = mega_call_tiles(m, ss.layout, p.n1, p.n2);
    __syncthreads();  // the prologue's scratch (the Linear-2 staging) is read before any epilogue writes it

    Tensor sX = make_tensor(make_smem_ptr(ss.rs.x.data()), typename T::SmemLayoutX{});
    const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
    const Queue queue{&ss.queue};

    if (warp < 4) {
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (tid == 0) {
        State write{0, 1u};  // every buffer starts empty
        const uint32_t l1_target = ::xstage::moe::mega_l1_target(::xstage::moe::mega_tile_shape(T::kTile), p.n1);
        mega_produce_all<kBlockM, 0>(m, ss.layout, p.n1, p.n2, call, l1_target, ss.slots, queue,
                                  [&](WorkTile const& t, bool is_l1, int) {
                                    produce_tile(is_l1 ? p.l1 : p.l2, is_l1 ? p.b1 : p.b2, is_l1, ss, sX, t, write);
                                  });
      } else if (warp == 1) {
        State write{0, 1u};
        auto qs = Queue::consumer_start();
        for (int k = 0;; ++k) {
          const int pos = queue.pop(qs);
          if (pos < 0) break;  // the end, or kTimedOut (the consumers trap on it)
          const MegaTileSlot& sl = ss.slots[k & (kMegaTileSlots - 1)];
          tile_scales(sl.is_l1 != 0 ? p.l1 : p.l2, ss, sl.t, tid & 31, write);
        }
      }
      return;  // a timed-out wait above still loads (garbage) so the consumers never hang
    }

    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int ct = tid - 128;
    const int g = ct / 128;
    const int wt = ct % 128;
    const Rs rs{};
    State read{};
    uint32_t it = 0;  // K blocks consumed (MoeW4A8RsKernel's trace, measurement builds only)
    mega_consume_all(m, ss.slots, queue, ct, call.ok, kConsumersBarrier, [&](WorkTile const& t, bool is_l1,
                                                                             auto mainloop_done) {
      const float rw = prefetch_epilogue(p, ss, t, is_l1, ct);
      Acc acc[2];
      rs.mma(is_l1 ? p.l1 : p.l2, ss.rs, sX, read, g, wt, acc, it);
      mainloop_done();
      long long tail;
      if (is_l1) {
        // The SwiGLU epilogue reads the router weights from rs.epi_rw after its first barrier;
        // every reader of the previous tile's passed this tile's last barrier below.
        if (ct < kBlockM) ss.rs.epi_rw[ct] = rw;
        p.epi1.dest.mark(0, ct);
        Epi::store_swiglu(p.l1, ss.rs, acc, t, g, wt, 0);
        p.epi1.dest.mark(1, ct);
        const long long c0 = clock64();
        p.epi1.dest.writer_fence();  // h is read next by TMA in other CTAs
        Epi::named_sync(256, kConsumersBarrier);
        tail = clock64() - c0;
        const EpilogueTile et{t.expert, t.m_block, t.n_block, t.row_begin, t.rows, t.n_block * 128, t.tag};
        if (ct == 0) p.epi1.dest.tile_stored(et, tail);
      } else {
        tail = store_l2(p, ss, acc, t, g, wt);
        if (m.spans != nullptr || m.trace != nullptr) {
          // The sender-visible span of the tile's stores: until both groups' stores are done.
          const long long c0 = clock64() - tail;
          Epi::named_sync(256, kConsumersBarrier);
          tail = clock64() - c0;
          if (ct == 0) {
            for (int piece = 0; piece < 2; ++piece) {
              if (t.n_block * 256 + 128 * piece >= p.epi2.n) continue;  // a piece past H has no span (as W8A8)
              const EpilogueTile et{t.expert, t.m_block, t.n_block, t.row_begin, t.rows, t.n_block * 256 + 128 * piece,
                                    t.tag};
              p.epi2.dest.tile_stored(et, tail);
            }
          }
        }
      }
    });
  }
};

template <bool kMx>
__global__ void __launch_bounds__(MegaW4A8RsKernel<kMx>::kThreads, 1)
    mega_moe_w4a8_rs_kernel(CUTE_GRID_CONSTANT typename MegaW4A8RsKernel<kMx>::Params const params) {
  XSTAGE_RUN_KERNEL(MegaW4A8RsKernel<kMx>, params);
}

}  // namespace xstage::kernels::moe
