// The Mega-MoE persistent kernel with per-token W4A8 activations (issue 37; docs/megamoe.md
// "Per-token activations in the fused kernel"): the fused call structure of the register-operand
// kernel (prologue and push dispatch, claimed tiles in the list order gated on their inputs, tile
// slots, publish, reduce; mega_common.cuh) around the per-token main loop of w4a8_rs.cuh (256
// tokens as two 128-token pieces, one 128-row weight chunk per K block, no token scale in the K
// loop: the promotion is a plain add for INT4 two-level, one FMA by the block scale for MXFP4).
//
// kWide (MegaTile::m128n256_tok, docs/megamoe.md "Wide per-token tiles"): 128-row blocks, one token
// piece and two weight chunks per K block, warp group g running chunk g as two 64-row slabs
// (MoeW4A8RsKernel::mma_wide): Linear-1 tiles of 128 h channels (group g: 64), Linear-2 tiles of
// 256 columns (group g: 128; the last one 128 where hidden / 128 is odd, group 1 idle), always
// copied out by the store warps. Everything else below holds for both tiles.
//
// Tile shape MegaTile::m256n128_tok (xstage/mega_tile.hpp): 256-row blocks;
//   Linear-1: one chunk of W1 in the gate/up-interleaved layout (int4_rs_lut_glu / mxfp4_rs_glu:
//     each 16-row slab holds 8 gate rows then the 8 up rows of the same channels), i.e. 64 h
//     channels; warp group g owns channels [32 g, 32 g + 32). Epilogue per group: h = silu(gate)
//     * up * router weight in bf16 to h16 [cap, I], and each token's |h| maximum over the group's
//     32 channels into h_amax [cap] (one atomic max per token and group); then the tile counts into
//     its block's Linear-1 counter. Once the count reaches n1 the maxima are final and the
//     block's h is quantised in chunks of kQuantRows tokens: one scale per token from h_amax
//     (h_scales[row]), fp8 h rows from h16, h_amax reset to zero for the next call, one more count
//     per chunk. Chunks are claimed one at a time (h_qclaim) by the consumers of every CTA that
//     starts one of the block's Linear-2 tiles while chunks are left, and, in a block of <= 128
//     rows, of the CTA whose count returned n1 - 1 (count_l1), so a block's quantisation runs on
//     several SMs. The block's Linear-2
//     tiles are handed over at count n1 and load h at n1 + chunks. No CTA waits for another's
//     Linear-1 tile or for an unclaimed chunk, so any number of tiles per block runs on any
//     number of CTAs.
//   Linear-2: 128 hidden columns of W2 (int4_rs_lut / mxfp4_rs); warp group g owns columns
//     [64 g, 64 g + 64): bf16, times the channel (INT4) and token scales, staged token-major one
//     128-token piece at a time, stored in 16-byte pieces straight into the token owners' combine
//     buffers (CombineDestination).
// x's token scales ([T], one per token) travel with the rows into the first group of the receive
// scales (mega_prologue<true>: one float per row); epilogue inputs written during the call (token scales,
// router weights) are read through L2.
//
// Roles (384 threads): thread 0 claims list positions, waits for each tile's inputs, fills the
// tile slot, hands the position over, then per K block the two token pieces (TMA) and the
// prepacked weight chunk (bulk copy; MXFP4 also its block scales); warp groups 1, 2:
// MoeW4A8RsKernel::mma, then the epilogue of the tile's kind. Each warp group's epilogue works in
// its own staging region, so the groups only meet at the Linear-1 count and the quantisation.
// With kStoreWarps (XSTAGE_MEGA_TOK_STORE_WARPS, default), warps 2 and 3 copy out the Linear-2
// tiles of <= 128 rows that the consumers staged (store_warps), under the consumers' next tile.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
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

// The per-token register-operand tile (configs.def w4a8rs_*_tok_bf16_m256n128's main loop: two
// 128-token pieces, kTok) with 4 stages of 41 KiB (the grouped tile has 3 next to its 68 KiB
// staging; here the staging is 36 KiB and the shared memory holds a fourth, ~226 of 227 KiB;
// XSTAGE_MEGA_TOK_STAGES=3 builds the 3-stage ring that the tails fold would need, docs/megamoe.md
// Next steps 4).
// kWide (MegaTile::m128n256_tok, docs/megamoe.md §Wide per-token tiles): 128-row blocks, one
// token piece and two weight chunks per stage, warp group g running chunk g (mma_wide).
#ifndef XSTAGE_MEGA_TOK_STAGES
#define XSTAGE_MEGA_TOK_STAGES 4  // the build option's default (CMakeLists.txt)
#endif
inline constexpr int kMegaTokStages = XSTAGE_MEGA_TOK_STAGES;
static_assert(kMegaTokStages == 3 || kMegaTokStages == 4, "XSTAGE_MEGA_TOK_STAGES: 3 or 4");
// The tails fold (XSTAGE_MEGA_TOK_FOLD, docs/megamoe.md "Tails fold"): 0 off; 32 a block's last
// <= 32 rows after a full 256-row block join it as a third, narrow token piece (the 256 x 128
// tile only). Its 4 KiB per stage need the 3-stage ring.
#ifndef XSTAGE_MEGA_TOK_FOLD
#define XSTAGE_MEGA_TOK_FOLD 0
#endif
inline constexpr int kMegaTokFold = XSTAGE_MEGA_TOK_FOLD;
static_assert(kMegaTokFold == 0 || (kMegaTokFold == 32 && kMegaTokStages == 3),
              "XSTAGE_MEGA_TOK_FOLD: 0, or 32 with XSTAGE_MEGA_TOK_STAGES=3");
template <bool kMx, bool kWide = false>
struct MegaW4TokTraits
    : W4RsTraits<kMegaTokStages, false, 0, kMx, kWide ? 1 : 2, !kMx, true, false, false, kWide> {
  static constexpr ::xstage::moe::MegaTile kTile =
      kWide ? ::xstage::moe::MegaTile::m128n256_tok : ::xstage::moe::MegaTile::m256n128_tok;
};

