// The register-operand W4A8 grouped GEMM (symmetric INT4 group-128 weights; MXFP4 with the
// exponents folded into per-sub-block conversion tables, W4RsTraits::kMx; INT4 with two-level
// scales, the e4m3 group scale folded into per-row tables, W4RsTraits::kLut): the GEMM runs
// transposed, out^T = W * X^T, so the 4-bit weights are wgmma's A operand and come from
// registers (the m64nNk32 e4m3 "RS" form). Each consumer thread converts exactly the values of
// its own A fragment (two 16-byte shared loads per 64 rows x 128 K from the prepacked
// sign-magnitude layout of w4a8_rs_layout.hpp, one instruction per value) while its warp
// group's previous wgmmas run. Nothing converted goes back to shared memory: no converted ring,
// no proxy fence, no converter warps (w4a8.cuh's designs are bound by those, docs/moe-gemm-w4a8.md).
//
// Two tiles (W4RsTraits::kGateUp):
//   bf16 output: 128 weight rows (output columns) x 128 tokens; consumer warp group g owns rows
//     [64g, 64g + 64) of the tile's weight chunk;
//   Linear-1 with SwiGLU (gate/up fused, fp8 output per token per 128 channels): 128 output
//     channels x 64 tokens (kLut: also 128 tokens as two 64-token pieces), i.e. two weight chunks
//     per K block (the gate rows and the up rows of the same 128 channels); warp group g owns
//     channels [64g, 64g + 64): 64 gate and 64 up rows.
// (bf16 also runs 256-token tiles: two 128-token pieces per converted fragment, W4RsTraits::kPieces.)
//   Linear-1 on gate/up-interleaved rows (W4RsTraits::kGlu, per-token scales): the bf16 256-token
//     tile's main loop on rows prepacked so that each 16-row slab holds 8 gate rows then the 8 up
//     rows of the same channels (ops::prepack_int4_lut_rs_glu): every thread holds gate and up of
//     one channel, the tile covers 64 channels, and the per-token amax over a scale block's 128
//     channels is taken with the partner CTA of a 1 x 2 cluster (the adjacent 64 channels of the
//     same tokens) through distributed shared memory. The consumers only compute h and park it
//     in shared memory; warps 1-3 of the producer warp group run the rest of the epilogue while
//     the consumers go on with the next tile.
// The per-token bf16 tiles (W4RsTraits::kBf16Warps) likewise stage the whole tile and leave its
// copy-out to those warps.
// Warp group 0 is the producer (warp 0: lane 0 issues the TMA load of the fp8 token tile and the
// bulk copies of the prepacked weight chunks and their weight scales; except with per-token
// scales, all 32 lanes copy the K block's token scales with cp.async, zero past the expert's
// tokens, and arrive on the stage's full barrier when they land). Consumers, per K block: four wgmmas per 64-row block from zero (A =
// converted registers, B = the token tile); while they run the next block's fragments are
// converted; then acc += part * w_scale[row, kb] * a_scale[token, kb] (the W8A8 precision
// scheme with both scales as vectors; kLut: acc += part * a_scale[token, kb], the channel scale
// applied in the epilogue) and the stage is released. Epilogues: bf16 - each warp
// group stages its piece token-major in shared memory and stores 16-byte row pieces; SwiGLU -
// h = silu(gate) * up * row_weight, per-token amax over the 128 channels (both warp groups
// through shared memory), fp8 rows staged token-major, 16-byte stores, one scale per token
// (w4a8_rs_epilogue.cuh holds them).
//
// Included only by launch_w4a8rs_*.cu.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/kernel_entry.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/common/shared_storage.cuh"
#include "kernels/moe/launch.hpp"
#include "kernels/moe/mainloop.cuh"
#include "kernels/moe/params_w4a8.hpp"
#include "kernels/moe/pipeline.cuh"
#include "kernels/moe/quant.cuh"
#include "kernels/moe/tile_scheduler.cuh"
#include "kernels/moe/w4a8_convert.cuh"
#include "kernels/moe/w4a8_rs_epilogue.cuh"
#include "kernels/moe/w4a8_rs_layout.hpp"
#include "kernels/moe/w4a8_trace.cuh"

