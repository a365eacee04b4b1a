// The epilogues of the register-operand W4A8 kernel (w4a8_rs.cuh), apart from its main loop: the
// epilogue inputs prefetched at tile start, the bf16 stores (by the consumers, or staged for the
// producer warp group's idle warps: kBf16Warps), the SwiGLU tile's, and Linear-1 on
// gate/up-interleaved rows (kGlu: h parked by the consumers; the amax, its exchange with the
// partner CTA over distributed shared memory, the quantisation and the stores on the idle warps).
// W4RsEpilogue<Kernel> holds them as static functions of the kernel's types; the kernel calls them.
//
// Included only by w4a8_rs.cuh.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "kernels/moe/mainloop.cuh"
#include "kernels/moe/pipeline.cuh"
#include "kernels/moe/quant.cuh"
#include "kernels/moe/tile_scheduler.cuh"

namespace xstage::kernels::moe {

template <class Kernel>
struct W4RsEpilogue {
  using T = typename Kernel::T;
  using Params = typename Kernel::Params;
  using SharedStorage = typename Kernel::SharedStorage;
  using Acc = typename Kernel::Acc;
  using Scheduler = typename Kernel::Scheduler;
  static constexpr int kBlockT = Kernel::kBlockT;
  static constexpr int kPieceT = Kernel::kPieceT;
  static constexpr int kPieces = Kernel::kPieces;
  static constexpr int kPitch = Kernel::kPitch;
  static constexpr int kHPitch = Kernel::kHPitch;
  static constexpr int kEpiThreads = Kernel::kEpiThreads;
  static constexpr int kParkPitch = Kernel::kParkPitch;
  __device__ static int cta_rank() { return Kernel::cta_rank(); }