template <bool kMx, bool kWide = false>
struct MegaW4A8TokKernel {
  using T = MegaW4TokTraits<kMx, kWide>;
  using Rs = MoeW4A8RsKernel<T>;
  using Epi = W4RsEpilogue<Rs>;
  using Acc = typename Rs::Acc;
  using State = typename Rs::State;
  using Queue = TileQueue<kMegaQueueDepth>;
  static constexpr int kThreads = T::kThreads;
  static constexpr int kStages = T::kStages;
  static constexpr int kBlockM = T::kBlockT;  // rows of an m-block: 256 tokens (kWide: 128)
  static constexpr int kPieceT = T::kPieceT;  // 128
  static constexpr int kPieces = T::kPieces;  // token pieces per stage: 2 (kWide: 1)
  static constexpr int kChunks = kWide ? 2 : 1;  // weight chunks per stage
  // The tails fold (kMegaTokFold): a block holds up to kRowsMax rows, the last kFold of them a
  // third token piece (Rs::Fold) with its own slot per stage.
  static constexpr int kFold = kWide ? 0 : kMegaTokFold;
  static constexpr int kRowsMax = kBlockM + kFold;
  using Acc3 = typename Rs::template FoldAcc<32>;  // used only where kFold > 0
  static constexpr ::xstage::moe::MegaTileShape kShape = ::xstage::moe::mega_tile_shape(T::kTile);
  static_assert(kBlockM == kShape.block_m && kShape.l1_n == 64 * kChunks && kShape.l2_n == 128 * kChunks &&
                    kShape.l1_pieces == 1 && Rs::kAccs == 2 && T::kTok && T::kScaleLanes == 0 && kPieceT == 128 &&
                    kBlockM == kPieceT * kPieces,
                "256-token tiles of one 128-row weight chunk (kWide: 128 tokens, two chunks), per-token scales");
  static constexpr uint32_t kConsumersBarrier = 7;  // the 256 consumer threads (user barrier 7)
  static_assert(128 * T::kProducerRegs + 256 * T::kConsumerRegs <= (65536 / kThreads) / 8 * 8 * kThreads,
                "setmaxnreg budget");
  // Each warp group's epilogue region inside the grouped kernel's staging (rs.epi, 2 x 18432
  // bytes): Linear-1 256 tokens x 32 bf16 channels (64-byte rows, the 16-byte piece index
  // swizzled by (token / 2) % 4: stmatrix's 8 rows and the copy-out's reads fall in distinct
  // banks); Linear-2 one 128-token piece x 64 bf16 columns (144-byte rows, as store_bf16).
  // kWide (2 x 34816 bytes): Linear-1 128 tokens x 64 channels (128-byte rows, the piece index
  // swizzled by token % 8); Linear-2 the piece x the group's 128 columns (272-byte rows).
  static constexpr int kStagingBytes = kWide ? Rs::kWideEpiBytes : Rs::kEpiBytes;  // rs.epi
  static constexpr int kGroupBytes = kStagingBytes / 2;
  static constexpr int kHRow = 64 * kChunks;
  static constexpr int kOutPitch = kWide ? Rs::kParkPitch : Rs::kPitch;  // 272 : 144
  static_assert(kStagingBytes == 2 * kPieceT * kOutPitch && kRowsMax * kHRow <= kGroupBytes, "staging regions");
  static_assert(!kWide || T::kBlocks == 2, "a wide stage holds both groups' chunks");
  static_assert(sizeof(MegaPrologueSmem) <= kStagingBytes, "the prologue's scratch fits in the staging");

  using Boxes = MegaTokenBoxes<T>;  // pieces of <= 32 / 64 tokens: smaller TMA boxes
#ifdef XSTAGE_MEGA_TOK_STORE_WARPS
  static constexpr bool kStoreWarps = XSTAGE_MEGA_TOK_STORE_WARPS != 0;
#else
  static constexpr bool kStoreWarps = false;
#endif
  static_assert(kStoreWarps || !kWide, "the wide tile's Linear-2 copy-out is the store warps'");
  // kStoreTwo (XSTAGE_MEGA_TOK_STORE_WARPS_TWO, with the store warps): a two-piece Linear-2 tile's
  // pieces go to the store warps one after the other too (the consumers wait for piece 0's
  // copy-out before staging piece 1, then go on), instead of the consumers' own copy-out.
#ifdef XSTAGE_MEGA_TOK_STORE_WARPS_TWO
  static constexpr bool kStoreTwo = kStoreWarps && !kWide && XSTAGE_MEGA_TOK_STORE_WARPS_TWO != 0;
#else
  static constexpr bool kStoreTwo = false;
#endif
  static_assert(kFold == 0 || kStoreTwo, "the fold's third Linear-2 piece goes to the store warps");
  // The store warps (kStoreWarps; warps 2, 3 of the producer warp group): the copy-out of a
  // Linear-2 tile of <= 128 rows (one token piece, both groups' 64 columns staged in their
  // regions), docs/megamoe.md §Per-token activations in the fused kernel. Their own named
  // barrier and the publish barrier (consumers + store warps): ids no other role of this kernel
  // uses (the epilogue's groups 0, 1; the consumers' 7).
  static constexpr int kStoreThreads = 64;
  static constexpr int kStoreBatch = 2;  // rows' loads in flight before their stores (40 registers)
  static constexpr int kRowPieces = 16 * kChunks;  // 16-byte pieces of a staged row (both groups)
  static constexpr int kStoreRowsPerStep = kStoreThreads / kRowPieces;
  static constexpr uint32_t kStoreBarrier = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + 2;
  static constexpr uint32_t kPublishBarrier = static_cast<uint32_t>(NamedBarrierId::swiglu_full);
  static constexpr int kPublishThreads = kStoreWarps ? 256 + kStoreThreads : 256;
  static_assert(kStoreBarrier != kConsumersBarrier && kPublishBarrier != kConsumersBarrier &&
                    kPublishBarrier + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount < 16,
                "named barriers");
  static constexpr int kQuantRows = 16;  // tokens per quantisation chunk (quantize_chunks)

  struct Params {
    typename Rs::Params l1;  // x = received rows [cap, H] (per-token scales), W1 prepacked glu (n = 2I)
    typename Rs::Params l2;  // x = h [cap, I] (per-token scales h_scales), W2 prepacked (n = H)
    struct {
      HDestination dest;  // the Linear-1 counter (and the trace hooks); h itself below
      const float* row_weights;
    } epi1;
    struct {
      CombineDestination dest;
      int n;  // hidden
    } epi2;
    MegaMoeArgs m;
    int n1, n2;  // Linear-1 / Linear-2 tiles per block
    __nv_bfloat16* h16;  // [cap, I]
    uint32_t* h_amax;    // [cap] float bits, zero between calls
    uint8_t* h;          // [cap, I] fp8
    float* h_scales;     // [cap] one scale per token
    int intermediate;
    int n2_pairs;        // ceil(hidden / 256): the span index's Linear-2 tiles per block (as m64n256)
    Boxes b1, b2;        // x's and h's 32- and 64-row boxes
  };
  static_assert(sizeof(Params) <= 4096, "kernel parameters");

  struct SharedStorage {
    typename Rs::SharedStorage rs;  // stages, epilogue inputs, the staging (the prologue's scratch before)
    float rw[2][kRowsMax];          // each group's copy of the tile's router weights (Linear-1)
    // With the fold: the third piece's slot per stage (1024-byte aligned for the 128-byte
    // swizzle) and each group's copy of the tile's token scales (rs.epi_ts holds kBlockM);
    // without it a few bytes and no alignment padding.
    struct alignas(kFold > 0 ? 1024 : 4) FoldSmem {
      typename T::Element x[kFold > 0 ? kStages * kFold * T::kBlockK : 4];
      float ts[2][kFold > 0 ? kRowsMax : 1];
    } fold;
    float inv[kQuantRows];          // the quantisation: 1 / scale per token of the chunk
    int last;                       // this CTA counted its small block's last Linear-1 tile
    int chunk;                      // the quantisation chunk this CTA claimed
    int quantised;                  // the Linear-2 tile's block is quantised
    int sw_last;                    // kStoreTwo: the staged piece is its tile's last (in sw's padding)
    struct {
      uint64_t full;              // every consumer thread staged its values (256 arrivals)
      uint64_t free;              // every store thread read the staging (64 arrivals)
      WorkTile t;                 // the staged tile (kStoreTwo: the staged piece's rows)
      int pos;                    // its list position; -1: no more tiles
      uint16_t* row_dst[kPieceT];  // each staged row's destination at the tile's first column
    } sw;                         // the store warps (kStoreWarps)
    typename Queue::Storage queue;
    MegaLayoutSmem layout;
    MegaTileSlot slots[kMegaTileSlots];  // the last member (kSmemBytes)
  };
  static constexpr int kSmemBytes =
      static_cast<int>(offsetof(SharedStorage, slots) + sizeof(MegaTileSlot) * kMegaTileSlots) + 1024;
  static_assert(kSmemBytes + kMegaStaticSmem <= 227 * 1024, "shared memory per CTA on sm_90");

