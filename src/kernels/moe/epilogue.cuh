// Epilogue policies of the MoE grouped GEMM: where a finished tile goes and in what form.
//
// The mainloop leaves each consumer warp group's fp32 64 x 128 piece (scales applied) in
// registers and hands it to the policy with the tile coordinates; it knows nothing about
// destinations. A policy is a template over (Traits, Destination): the data movement is
// shared (registers -> padded shared staging -> 16-byte row stores by the warp group), the
// Destination says where each output row lands:
//   * Bf16TileEpilogue<Traits, LocalRowDestination<bf16>>: out[m_total, n] bf16 (Linear-2, or
//     any plain grouped GEMM);
//   * SwiGluQuantEpilogue<Traits, LocalQuantDestination>: Linear-1 with gate and up fused:
//     h = silu(gate) * up * row_weight, quantised to fp8 e4m3 per token per 128 channels
//     (scale = max(amax, 1e-4) / 448), out[m_total, n/2] fp8 + scales [n/2/128, m_total];
//   * SwiGluSerialQuantEpilogue<Traits, LocalQuantDestination>: the same for the two-pass
//     128 x 128 gate/up tile (MoeTraits::kGateUpSerial; the gate pass parked in shared memory);
//   * SwiGluDualQuantEpilogue<Traits, LocalQuantDestination>: the same for the 128 x 256 gate/up
//     tile (MoeTraits::kGateUpDual; gate and up of a channel in one thread); also with the
//     Mega-MoE kernel's h destination (its 128 x 256 tile);
//   * the Mega-MoE kernel (mega_epilogue.cuh) supplies Destinations that map a row to a peer
//     GPU's buffer or count a tile into a counter in tile_stored(); the mainloop is untouched.
//
// Destination interface (all __device__, const):
//   void* row_ptr(EpilogueTile const& t, int row) const;   // address of (row, t.col_begin)
//   float* scale_ptr(EpilogueTile const& t, int row) const;  // quantising policies only
//   static constexpr bool kNeedsTileStoredHook;
//   void writer_fence() const;  // every storing thread, after its stores (hook only)
//   void tile_stored(EpilogueTile const& t, long long cycles) const;  // one thread, after the
//       warp group's stores and fences; cycles = the warp group's sender-visible store span, or
//       -1 for a piece the caller does not record (second row half of a 128-row tile)
//   void mark(int k, int wt) const;  // (SwiGLU epilogue, hook destinations) phase k reached
#pragma once
#include <cstdint>

#include <cuda_fp8.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include "kernels/moe/mainloop.cuh"
#include "kernels/moe/params.hpp"
#include "kernels/moe/quant.cuh"