namespace xstage::kernels::moe {

using namespace cute;

// kStudy_ (measurement builds only, XSTAGE_W4RS_STUDY): bit 0 skips the conversion (the packed
// words go to wgmma as they are), bit 1 the scales of the promotion (acc += part), bit 2 the
// promotion (one value per piece is added; the 256-token lut tile). Wrong
// results by design: they say what each part costs (docs/moe-gemm-w4a8.md).
// kMx_: MXFP4 weights (ops::prepack_mxfp4_rs): each chunk carries its exponent gaps and each
// K step's table is shifted by its sub-block's gap (w4a8_rs_layout.hpp); w_scales are the
// block scales 2^(emax - 133).
// kPieces_: token pieces per tile (128 tokens each for bf16, 64 for SwiGLU). With 2, a warp
// group converts its weight fragments of a K block once and runs them against both token
// pieces, one after the other (one per-K-block accumulator per weight block, kPieces fp32
// accumulators): half the conversion per MAC. SwiGLU with 2 pieces: INT4 two-level only.
// kLut_: INT4 with two-level scales (ops::prepack_int4_lut_rs): each chunk carries every row's
// conversion table for its K block (the e4m3 group scale folded in, w4a8_rs_layout.hpp), so the
// promotion keeps only the token scale (one FFMA per value, as W8A8) and w_scales are fp32
// channel scales [experts, n], applied once per tile in the epilogue.
// kTok_: per-token activation scales (a_scales fp32 [m_total], one per token for all K), INT4
// two-level or MXFP4 with two pieces only. INT4 two-level: no scale varies per K block, so the
// promotion is a plain add (acc += part, kept per 128 K for the fp32 accuracy of the sum: the
// tensor core's own FP8
// accumulation over all of K was 3.6e-3 off in the SwiGLU group scales at K = 1408) and
// the K loop loads no token scales (their shared-memory traffic is most of what the per-128
// promotion costs: tools/rs_wgmma_probe, docs/moe-gemm-w4a8.md); token x channel scale in the epilogue.
// MXFP4 (kMx_ with kTok_): the block scale of each row and K block stays in the promotion as one
// register per row (acc = fma(part, w_scale[row, kb], acc), no token-scale loads); the token
// scale in the epilogue.
// kGlu_: SwiGLU on gate/up-interleaved rows (see the header; per-token scales, 256-token tiles of
// two 128-token pieces, one 64-row block per warp group, 1 x 2 clusters). kGateUp_ stays false:
// the main loop is the bf16 tile's, only the epilogue differs.
// kBf16Warps_: the bf16 tile's copy-out on warps 1-3 of the producer warp group (per-token tiles):
// the consumers stage the whole tile (both pieces, bf16, token-major) and go on with the next one.
// kWide_ (per-token, one 128-token piece): two 128-row weight chunks per K block, warp group g
// running chunk g as two 64-row slabs against the piece (mma_wide; the fused kernel's wide
// few-row tile, docs/megamoe.md §Wide per-token tiles): each converted fragment is used once.
template <int kStages_, bool kGateUp_, int kStudy_ = 0, bool kMx_ = false, int kPieces_ = 1, bool kLut_ = false,
          bool kTok_ = false, bool kGlu_ = false, bool kBf16Warps_ = false, bool kWide_ = false>
struct W4RsTraits {
  static constexpr int kStudy = kStudy_;
  static constexpr bool kWide = kWide_;
  static_assert(!kWide_ || (kTok_ && kPieces_ == 1 && !kGateUp_ && !kGlu_ && !kBf16Warps_ && (kLut_ || kMx_)),
                "wide tiles: per-token, one piece, INT4 two-level or MXFP4");
  static constexpr bool kGlu = kGlu_;
  static constexpr bool kBf16Warps = kBf16Warps_;
  static_assert(!kBf16Warps_ || (kTok_ && !kGlu_ && !kGateUp_), "the bf16 copy-out on the producer warps: per-token bf16");
  // Warps 1-3 of the producer warp group run (part of) the epilogue.
  static constexpr bool kEpiWarps = kGlu_ || kBf16Warps_;
  static_assert(!kGlu_ || (!kGateUp_ && kTok_), "the interleaved SwiGLU tile: per-token scales on the bf16 main loop");
  static constexpr bool kTok = kTok_;
  static_assert(!kTok_ || ((kLut_ || kMx_) && (kPieces_ == 2 || kWide_)),
                "per-token activation scales: INT4 two-level or MXFP4, two pieces or wide");
  static constexpr bool kMx = kMx_;
  static constexpr bool kLut = kLut_;
  static_assert(!(kMx && kLut), "one weight format");
  static constexpr bool kGateUp = kGateUp_;
  static constexpr int kPieces = kPieces_;
  static_assert(kPieces == 1 || (kPieces == 2 && (!kGateUp || kLut_)), "two token pieces: bf16, or SwiGLU with kLut");
  using Element = cutlass::float_e4m3_t;
  // 64-row weight blocks per warp group (gate, up); kWide: a stage's chunks (one per warp group)
  static constexpr int kBlocks = kGateUp || kWide_ ? 2 : 1;
  static constexpr int kPieceT = kGateUp ? 64 : 128;       // tokens per wgmma piece
  static constexpr int kBlockT = kPieceT * kPieces;        // tokens per tile
  static constexpr int kBlockK = 128;
  static constexpr int kStages = kStages_;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kConsumerWarps = 4 * kConsumerWGs;
  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  // Two pieces hold a second 64-value accumulator: the producer gives up 16 more registers.
  // XSTAGE_RS_PRODUCER_REGS (the Mega-MoE translation units; CMake option of that name): the
  // producer's registers with two pieces, 24 (consumers 240) or 32 / 40 (consumers 232, their K
  // loops still without local memory), so that the Mega-MoE producer's claim and decode spill
  // less (docs/megamoe.md §Per-tile trace).
#ifdef XSTAGE_RS_PRODUCER_REGS
  static_assert(XSTAGE_RS_PRODUCER_REGS == 24 || XSTAGE_RS_PRODUCER_REGS == 32 || XSTAGE_RS_PRODUCER_REGS == 40,
                "XSTAGE_RS_PRODUCER_REGS: 24, 32 or 40");
  static constexpr int kProducerRegs = kPieces == 2 || kWide_ ? XSTAGE_RS_PRODUCER_REGS : 40;
  static constexpr int kConsumerRegs = (kPieces == 2 || kWide_) && XSTAGE_RS_PRODUCER_REGS == 24 ? 240 : 232;
#else
  static constexpr int kProducerRegs = kPieces == 2 || kWide_ ? 24 : 40;
  static constexpr int kConsumerRegs = kPieces == 2 || kWide_ ? 240 : 232;
#endif
  static_assert(128 * kProducerRegs + 128 * kConsumerWGs * kConsumerRegs <= 65536, "register file");

  using MmaAtom = cute::conditional_t<kGateUp, SM90_64x64x32_F32E4M3E4M3_RS_TN<>, SM90_64x128x32_F32E4M3E4M3_RS_TN<>>;
  using TiledMma = decltype(make_tiled_mma(MmaAtom{}));  // one warp group, 64 x kPieceT x 32

  // Token tile: K-major, 128-byte swizzle (what the e4m3 wgmma's B operand reads), one slot per
  // piece and stage (slot = stage * kPieces + piece).
  using SmemLayoutX = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<Int<kPieceT>, Int<kBlockK>, Int<kPieces * kStages>>{}));
  using ShapeX = Shape<int32_t, int32_t>;  // (m_total, k)
  using StrideX = Stride<int64_t, _1>;
  using TmaX = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeX{},
                                                  StrideX{}),
                                      take<0, 2>(SmemLayoutX{}), Shape<Int<kPieceT>, Int<kBlockK>>{}, Int<1>{}));

  static constexpr uint32_t kBytesX = kBlockT * kBlockK;
  // one 128-row chunk, prepacked
  static constexpr uint32_t kChunkBytes = kMx ? kRsMxChunkBytes : kLut ? kRsLutChunkBytes : kRsChunkBytes;
  static constexpr uint32_t kPackedBytes = kBlocks * kChunkBytes;
  static constexpr uint32_t kWScaleBytes = kLut ? 0 : kBlocks * 128 * 4;  // per-K-block weight scales
  static constexpr uint32_t kTxBytes = kBytesX + kPackedBytes + kWScaleBytes;  // TMA + bulk copies
  // Producer lanes copying token scales per K block (cp.async arrivals); kTok: none, the token
  // scale is the epilogue's and is copied once per tile.
  static constexpr int kScaleLanes = kTok_ ? 0 : 32;
  // Token scales of a stage in shared memory, ordered by the consumer thread that reads them:
  // thread quad position q needs tokens 2q + 8i + {0, 1}, kept as kBlockT / 4 consecutive
  // floats per q (+4 floats of padding: the four rows fall in different banks for 16-byte loads).
  static constexpr int kAsRow = kBlockT / 4 + 4;
  static constexpr int kAsStage = 4 * kAsRow;
  __host__ __device__ static constexpr int as_index(int token) {
    return ((token % 8) / 2) * kAsRow + (token / 8) * 2 + token % 2;
  }
};

// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ uint2 ld_shared_u2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}