  // Warp group g's token scales of the tile (kRowsMax with the fold).
  __device__ static float* tile_ts(SharedStorage& ss, int g) {
    if constexpr (kFold > 0) return ss.fold.ts[g];
    else return ss.rs.epi_ts.data() + g * kBlockM;
  }

  // Thread 0: the tile's K blocks into the ring: two 128-token pieces and one weight chunk (the
  // tile's 128 rows: 64 interleaved gate/up channels of W1, or 128 hidden columns of W2).
  // A block of <= 128 rows loads piece 0 only (the consumers skip piece 1: mma's second_piece), a
  // piece of few rows a smaller box (MegaTokenBoxes). A box reads past its block's rows (the next
  // block's h, which that block's quantisation may be writing): bytes of tokens never stored.
  // kWide: one token piece and the tile's two chunks (128 h channels of W1, or 256 hidden columns
  // of W2) per K block, chunk c into the stage's place c (warp group c's); the last Linear-2 tile
  // where hidden / 128 is odd has one chunk (group 1 idles: chunks_of).
  template <class SmemX>
  __device__ static void produce_tile(typename Rs::Params const& gp, Boxes const& bx, SharedStorage& ss, SmemX& sX,
                                      WorkTile const& t, State& write) {
    const bool two = kPieces == 2 && t.rows > kPieceT;
    const int box0 = Boxes::rows_for(min(t.rows, kPieceT)), box1 = two ? Boxes::rows_for(t.rows - kPieceT) : 0;
    const int chunks = chunks_of(gp.n, t);
    constexpr uint32_t kChunkTx = T::kChunkBytes + (kMx ? 512u : 0u);
    const bool third = kFold > 0 && t.rows > kBlockM;  // the fold's piece (kFold rows, its own box)
    const uint32_t tx = T::kTxBytes - static_cast<uint32_t>(kPieces * kPieceT - box0 - box1) * T::kBlockK -
                        static_cast<uint32_t>(kChunks - chunks) * kChunkTx +
                        (third ? static_cast<uint32_t>(kFold * T::kBlockK) : 0u);
    Tensor mX = gp.tma_x.get_tma_tensor(gp.shape_x);
    auto cta_x = gp.tma_x.get_slice(0);
    Tensor tXsX = group_modes<0, 3>(cta_x.partition_D(sX));  // (TMA, stage * kPieces + piece)
    const int chunk0 = t.n_block * kChunks;  // the tile's first 128-row chunk of the weight
    const uint8_t* wsrc = gp.w + (static_cast<int64_t>(t.expert) * (gp.n / 128) + chunk0) * gp.k_blocks * T::kChunkBytes;
    [[maybe_unused]] const float* ssrc = gp.w_scales + static_cast<int64_t>(t.expert) * gp.k_blocks * gp.n + chunk0 * 128;
    for (int kb = 0; kb < gp.k_blocks; ++kb) {
      uint64_t* full = &ss.rs.full[write.index];
      bounded_wait(&ss.rs.empty[write.index], write.phase);
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(full, tx);
      CUTE_UNROLL
      for (int pc = 0; pc < kPieces; ++pc) {
        const int box = pc == 0 ? box0 : box1;
        if (box == 0) break;
        const int slot = write.index * kPieces + pc;
        if (!bx.load_small(gp.shape_x, box, ss.rs.x.data() + slot * kPieceT * T::kBlockK, full,
                           t.row_begin + pc * kPieceT, kb)) {
          Tensor gX = local_tile(domain_offset(make_coord(t.row_begin + pc * kPieceT, 0), mX),
                                 Shape<Int<kPieceT>, Int<T::kBlockK>>{}, make_coord(_0{}, kb));
          copy(gp.tma_x.with(*full), group_modes<0, 3>(cta_x.partition_S(gX)), tXsX(_, slot));
        }
      }
      if constexpr (kFold > 0) {
        static_assert(kFold == 32, "the fold's box: MegaTokenBoxes::x32");
        if (third)
          Boxes::template load<kFold>(bx.x32, gp.shape_x, ss.fold.x + write.index * kFold * T::kBlockK, full,
                                      t.row_begin + kBlockM, kb);
      }
      CUTE_UNROLL
      for (int c = 0; c < kChunks; ++c) {
        if (c >= chunks) break;
        const int place = write.index * kChunks + c;
        SM90_BULK_COPY_G2S::copy(wsrc + (static_cast<int64_t>(c) * gp.k_blocks + kb) * T::kChunkBytes, full,
                                 ss.rs.w.data() + place * T::kChunkBytes, T::kChunkBytes);
        if constexpr (kMx)
          SM90_BULK_COPY_G2S::copy(ssrc + static_cast<int64_t>(kb) * gp.n + c * 128, full, ss.rs.ws.data() + place * 128,
                                   512);
      }
      write.advance();
    }
  }
  // The tile's weight chunks: kChunks, except a wide Linear-2 tile past hidden / 128 chunks (n:
  // the GEMM's weight rows, hidden for Linear-2; Linear-1's 2 I is a multiple of 256).
  __device__ static int chunks_of(int n, WorkTile const& t) {
    if constexpr (kWide) return min(kChunks, n / 128 - t.n_block * kChunks);
    else return 1;
  }