  // Epilogue inputs of tile t into shared memory (cp.async, one group per thread): issued when the
  // tile starts and waited for in the epilogue, so the loads' latency hides under the K loop.
  // Rows past the expert's tokens read as zero (their outputs are never stored).
  __device__ __forceinline__ static void prefetch_epilogue(Params const& p, SharedStorage& ss, WorkTile const& t,
                                                           int g, int wt) {
    auto copy = [](float* dst, const float* src, bool ok) {
      cp_async_4(cute::cast_smem_ptr_to_uint(dst), src, ok ? 4u : 0u);
    };
    if constexpr (T::kGateUp) {
      const int ct = g * 128 + wt;  // consumer thread 0..255
      if constexpr (T::kLut) {  // channel ct < 128: gate row ct of the tile; ct >= 128: up row ct - 128
        const float* cs = p.w_scales + static_cast<int64_t>(t.expert) * p.n + t.n_block * 128 + (ct & 127) +
                          (ct >= 128 ? p.n / 2 : 0);
        copy(ss.epi_cs.data() + ct, cs, true);
      }
      if (ct < kBlockT) {
        const bool ok = ct < t.rows;
        copy(ss.epi_rw.data() + ct, ok ? p.row_weights + t.row_begin + ct : p.row_weights, ok);
        if constexpr (T::kTok) copy(ss.epi_ts.data() + ct, ok ? p.a_scales + t.row_begin + ct : p.a_scales, ok);
      }
    } else {
      if constexpr (T::kLut) {
        if (wt < 64) {
          const float* cs = p.w_scales + static_cast<int64_t>(t.expert) * p.n + t.n_block * 128 + 64 * g + wt;
          copy(ss.epi_cs.data() + 64 * g + wt, cs, true);
        }
      }
      if constexpr (T::kTok) {
        CUTE_UNROLL
        for (int j = 0; j < kBlockT / 128; ++j) {
          const int r = wt + 128 * j;
          const bool ok = r < t.rows;
          copy(ss.epi_ts.data() + g * kBlockT + r, ok ? p.a_scales + t.row_begin + r : p.a_scales, ok);
        }
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }

  // bf16: warp group g's 64 columns of token piece pc to out[token, n_block * 128 + 64 g + ...],
  // staged token-major (one piece at a time through the group's staging). The accumulator's 8 x 8
  // blocks (8 weight rows x 8 tokens per warp) go to the staging transposed by stmatrix: 8
  // instructions per thread per piece instead of 64 two-byte stores.
  __device__ __forceinline__ static void store_bf16(Params const& p, SharedStorage& ss, Acc const& acc,
                                                    WorkTile const& t, int g, int wt, int pc) {
    const uint32_t bar = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + g;
    uint8_t* staged = ss.epi.data() + g * kPieceT * kPitch;
    const int tok0 = pc * kPieceT;  // the piece's first token in the tile
    const int lane = wt % 32, w = wt / 32;
    const int q = lane % 4;
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    cutlass::arch::NamedBarrier::sync(128, bar);  // the previous piece's copy-out has read the staging;
                                                  // every thread's prefetched scales have landed
    // INT4 two-level: the channel scales of this thread's two weight rows (output columns).
    float cs0 = 1.f, cs1 = 1.f;
    if constexpr (T::kLut) {
      cs0 = ss.epi_cs[64 * g + 16 * w + lane / 4];
      cs1 = ss.epi_cs[64 * g + 16 * w + lane / 4 + 8];
    }
    // lane 8 m + r names row r (a token) of matrix m (stage_bf16_piece).
    const int m = lane / 8, r = lane % 8;
    const uint32_t row_addr = cute::cast_smem_ptr_to_uint(staged + (8 * (m >> 1) + r) * kPitch + (16 * w + 8 * (m & 1)) * 2);
    stage_bf16_piece<kPitch>(acc, row_addr, cs0, cs1, ss.epi_ts.data() + g * kBlockT + tok0, q);
    cutlass::arch::NamedBarrier::sync(128, bar);
    constexpr int kChunks = 64 * 2 / 16;  // 16-byte pieces per token row of the group
    auto* out = static_cast<__nv_bfloat16*>(p.out);
    CUTE_UNROLL
    for (int it = 0; it < kPieceT * kChunks / 128; ++it) {
      const int idx = wt + 128 * it;
      const int tok = idx / kChunks, c = idx % kChunks;
      if (tok0 + tok < t.rows) {
        const uint4 v = *reinterpret_cast<const uint4*>(staged + tok * kPitch + c * 16);
        *reinterpret_cast<uint4*>(out + (t.row_begin + tok0 + tok) * p.out_ld + t.n_block * 128 + 64 * g + 8 * c) = v;
      }
    }
  }

  // One token piece of this thread's accumulator staged as bf16, token-major, through stmatrix:
  // value i (weight row 16 w + lane / 4 + 8 h, h = (i >> 1) & 1; token 2 q + (i & 1) + 8 (i / 4))
  // times its row's channel scale (cs0, cs1) and, with per-token scales, the token's scale
  // (ts: the piece's first token). One stmatrix.x4 per two 8-token groups: matrices (h, jj) =
  // (0, 2 j), (1, 2 j), (0, 2 j + 1), (1, 2 j + 1). row_addr: this lane's row of the first 16
  // tokens; kRowPitch bytes per token row. 8 instructions per thread per piece instead of 64
  // two-byte stores. kTokens < kPieceT: a narrower accumulator (the fused kernel's fold piece,
  // the first kTokens / 8 token groups of the same layout).
  template <int kRowPitch, int kTokens = kPieceT, class AccT = Acc>
  __device__ __forceinline__ static void stage_bf16_piece(AccT const& acc, uint32_t row_addr, float cs0, float cs1,
                                                          const float* ts, int q) {
    static_assert(kTokens % 16 == 0 && kTokens <= kPieceT, "whole 16-token stmatrix groups");
    CUTE_UNROLL
    for (int j = 0; j < kTokens / 16; ++j) {
      uint32_t packed[4];
      CUTE_UNROLL
      for (int mm = 0; mm < 4; ++mm) {
        const int jj = 2 * j + (mm >> 1), h = mm & 1;
        const int i = 4 * jj + 2 * h;
        __nv_bfloat162 b2;  // .x (token 2q) in the low half
        if constexpr (T::kTok) {
          const float2 t2 = *reinterpret_cast<const float2*>(ts + 8 * jj + 2 * q);
          b2 = __floats2bfloat162_rn(acc(i) * (h ? cs1 : cs0) * t2.x, acc(i + 1) * (h ? cs1 : cs0) * t2.y);
        } else {
          b2 = __floats2bfloat162_rn(acc(i) * (h ? cs1 : cs0), acc(i + 1) * (h ? cs1 : cs0));
        }
        packed[mm] = *reinterpret_cast<const uint32_t*>(&b2);
      }
      asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                       row_addr + static_cast<uint32_t>(16 * j * kRowPitch)),
                   "r"(packed[0]), "r"(packed[1]), "r"(packed[2]), "r"(packed[3])
                   : "memory");
    }
  }