template <class Traits>
struct MoeW4A8RsKernel {
  using T = Traits;
  using Element = typename T::Element;
  static constexpr int kStages = T::kStages;
  static constexpr int kBlocks = T::kBlocks;
  static constexpr int kBlockT = T::kBlockT;
  static constexpr int kPieceT = T::kPieceT;
  static constexpr int kPieces = T::kPieces;
  static constexpr int kAccs = kBlocks * kPieces;  // fp32 accumulators per thread: acc[piece * kBlocks + block]
  using State = PipeState<kStages>;
  // kGlu: the two CTAs of a 1 x 2 cluster take the two 64-channel halves of a scale block.
  static constexpr int kClusterN = T::kGlu ? 2 : 1;
  using Scheduler = GroupedScheduler<kBlockT, 1, kClusterN>;
  static constexpr int kThreads = T::kThreads;
  // Epilogue staging, token-major: bf16 64 columns per warp group (one piece at a time); SwiGLU
  // fp8 128 channels.
  static constexpr int kPitch = T::kGateUp ? 128 + 16 : 64 * 2 + 16;
  static constexpr int kEpiBytes = T::kGateUp ? kPieceT * kPitch + 8 * kPieceT * 4 + kPieceT * 4
                                              : T::kConsumerWGs * kPieceT * kPitch;
  // kGlu: h = silu(gate) * up (fp32) of the tile's 64 channels for all kBlockT tokens, token-major,
  // parked by the consumers for the epilogue warps. The pitch (68 floats, 4 mod 32) keeps both
  // sides free of bank conflicts: a consumer warp writes 4 tokens (2q) x 8 channels, banks
  // 8q + c; an epilogue warp reads 16 bytes of 8 tokens per phase, banks 4 tok + 4c.
  static constexpr int kHPitch = 64 + 4;
  static constexpr int kGluEpiBytes = kBlockT * kHPitch * 4;
  // kGlu: warps 1-3 of the producer warp group run the epilogue (one thread per token); kBf16Warps:
  // they copy the staged bf16 tile out.
  static constexpr int kEpiThreads = 96;
  // kBf16Warps: the whole tile staged token-major, 128 bf16 columns per token (pitch 272 bytes,
  // 4 mod 32 words: the stmatrix rows and the 16-byte copy-out reads are free of bank conflicts).
  static constexpr int kParkPitch = 128 * 2 + 16;
  static constexpr int kParkEpiBytes = kBlockT * kParkPitch;
  // kWide: each warp group's 128 columns (two slabs) of the piece at the park pitch, side by side.
  static constexpr int kWideEpiBytes = T::kConsumerWGs * kPieceT * kParkPitch;