  // Epilogue inputs of one tile for consumer thread (g, wt), issued at the tile's start so their
  // latency hides under the K loop: INT4 two-level channel scales of the group's 64 rows (weights:
  // cp.async, waited for in the epilogue); the token scales and, for Linear-1, router weights of
  // tokens wt and wt + 128 (written during the call by peers' pushes or other CTAs: read through L2
  // into registers, parked in shared memory when the epilogue starts). Past the block's rows: 0.
  static constexpr int kInputs = kPieces + (kFold > 0 ? 1 : 0);  // tokens wt + 128 j (j = 2: the fold's)
  struct TileInputs {
    float ts[kInputs];
    float rw[kInputs];
  };
  __device__ static TileInputs prefetch_epilogue(Params const& p, SharedStorage& ss, WorkTile const& t, bool is_l1,
                                                 int g, int wt) {
    const auto& gp = is_l1 ? p.l1 : p.l2;
    if constexpr (T::kLut) {
      if constexpr (kWide) {  // the 128 rows of the group's chunk, if the tile has one
        if (g < chunks_of(gp.n, t))
          cp_async_4(cute::cast_smem_ptr_to_uint(ss.rs.epi_cs.data() + 128 * g + wt),
                     gp.w_scales + static_cast<int64_t>(t.expert) * gp.n + (t.n_block * 2 + g) * 128 + wt, 4u);
      } else if (wt < 64) {
        cp_async_4(cute::cast_smem_ptr_to_uint(ss.rs.epi_cs.data() + 64 * g + wt),
                   gp.w_scales + static_cast<int64_t>(t.expert) * gp.n + t.n_block * 128 + 64 * g + wt, 4u);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    TileInputs in{};
    CUTE_UNROLL
    for (int j = 0; j < kInputs; ++j) {
      const int r = wt + 128 * j;
      const bool ok = r < t.rows;  // t.rows <= kRowsMax
      in.ts[j] = ok ? __ldcg(gp.a_scales + t.row_begin + r) : 0.f;
      in.rw[j] = ok && is_l1 ? __ldcg(p.epi1.row_weights + t.row_begin + r) : 0.f;
    }
    return in;
  }

  // The group's inputs into shared memory and the group's barrier: its channel scales have
  // landed, its previous epilogue has finished with the staging and these arrays.
  __device__ static void epilogue_start(SharedStorage& ss, TileInputs const& in, bool is_l1, int g, int wt) {
    float* ts = tile_ts(ss, g);
    CUTE_UNROLL
    for (int j = 0; j < kInputs; ++j)
      if (wt + 128 * j < kRowsMax) ts[wt + 128 * j] = in.ts[j];
    if (is_l1) {
      CUTE_UNROLL
      for (int j = 0; j < kInputs; ++j)
        if (wt + 128 * j < kRowsMax) ss.rw[g][wt + 128 * j] = in.rw[j];
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    Epi::named_sync(128, static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + g);
  }

  // Linear-1, warp group g: thread (w, lane) holds gate (chunk row 64 g + 16 w + lane / 4) and up
  // (+ 8) of channel c = 32 g + 8 w + lane / 4 of the tile's 64, tokens 2 q + (i & 1) + 8 (i / 4) of
  // each piece (C layout of m64n128k32). h = silu(gate * cs_g * ts) * (up * cs_u * ts) * rw, rounded
  // to bf16 (the value h_amax and the quantisation see), staged token-major by stmatrix.trans (one
  // 8 x 8 matrix = 8 channels x 8 tokens), copied out to h16; each token's maximum is taken in
  // the copy-out (below) and goes out by one atomic max per token and group.
  // kWide: chunk g's 64 channels as two slabs, acc[sl] holding gate (chunk row 64 sl + 16 w +
  // lane / 4) and up (+ 8) of channel 32 sl + 8 w + lane / 4 of the group's 64 (tile channel 64 g +
  // that) for the one piece; 128-byte rows (the 16-byte piece 4 sl + w swizzled by token % 8).
  __device__ static int h_swizzle(int tok) { return kWide ? (tok & 7) : ((tok >> 1) & 3); }
  // With the fold, acc3 holds the third piece (tokens kBlockM.., Rs::FoldAcc: the first kFold / 8
  // token groups of the same C layout).
  __device__ static void store_h(Params const& p, SharedStorage& ss, Acc const* acc,
                                 [[maybe_unused]] Acc3 const& acc3, WorkTile const& t, int g, int wt_in) {
    const int wt = opaque(wt_in);  // the epilogue's addresses are computed here, not before the K loop
    const int w = wt / 32, lane = wt % 32, q = lane % 4;
    const float* ts = tile_ts(ss, g);
    const float* rw = ss.rw[g];
    uint8_t* region = ss.rs.epi.data() + g * kGroupBytes;
    // The rows' channel scales (gate, up): per group (kWide: per slab a).
    auto scales = [&](int a) {
      const int grow = kWide ? 128 * g + 64 * a + 16 * w + lane / 4 : 64 * g + 16 * w + lane / 4;
      return make_float2(T::kLut ? ss.rs.epi_cs[grow] : 1.f, T::kLut ? ss.rs.epi_cs[grow + 8] : 1.f);
    };
    float2 cs = scales(0);
    const int m = lane / 8, r = lane % 8;
    // Four 8-token groups (4 s .. 4 s + 3) of accumulator A, whose token 0 is tile token tok0,
    // through one stmatrix.x4 into 16-byte piece `piece` of their rows.
    auto put4 = [&](auto const& A, int tok0, int piece, float cg, float cu, int s) {
      uint32_t packed[4];
      CUTE_UNROLL
      for (int mm = 0; mm < 4; ++mm) {
        const int jj = 4 * s + mm;  // 8-token group of the piece
        const int i = 4 * jj;       // gate values i, i + 1 (tokens tok, tok + 1); up i + 2, i + 3
        const int tok = tok0 + 8 * jj + 2 * q;
        const float2 t2 = *reinterpret_cast<const float2*>(ts + tok);
        const float2 r2 = *reinterpret_cast<const float2*>(rw + tok);
        const float h0 = swiglu(A(i) * (cg * t2.x), A(i + 2) * (cu * t2.x)) * r2.x;
        const float h1 = swiglu(A(i + 1) * (cg * t2.y), A(i + 3) * (cu * t2.y)) * r2.y;
        const __nv_bfloat162 b2 = __floats2bfloat162_rn(h0, h1);
        packed[mm] = *reinterpret_cast<const uint32_t*>(&b2);
      }
      // Lane 8 mm + r: row r (token) of matrix mm: token group 4 s + mm; channels 8 w .. 8 w + 7
      // of the group's 32 (kWide: of slab a's) = 16-byte piece `piece` of the row, swizzled.
      const int tok = tok0 + 8 * (4 * s + m) + r;
      const uint32_t addr = cute::cast_smem_ptr_to_uint(region + tok * kHRow + 16 * (piece ^ h_swizzle(tok)));
      asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                   "r"(packed[0]), "r"(packed[1]), "r"(packed[2]), "r"(packed[3])
                   : "memory");
    };
    CUTE_UNROLL
    for (int a = 0; a < 2; ++a) {  // the accumulators: token pieces (kWide: slabs)
      if (!kWide && a * kPieceT >= t.rows) break;  // a block of <= 128 rows: piece 1 holds no token of it
      if (kWide && a > 0) cs = scales(a);
      const int tok0 = kWide ? 0 : a * kPieceT, piece = kWide ? 4 * a + w : w;
      CUTE_UNROLL
      for (int s = 0; s < 4; ++s) put4(acc[a], tok0, piece, cs.x, cs.y, s);  // 4 x 8-token groups per stmatrix.x4
    }
    if constexpr (kFold > 0) {
      if (t.rows > kBlockM) {
        CUTE_UNROLL
        for (int s = 0; s < kFold / 32; ++s) put4(acc3, kBlockM, w, cs.x, cs.y, s);
      }
    }
    Epi::named_sync(128, static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + g);
    // Copy-out: kBlockM rows x kP pieces of 16 bytes (the group's 32 channels; kWide 64), 8 per
    // thread; the kP lanes of a row (consecutive: c = lane % kP) also take its |h| maximum over the
    // group's channels (bf16, exact: 3 max over the piece, log2 kP shuffles), one atomic max per
    // token and group (|h| >= 0: ordered as its float bits). Here, not per value in the conversion
    // above: there 3 dependent shuffles per token pair made the epilogue latency-bound.
    constexpr int kP = kHRow / 16;
    const int64_t I = p.intermediate;
    const int rows = opaque(t.rows), row_begin = opaque(t.row_begin),
              col0 = opaque(t.n_block * kShape.l1_n + kShape.l1_n / 2 * g);
    CUTE_UNROLL
    for (int it = 0; it < kRowsMax * kP / 128; ++it) {
      // With the fold, a block without a third piece skips the passes past its rows (rows is the
      // same for the whole warp group, so the shuffles below stay converged).
      if constexpr (kFold > 0)
        if (128 / kP * it >= rows) break;
      const int idx = wt + 128 * it;
      const int tok = idx / kP, c = idx % kP;
      const uint4 v = *reinterpret_cast<const uint4*>(region + tok * kHRow + 16 * (c ^ h_swizzle(tok)));
      if (tok < rows) *reinterpret_cast<uint4*>(p.h16 + (row_begin + tok) * I + col0 + 8 * c) = v;
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
      __nv_bfloat162 a2 = __habs2(*reinterpret_cast<const __nv_bfloat162*>(&words[0]));
      CUTE_UNROLL
      for (int e = 1; e < 4; ++e) a2 = __hmax2(a2, __habs2(*reinterpret_cast<const __nv_bfloat162*>(&words[e])));
      CUTE_UNROLL
      for (int x = 1; x < kP; x <<= 1) {
        const uint32_t o = __shfl_xor_sync(0xffffffffu, *reinterpret_cast<const uint32_t*>(&a2), x);
        a2 = __hmax2(a2, *reinterpret_cast<const __nv_bfloat162*>(&o));
      }
      if (c == 0 && tok < rows) {
        const float2 f2 = __bfloat1622float2(a2);
        atomicMax(p.h_amax + row_begin + tok, __float_as_uint(fmaxf(f2.x, f2.y)));
      }
    }
  }

  // A value the compiler cannot see through: what derives from it is computed where it is used.
  // Without it ptxas computed the epilogue's stmatrix and copy-out addresses before the K loop
  // and spilled them (240 registers there), and the epilogue reloaded each from local memory,
  // which the ~29 KiB of L1 left next to 226 KiB of shared memory hardly caches.
  __device__ static int opaque(int v) {
    asm volatile("" : "+r"(v));
    return v;
  }

  // Quantisation chunks (kQuantRows tokens each): the block's Linear-2 tiles load h once its
  // Linear-1 counter reached quant_target (n1 tiles, then one count per chunk).
  __device__ static uint32_t quant_target(Params const& p, int rows) {
    return static_cast<uint32_t>(p.n1 + (rows + kQuantRows - 1) / kQuantRows);
  }
  __device__ static int block_of(Params const& p, WorkTile const& t, bool is_l1) { return is_l1 ? t.tag : t.tag / p.n2; }

  // 8 bf16 values (16 bytes) times inv as 8 e4m3 codes (8 bytes): the quantisation's conversion.
  __device__ __forceinline__ static uint2 to_fp8x8(uint4 v, float inv) {
    const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
    uint32_t o[2];
    CUTE_UNROLL
    for (int e = 0; e < 2; ++e) {
      const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wv[2 * e]));
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wv[2 * e + 1]));
      o[e] = static_cast<uint32_t>(fp8x2_e4m3(a.x * inv, a.y * inv)) |
             (static_cast<uint32_t>(fp8x2_e4m3(b.x * inv, b.y * inv)) << 16);
    }
    return make_uint2(o[0], o[1]);
  }

  // The 256 consumer threads claim the block's chunks until none is left (the block's Linear-1
  // count is at least n1: its maxima are final, every h16 row and maximum visible — released with
  // the counts, acquired by thread 0 before the barrier that orders the other threads; all reads
  // below go through L2). Per chunk: the tokens' scales from h_amax (reset to zero), fp8 rows
  // from h16 (16-byte loads, kInFlight per thread: one SM's rate is about its bytes in flight
  // over the L2 latency, 64 KiB here), then one count, released after the proxy fence (h is read next by
  // TMA, the async proxy, in other CTAs).
  __device__ static void quantize_chunks(Params const& p, SharedStorage& ss, WorkTile const& t, int block, int ct) {
    const int chunks = (t.rows + kQuantRows - 1) / kQuantRows;
    uint32_t* claim = p.m.h_qclaim + block;
    constexpr int kInFlight = 16;
    const int per_row = p.intermediate / 8;
    for (int it = 0; it < kRowsMax / kQuantRows; ++it) {  // a bounded loop: at most this many chunks
                                                         // (unbounded, ptxas moved the K loop's
                                                         // stage indices out of uniform registers)
      if (ct == 0) ss.chunk = static_cast<int>(atomicAdd(claim, 1u));
      Epi::named_sync(256, kConsumersBarrier);
      const int c = __shfl_sync(0xffffffffu, ss.chunk, 0);  // warp-uniform to the compiler too
      Epi::named_sync(256, kConsumersBarrier);  // every thread has read it before the next claim
      if (c >= chunks) break;
      const int r0 = t.row_begin + c * kQuantRows, n = min(kQuantRows, t.rows - c * kQuantRows);
      if (ct < n) {
        const QuantScale qs = quant_scale(__uint_as_float(__ldcg(p.h_amax + r0 + ct)));
        p.h_amax[r0 + ct] = 0u;
        p.h_scales[r0 + ct] = qs.scale;
        ss.inv[ct] = qs.inv;
      }
      Epi::named_sync(256, kConsumersBarrier);
      // The chunk's rows are contiguous in h16 and h: piece j (16 bytes of bf16, 8 values) is row
      // j / (I / 8) of the chunk.
      const int pieces = n * per_row;
      const uint4* src = reinterpret_cast<const uint4*>(p.h16 + static_cast<int64_t>(r0) * p.intermediate);
      uint2* dst = reinterpret_cast<uint2*>(p.h + static_cast<int64_t>(r0) * p.intermediate);
      for (int j0 = ct; j0 < pieces; j0 += 256 * kInFlight) {
        uint4 v[kInFlight];
        CUTE_UNROLL
        for (int k = 0; k < kInFlight; ++k) {
          const int j = j0 + 256 * k;
          v[k] = j < pieces ? __ldcg(src + j) : make_uint4(0u, 0u, 0u, 0u);
        }
        CUTE_UNROLL
        for (int k = 0; k < kInFlight; ++k) {
          const int j = j0 + 256 * k;
          if (j >= pieces) break;
          dst[j] = to_fp8x8(v[k], ss.inv[j / per_row]);
        }
      }
      dev::fence_proxy_async_global();
      Epi::named_sync(256, kConsumersBarrier);  // the chunk's rows and ss.inv are done with
      if (ct == 0) dev::add_release_gpu(p.epi1.dest.l1_done + block, 1u);
    }
  }

  // A Linear-2 tile's consumers before its epilogue inputs (h_scales) are read: help quantise the
  // block if chunks are left, then wait until every chunk is counted (a chunk claimed elsewhere
  // never waits, so the wait is bounded by its work).
  __device__ static void await_quantised(Params const& p, SharedStorage& ss, WorkTile const& t, int ct) {
    const int block = block_of(p, t, false);
    const uint32_t target = quant_target(p, t.rows);
    const uint32_t* done = p.epi1.dest.l1_done + block;
    if (ct == 0) ss.quantised = dev::load_acquire_gpu(done) >= target;
    Epi::named_sync(256, kConsumersBarrier);
    const bool quantised = __shfl_sync(0xffffffffu, ss.quantised, 0) != 0;  // warp-uniform (the K loop's
                                                                             // uniform registers)
    Epi::named_sync(256, kConsumersBarrier);  // read by all before a later tile writes it
    if (quantised) return;
    quantize_chunks(p, ss, t, block, ct);
    if (ct == 0)
      dev::wait_geq_gpu(done, target, p.m.ep.status, WaitId::moe_linear1, p.m.ep.rank, p.m.ep.timeout_ns);
    Epi::named_sync(256, kConsumersBarrier);
  }

  // Linear-1 count: after both groups stored (the barrier orders every thread's h16 stores and
  // maxima before thread 0's release). A block of more than kLastQuantRows rows counts by a
  // reduction: nothing waits for the round trip of an atomic that returns (~0.7 us per Linear-1
  // tile under load), and its quantisation is left to the CTAs of its Linear-2 tiles, handed over
  // at count n1 (await_quantised). A smaller block's count returns, and the CTA that counted last
  // quantises at once: its few chunks are short, its Linear-2 tiles many (hidden / 128), and
  // waiting for their hand-over cost more than the round trip (docs/megamoe.md §Per-token
  // activations in the fused kernel). Returns whether this CTA is to quantise the block now.
  static constexpr int kLastQuantRows = 128;
  __device__ static bool count_l1(Params const& p, SharedStorage& ss, WorkTile const& t, int ct) {
    Epi::named_sync(256, kConsumersBarrier);
    uint32_t* done = p.epi1.dest.l1_done + t.tag;
    if (t.rows > kLastQuantRows) {
      if (ct == 0) dev::add_release_gpu(done, 1u);
      return false;
    }
    if (ct == 0) {
      uint32_t before;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(done) : "memory");
      ss.last = before + 1u == static_cast<uint32_t>(p.n1);
    }
    Epi::named_sync(256, kConsumersBarrier);
    return ss.last != 0;
  }

  // Linear-2 staging of consumer thread (g, wt): warp group g's 64 columns of a 128-token piece,
  // bf16 times the channel and token scales, token-major (stmatrix) in the group's region at
  // kOutPitch bytes per token.
  struct L2Stage {
    uint32_t row_addr;
    float cs0, cs1;
    int q;
  };
  __device__ static L2Stage l2_stage(SharedStorage& ss, int g, int wt_in) {
    const int wt = opaque(wt_in);  // as store_h
    const int lane = wt % 32, w = wt / 32;
    L2Stage s{0u, 1.f, 1.f, lane % 4};
    if constexpr (T::kLut) {
      s.cs0 = ss.rs.epi_cs[64 * g + 16 * w + lane / 4];
      s.cs1 = ss.rs.epi_cs[64 * g + 16 * w + lane / 4 + 8];
    }
    const int m = lane / 8, r = lane % 8;
    s.row_addr = cute::cast_smem_ptr_to_uint(ss.rs.epi.data() + g * kGroupBytes + (8 * (m >> 1) + r) * kOutPitch +
                                             (16 * w + 8 * (m & 1)) * 2);
    return s;
  }
  __device__ static void stage_l2(SharedStorage& ss, L2Stage const& s, Acc const& acc, int g, int pc) {
    Epi::template stage_bf16_piece<kOutPitch>(acc, s.row_addr, s.cs0, s.cs1, tile_ts(ss, g) + pc * kPieceT, s.q);
  }
  // The fold's third piece (kFold tokens from kBlockM).
  __device__ static void stage_l2_fold(SharedStorage& ss, L2Stage const& s, Acc3 const& acc3, int g) {
    Epi::template stage_bf16_piece<kOutPitch, kFold>(acc3, s.row_addr, s.cs0, s.cs1, tile_ts(ss, g) + kBlockM, s.q);
  }

  // kWide, Linear-2, warp group g (active: its chunk exists): both slabs' 64 columns of the piece,
  // bf16 times the channel and token scales, side by side in the group's region (kOutPitch bytes
  // per token), for the store warps.
  __device__ static void stage_l2_wide(SharedStorage& ss, Acc const* acc, int g, int wt_in) {
    const int wt = opaque(wt_in);
    const int lane = wt % 32, w = wt / 32;
    const int m = lane / 8, r = lane % 8;
    const uint32_t row_addr = cute::cast_smem_ptr_to_uint(ss.rs.epi.data() + g * kGroupBytes +
                                                          (8 * (m >> 1) + r) * kOutPitch + (16 * w + 8 * (m & 1)) * 2);
    CUTE_UNROLL
    for (int sl = 0; sl < 2; ++sl) {
      float cs0 = 1.f, cs1 = 1.f;
      if constexpr (T::kLut) {
        cs0 = ss.rs.epi_cs[128 * g + 64 * sl + 16 * w + lane / 4];
        cs1 = ss.rs.epi_cs[128 * g + 64 * sl + 16 * w + lane / 4 + 8];
      }
      Epi::template stage_bf16_piece<kOutPitch>(acc[sl], row_addr + static_cast<uint32_t>(128 * sl), cs0, cs1,
                                                tile_ts(ss, g), lane % 4);
    }
  }

  // Linear-2, warp group g: its 64 columns of each 128-token piece staged (stage_l2), then 16-byte
  // pieces straight into the token owners' combine buffers (each thread 8 rows of one piece, the
  // rows' addresses taken before the stores). Returns the SM cycles of the stores.
  __device__ static long long store_l2(Params const& p, SharedStorage& ss, Acc const* acc, WorkTile const& t, int g,
                                       int wt_in) {
    const int wt = opaque(wt_in);  // as store_h
    const uint32_t bar = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + g;
    uint8_t* region = ss.rs.epi.data() + g * kGroupBytes;
    const L2Stage st = l2_stage(ss, g, wt_in);
    const EpilogueTile et{t.expert, t.m_block, t.n_block, t.row_begin, t.rows, t.n_block * 128 + 64 * g, t.tag};
    long long cycles = 0;
    CUTE_UNROLL
    for (int pc = 0; pc < 2; ++pc) {
      if (pc * kPieceT >= t.rows) break;
      if (pc > 0) Epi::named_sync(128, bar);  // piece 0's copy-out is done with the staging
      stage_l2(ss, st, acc[pc], g, pc);
      Epi::named_sync(128, bar);
      const long long c0 = clock64();
      constexpr int kRowsPerThread = kPieceT * 8 / 128;  // 8 pieces of 16 bytes per row
      const int c = wt % 8;
      uint16_t* dst[kRowsPerThread];
      CUTE_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int tok = pc * kPieceT + wt / 8 + 16 * i;
        dst[i] = tok < t.rows ? static_cast<uint16_t*>(p.epi2.dest.row_ptr(et, t.row_begin + tok)) + 8 * c : nullptr;
      }
      CUTE_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int tok = wt / 8 + 16 * i;
        if (dst[i] != nullptr)
          *reinterpret_cast<uint4*>(dst[i]) = *reinterpret_cast<const uint4*>(region + tok * kOutPitch + 16 * c);
      }
      cycles += clock64() - c0;
    }
    return cycles;
  }

  // The span record of a Linear-2 tile's stores (bench --spans): where the 64 x 256 tile's two
  // 128-column pieces would be (mega_epilogue.cuh); with_hook: also the trace's store tail through
  // the hook (the consumers' copy-out; the store warps write the trace word themselves).
  __device__ static void record_l2_span(Params const& p, WorkTile const& t, long long cycles, bool with_hook) {
    const int block = t.tag / p.n2;
    const EpilogueTile et{t.expert, t.m_block, t.n_block, t.row_begin, t.rows, t.n_block * 128 * kChunks,
                          block * p.n2_pairs + t.n_block * kChunks / 2};
    CombineDestination d = p.epi2.dest;
    if (!with_hook) d.hook = nullptr;
    d.tile_stored(et, cycles);
  }

  // Store thread st (0..63, kStoreWarps): each staged Linear-2 tile (one token piece: at most 128 rows;
  // warp group g's 64 columns in its region) to the token owners' combine rows, until the
  // consumers stage "no more". The rows' destinations first (one origin load per row, all in
  // flight), then per row 16 lanes take its 16 pieces of 16 bytes (0-7 from region 0, 8-15 from
  // region 1), a warp two rows per step; then `free`.
  __device__ static void store_warps(Params const& p, SharedStorage& ss, int st) {
    const MegaMoeArgs& m = p.m;
    uint32_t full_phase = 0;
    long long c0_tile = 0;  // kStoreTwo: the clock at the tile's first piece (0: none begun)
    // Piece j of a row: the first half of a row's pieces from region 0, the second from region 1.
    constexpr int kHalf = kRowPieces / 2, kHalfShift = kChunks == 2 ? 4 : 3;  // kHalf = 1 << kHalfShift
    const int j = st & (kRowPieces - 1), r0 = st >> (kHalfShift + 1);
    const uint32_t src =
        cute::cast_smem_ptr_to_uint(ss.rs.epi.data() + (j >> kHalfShift) * kGroupBytes + 16 * (j & (kHalf - 1)));
    for (;;) {
      wait_then_read(&ss.sw.full, full_phase);
      full_phase ^= 1u;
      const int pos = ss.sw.pos;
      if (pos < 0) break;
      const WorkTile t = ss.sw.t;
      const bool last = kStoreTwo ? ss.sw_last != 0 : true;
      const long long c0 = clock64();
      if (kStoreTwo && c0_tile == 0) c0_tile = c0;
      const EpilogueTile et{t.expert, t.m_block, t.n_block, t.row_begin, t.rows, t.n_block * 128 * kChunks, t.tag};
      for (int r = st; r < t.rows; r += kStoreThreads)
        ss.sw.row_dst[r] = static_cast<uint16_t*>(p.epi2.dest.row_ptr(et, t.row_begin + r));
      sync_store_threads();
      const bool live = j < 16 * chunks_of(p.epi2.n, t);  // a wide tile's absent chunk: no columns
      for (int r = r0; r < t.rows; r += kStoreRowsPerStep * kStoreBatch) {
        uint4 v[kStoreBatch];
        uint16_t* d[kStoreBatch];
        CUTE_UNROLL
        for (int q = 0; q < kStoreBatch; ++q) {
          const int rr = r + kStoreRowsPerStep * q;
          d[q] = nullptr;
          if (rr < t.rows && live) {
            d[q] = ss.sw.row_dst[rr];
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(v[q].x), "=r"(v[q].y), "=r"(v[q].z), "=r"(v[q].w)
                         : "r"(src + static_cast<uint32_t>(rr * kOutPitch))
                         : "memory");
          }
        }
        CUTE_UNROLL
        for (int q = 0; q < kStoreBatch; ++q)
          if (d[q] != nullptr) *reinterpret_cast<uint4*>(d[q] + 8 * j) = v[q];
      }
      sync_store_threads();  // every row's stores issued; row_dst is read
      // The store tail: from the tile's first piece (kStoreTwo: across the hand-over of the next).
      if (st == 0 && last && (m.spans != nullptr || m.trace != nullptr)) {
        const long long tail = clock64() - (kStoreTwo ? c0_tile : c0);
        record_l2_span(p, t, tail, false);
        if (m.trace != nullptr) m.trace[size_t(pos) * kMegaTraceWords + 5] = static_cast<uint32_t>(tail);
      }
      if (kStoreTwo && last) c0_tile = 0;
      write_then_arrive(&ss.sw.free);
    }
    // Publish (mega_consume_all) counts this CTA done only after these stores.
    compiler_fence();
    cutlass::arch::NamedBarrier::sync(kPublishThreads, kPublishBarrier);
  }
  // The consumers' wait after their tile loop, not inlined: inlined, its clock-bounded poll made
  // ptxas spill in the two-piece K loop (~700 B; as MegaStoreWarps::wait_cold).
  __device__ __noinline__ static void wait_cold(uint64_t const* bar, uint32_t phase) { wait_then_read(bar, phase); }
  __device__ static void sync_store_threads() {
    compiler_fence();
    cutlass::arch::NamedBarrier::sync(kStoreThreads, kStoreBarrier);
    compiler_fence();
  }

  __device__ void operator()(Params const& p, char* smem_buf) const {
    const uint32_t base = cute::cast_smem_ptr_to_uint(smem_buf);
    SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem_buf + ((1024u - (base & 1023u)) & 1023u));
    const MegaMoeArgs& m = p.m;
    const int tid = threadIdx.x;
    mega_stamp_start(m);
    // Full barriers: the TMA thread only (no token scales per K block); queue readers: every
    // consumer thread.
    if (tid == 0) {
      mega_rs_setup<kMx, typename Rs::SharedStorage, Queue>(ss.rs, kStages, 1, T::kConsumerWarps, ss.queue, 256, p.l1,
                                                            p.l2, p.b1, p.b2);
      if constexpr (kStoreWarps) {
        cutlass::arch::ClusterBarrier::init(&ss.sw.full, 256);
        cutlass::arch::ClusterBarrier::init(&ss.sw.free, kStoreThreads);
      }
    }
    cutlass::arch::fence_barrier_init();
    __syncthreads();

    mega_prologue<true>(m, *reinterpret_cast<MegaPrologueSmem*>(ss.rs.epi.data()), ss.layout, p.n1, kBlockM, kFold);
    const MegaCallTiles call = mega_call_tiles(m, ss.layout, p.n1, p.n2);
    __syncthreads();  // the prologue's scratch (the staging) is read before any epilogue writes it

    Tensor sX = make_tensor(make_smem_ptr(ss.rs.x.data()), typename T::SmemLayoutX{});
    const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);
    const Queue queue{&ss.queue};

    if (warp < 4) {
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (tid == 0) {
        State write{0, 1u};  // every buffer starts empty
        // A Linear-2 tile is handed over once every Linear-1 tile of its block counted (its
        // consumers may then help quantise), and loads h once every chunk counted.
        const uint32_t l1_target = ::xstage::moe::mega_l1_target(::xstage::moe::mega_tile_shape(T::kTile), p.n1);
        mega_produce_all<kBlockM, kFold>(
            m, ss.layout, p.n1, p.n2, call, l1_target, ss.slots, queue, [&](WorkTile const& t, bool is_l1, int pos) {
              if (!is_l1) {
                const uint64_t w0 = m.trace != nullptr ? clock64() : 0;
                dev::wait_geq_gpu(call.l1_done + block_of(p, t, false), quant_target(p, t.rows), m.ep.status,
                                  WaitId::moe_linear1, m.ep.rank, m.ep.timeout_ns);
                dev::fence_proxy_async_global();
                if (m.trace != nullptr) m.trace[size_t(pos) * kMegaTraceWords + 4] += static_cast<uint32_t>(clock64() - w0);
              }
              produce_tile(is_l1 ? p.l1 : p.l2, is_l1 ? p.b1 : p.b2, ss, sX, t, write);
            });
      } else if (kStoreWarps && warp >= 2) {
        store_warps(p, ss, tid - 64);
      }
      return;
    }

    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int ct = tid - 128;
    const int g = ct / 128;
    const int wt = ct % 128;
    const Rs rs{};
    State read{};
    uint32_t it = 0;  // K blocks consumed (MoeW4A8RsKernel's trace, measurement builds only)
    // kStoreWarps: the parity of `free` to wait for before the staging is written again (the
    // store warps have read the last handed-over tile; a fresh barrier passes at parity 1).
    uint32_t free_parity = 1u;
    auto staging_free = [&] {
      if constexpr (kStoreWarps) wait_then_read(&ss.sw.free, free_parity);
    };
    mega_consume_all<kStoreWarps>(
        m, ss.slots, queue, ct, call.ok, kConsumersBarrier,
        [&](WorkTile const& t, bool is_l1, auto mainloop_done, int pos = -1) -> bool {
          if (!is_l1) await_quantised(p, ss, t, ct);  // before its token scales are read
          const TileInputs in = prefetch_epilogue(p, ss, t, is_l1, g, wt);
          Acc acc[2];
          Acc3 acc3;  // the fold's third piece (kFold > 0 only)
          // A block of <= 32 / <= 64 rows: the narrow wgmmas (the producer's box has that many rows).
          const int narrow = Boxes::rows_for(min(t.rows, kPieceT));
          if constexpr (kWide) {
            const bool active = g < chunks_of(is_l1 ? p.l1.n : p.l2.n, t);  // warp-group uniform
            rs.mma_wide_tile(is_l1 ? p.l1 : p.l2, ss.rs, read, g, wt, acc, it, narrow < kPieceT ? narrow : 0, active);
          } else if constexpr (kFold > 0) {
            rs.mma(is_l1 ? p.l1 : p.l2, ss.rs, sX, read, g, wt, acc, it, t.rows > kPieceT,
                   narrow < kPieceT ? narrow : 0,
                   typename Rs::template Fold<kFold>{ss.fold.x, t.rows > kBlockM, acc3});
          } else {
            rs.mma(is_l1 ? p.l1 : p.l2, ss.rs, sX, read, g, wt, acc, it, t.rows > kPieceT,
                   narrow < kPieceT ? narrow : 0);
          }
          mainloop_done();
          epilogue_start(ss, in, is_l1, g, wt);
          staging_free();
          if (is_l1) {
            p.epi1.dest.mark(0, ct);
            store_h(p, ss, acc, acc3, t, g, wt);
            p.epi1.dest.mark(1, ct);
            const long long c0 = clock64();
            if (count_l1(p, ss, t, ct)) {
              quantize_chunks(p, ss, t, block_of(p, t, true), ct);
            }
            if (ct == 0 && p.epi1.dest.hook != nullptr) p.epi1.dest.hook[blockIdx.x] = static_cast<uint32_t>(clock64() - c0);
            return true;
          }
          if (kStoreWarps && (kWide || kStoreTwo || t.rows <= kPieceT)) {
            // Each token piece staged for the store warps, which copy it out under the next tile
            // (kStoreTwo: piece 1 is staged once they have read piece 0).
            if constexpr (kWide) {
              if (g < chunks_of(p.epi2.n, t)) stage_l2_wide(ss, acc, g, wt);
              if (ct == 0) {
                ss.sw.t = t;
                ss.sw.pos = pos;
              }
              write_then_arrive(&ss.sw.full);
              free_parity ^= 1u;
            } else {
              // pieces a tile may hand over (the fold's third: kStaged = 3)
              constexpr int kStaged = kStoreTwo ? kPieces + (kFold > 0 ? 1 : 0) : 1;
              CUTE_UNROLL
              for (int pc = 0; pc < kStaged; ++pc) {
                if (pc > 0) {  // piece 0 always holds rows
                  if (pc * kPieceT >= t.rows) break;
                  wait_cold(&ss.sw.free, free_parity);
                }
                if (pc < kPieces) stage_l2(ss, l2_stage(ss, g, wt), acc[pc < kPieces ? pc : 0], g, pc);
                else stage_l2_fold(ss, l2_stage(ss, g, wt), acc3, g);
                if (ct == 0) {
                  WorkTile tp = t;
                  if constexpr (kStoreTwo) {
                    tp.row_begin += pc * kPieceT;
                    tp.rows = min(kPieceT, t.rows - pc * kPieceT);
                    ss.sw_last = (pc + 1) * kPieceT >= t.rows;
                  }
                  ss.sw.t = tp;
                  ss.sw.pos = pos;
                }
                write_then_arrive(&ss.sw.full);
                free_parity ^= 1u;
              }
            }
            // The group's warps have read its channel scales (epi_cs) before any of them prefetches
            // the next tile's over them (prefetch_epilogue's cp.async comes before any barrier).
            Epi::named_sync(128, static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + g);
            return false;  // the store warps write the trace's store tail
          }
          long long tail = store_l2(p, ss, acc, t, g, wt);
          if (m.spans != nullptr || m.trace != nullptr) {
            // The sender-visible span of the tile's stores: until both groups' stores are done.
            const long long c0 = clock64() - tail;
            Epi::named_sync(256, kConsumersBarrier);
            tail = clock64() - c0;
            if (ct == 0) record_l2_span(p, t, tail, true);
          }
          return true;
        },
        [&] {
          if constexpr (kStoreWarps) {  // the store warps leave once they read the last staged tile
            wait_cold(&ss.sw.free, free_parity);
            if (ct == 0) ss.sw.pos = -1;
            write_then_arrive(&ss.sw.full);
          }
        },
        kPublishThreads, kPublishBarrier);
  }
};

template <bool kMx, bool kWide>
__global__ void __launch_bounds__(MegaW4A8TokKernel<kMx, kWide>::kThreads, 1)
    mega_moe_w4a8_tok_kernel(CUTE_GRID_CONSTANT typename MegaW4A8TokKernel<kMx, kWide>::Params const params) {
  using K = MegaW4A8TokKernel<kMx, kWide>;
  XSTAGE_RUN_KERNEL(K, params);
}

}  // namespace xstage::kernels::moe