namespace xstage::kernels::moe {

using namespace cute;

// One warp group's piece of an output tile: rows [row_begin, row_begin + rows) (absolute
// rows of the output, all of expert `expert`) x columns [col_begin, col_begin + 128).
struct EpilogueTile {
  int expert;
  int m_block;
  int n_block;
  int row_begin;
  int rows;
  int col_begin;
  int tag;  // WorkTile::tag
};

// Output rows in this GPU's memory: element (row, col) at out[row * ld + col].
template <class Element>
struct LocalRowDestination {
  Element* out;
  int64_t ld;
  static constexpr bool kNeedsTileStoredHook = false;
  static LocalRowDestination from(MoeGemmParams const& p) { return {static_cast<Element*>(p.out), p.out_ld}; }
  __device__ void* row_ptr(EpilogueTile const& t, int row) const { return out + row * ld + t.col_begin; }
};

// fp8 rows plus one fp32 scale per (row, 128 columns), scales [cols/128, m_total].
struct LocalQuantDestination {
  uint8_t* out;
  int64_t ld;
  float* scales;
  int m_total;
  static constexpr bool kNeedsTileStoredHook = false;
  static LocalQuantDestination from(MoeGemmParams const& p) {
    return {static_cast<uint8_t*>(p.out), p.out_ld, p.out_scales, p.m_total};
  }
  __device__ void* row_ptr(EpilogueTile const& t, int row) const { return out + row * ld + t.col_begin; }
  __device__ float* scale_ptr(EpilogueTile const& t, int row) const {
    return scales + static_cast<int64_t>(t.col_begin / 128) * m_total + row;
  }
};

// Row r (inside the 64-row piece) and column c of accumulator value i of thread wt
// (m64n128 C layout: bit 0 -> column + 1, bit 1 -> row + 8, i / 4 -> column + 8 * (i / 4)).
__device__ __forceinline__ int acc_row(int wt, int i) { return (wt / 32) * 16 + (wt % 32) / 4 + ((i & 2) ? 8 : 0); }
__device__ __forceinline__ int acc_col(int wt, int i) { return (wt % 4) * 2 + (i & 1) + 8 * (i / 4); }

// Copies a warp group's 64 staged rows of `row_bytes` (multiple of 16 B, pitch in bytes) to
// the destination, 16-byte chunks, consecutive threads along a row. For the Mega-MoE
// destinations (those with the tile_stored hook) all row addresses are taken before the first
// store: the combine's origin-table load would otherwise cost one dependent L2 round trip per
// store, since the compiler cannot move a load above a store that may alias it. Plain local
// destinations keep the one-pass loop (no extra registers: the 3-warp-group tiles are tight).
template <int kRowBytes, int kPitch, class Destination>
__device__ __forceinline__ void copy_out_rows(Destination const& dest, EpilogueTile const& t, const uint8_t* staged,
                                              int wt) {
  constexpr int kChunks = kRowBytes / 16;
  constexpr int kIters = 64 * kChunks / 128;
  static_assert(kChunks * 16 == kRowBytes && (64 * kChunks) % 128 == 0);
  if constexpr (Destination::kNeedsTileStoredHook) {
    uint8_t* dst[kIters];
    CUTE_UNROLL
    for (int it = 0; it < kIters; ++it) {
      const int idx = wt + it * 128;
      const int r = idx / kChunks;
      dst[it] = r < t.rows ? static_cast<uint8_t*>(dest.row_ptr(t, t.row_begin + r)) + (idx % kChunks) * 16 : nullptr;
    }
    CUTE_UNROLL
    for (int it = 0; it < kIters; ++it) {
      const int idx = wt + it * 128;
      if (dst[it] != nullptr)
        *reinterpret_cast<uint4*>(dst[it]) =
            *reinterpret_cast<const uint4*>(staged + (idx / kChunks) * kPitch + (idx % kChunks) * 16);
    }
  } else {
    CUTE_UNROLL
    for (int it = 0; it < kIters; ++it) {
      const int idx = wt + it * 128;
      const int r = idx / kChunks;
      const int chunk = idx % kChunks;
      if (r < t.rows) {
        const uint4 v = *reinterpret_cast<const uint4*>(staged + r * kPitch + chunk * 16);
        *reinterpret_cast<uint4*>(static_cast<uint8_t*>(dest.row_ptr(t, t.row_begin + r)) + chunk * 16) = v;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
template <class Traits, class Destination>
struct Bf16TileEpilogue {
  using T = Traits;
  using Out = cutlass::bfloat16_t;
  // Local destinations stage a piece in 64-column parts one after the other (two, or three for
  // 192-column pieces): 18 KiB of staging for two warp groups, which gives the 128 x 128 tile
  // a sixth pipeline stage (cuBLASLt's depth; measured neutral,
  // docs/moe-gemm.md §Design). Destinations with the
  // tile-stored hook (Mega-MoE) keep the whole 128-column piece in one pass (one fence and one
  // flag per piece).
  static_assert(!Destination::kNeedsTileStoredHook || T::kPieceN == 128, "hook destinations: 128-column pieces");
  static constexpr int kParts = Destination::kNeedsTileStoredHook ? 1 : T::kPieceN / 64;
  static constexpr int kPartCols = T::kPieceN / kParts;
  static constexpr int kPitch = kPartCols * 2 + 16;  // bytes per staged row (16 B pad: no bank conflicts)
  static constexpr int kSmemBytes = T::kConsumerWGs * 64 * kPitch;
  static constexpr bool kSwiGlu = false;

  struct Params {
    Destination dest;
    int n;  // output columns
  };
  static Params to_params(MoeGemmParams const& p) { return Params{Destination::from(p), p.n}; }

  __device__ static void consumer_init(int) {}

  // The 128 x 256 tile (MoeTraits::kDual): a warp group's two pieces, one after the other
  // through its one staging buffer.
  template <class Frg>
  __device__ __forceinline__ void store_dual(Params const& ep, uint8_t* smem, Frg const& acc0, Frg const& acc1,
                                             WorkTile const& tile, int wt, int wm) const {
    store(ep, smem, acc0, tile, wt, wm, 0, 0);
    store(ep, smem, acc1, tile, wt, wm, 0, 1);
  }

  // piece: the tile's N piece (-1: the warp group's wn; the 128 x 256 tile passes 0 and 1).
  template <class Frg>
  __device__ __forceinline__ void store(Params const& ep, uint8_t* smem, Frg const& acc, WorkTile const& tile, int wt, int wm,
                                        int wn, int piece = -1) const {
    constexpr int kVals = decltype(size(acc))::value;
    constexpr int kPartVals = kVals / kParts;  // values i / 4 in [8 part, 8 part + 8): columns [64 part, 64 part + 64)
    const int wg = wm * T::kWgNThreads + wn;
    EpilogueTile t{tile.expert, tile.m_block, tile.n_block, tile.row_begin + 64 * wm,
                   min(64, tile.rows - 64 * wm), tile.n_block * T::kBlockN + T::kPieceN * (piece < 0 ? wn : piece),
                   tile.tag};
    if (t.rows <= 0 || t.col_begin >= ep.n) return;  // nothing of this piece is in the output
    const uint32_t bar = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + wg;
    uint8_t* staged = smem + wg * 64 * kPitch;
    CUTE_UNROLL
    for (int part = 0; part < kParts; ++part) {
      if (t.col_begin + part * kPartCols >= ep.n) break;  // the last tile of a 192-wide grid (n % 192 = 64, 128)
      cutlass::arch::NamedBarrier::sync(128, bar);  // the previous copy-out has read the staging
      CUTE_UNROLL
      for (int i = part * kPartVals; i < (part + 1) * kPartVals; i += 2) {
        __nv_bfloat162 h = __floats2bfloat162_rn(acc(i), acc(i + 1));
#ifdef XSTAGE_TEST_CORRUPT_ONE_ROW
        // Test-only (CMake option XSTAGE_TEST_CORRUPT_ONE_ROW, OFF by default; issue 33): the local
        // bf16 stores negate output row XSTAGE_TEST_CORRUPT_ONE_ROW (one wrong row must fail).
        if constexpr (std::is_same_v<Destination, LocalRowDestination<cutlass::bfloat16_t>>)
          if (t.row_begin + acc_row(wt, i) == XSTAGE_TEST_CORRUPT_ONE_ROW) h = __hneg2(h);
#endif
        *reinterpret_cast<__nv_bfloat162*>(staged + acc_row(wt, i) * kPitch + (acc_col(wt, i) - part * kPartCols) * 2) = h;
      }
      cutlass::arch::NamedBarrier::sync(128, bar);
      if constexpr (Destination::kNeedsTileStoredHook) {
        const long long c0 = clock64();
        copy_out_rows<kPartCols * 2, kPitch>(ep.dest, t, staged, wt);
        ep.dest.writer_fence();
        cutlass::arch::NamedBarrier::sync(128, bar);
        // Row half wm > 0 of a 128-row tile: not recorded (cycles -1; Destination interface).
        if (wt == 0) ep.dest.tile_stored(t, wm == 0 ? clock64() - c0 : -1);
      } else {
        EpilogueTile tp = t;
        tp.col_begin += part * kPartCols;
        copy_out_rows<kPartCols * 2, kPitch>(ep.dest, tp, staged, wt);
      }
    }
  }
};

// SwiGLU of a thread's kN accumulator values (gate(i), up(i): same positions) with the router
// weights of its two rows (value bit 1: row r0 + 8, weight w1; else row r0, w0), into h; each
// row's amax over the 4 threads of its quad (a row's 128 channels).
template <int kN, class Gate, class Up>
__device__ __forceinline__ void swiglu_rows(Gate&& gate, Up&& up, float w0, float w1, float (&h)[kN], float& amax0,
                                            float& amax1) {
  amax0 = 0.f;
  amax1 = 0.f;
  CUTE_UNROLL
  for (int i = 0; i < kN; ++i) {
    h[i] = swiglu(gate(i), up(i)) * ((i & 2) ? w1 : w0);
    if (i & 2) amax1 = fmaxf(amax1, fabsf(h[i]));
    else amax0 = fmaxf(amax0, fabsf(h[i]));
  }
  CUTE_UNROLL
  for (int s = 1; s <= 2; s <<= 1) {
    amax0 = fmaxf(amax0, __shfl_xor_sync(0xffffffffu, amax0, s));
    amax1 = fmaxf(amax1, __shfl_xor_sync(0xffffffffu, amax1, s));
  }
}

// Quantises a thread's kN values h to fp8 e4m3 with its rows' scales q0 / q1 into the staging
// (row pitch kPitch bytes), and has one thread per quad write the two rows' scales.
template <int kPitch, int kN, class Destination>
__device__ __forceinline__ void stage_fp8_rows(Destination const& dest, EpilogueTile const& t, uint8_t* staged,
                                               float const (&h)[kN], QuantScale q0, QuantScale q1, int wt) {
  CUTE_UNROLL
  for (int i = 0; i < kN; i += 2) {
    const float inv = (i & 2) ? q1.inv : q0.inv;
    *reinterpret_cast<uint16_t*>(staged + acc_row(wt, i) * kPitch + acc_col(wt, i)) = fp8x2_e4m3(h[i] * inv, h[i + 1] * inv);
  }
  const int r0 = acc_row(wt, 0);
  if ((wt % 4) == 0) {
    if (r0 < t.rows) *dest.scale_ptr(t, t.row_begin + r0) = q0.scale;
    if (r0 + 8 < t.rows) *dest.scale_ptr(t, t.row_begin + r0 + 8) = q1.scale;
  }
}

// The router weights of a thread's two accumulator rows r0, r0 + 8 (p = row r0's weight; rows
// past the tile's valid rows read as 0). kInKernel: the weights are written while the kernel
// runs (the Mega-MoE kernel's are pushed by peers): read through L2 (ld.cg), never the
// non-coherent read-only path; volatile keeps the load where it is issued (a caller loads
// them before its mainloop so the latency hides behind the wgmmas).
template <bool kInKernel>
__device__ __forceinline__ void load_row_weights(const float* p, bool ok0, bool ok1, float& w0, float& w1) {
  w0 = 0.f;
  w1 = 0.f;
  if constexpr (kInKernel) {
    if (ok0) asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(w0) : "l"(p));
    if (ok1) asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(w1) : "l"(p + 8));
  } else {
    if (ok0) w0 = __ldg(p);
    if (ok1) w1 = __ldg(p + 8);
  }
}

// The rest of a SwiGLU epilogue for a warp group whose threads hold gate and up of the same 64
// rows x 128 channels (value i of both at one position, as the m64n128 accumulators): h =
// silu(gate) * up * router weight (w0 / w1: the thread's two rows) into h (which may hold the
// gate values on entry: each is read before it is overwritten), per-row scales, fp8 rows staged
// (after `bar`: the previous copy-out has read the staging) and stored. Destinations with the
// tile-stored hook (Mega-MoE's h): every writer fences, the group meets, one thread reports the
// piece (its block's Linear-1 count); `marks` says whether this group records the trace marks.
template <int kPitch, class Destination, class Gate, class Up>
__device__ __forceinline__ void swiglu_quant_rows(Destination const& dest, float w0, float w1, EpilogueTile const& t,
                                                  uint8_t* staged, uint32_t bar, int wt, Gate&& gate, Up&& up,
                                                  float (&h)[64], bool marks = false) {
  float amax0, amax1;
  swiglu_rows(gate, up, w0, w1, h, amax0, amax1);
  const QuantScale q0 = quant_scale(amax0);
  const QuantScale q1 = quant_scale(amax1);
  cutlass::arch::NamedBarrier::sync(128, bar);
  stage_fp8_rows<kPitch>(dest, t, staged, h, q0, q1, wt);
  cutlass::arch::NamedBarrier::sync(128, bar);
  if constexpr (Destination::kNeedsTileStoredHook) {
    if (marks) dest.mark(1, wt);
    const long long c0 = clock64();
    copy_out_rows<128, kPitch>(dest, t, staged, wt);
    dest.writer_fence();
    cutlass::arch::NamedBarrier::sync(128, bar);
    if (wt == 0) dest.tile_stored(t, marks ? clock64() - c0 : -1);
  } else {
    copy_out_rows<128, kPitch>(dest, t, staged, wt);
  }
}

// ---------------------------------------------------------------------------------------
// Linear-1 epilogue. Warp group wn = 0 holds the gate piece, wn = 1 the up piece of the same
// 64 rows x 128 output channels. The up group stages its values in its own register order,
// the gate group reads them back (conflict-free: value i of thread wt at [i * 128 + wt]),
// applies SwiGLU and the router weight, finds each row's amax (a row's 128 columns live in
// the 4 threads of a quad), quantises, stages the fp8 row and stores it.
template <class Traits, class Destination>
struct SwiGluQuantEpilogue {
  using T = Traits;
  static_assert(T::kGateUp && T::kWgM == 1 && T::kWgN == 2, "one gate and one up warp group");
  static constexpr int kUpBytes = 64 * 128 * 4;
  static constexpr int kPitch = 128 + 16;
  static constexpr int kSmemBytes = kUpBytes + 64 * kPitch;
  static constexpr bool kSwiGlu = true;

  struct Params {
    Destination dest;
    const float* row_weights;
  };
  static Params to_params(MoeGemmParams const& p) { return Params{Destination::from(p), p.row_weights}; }

  // Once per consumer thread at kernel start: the staging starts free.
  __device__ static void consumer_init(int wn) {
    if (wn == 0) cutlass::arch::NamedBarrier::arrive(256, static_cast<uint32_t>(NamedBarrierId::swiglu_free));
  }

  // The router weights of this thread's two accumulator rows (gate warp group). A caller may
  // load them before its mainloop (load_weights, then store_with) so their latency hides
  // behind the tile's wgmmas; under a saturated memory system it is microseconds.
  struct RowWeights {
    float w0 = 0.f, w1 = 0.f;
  };
  __device__ __forceinline__ RowWeights load_weights(Params const& ep, WorkTile const& tile, int wt) const {
    const int r0 = acc_row(wt, 0);
    RowWeights w;
    load_row_weights<T::kInKernelScales>(ep.row_weights + tile.row_begin + r0, r0 < tile.rows, r0 + 8 < tile.rows, w.w0,
                                         w.w1);
    return w;
  }

  template <class Frg>
  __device__ __forceinline__ void store(Params const& ep, uint8_t* smem, Frg const& acc, WorkTile const& tile, int wt, int wm,
                                        int wn) const {
    store_with(ep, smem, acc, tile, wt, wm, wn, wn == 0 ? load_weights(ep, tile, wt) : RowWeights{});
  }

  template <class Frg>
  __device__ __forceinline__ void store_with(Params const& ep, uint8_t* smem, Frg const& acc, WorkTile const& tile, int wt,
                                             int, int wn, RowWeights rw) const {
    float* up = reinterpret_cast<float*>(smem);
    constexpr int kVals = decltype(size(acc))::value;
    if (wn == 1) {
      cutlass::arch::NamedBarrier::sync(256, static_cast<uint32_t>(NamedBarrierId::swiglu_free));
      CUTE_UNROLL
      for (int i = 0; i < kVals; ++i) up[i * 128 + wt] = acc(i);
      cutlass::arch::NamedBarrier::arrive(256, static_cast<uint32_t>(NamedBarrierId::swiglu_full));
      return;
    }
    const EpilogueTile t{tile.expert, tile.m_block, tile.n_block, tile.row_begin, tile.rows, tile.n_block * 128, tile.tag};
    const float w0 = rw.w0, w1 = rw.w1;
    float h[kVals];
    cutlass::arch::NamedBarrier::sync(256, static_cast<uint32_t>(NamedBarrierId::swiglu_full));
    if constexpr (Destination::kNeedsTileStoredHook) ep.dest.mark(0, wt);
    CUTE_UNROLL
    for (int i = 0; i < kVals; ++i) h[i] = up[i * 128 + wt];
    cutlass::arch::NamedBarrier::arrive(256, static_cast<uint32_t>(NamedBarrierId::swiglu_free));
    float amax0, amax1;  // h holds the up values: each is read before it is overwritten
    swiglu_rows([&](int i) { return acc(i); }, [&](int i) { return h[i]; }, w0, w1, h, amax0, amax1);
    const QuantScale q0 = quant_scale(amax0);
    const QuantScale q1 = quant_scale(amax1);

    const uint32_t bar = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0);
    uint8_t* staged = smem + kUpBytes;
    cutlass::arch::NamedBarrier::sync(128, bar);  // the previous tile's copy-out has read the staging
    stage_fp8_rows<kPitch>(ep.dest, t, staged, h, q0, q1, wt);
    cutlass::arch::NamedBarrier::sync(128, bar);
    if constexpr (Destination::kNeedsTileStoredHook) {
      ep.dest.mark(1, wt);
      const long long c0 = clock64();
      copy_out_rows<128, kPitch>(ep.dest, t, staged, wt);
      ep.dest.writer_fence();
      cutlass::arch::NamedBarrier::sync(128, bar);
      if (wt == 0) ep.dest.tile_stored(t, clock64() - c0);
    } else {
      copy_out_rows<128, kPitch>(ep.dest, t, staged, wt);
    }
  }
};

// ---------------------------------------------------------------------------------------
// What the two 128-row SwiGLU epilogues share: their parameters (destination, router weights),
// the fp8 row staging pitch, and no per-thread start-up.
template <class Destination>
struct SwiGluRowsEpilogueBase {
  static constexpr int kVals = 64;
  static constexpr int kPitch = 128 + 16;  // fp8 bytes per staged row (16 B pad: no bank conflicts)
  static constexpr bool kSwiGlu = true;
  struct Params {
    Destination dest;
    const float* row_weights;
  };
  static Params to_params(MoeGemmParams const& p) { return Params{Destination::from(p), p.row_weights}; }
  __device__ static void consumer_init(int) {}
};

// ---------------------------------------------------------------------------------------
// Linear-1 epilogue of the two-pass gate/up tile (MoeTraits::kGateUpSerial, 128 x 128 output
// channels, warp group wm holds rows [64 wm, 64 wm + 64)). A tile arrives twice: half 0 with
// the gate result, which each thread parks in shared memory (its own 16 float4 slots, read
// back only by itself: no barrier), then half 1 with the up result: SwiGLU, router weight, the
// row amax over the tile's 128 channels (a row's values live in the 4 threads of a quad), fp8
// quantisation, staged rows stored. Parking instead of holding the gate in registers leaves
// room for the overlap schedule's second per-K-block accumulator; no exchange between the
// warp groups.
template <class Traits, class Destination>
struct SwiGluSerialQuantEpilogue : SwiGluRowsEpilogueBase<Destination> {
  using T = Traits;
  using Base = SwiGluRowsEpilogueBase<Destination>;
  using typename Base::Params;
  using Base::kPitch;
  using Base::kVals;
  static_assert(T::kGateUpSerial && T::kWgM == 2 && T::kWgN == 1, "the two-pass 128 x 128 gate/up tile");
  static_assert(!Destination::kNeedsTileStoredHook, "local destinations only");
  static constexpr int kParkBytes = 64 * 128 * 4;  // one warp group's gate piece, fp32
  static constexpr int kStageBytes = 64 * kPitch;  // one warp group's fp8 rows
  static constexpr int kSmemBytes = T::kConsumerWGs * (kParkBytes + kStageBytes);

  // Slot j of thread wt: values 4j .. 4j + 3 (consecutive threads, consecutive 16 B: conflict-free).
  __device__ static float4* park_slot(uint8_t* smem, int wm, int wt, int j) {
    return reinterpret_cast<float4*>(smem + wm * kParkBytes) + j * 128 + wt;
  }

  template <class Frg>
  __device__ __forceinline__ void store(Params const& ep, uint8_t* smem, Frg const& acc, WorkTile const& tile, int wt, int wm,
                                        int) const {
    static_assert(decltype(size(acc))::value == kVals);
    const EpilogueTile t{tile.expert, tile.m_block, tile.n_block, tile.row_begin + 64 * wm,
                         min(64, tile.rows - 64 * wm), tile.n_block * 128, tile.tag};
    if (t.rows <= 0) return;  // no valid row in this warp group's half of the tile
    if (tile.half == 0) {
      CUTE_UNROLL
      for (int j = 0; j < kVals / 4; ++j)
        *park_slot(smem, wm, wt, j) = make_float4(acc(4 * j), acc(4 * j + 1), acc(4 * j + 2), acc(4 * j + 3));
      return;
    }
    float h[kVals];
    CUTE_UNROLL
    for (int j = 0; j < kVals / 4; ++j) {
      const float4 g = *park_slot(smem, wm, wt, j);
      h[4 * j] = g.x;
      h[4 * j + 1] = g.y;
      h[4 * j + 2] = g.z;
      h[4 * j + 3] = g.w;
    }
    const int r0 = acc_row(wt, 0);
    float w0, w1;
    load_row_weights<false>(ep.row_weights + t.row_begin + r0, r0 < t.rows, r0 + 8 < t.rows, w0, w1);
    swiglu_quant_rows<kPitch>(ep.dest, w0, w1, t, smem + T::kConsumerWGs * kParkBytes + wm * kStageBytes,
                              static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + wm, wt,
                              [&](int i) { return h[i]; }, [&](int i) { return acc(i); }, h);
  }
};

// ---------------------------------------------------------------------------------------
// Linear-1 epilogue of the 128 x 256 gate/up tile (MoeTraits::kGateUpDual, 128 output
// channels, warp group wm holds rows [64 wm, 64 wm + 64) of both the gate and the up piece):
// everything in registers, SwiGLU per thread, the fp8 rows staged per warp group. With the
// tile-stored hook (the Mega-MoE kernel's 128-row tile) every warp group reports its piece, an
// empty one (no valid row in its half) too, so a block's Linear-1 counter reaches 2 per tile
// whatever its rows (xstage/mega_tile.hpp, mega_l1_target).
template <class Traits, class Destination>
struct SwiGluDualQuantEpilogue : SwiGluRowsEpilogueBase<Destination> {
  using T = Traits;
  using Base = SwiGluRowsEpilogueBase<Destination>;
  using typename Base::Params;
  using Base::kPitch;
  using Base::kVals;
  static_assert(T::kGateUpDual && T::kConsumerWGs == 2, "the 128 x 256 gate/up tile");
  static constexpr int kSmemBytes = T::kConsumerWGs * 64 * kPitch;

  struct RowWeights {
    float w0 = 0.f, w1 = 0.f;
  };
  // The router weights of this thread's two rows in warp group wm's half; a caller may load
  // them before its mainloop (then store_dual_with).
  __device__ __forceinline__ RowWeights load_weights(Params const& ep, WorkTile const& tile, int wt, int wm) const {
    const int r0 = 64 * wm + acc_row(wt, 0);
    RowWeights w;
    load_row_weights<T::kInKernelScales>(ep.row_weights + tile.row_begin + r0, r0 < tile.rows, r0 + 8 < tile.rows, w.w0,
                                         w.w1);
    return w;
  }

  template <class Frg>
  __device__ __forceinline__ void store_dual(Params const& ep, uint8_t* smem, Frg const& gate, Frg const& up,
                                             WorkTile const& tile, int wt, int wm) const {
    store_dual_with(ep, smem, gate, up, tile, wt, wm, load_weights(ep, tile, wt, wm));
  }

  // stage_stride: bytes between the two warp groups' staging (the Mega-MoE store-warp kernel puts
  // each group's rows in the half of its shared staging that only that group writes).
  template <class Frg>
  __device__ __forceinline__ void store_dual_with(Params const& ep, uint8_t* smem, Frg const& gate, Frg const& up,
                                                  WorkTile const& tile, int wt, int wm, RowWeights rw,
                                                  int stage_stride = 64 * kPitch) const {
    static_assert(decltype(size(gate))::value == kVals);
    const EpilogueTile t{tile.expert, tile.m_block, tile.n_block, tile.row_begin + 64 * wm,
                         min(64, tile.rows - 64 * wm), tile.n_block * 128, tile.tag};
    if (t.rows <= 0) {  // no valid row in this warp group's half of the tile
      if constexpr (Destination::kNeedsTileStoredHook)
        if (wt == 0) ep.dest.tile_stored(t, -1);  // nothing stored; the piece still counts
      return;
    }
    if constexpr (Destination::kNeedsTileStoredHook)
      if (wm == 0) ep.dest.mark(0, wt);  // mark 0 = the epilogue's start (a half block's hand-over came before it)
    float h[kVals];
    swiglu_quant_rows<kPitch>(ep.dest, rw.w0, rw.w1, t, smem + wm * stage_stride,
                              static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + wm, wt,
                              [&](int i) { return gate(i); }, [&](int i) { return up(i); }, h, wm == 0);
  }
};

template <class Traits>
using LocalBf16Epilogue = Bf16TileEpilogue<Traits, LocalRowDestination<cutlass::bfloat16_t>>;
template <class Traits>
using LocalSwiGluEpilogue = cute::conditional_t<
    Traits::kGateUpSerial, SwiGluSerialQuantEpilogue<Traits, LocalQuantDestination>,
    cute::conditional_t<Traits::kGateUpDual, SwiGluDualQuantEpilogue<Traits, LocalQuantDestination>,
                        SwiGluQuantEpilogue<Traits, LocalQuantDestination>>>;

}  // namespace xstage::kernels::moe