  struct Params {
    typename T::TmaX tma_x;
    typename T::ShapeX shape_x;
    const uint8_t* w;        // prepacked int4 / mxfp4 weights (w4a8_rs_layout.hpp)
    const float* w_scales;   // fp32 [experts, k/128, n] (mxfp4: block scales from prepacking; lut: [experts, n])
    const float* a_scales;   // fp32 [k/128, m_total] (kTok: [m_total])
    const int* counts;
    const int* offsets;
    void* out;               // bf16 [m_total, n] or (SwiGLU) fp8 [m_total, n/2], row pitch out_ld
    int64_t out_ld;
    float* out_scales;       // SwiGLU: fp32 [n/2/128, m_total]
    const float* row_weights;  // SwiGLU: fp32 [m_total]
    int experts;
    int m_total;
    int n;
    int k_blocks;
    int n_blocks;  // output tile columns: n/128 (bf16), n/2/128 (SwiGLU)
#ifdef XSTAGE_MOE_STUDY
    uint32_t* trace;  // w4a8_trace.cuh (W4RsTraceSlot); null: not recorded
#endif
  };

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<typename T::SmemLayoutX>, 1024> x;
    cute::array_aligned<uint8_t, kStages * T::kPackedBytes, 128> w;
    cute::array_aligned<float, T::kLut ? 4 : kStages * kBlocks * 128, 16> ws;  // lut: unused
    cute::array_aligned<float, T::kTok ? 4 : kStages * T::kAsStage, 16> as;  // kTok: unused
    cute::array_aligned<uint8_t, T::kGlu ? kGluEpiBytes : T::kBf16Warps ? kParkEpiBytes : T::kWide ? kWideEpiBytes : kEpiBytes,
                        128>
        epi;
    // Epilogue inputs, copied in (cp.async) when a tile starts so their global latency hides under
    // the K loop. bf16: each warp group's 64 channel scales (lut) and its copy of the tile's token
    // scales (kTok). SwiGLU (shared by both groups): the 128 gate and 128 up channel scales (lut),
    // the tile's router weights and token scales (kTok).
    static constexpr int kEpiCs = T::kLut ? (T::kGateUp || T::kWide ? 256 : T::kConsumerWGs * 64) : 4;
    static constexpr int kEpiTs = T::kTok ? (T::kGateUp ? kBlockT : T::kConsumerWGs * kBlockT) : 4;
    cute::array_aligned<float, kEpiCs, 16> epi_cs;
    cute::array_aligned<float, kEpiTs, 16> epi_ts;
    cute::array_aligned<float, T::kGateUp ? kBlockT : 4, 16> epi_rw;
    // kGlu: the partner CTA's per-token amax of tile parity i (written remotely) and its arrivals.
    cute::array_aligned<float, T::kGlu ? 2 * kBlockT : 4, 16> xch;
    uint64_t xfull[2];
    uint64_t full[kStages];
    uint64_t empty[kStages];
    uint32_t lut[4];  // the table twice: read per lane, the words stay in registers
  };
  static constexpr int kSmemBytes = xstage::kernels::shared_storage_bytes<SharedStorage>();
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on sm_90");

  static Params to_params(MoeW4A8Params const& p) {
    auto shape_x = make_shape(p.m_total, p.k);
    Tensor mX = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.a)), shape_x,
                            make_stride(static_cast<int64_t>(p.k), _1{}));
    auto tma_x = make_tma_copy(SM90_TMA_LOAD{}, mX, take<0, 2>(typename T::SmemLayoutX{}),
                               Shape<Int<kPieceT>, Int<T::kBlockK>>{}, Int<1>{});
    return Params{tma_x,
                  shape_x,
                  static_cast<const uint8_t*>(p.b),
                  p.b_scales,
                  p.a_scales,
                  p.counts,
                  p.offsets,
                  p.out,
                  p.out_ld,
                  p.out_scales,
                  p.row_weights,
                  p.experts,
                  p.m_total,
                  p.n,
                  p.k / 128,
                  T::kGateUp ? p.n / 256 : p.n / 128
#ifdef XSTAGE_MOE_STUDY
                  ,
                  nullptr
#endif
    };
  }

  static KernelInfo info() {
    return KernelInfo{TileConfig{kBlockT, 128 * kBlocks, T::kBlockK, kStages, T::kConsumerWGs, 1, kClusterN}, kThreads,
                      kSmemBytes, T::kProducerRegs, T::kConsumerRegs};
  }

  // First weight row (a multiple of 128) of chunk c of output tile column nb: the tile's own
  // 128 rows, or for SwiGLU the gate rows (c = 0) and the up rows n/2 further (c = 1).
  __device__ static int chunk_row(Params const& p, int nb, int c) { return (T::kGateUp ? c * (p.n / 2) : 0) + nb * 128; }

  __device__ static int cta_rank() {
    if constexpr (kClusterN > 1) return static_cast<int>(cute::block_rank_in_cluster());
    else return 0;
  }

  // ---- producer: warp 0 of warp group 0 ---------------------------------------------------------
  template <class SmemX>
  __device__ void produce(Params const& p, SharedStorage& ss, SmemX& sX) const {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    Scheduler sched(p.counts, p.offsets, p.experts, p.n_blocks, cta_rank());
    State write{0, 1u};  // every buffer starts empty
    Tensor mX = p.tma_x.get_tma_tensor(p.shape_x);
    auto cta_x = p.tma_x.get_slice(0);
    Tensor tXsX = group_modes<0, 3>(cta_x.partition_D(sX));  // (TMA, stage)
    WorkTile t;
    [[maybe_unused]] uint32_t it = 0;  // K blocks written (trace only)
    while (sched.next(t)) {
      const uint8_t* wsrc[kBlocks];
      const float* ssrc[kBlocks];
      CUTE_UNROLL
      for (int c = 0; c < kBlocks; ++c) {
        const int row = chunk_row(p, t.n_block, c);
        wsrc[c] = p.w + (static_cast<int64_t>(t.expert) * (p.n / 128) + row / 128) * p.k_blocks * T::kChunkBytes;
        ssrc[c] = p.w_scales + static_cast<int64_t>(t.expert) * p.k_blocks * p.n + row;
      }
      const float* asrc = p.a_scales + t.row_begin;
      for (int kb = 0; kb < p.k_blocks; ++kb) {
        uint64_t* full = &ss.full[write.index];
        bounded_wait(&ss.empty[write.index], write.phase);
        if (lane == 0) W4_TRACE(p.trace, it, kTrProducerIssue);
        ++it;
        if (lane == 0) {
          cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(full, T::kTxBytes);
          CUTE_UNROLL
          for (int pc = 0; pc < kPieces; ++pc) {
            Tensor gX = local_tile(domain_offset(make_coord(t.row_begin + pc * kPieceT, 0), mX),
                                   Shape<Int<kPieceT>, Int<T::kBlockK>>{}, make_coord(_0{}, kb));
            copy(p.tma_x.with(*full), group_modes<0, 3>(cta_x.partition_S(gX)), tXsX(_, write.index * kPieces + pc));
          }
          CUTE_UNROLL
          for (int c = 0; c < kBlocks; ++c) {
            SM90_BULK_COPY_G2S::copy(wsrc[c] + static_cast<int64_t>(kb) * T::kChunkBytes, full,
                                     ss.w.data() + (write.index * kBlocks + c) * T::kChunkBytes, T::kChunkBytes);
            if constexpr (!T::kLut)
              SM90_BULK_COPY_G2S::copy(ssrc[c] + static_cast<int64_t>(kb) * p.n, full,
                                       ss.ws.data() + (write.index * kBlocks + c) * 128, 512);
          }
        }
        // Token scales of K block kb: rows past the expert's tokens read as zero (their products are
        // never stored). kTok: nothing per K block (the epilogue prefetches the tile's scales).
        if constexpr (!T::kTok) {
          const float* a_kb = asrc + static_cast<int64_t>(kb) * p.m_total;
          const uint32_t dst = cute::cast_smem_ptr_to_uint(ss.as.data() + write.index * T::kAsStage);
          CUTE_UNROLL
          for (int j = 0; j < kBlockT / 32; ++j) {
            const int r = lane + 32 * j;
            const bool ok = r < t.rows;
            cp_async_4(dst + 4u * T::as_index(r), ok ? a_kb + r : p.a_scales, ok ? 4u : 0u);
          }
          cp_async_arrive(full);
        }
        write.advance();
      }
    }
  }

  // ---- consumer: one warp group's kBlocks x 64 weight rows x kBlockT tokens ----------------------
  // A fragments of one 64-row block and K block: (MMA, 1, 4 K steps) e4m3 registers, 4 x 32 bits
  // per K step.
  using FragA = decltype(make_tensor<Element>(partition_shape_A(typename T::TiledMma{}, Shape<_64, Int<T::kBlockK>>{})));
  using Frags = FragA[kBlocks];

  // The narrow wgmmas (m64 x kN, kN = 32 or 64) of the per-token tiles' few-row pieces: the
  // narrow blocks (mma_narrow), the wide tile's slabs (mma_wide) and the tails fold's third piece.
  template <int kN>
  using NarrowMma = decltype(make_tiled_mma(
      cute::conditional_t<kN == 32, SM90_64x32x32_F32E4M3E4M3_RS_TN<>, SM90_64x64x32_F32E4M3E4M3_RS_TN<>>{}));
  template <int kN>
  using NarrowAcc = decltype(partition_fragment_C(NarrowMma<kN>{}, Shape<_64, Int<kN>>{}));
  // The tails fold's third token piece (the fused per-token kernel, docs/megamoe.md "Tails fold"):
  // kFoldN tokens through one m64 x kFoldN wgmma batch per K block, its own slot per stage (x,
  // kFoldN x kBlockK fp8, 128-byte swizzle, 1024-byte aligned).
  template <int kFoldN>
  using FoldAcc = NarrowAcc<kFoldN>;
  struct NoFold {
    static constexpr int kN = 0;
  };
  template <int kFoldN>
  struct Fold {
    static constexpr int kN = kFoldN;
    const Element* x;  // stage s's slot at x + s * kFoldN * kBlockK
    bool on;           // this tile's block has a third piece (warp-uniform)
    FoldAcc<kFoldN>& acc;
  };

  using Acc = decltype(partition_fragment_C(typename T::TiledMma{}, Shape<_64, Int<kPieceT>>{}));

  // Loads and converts this thread's values of 64-row block b of stage `s` (two 16-byte loads; the
  // sign-magnitude code of w4a8_rs_layout.hpp: 8 integer instructions per 8 values). MXFP4: one
  // more 8-byte load (the gaps of rows r0 and r0 + 8) and per K step each row's table shifted
  // by its sub-block's gap (3 instructions per row and step). INT4 two-level: one 16-byte load,
  // the tables of rows r0 and r0 + 8 for the whole K block.
  // A consumer warp is done with stage s: its shared reads stay before the release (compiler
  // fence), then lane 0 arrives on the stage's empty barrier for the warp.
  __device__ __forceinline__ static void release_stage(SharedStorage& ss, int s, int wt) {
    asm volatile("" ::: "memory");
    __syncwarp();
    if ((wt & 31) == 0) cutlass::arch::ClusterBarrier::arrive(&ss.empty[s]);
  }

  __device__ __forceinline__ static void convert_block(SharedStorage& ss, int s, int b, int g, int wt, uint32_t t0,
                                                       uint32_t t1, FragA& f) {
    const uint32_t chunk = cute::cast_smem_ptr_to_uint(ss.w.data() + (s * kBlocks + b) * T::kChunkBytes);
    const uint32_t base = chunk + g * 4096 + wt * 16;
    const uint4 h0 = ld_shared_u4(base);
    const uint4 h1 = ld_shared_u4(base + 2048);
    const uint32_t words[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    uint2 gaps = make_uint2(0u, 0u);
    if constexpr (T::kMx) gaps = ld_shared_u2(chunk + kRsChunkBytes + 8 * (32 * g + 8 * (wt / 32) + (wt % 32) / 4));
    uint4 rows_lut = make_uint4(t0, t1, t0, t1);
    if constexpr (T::kLut) rows_lut = ld_shared_u4(chunk + kRsChunkBytes + 16 * (32 * g + 8 * (wt / 32) + (wt % 32) / 4));
    Tensor f32 = recast<uint32_t>(f);
    static_assert(decltype(size(f32))::value == 16, "4 registers per K step");
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) {  // K step j = sub-block j of the 128-K block
      // tables of rows r0 (A registers) and r0 + 8 (B)
      uint32_t a0 = rows_lut.x, a1 = rows_lut.y, b0 = rows_lut.z, b1 = rows_lut.w;
      if constexpr (T::kMx) {
        // 8 * gap in every byte; the zero entry (byte 0 of the low word) stays zero.
        const uint32_t ga = prmt(gaps.x, 0u, 0x1111u * j), gb = prmt(gaps.y, 0u, 0x1111u * j);
        a0 = t0 - (ga << 8);
        a1 = t1 - ga;
        b0 = t0 - (gb << 8);
        b1 = t1 - gb;
      }
      CUTE_UNROLL
      for (int w = 0; w < 2; ++w) {
        const int i = 2 * j + w;
        const uint32_t x = words[i];
        if constexpr ((T::kStudy & 1) != 0) {
          f32(2 * i) = x;
          f32(2 * i + 1) = x >> 16;
        } else {
          f32(2 * i) = prmt(a0, a1, x & 0x7777u) | (x & 0x80808080u);
          f32(2 * i + 1) = prmt(b0, b1, (x >> 16) & 0x7777u) | ((x << 4) & 0x80808080u);
        }
      }
    }
  }
  __device__ __forceinline__ static void convert_stage(SharedStorage& ss, int s, int g, int wt, uint32_t t0,
                                                       uint32_t t1, Frags& f) {
    CUTE_UNROLL
    for (int b = 0; b < kBlocks; ++b) convert_block(ss, s, b, g, wt, t0, t1, f[b]);
  }

  // Four wgmmas per 64-row block of one K block from zero, one commit group; the fragments
  // must stay untouched (and alive: fenced after the wait) until they complete.
  template <class TiledMma, class FrgB>
  __device__ __forceinline__ static void issue(TiledMma& mma, Frags& f, FrgB const& tCrB, int s, Acc (&part)[kBlocks]) {
    CUTE_UNROLL
    for (int b = 0; b < kBlocks; ++b) {
      warpgroup_fence_operand(f[b]);
      warpgroup_fence_operand(part[b]);
    }
    warpgroup_arrive();
    CUTE_UNROLL
    for (int b = 0; b < kBlocks; ++b) {
      mma.accumulate_ = GMMA::ScaleOut::Zero;
      CUTE_UNROLL
      for (int k = 0; k < size<2>(f[b]); ++k) {
        cute::gemm(mma, f[b](_, _, k), tCrB(_, _, k, s), part[b]);
        mma.accumulate_ = GMMA::ScaleOut::One;
      }
    }
    warpgroup_commit_batch();
  }

  // One commit group of wgmmas from zero: fragment f (one K block) against tCrB into part. The
  // fragments must stay untouched until the group completes.
  template <class Mma, class FrgB, class Part>
  __device__ __forceinline__ static void issue_batch(Mma& mma, FragA& f, FrgB const& tCrB, Part& part) {
    warpgroup_fence_operand(f);
    warpgroup_fence_operand(part);
    warpgroup_arrive();
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(f); ++k) {
      cute::gemm(mma, f(_, _, k), tCrB(_, _, k), part);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  }
  // A narrow K block (m64 x kN): issue_batch, wait, then dst's first size(part) values += part
  // (MXFP4: times the rows' block scales of stage s; with INT4 two-level a plain add).
  template <class Mma, class FrgB, class Part, class Dst>
  __device__ __forceinline__ static void narrow_step(SharedStorage& ss, Mma& mma, FragA& f, FrgB const& tCrB,
                                                     Part& part, Dst& dst, int s, int wrow0) {
    issue_batch(mma, f, tCrB, part);
    warpgroup_wait<0>();
    warpgroup_fence_operand(part);
    warpgroup_fence_operand(f);
    [[maybe_unused]] float w0 = 1.f, w1 = 1.f;  // MXFP4: the K block's weight scales (as promote)
    if constexpr (!T::kLut) {
      w0 = ss.ws[s * 128 + wrow0];
      w1 = ss.ws[s * 128 + wrow0 + 8];
    }
    CUTE_UNROLL
    for (int i = 0; i < size(part); ++i) {
      if constexpr (T::kLut) dst(i) += part(i);
      else dst(i) = fmaf(part(i), (i & 2) ? w1 : w0, dst(i));
    }
  }

  // Piece 0 only, through an m64 x kN wgmma (kN = 32 or 64) on the first kN token rows of each
  // stage's slot (per-token tiles of the fused kernel whose block has <= kN rows; its producer
  // loads them with the kN-row box, and the 128-byte swizzle is by address, so a kN-row tile at the
  // slot's base reads those bytes). In the C layout above the kN / 8 column groups of the narrow
  // accumulator are the first values of the 128-token one: they are added into acc[0]'s first
  // values, the rest stay cleared. A wgmma's time scales with its N: a block of 16 rows no longer
  // multiplies 128.
  template <int kN>
  __device__ __forceinline__ void mma_narrow(Params const& p, SharedStorage& ss, State& read, int g, int wt,
                                             Acc (&acc)[kAccs], uint32_t& it, uint32_t t0, uint32_t t1,
                                             int wrow0) const {
    static_assert(T::kTok && kPieces == 2 && kBlocks == 1 && (kN == 32 || kN == 64), "per-token tiles only");
    using MmaN = NarrowMma<kN>;
    using LayoutN = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kN>, Int<T::kBlockK>>{}));
    using PartN = NarrowAcc<kN>;
    static_assert(decltype(size(PartN{}))::value == kN / 2, "kN / 8 column groups of 4 values");
    MmaN mma;
    auto thr = mma.get_slice(wt);
    const int kbs = p.k_blocks;
    Frags f;
    convert_stage(ss, read.index, g, wt, t0, t1, f);
    for (int kb = 0; kb < kbs; ++kb, ++it) {
      const int s = read.index;
      Tensor tCrB = thr.partition_fragment_B(
          make_tensor(make_smem_ptr(ss.x.data() + s * kPieces * kPieceT * T::kBlockK), LayoutN{}));  // (MMA, 1, 4)
      PartN part;
      narrow_step(ss, mma, f[0], tCrB, part, acc[0], s, wrow0);
      release_stage(ss, s, wt);
      read.advance();
      if (kb + 1 < kbs) {
        bounded_wait(&ss.full[read.index], read.phase);
        convert_stage(ss, read.index, g, wt, t0, t1, f);
      }
    }
  }

  // The tails fold's third piece of stage s (Fold above): one m64 x kN wgmma batch with the K
  // block's fragments f, then acc += part (MXFP4: times the row's block scale, as promote), then
  // the stage is released (every wgmma of the three pieces has read it).
  template <int kN>
  __device__ __forceinline__ static void fold_piece(SharedStorage& ss, const Element* x, FoldAcc<kN>& acc, FragA& f,
                                                    int s, int wt, int wrow0) {
    using LayoutN = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kN>, Int<T::kBlockK>>{}));
    NarrowMma<kN> mma;
    auto thr = mma.get_slice(wt);
    Tensor tCrB = thr.partition_fragment_B(make_tensor(make_smem_ptr(x + s * kN * T::kBlockK), LayoutN{}));
    FoldAcc<kN> part;
    narrow_step(ss, mma, f, tCrB, part, acc, s, wrow0);
    release_stage(ss, s, wt);
  }

  // Wide tiles (kWide): warp group g runs chunk g of each stage as two 64-row slabs (slab sl: rows
  // [64 sl, 64 sl + 64) of the chunk, the layout's half sl) against the stage's one token piece,
  // acc[sl] += slab sl's products per K block (MXFP4: times the row's block scale). The wgmmas are
  // m64 x kN (kN = 32 or 64: the block's rows, the producer's box): slab 1 is converted while
  // slab 0's wgmmas run and the next K block's slab 0 while slab 1's run. A block of 65-128 rows
  // runs two m64n64 halves of the piece per slab (tokens 64 h..: the accumulator's values 32 h..)
  // through one fragment, each slab converted after the previous wgmmas completed: an m64n128
  // accumulator (64 registers next to the 128 of acc) or a second fragment spilled 0.5-2.5 KB
  // into the K loop (ptxas, sm_90a). The stage is released once every wgmma read it. A group
  // without a chunk (active false: the last Linear-2 tile where hidden / 128 is odd) follows the
  // stages, so its warps' releases stay in step.
  template <int kN>
  __device__ __forceinline__ void mma_wide(Params const& p, SharedStorage& ss, State& read, int g, int wt,
                                           Acc (&acc)[kAccs], uint32_t& it, uint32_t t0, uint32_t t1,
                                           bool active) const {
    static_assert(T::kWide && kAccs == 2 && (kN == 32 || kN == 64 || kN == 128), "wide per-token tiles only");
    constexpr int kHalves = kN == 128 ? 2 : 1;
    constexpr int kW = kN / kHalves;  // the wgmmas' N
    using MmaN = NarrowMma<kW>;
    using LayoutN = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kW>, Int<T::kBlockK>>{}));
    using PartN = NarrowAcc<kW>;
    static_assert(decltype(size(PartN{}))::value == kW / 2, "kW / 8 column groups of 4 values");
    MmaN mma;
    auto thr = mma.get_slice(wt);
    const int kbs = p.k_blocks;
    const int wrow = 16 * (wt / 32) + (wt % 32) / 4;  // rows wrow, wrow + 8 of slab 0 (+ 64: slab 1)
    FragA f0, f1;
    PartN part;
    // The wgmmas of fragment f against token half h of stage s into part (one commit group).
    auto run = [&](FragA& f, int s, int h) {
      Tensor tCrB = thr.partition_fragment_B(make_tensor(
          make_smem_ptr(ss.x.data() + (s * kPieceT + h * kW) * T::kBlockK), LayoutN{}));  // (MMA, 1, 4)
      issue_batch(mma, f, tCrB, part);
    };
    // Wait for them, then acc[sl] values kW / 2 * h.. += part (times the rows' block scales).
    auto promote = [&](Acc& ac, int s, int sl, int h) {
      warpgroup_wait<0>();
      warpgroup_fence_operand(part);
      [[maybe_unused]] float w0 = 1.f, w1 = 1.f;
      if constexpr (!T::kLut) {
        w0 = ss.ws[(s * kBlocks + g) * 128 + 64 * sl + wrow];
        w1 = ss.ws[(s * kBlocks + g) * 128 + 64 * sl + wrow + 8];
      }
      CUTE_UNROLL
      for (int i = 0; i < kW / 2; ++i) {
        float& a = ac(kW / 2 * h + i);
        if constexpr (T::kLut) a += part(i);
        else a = fmaf(part(i), (i & 2) ? w1 : w0, a);
      }
    };
    if (active) convert_block(ss, read.index, g, 0, wt, t0, t1, f0);
    for (int kb = 0; kb < kbs; ++kb, ++it) {
      const int s = read.index;
      if (active) {
        State nx = read;
        nx.advance();
        if constexpr (kHalves == 1) {
          run(f0, s, 0);
          convert_block(ss, s, g, 1, wt, t0, t1, f1);
          promote(acc[0], s, 0, 0);
          warpgroup_fence_operand(f0);
          run(f1, s, 0);
          if (kb + 1 < kbs) {
            bounded_wait(&ss.full[nx.index], nx.phase);
            convert_block(ss, nx.index, g, 0, wt, t0, t1, f0);
          }
          promote(acc[1], s, 1, 0);
          warpgroup_fence_operand(f1);
        } else {
          CUTE_UNROLL
          for (int sl = 0; sl < 2; ++sl) {
            if (sl == 1) convert_block(ss, s, g, 1, wt, t0, t1, f0);
            run(f0, s, 0);
            promote(acc[sl], s, sl, 0);
            run(f0, s, 1);
            promote(acc[sl], s, sl, 1);
            warpgroup_fence_operand(f0);
          }
          if (kb + 1 < kbs) {
            bounded_wait(&ss.full[nx.index], nx.phase);
            convert_block(ss, nx.index, g, 0, wt, t0, t1, f0);
          }
        }
      }
      release_stage(ss, s, wt);
      read.advance();
      if (kb + 1 < kbs && !active) bounded_wait(&ss.full[read.index], read.phase);
    }
  }
  // A wide tile's main loop (kWide): acc cleared, the first stage awaited, then mma_wide with the
  // wgmma width for the block's rows (narrow: 32 or 64; else 128).
  __device__ __forceinline__ void mma_wide_tile(Params const& p, SharedStorage& ss, State& read, int g, int wt,
                                                Acc (&acc)[kAccs], uint32_t& it, int narrow, bool active) const {
    CUTE_UNROLL
    for (int b = 0; b < kAccs; ++b) clear(acc[b]);
    const int pick = 2 * (wt & 1);
    const uint32_t t0 = ss.lut[pick], t1 = ss.lut[pick + 1];
    bounded_wait(&ss.full[read.index], read.phase);
    if (narrow == 32) mma_wide<32>(p, ss, read, g, wt, acc, it, t0, t1, active);
    else if (narrow == 64) mma_wide<64>(p, ss, read, g, wt, acc, it, t0, t1, active);
    else mma_wide<128>(p, ss, read, g, wt, acc, it, t0, t1, active);
  }

  template <class SmemX, class FoldT = NoFold>
  // it: K blocks consumed by this CTA so far (trace only). second_piece (kPieces == 2): false runs
  // piece 0 only (the fused kernel's blocks of <= kPieceT rows, whose producer loads no piece 1);
  // acc[kBlocks..] then stay cleared. narrow (per-token tiles): 32 or 64 runs piece 0 through
  // mma_narrow (a block of <= 32 / <= 64 rows), 0 the 128-token wgmmas. The grouped kernels leave
  // both at their constant defaults. fold (Fold<kN>, the fused per-token kernel with the tails
  // fold): with fold.on, after piece 1 the same fragments run the third piece into fold.acc
  // (cleared here), and the stage is released after it.
  __device__ __forceinline__ void mma(Params const& p, SharedStorage& ss, SmemX const& sX, State& read, int g, int wt,
                                      Acc (&acc)[kAccs], [[maybe_unused]] uint32_t& it,
                                      [[maybe_unused]] bool second_piece = true, [[maybe_unused]] int narrow = 0,
                                      [[maybe_unused]] FoldT fold = FoldT{}) const {
    static_assert(FoldT::kN == 0 || (T::kTok && kPieces == 2 && kBlocks == 1), "the fold: per-token two-piece tiles");
    typename T::TiledMma tiled_mma;
    auto thr = tiled_mma.get_slice(wt);
    Tensor tCrB = thr.partition_fragment_B(sX);  // (MMA, 1, 4, stage) descriptors
    const int wrow0 = 64 * g + (wt / 32) * 16 + (wt % 32) / 4;  // rows wrow0, wrow0 + 8 of each chunk
    const int q = wt % 4;                                        // tokens 2q + 8i + {0, 1}
    CUTE_UNROLL
    for (int b = 0; b < kAccs; ++b) clear(acc[b]);
    // The table e4m3(0..7) comes from shared memory (two copies, by lane parity) so ptxas keeps
    // it in registers instead of copying immediates before every prmt.
    const int pick = 2 * (wt & 1);
    const uint32_t t0 = ss.lut[pick], t1 = ss.lut[pick + 1];
    const int kbs = p.k_blocks;
    [[maybe_unused]] const int tr = kTrRsConsumerBase + kTrRsConsumerStride * g;  // trace slots of this group
    auto stamp = [&](int slot) {
      if (wt == 0) W4_TRACE(p.trace, it, tr + slot);
    };

    // acc += part * a_scale[token] * w_scale[row] for piece pc of the block in stage s; after the
    // last piece the stage is released. C layout (m64nNk32): value i -> row + 8 * ((i >> 1) & 1),
    // token 2q + (i & 1) + 8 * (i / 4) of the piece; the token scales come 4 at a time (tokens of
    // values 8c .. 8c + 7; piece pc's start kPieceT / 4 floats into the thread's row).
    auto promote = [&](Acc (&pt)[kBlocks], int s, auto pc_c, bool release = true) {
      constexpr int pc = decltype(pc_c)::value;  // compile time: acc[] stays in registers
      [[maybe_unused]] float w0[kBlocks], w1[kBlocks];  // weight scales (not with kLut)
      CUTE_UNROLL
      for (int b = 0; b < kBlocks; ++b) {
        warpgroup_fence_operand(pt[b]);
        if constexpr (!T::kLut) {
          w0[b] = ss.ws[(s * kBlocks + b) * 128 + wrow0];
          w1[b] = ss.ws[(s * kBlocks + b) * 128 + wrow0 + 8];
        }
      }
      CUTE_UNROLL
      for (int c = 0; c < kPieceT / 16; ++c) {
        float4 a4 = make_float4(1.f, 1.f, 1.f, 1.f);
        if constexpr (!T::kTok)  // kTok: the token scale is the epilogue's, nothing to load here
          a4 = *reinterpret_cast<const float4*>(&ss.as[s * T::kAsStage + q * T::kAsRow + pc * (kPieceT / 4) + 4 * c]);
        CUTE_UNROLL
        for (int e = 0; e < 8; ++e) {
          const int i = 8 * c + e;
          [[maybe_unused]] const float a = (i & 4) ? ((i & 1) ? a4.w : a4.z) : ((i & 1) ? a4.y : a4.x);
          CUTE_UNROLL
          for (int b = 0; b < kBlocks; ++b) {
            Acc& ac = acc[pc * kBlocks + b];
            if constexpr ((T::kStudy & 4) != 0) {
              if (i == 0) ac(i) += pt[b](i);  // one value, so the wgmmas stay live
            } else if constexpr ((T::kStudy & 2) != 0 || (T::kTok && T::kLut)) ac(i) += pt[b](i);
            else if constexpr (T::kTok) ac(i) = fmaf(pt[b](i), (i & 2) ? w1[b] : w0[b], ac(i));  // kMx
            else if constexpr (T::kLut) ac(i) = fmaf(pt[b](i), a, ac(i));
            else ac(i) = fmaf(pt[b](i) * a, (i & 2) ? w1[b] : w0[b], ac(i));
          }
        }
      }
      if (pc + 1 == kPieces && release) {
        release_stage(ss, s, wt);
      }
    };

    bounded_wait(&ss.full[read.index], read.phase);
    if constexpr (T::kTok && kBlocks == 1) {
      if (narrow == 32) return mma_narrow<32>(p, ss, read, g, wt, acc, it, t0, t1, wrow0);
      if (narrow == 64) return mma_narrow<64>(p, ss, read, g, wt, acc, it, t0, t1, wrow0);
    }
    Acc part[kBlocks];
    if constexpr (FoldT::kN > 0) clear(fold.acc);
    if constexpr (kPieces == 2) {
      // Two token pieces: one fragment buffer (the registers hold two fp32 accumulators). Per K
      // block: piece 0, promote, piece 1 with the same fragments, promote (the stage is
      // released), then block kb + 1 is converted into the buffer; the other warp group's
      // wgmmas run meanwhile.
      Frags f;
      convert_stage(ss, read.index, g, wt, t0, t1, f);
      for (int kb = 0; kb < kbs; ++kb, ++it) {
        const int s = read.index;
        issue(tiled_mma, f, tCrB, s * kPieces, part);
        stamp(0);
        warpgroup_wait<0>();
        stamp(1);
        promote(part, s, Int<0>{});
        stamp(2);
        if (second_piece) {
          issue(tiled_mma, f, tCrB, s * kPieces + 1, part);
          stamp(3);
          warpgroup_wait<0>();
          stamp(4);
          CUTE_UNROLL
          for (int b = 0; b < kBlocks; ++b) warpgroup_fence_operand(f[b]);
          if constexpr (FoldT::kN > 0) {
            promote(part, s, Int<1>{}, !fold.on);
            if (fold.on) fold_piece<FoldT::kN>(ss, fold.x, fold.acc, f[0], s, wt, wrow0);
          } else {
            promote(part, s, Int<1>{});
          }
        } else {
          // promote's release of the stage, without piece 1 (the fragments are not read again)
          CUTE_UNROLL
          for (int b = 0; b < kBlocks; ++b) warpgroup_fence_operand(f[b]);
          release_stage(ss, s, wt);
        }
        stamp(5);
        read.advance();
        if (kb + 1 < kbs) {
          bounded_wait(&ss.full[read.index], read.phase);
          stamp(6);
          convert_stage(ss, read.index, g, wt, t0, t1, f);
          stamp(7);
        }
      }
      return;
    }
    Frags f0, f1;
    convert_stage(ss, read.index, g, wt, t0, t1, f0);
    // Block kb's fragments are in `cur`; block kb + 1's are converted into `nxt` while block kb's
    // wgmmas run. Two K blocks per loop iteration keep the buffers' names constant. (Issuing
    // block kb + 1 before promoting kb, with a second accumulator, measured the same.)
    auto step = [&](int kb, Frags& cur, Frags& nxt) {
      const int s = read.index;
      issue(tiled_mma, cur, tCrB, s, part);
      stamp(0);
      State nx = read;
      nx.advance();
      if (kb + 1 < kbs) {
        bounded_wait(&ss.full[nx.index], nx.phase);
        stamp(1);
        convert_stage(ss, nx.index, g, wt, t0, t1, nxt);
        stamp(2);
      }
      warpgroup_wait<0>();
      stamp(3);
      CUTE_UNROLL
      for (int b = 0; b < kBlocks; ++b) warpgroup_fence_operand(cur[b]);
      promote(part, s, Int<0>{});
      stamp(4);
      read = nx;
      ++it;
    };
    int kb = 0;
    for (; kb + 1 < kbs; kb += 2) {
      step(kb, f0, f1);
      step(kb + 1, f1, f0);
    }
    if (kb < kbs) step(kb, f0, f1);
  }

  using Epi = W4RsEpilogue<MoeW4A8RsKernel>;

  __device__ void operator()(Params const& p, char* smem_buf) const {
    SharedStorage& ss = XSTAGE_SHARED_STORAGE(SharedStorage, smem_buf);
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
    const int warp_group = warp / 4;
    if (threadIdx.x == 0) {
      for (int i = 0; i < kStages; ++i) {
        cutlass::arch::ClusterTransactionBarrier::init(&ss.full[i], 1 + T::kScaleLanes);
        cutlass::arch::ClusterBarrier::init(&ss.empty[i], T::kConsumerWarps);
      }
      if constexpr (T::kGlu) {  // the partner's epilogue threads arrive once per tile of that parity
        cutlass::arch::ClusterBarrier::init(&ss.xfull[0], kEpiThreads);
        cutlass::arch::ClusterBarrier::init(&ss.xfull[1], kEpiThreads);
      }
      cute::prefetch_tma_descriptor(p.tma_x.get_tma_descriptor());
      // INT4: e4m3(0..7) (int4_lut's positive half); MXFP4: e4m3({0, 1/2, 1, 3/2, 2, 3, 4, 6} * 2^6).
      const W4Lut l = int4_lut();
      ss.lut[0] = ss.lut[2] = T::kMx ? 0x6C686000u : l.p0;
      ss.lut[1] = ss.lut[3] = T::kMx ? 0x7C787470u : l.p1;
    }
    cutlass::arch::fence_barrier_init();
    // kGlu: the partner's barriers are initialised before anyone arrives on them remotely.
    if constexpr (kClusterN > 1) cute::cluster_sync();
    else __syncthreads();
    Tensor sX = make_tensor(make_smem_ptr(ss.x.data()), typename T::SmemLayoutX{});
    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (warp == 0) produce(p, ss, sX);
      else if constexpr (T::kEpiWarps) Epi::epilogue_warps(p, ss);
    } else {
      cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
      const int ct = static_cast<int>(threadIdx.x) - 128;
      const int g = ct / 128, wt = ct % 128;
      Scheduler sched(p.counts, p.offsets, p.experts, p.n_blocks, cta_rank());
      State read{};
      WorkTile t;
      uint32_t it = 0;       // K blocks consumed (trace only)
      while (sched.next(t)) {
        Acc acc[kAccs];
        Epi::prefetch_epilogue(p, ss, t, g, wt);
        mma(p, ss, sX, read, g, wt, acc, it);
        if constexpr (T::kGlu) {
          Epi::park_h(ss, acc, g, wt);
        } else if constexpr (T::kGateUp) {
          Epi::store_swiglu(p, ss, acc, t, g, wt, 0);
          if constexpr (kPieces == 2) {
            if (kPieceT < t.rows) Epi::store_swiglu(p, ss, acc + kBlocks, t, g, wt, 1);
          }
        } else if constexpr (T::kBf16Warps) {
          Epi::park_bf16(ss, acc, g, wt);
        } else {
          Epi::store_bf16(p, ss, acc[0], t, g, wt, 0);
          if constexpr (kPieces == 2) {
            if (kPieceT < t.rows) Epi::store_bf16(p, ss, acc[1], t, g, wt, 1);
          }
        }
      }
    }
    // kGlu: no CTA leaves while its partner may still write into its shared memory.
    if constexpr (kClusterN > 1) cute::cluster_sync();
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    moe_w4a8_rs_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
  XSTAGE_RUN_KERNEL(Kernel, params);
}