  // kBf16Warps: warp group g's 64 columns of both pieces, scaled (channel x token scale) and
  // staged token-major through stmatrix as store_bf16 does, into the tile-wide staging; the
  // epilogue warps copy it out (bf16_copy_out) while this group starts the next tile.
  __device__ __forceinline__ static void park_bf16(SharedStorage& ss, Acc const* acc, int g, int wt) {
    const int lane = wt % 32, w = wt / 32;
    const int q = lane % 4;
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    named_sync(128, static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + g);  // the group's prefetches landed
    float cs0 = 1.f, cs1 = 1.f;
    if constexpr (T::kLut) {
      cs0 = ss.epi_cs[64 * g + 16 * w + lane / 4];
      cs1 = ss.epi_cs[64 * g + 16 * w + lane / 4 + 8];
    }
    named_sync(kHBarThreads, kBarHFree0 + g);  // the epilogue warps have copied the previous tile out
    const int m = lane / 8, r = lane % 8;
    const uint32_t row_addr = cute::cast_smem_ptr_to_uint(ss.epi.data() + (8 * (m >> 1) + r) * kParkPitch +
                                                          (64 * g + 16 * w + 8 * (m & 1)) * 2);
    CUTE_UNROLL
    for (int pc = 0; pc < kPieces; ++pc)
      stage_bf16_piece<kParkPitch>(acc[pc], row_addr + static_cast<uint32_t>(pc * kPieceT * kParkPitch), cs0, cs1,
                                   ss.epi_ts.data() + g * kBlockT + pc * kPieceT, q);
    named_arrive(kHBarThreads, kBarHFull0 + g);
  }

  // SwiGLU: h = silu(gate) * up * row_weight for warp group g's 64 channels of token piece pc
  // (acc = its gate and up accumulators); the per-token amax over the tile's 128 channels goes
  // through shared memory (one partial per warp); fp8 rows staged token-major, stored in 16-byte
  // pieces by both warp groups; one scale per token.
  __device__ __forceinline__ static void store_swiglu(Params const& p, SharedStorage& ss, Acc const* acc,
                                                      WorkTile const& t, int g, int wt, int pc) {
    constexpr uint32_t kBoth = static_cast<uint32_t>(NamedBarrierId::swiglu_full);  // the 256 consumer threads
    uint8_t* staged = ss.epi.data();
    float* partial = reinterpret_cast<float*>(ss.epi.data() + kPieceT * kPitch);  // [8 warps][kPieceT]
    const int row0 = t.row_begin + pc * kPieceT, rows = t.rows - pc * kPieceT;  // the piece's tokens
    float* inv = partial + 8 * kPieceT;                                             // [kPieceT]
    const int warp = g * 4 + wt / 32, lane = wt % 32;
    const int crow = 64 * g + (wt / 32) * 16 + lane / 4;  // channel inside the tile (and + 8)
    const int q = lane % 4;
    constexpr int kVals = decltype(size(acc[0]))::value;  // kPieceT / 2
    // The prefetched inputs (prefetch_epilogue) of every thread have landed.
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    cutlass::arch::NamedBarrier::sync(256, kBoth);
    // INT4 two-level: channel scales of this thread's gate rows (crow, crow + 8) and up rows.
    float gs[2] = {1.f, 1.f}, us[2] = {1.f, 1.f};
    if constexpr (T::kLut) {
      gs[0] = ss.epi_cs[crow];
      gs[1] = ss.epi_cs[crow + 8];
      us[0] = ss.epi_cs[128 + crow];
      us[1] = ss.epi_cs[128 + crow + 8];
    }
    float h[kVals];
    CUTE_UNROLL
    for (int i = 0; i < kVals; ++i) {
      const int tok = 2 * q + (i & 1) + 8 * (i / 4);
      const float rw = ss.epi_rw[pc * kPieceT + tok];  // zero past the expert's tokens
      const float at = T::kTok ? ss.epi_ts[pc * kPieceT + tok] : 1.f;  // kTok: token scale
      h[i] = T::kLut ? swiglu(acc[0](i) * (gs[(i >> 1) & 1] * at), acc[1](i) * (us[(i >> 1) & 1] * at)) * rw
                     : swiglu(acc[0](i), acc[1](i)) * rw;
    }
    // Per-token amax: this thread's two channels, then the 8 lanes of the quad column (xor over
    // lane bits 2..4), then one partial per warp.
    float m[kVals / 2];
    CUTE_UNROLL
    for (int j = 0; j < kVals / 2; ++j) {  // j = token pair index: values 4 (j / 2) + (j & 1) and + 2
      const int i = 4 * (j / 2) + (j & 1);
      m[j] = fmaxf(fabsf(h[i]), fabsf(h[i + 2]));
      CUTE_UNROLL
      for (int x = 4; x < 32; x <<= 1) m[j] = fmaxf(m[j], __shfl_xor_sync(0xffffffffu, m[j], x));
    }
    cutlass::arch::NamedBarrier::sync(256, kBoth);  // the previous tile's copy-out is done with the staging
    if (lane < 4) {
      CUTE_UNROLL
      for (int j = 0; j < kVals / 2; ++j) partial[warp * kPieceT + 2 * q + (j & 1) + 8 * (j / 2)] = m[j];
    }
    cutlass::arch::NamedBarrier::sync(256, kBoth);
    const int ct = g * 128 + wt;  // consumer thread 0..255
    if (ct < kPieceT) {
      float a = 0.f;
      CUTE_UNROLL
      for (int w = 0; w < 8; ++w) a = fmaxf(a, partial[w * kPieceT + ct]);
      const QuantScale qs = quant_scale(a);
      inv[ct] = qs.inv;
      if (ct < rows) p.out_scales[static_cast<int64_t>(t.n_block) * p.m_total + row0 + ct] = qs.scale;
    }
    cutlass::arch::NamedBarrier::sync(256, kBoth);
    CUTE_UNROLL
    for (int i = 0; i < kVals; i += 2) {
      const int tok = 2 * q + 8 * (i / 4);  // values i, i + 1: tokens tok, tok + 1 of channel crow (+8)
      const float2 iv = *reinterpret_cast<const float2*>(&inv[tok]);
      const uint16_t v = fp8x2_e4m3(h[i] * iv.x, h[i + 1] * iv.y);
      const int ch = crow + ((i & 2) ? 8 : 0);
      staged[tok * kPitch + ch] = static_cast<uint8_t>(v & 0xFF);
      staged[(tok + 1) * kPitch + ch] = static_cast<uint8_t>(v >> 8);
    }
    cutlass::arch::NamedBarrier::sync(256, kBoth);
    auto* out = static_cast<uint8_t*>(p.out);
    constexpr int kChunks = 128 / 16;  // 16-byte pieces per token row
    CUTE_UNROLL
    for (int it = 0; it < kPieceT * kChunks / 256; ++it) {
      const int idx = ct + 256 * it;
      const int tok = idx / kChunks, c = idx % kChunks;
      if (tok < rows)
        *reinterpret_cast<uint4*>(out + (row0 + tok) * p.out_ld + t.n_block * 128 + 16 * c) =
            *reinterpret_cast<const uint4*>(staged + tok * kPitch + c * 16);
    }
  }

  // kGlu's named barriers (ids this kernel does not use otherwise): h of consumer warp group g
  // parked (kBarHFull0 + g: the group arrives, the epilogue warps wait) and read (kBarHFree0 + g:
  // the other way round), 128 + 96 threads each.
  static constexpr uint32_t kBarHFull0 = static_cast<uint32_t>(NamedBarrierId::swiglu_full);  // 3, 4
  static constexpr uint32_t kBarHFree0 = static_cast<uint32_t>(NamedBarrierId::pingpong_wg0);  // 5, 6
  static constexpr uint32_t kHBarThreads = 128 + kEpiThreads;
  // Named barriers with the compiler's memory ordering made explicit (CUTLASS's bar.arrive has no
  // memory clobber; the shared stores before it must stay before it).
  __device__ __forceinline__ static void named_sync(uint32_t threads, uint32_t id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount), "r"(threads) : "memory");
  }
  __device__ __forceinline__ static void named_arrive(uint32_t threads, uint32_t id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id + cutlass::arch::NamedBarrier::ReservedNamedBarrierCount), "r"(threads) : "memory");
  }

  // kGlu, consumer side: thread (g, warp w, lane) holds gate (tile row 64g + 16w + lane/4) and up
  // (+ 8) of channel 32g + 8w + lane/4 of the CTA's 64, for tokens 2q + (i & 1) + 8 (i / 4) of each
  // piece. It computes h = silu(gate * s_g * t) * (up * s_u * t) for both pieces and parks h in
  // shared memory (token-major fp32) for the epilogue warps (glu_tile), which take the router
  // weight, the amax, its exchange with the partner CTA, the quantisation and the stores, while
  // this warp group goes on to the next tile. Each warp group only reads the scales its own
  // threads prefetched, so the groups never wait for each other here.
  __device__ __forceinline__ static void park_h(SharedStorage& ss, Acc const* acc, int g, int wt) {
    const int w = wt / 32, lane = wt % 32, q = lane % 4;
    const int ch = 32 * g + 8 * w + lane / 4;     // channel inside the CTA's 64
    const int grow = 64 * g + 16 * w + lane / 4;  // tile row of its gate value (up: + 8)
    constexpr int kVals = decltype(size(acc[0]))::value;  // 64 per piece
    static_assert(kBlockT == 256 && kPieceT == 128 && kVals == 64, "two 128-token pieces, one per 256 threads");
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    named_sync(128, static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + g);  // the group's prefetches landed
    // INT4 two-level: the channel scales of gate and up (MXFP4: the block scales were applied in
    // the promotion).
    const float cg = T::kLut ? ss.epi_cs[grow] : 1.f, cu = T::kLut ? ss.epi_cs[grow + 8] : 1.f;
    float h[kPieces][kVals / 2];  // [piece][j]: token 2q + (j & 1) + 8 (j / 2)
    CUTE_UNROLL
    for (int pc = 0; pc < kPieces; ++pc) {
      CUTE_UNROLL
      for (int j = 0; j < kVals / 2; j += 2) {
        const int i = 4 * (j / 2);  // gate values i, i + 1 (tokens tok, tok + 1); up i + 2, i + 3
        const int tok = pc * kPieceT + 2 * q + 8 * (j / 2);
        const float2 ts = *reinterpret_cast<const float2*>(ss.epi_ts.data() + g * kBlockT + tok);
        h[pc][j] = swiglu(acc[pc](i) * (cg * ts.x), acc[pc](i + 2) * (cu * ts.x));
        h[pc][j + 1] = swiglu(acc[pc](i + 1) * (cg * ts.y), acc[pc](i + 3) * (cu * ts.y));
      }
    }
    named_sync(kHBarThreads, kBarHFree0 + g);  // the epilogue warps have read the previous tile's h
    float* hb = reinterpret_cast<float*>(ss.epi.data());
    CUTE_UNROLL
    for (int pc = 0; pc < kPieces; ++pc) {
      CUTE_UNROLL
      for (int j = 0; j < kVals / 2; ++j) hb[(pc * kPieceT + 2 * q + (j & 1) + 8 * (j / 2)) * kHPitch + ch] = h[pc][j];
    }
    named_arrive(kHBarThreads, kBarHFull0 + g);
  }

  // Warps 1-3 of the producer warp group (e = 0..95): per tile, wait until both consumer warp
  // groups have parked their part, run the kGlu epilogue (glu_tile) or the bf16 copy-out, and
  // release the staging to the consumers after the last read.
  __device__ static void epilogue_warps(Params const& p, SharedStorage& ss) {
    const int e = static_cast<int>(threadIdx.x) - 32;
    Scheduler sched(p.counts, p.offsets, p.experts, p.n_blocks, cta_rank());
    CUTE_UNROLL
    for (int g = 0; g < T::kConsumerWGs; ++g) named_arrive(kHBarThreads, kBarHFree0 + g);  // the staging starts free
    WorkTile t;
    uint32_t tile_no = 0;
    while (sched.next(t)) {
      CUTE_UNROLL
      for (int g = 0; g < T::kConsumerWGs; ++g) named_sync(kHBarThreads, kBarHFull0 + g);
      if constexpr (T::kGlu) {
        glu_tile(p, ss, t, e, tile_no);
      } else {
        // 16-byte pieces of the staged rows (16 per token), consecutive lanes along a row.
        constexpr int kChunks = 128 * 2 / 16;
        auto* out = static_cast<__nv_bfloat16*>(p.out);
        for (int idx = e; idx < kBlockT * kChunks; idx += kEpiThreads) {
          const int tok = idx / kChunks, c = idx % kChunks;
          if (tok < t.rows)
            *reinterpret_cast<uint4*>(out + (t.row_begin + tok) * p.out_ld + t.n_block * 128 + 8 * c) =
                *reinterpret_cast<const uint4*>(ss.epi.data() + tok * kParkPitch + c * 16);
        }
      }
      CUTE_UNROLL
      for (int g = 0; g < T::kConsumerWGs; ++g) named_arrive(kHBarThreads, kBarHFree0 + g);
      ++tile_no;
    }
  }

  // kGlu, epilogue warps, one tile (thread e takes tokens e, e + 96, e + 192 < 256): the amax of
  // |h| over the CTA's 64 channels times |router weight|, stored into the partner CTA's exchange
  // buffer (the partner covers the other 64 channels of the scale block), one remote arrival per
  // thread after its stores, two buffers by tile parity (a buffer is written again only after its
  // reader has arrived for the next tile, i.e. after it read this one). Then the block amax, the
  // scale (written by rank 0), and the row quantised (h * router weight / scale) and stored as
  // four 16-byte pieces.
  __device__ __forceinline__ static void glu_tile(Params const& p, SharedStorage& ss, WorkTile const& t, int e,
                                                  uint32_t tile_no) {
    constexpr int kRounds = (kBlockT + kEpiThreads - 1) / kEpiThreads;
    const int rank = cta_rank();
    const uint32_t peer = static_cast<uint32_t>(rank ^ 1);
    const float* hb = reinterpret_cast<const float*>(ss.epi.data());
    const uint32_t par = tile_no & 1u;
    float amax[kRounds] = {};
    CUTE_UNROLL
    for (int r = 0; r < kRounds; ++r) {
      const int tok = e + kEpiThreads * r;
      if (tok >= kBlockT) break;
      const float4* row = reinterpret_cast<const float4*>(hb + tok * kHPitch);
      float m0 = 0.f, m1 = 0.f, m2 = 0.f, m3 = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < 16; ++c) {
        const float4 v = row[c];
        m0 = fmaxf(m0, fabsf(v.x));
        m1 = fmaxf(m1, fabsf(v.y));
        m2 = fmaxf(m2, fabsf(v.z));
        m3 = fmaxf(m3, fabsf(v.w));
      }
      const float rw = tok < t.rows ? __ldg(p.row_weights + t.row_begin + tok) : 0.f;
      amax[r] = fmaxf(fmaxf(m0, m1), fmaxf(m2, m3)) * fabsf(rw);
      const uint32_t dst = remote_smem(cute::cast_smem_ptr_to_uint(ss.xch.data() + par * kBlockT + tok), peer);
      asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(dst), "f"(amax[r]) : "memory");
    }
    {
      const uint32_t bar = remote_smem(cute::cast_smem_ptr_to_uint(&ss.xfull[par]), peer);
      asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
    }
    cluster_wait(&ss.xfull[par], (tile_no >> 1) & 1u);
    auto* out = static_cast<uint8_t*>(p.out);
    CUTE_UNROLL
    for (int r = 0; r < kRounds; ++r) {
      const int tok = e + kEpiThreads * r;
      if (tok >= kBlockT) break;
      if (tok >= t.rows) continue;
      const QuantScale qs = quant_scale(fmaxf(amax[r], ss.xch[par * kBlockT + tok]));
      if (rank == 0) p.out_scales[static_cast<int64_t>(t.n_block / 2) * p.m_total + t.row_begin + tok] = qs.scale;
      const float f = __ldg(p.row_weights + t.row_begin + tok) * qs.inv;
      const float4* row = reinterpret_cast<const float4*>(hb + tok * kHPitch);
      uint4* dst = reinterpret_cast<uint4*>(out + (t.row_begin + tok) * p.out_ld + t.n_block * 64);
      CUTE_UNROLL
      for (int c = 0; c < 4; ++c) {
        uint32_t wd[4];
        CUTE_UNROLL
        for (int k = 0; k < 4; ++k) {
          const float4 v = row[4 * c + k];
          wd[k] = static_cast<uint32_t>(fp8x2_e4m3(v.x * f, v.y * f)) |
                  (static_cast<uint32_t>(fp8x2_e4m3(v.z * f, v.w * f)) << 16);
        }
        dst[c] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
      }
    }
  }

  // Shared-memory address `local` in CTA `rank` of the cluster.
  __device__ __forceinline__ static uint32_t remote_smem(uint32_t local, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(local), "r"(rank));
    return r;
  }
  // Waits (acquire, cluster scope) for phase `phase` of a local barrier the partner arrives on;
  // a partner that never arrives traps after kWaitTimeoutNs (bounded_poll).
  __device__ __forceinline__ static void cluster_wait(uint64_t* bar, uint32_t phase) {
    const uint32_t addr = cute::cast_smem_ptr_to_uint(bar);
    bounded_poll([&] {
      uint32_t ok;
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          " selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(ok)
          : "r"(addr), "r"(phase)
          : "memory");
      return ok != 0;
    });
  }
};

}  // namespace xstage::kernels::moe