// Host: the persistent grid (one CTA per SM or p.num_ctas, at most the tile count bound).
template <class Kernel>
cudaError_t launch_moe_w4a8_rs(MoeW4A8Params const& p, cudaStream_t stream) {
  const long long tiles =
      (static_cast<long long>(p.m_total) / Kernel::T::kBlockT + p.experts) * (p.n / (Kernel::T::kGateUp ? 256 : 128));
  const W4Format format = Kernel::T::kMx ? W4Format::mxfp4 : W4Format::int4_g128;
  // SwiGLU (kGateUp: gate and up chunks; kGlu: 64-channel tiles in pairs) needs n / 2 in 128s.
  const int n_multiple = Kernel::T::kGateUp || Kernel::T::kGlu ? 256 : 128;
  if (tiles <= 0 || p.k % 128 != 0 || p.n % n_multiple != 0 || p.format != format || p.b_scales == nullptr)
    return cudaErrorInvalidValue;
  int ctas = 0;
  if (const cudaError_t g = persistent_grid(p.num_ctas, tiles, ctas); g != cudaSuccess) return g;
  // Whole clusters (the tile bound is even for kGlu: n / 128 is), so a trace buffer sized by ctas
  // holds every CTA that runs.
  ctas = (ctas + Kernel::kClusterN - 1) / Kernel::kClusterN * Kernel::kClusterN;
#ifdef XSTAGE_MOE_STUDY
  typename Kernel::Params kp = Kernel::to_params(p);
  W4TraceHost trace;
  if (const cudaError_t t = trace.begin(ctas, stream); t != cudaSuccess) return t;
  kp.trace = trace.buf;
#else
  const typename Kernel::Params kp = Kernel::to_params(p);
#endif
  auto* fn = moe_w4a8_rs_kernel<Kernel>;
  // kGlu: 1 x 2 clusters.
  const cudaError_t e =
      launch_persistent<Kernel::kClusterN>(fn, kp, ctas, Kernel::kThreads, Kernel::kSmemBytes, stream);
  if (e != cudaSuccess) return e;
#ifdef XSTAGE_MOE_STUDY
  if (const cudaError_t l = cudaGetLastError(); l != cudaSuccess) return l;
  char header[256];
  std::snprintf(header, sizeof header,
                "# w4a8 trace: register-operand pieces %d block_t %d gate_up %d lut %d mxfp4 %d m_total %d n %d k %d "
                "ctas %d",
                Kernel::T::kPieces, Kernel::T::kBlockT, Kernel::T::kGateUp ? 1 : 0, Kernel::T::kLut ? 1 : 0,
                Kernel::T::kMx ? 1 : 0, p.m_total, p.n, p.k, ctas);
  return trace.finish(stream, ctas, header);
#else
  return cudaGetLastError();
#endif
}

}  // namespace xstage::kernels::moe
