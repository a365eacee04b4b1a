// The W4A8 MoE grouped GEMM: 4-bit weights in memory (INT4 group-128 or MXFP4), converted to
// fp8 e4m3 in shared memory inside the mainloop, then the W8A8 consumer (FP8 wgmma per 128-K
// block, fp32 promotion) and the W8A8 epilogue policies. Included only by the
// launch_w4a8_*.cu files.
//
// Two rings in shared memory:
//   TMA ring (full/empty): per K block the fp8 A chunks, the packed B chunks (128 weight rows x
//     64 bytes, no swizzle) and the raw weight scales (int4: 512 B of fp32 per chunk; mxfp4:
//     4 x 128 exponent bytes per chunk) + a header word (data / end of stream);
//   converted ring (cfull/cempty): the fp8 B chunks in the 128-byte-swizzled K-major layout
//     wgmma reads (the layout W8A8's TMA writes) + one fp32 weight scale per weight row.
// Roles:
//   warp 0, lane 0 of warp group 0: TMA producer. After its last tile it writes "end" into the
//     next stage's header and arrives on full without data.
//   converting threads = warps 1..3 of warp group 0 (96 threads, no other work) + (see the
//     designs) the consumer threads: each converts its units of every stage (unit x = chunk,
//     weight row, 32-K sub-block), writes its rows' weight scales, fences (fence.proxy.async),
//     and its warp arrives once on cfull.
//   consumers (2 or 3 warp groups): wait full[i] (A) and cfull[i] (B), four m64n128k32 FP8
//     wgmmas from zero, convert their share of a later stage while those run, wait, promote
//     into fp32 with a_scale[row, kb] * w_scale[col, kb] (a vector along N), release both rings.
// Two designs (W4Traits::kDecoupled; the launchers run int4 decoupled, mxfp4 lock step):
//   lock step: 4 TMA stages, 2 converted buffers; every converting thread converts units
//     x = g, g + kConvThreads, ... of stage i + 1 while stage i's wgmmas run, so each wgmma
//     waits for every thread's conversion of its stage.
//   decoupled: 3 TMA stages, 3 converted buffers; consumers convert their share of stage i + 2
//     and load the next block's token scales a stage ahead; with three consumer warp groups
//     warp group 0 converts every unit (56 registers), in steps of several units.
// Design in docs/moe-gemm-w4a8.md §Design; the measurement build (XSTAGE_MOE_STUDY, study.hpp)
// stamps every stage (w4a8_trace.cuh).
//
// The 4-bit -> e4m3 conversion arithmetic: w4a8_convert.cuh.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/kernel_entry.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/common/shared_storage.cuh"
#include "kernels/moe/epilogue.cuh"
#include "kernels/moe/launch.hpp"
#include "kernels/moe/params_w4a8.hpp"
#include "kernels/moe/mainloop.cuh"
#include "kernels/moe/params_w4a8.hpp"
#include "kernels/moe/pipeline.cuh"
#include "kernels/moe/quant.cuh"
#include "kernels/moe/tile_scheduler.cuh"
#include "kernels/moe/w4a8_convert.cuh"
#include "kernels/moe/w4a8_trace.cuh"

#include <cstdlib>
#ifdef XSTAGE_MOE_STUDY
#include <cstdio>
#include <vector>
#endif

namespace xstage::kernels::moe {

using namespace cute;

// W8A8 tile traits (A, wgmma) with a TMA ring that also carries the packed B chunk, a ring of
// converted B, and the W4A8 register split, in one of two designs (docs/moe-gemm-w4a8.md §Design, "Two
// designs"; the launchers pick int4 -> decoupled, mxfp4 -> lock step):
//   lock step (kDecoupled = false): 4 TMA stages, 2 converted buffers; every converting thread
//     (warps 1..3 of warp group 0 and every consumer thread) converts an equal share of stage
//     i + 1 while stage i's wgmmas run, so the next wgmma waits for all of them.
//   decoupled (kDecoupled = true): 3 TMA stages, 3 converted buffers; consumers convert their
//     share two stages ahead (a warp group never waits for the others' conversion of the next
//     stage) and load the token scales a stage ahead. With three consumer warp groups (160
//     registers would spill in the K loop) warp group 0 converts everything, at 56 registers.
// kInKernelScales: the token scales may be written while the kernel runs (the Mega-MoE kernel,
// mega_w4a8_kernel.cuh): the consumers read them through L2, never the read-only path.
template <int kBlockM_, int kBlockN_, bool kGateUp_, bool kDecoupled_, bool kInKernelScales_ = false>
struct W4Traits : MoeTraits<kBlockM_, kBlockN_, kDecoupled_ ? 3 : 4, kGateUp_, 1, 1, kInKernelScales_> {
  using Base = MoeTraits<kBlockM_, kBlockN_, kDecoupled_ ? 3 : 4, kGateUp_, 1, 1, kInKernelScales_>;
  using Base::kConsumerThreads;
  using Base::kConsumerWGs;
  using Base::kStages;
  using Base::kWgM;
  using Base::kWgN;
  using typename Base::Element;
  static constexpr bool kDecoupled = kDecoupled_;
  static constexpr int kConvBufs = kDecoupled ? 3 : 2;
  static constexpr bool kConsumersConvert = !kDecoupled || kConsumerWGs == 2;
  static constexpr bool kPrefetchScales = kDecoupled;
  // Warp group 0 keeps enough registers for the converter warps.
  static constexpr int kProducerRegs = kConsumerWGs == 2 ? 40 : kConsumersConvert ? 32 : 56;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 232 : kConsumersConvert ? 160 : 152;
  static_assert(128 * kProducerRegs + kConsumerThreads * kConsumerRegs <= 65536, "register file");
  static constexpr int kConverterThreads = 96;  // warps 1..3
  static constexpr int kConvThreads = kConverterThreads + (kConsumersConvert ? kConsumerThreads : 0);
  static_assert(kConvThreads % 32 == 0, "cfull counts whole converting warps");
  static constexpr int kUnits = kWgN * 512;  // conversion units per stage (weight row x 32 K)
  // Decoupled design: units per converter thread per stage (units x < 96 * this go to warps
  // 1..3 of warp group 0, the rest to the consumers): about one unit per consumer thread (the
  // consumers' share delays their own next wgmma), all of them when the consumers do not
  // convert. MoeW4A8Params::converter_units overrides it (tuning). The lock-step design
  // spreads the units over every converting thread and ignores it.
  static constexpr int kConverterUnitsMax = (kUnits + kConverterThreads - 1) / kConverterThreads;
  static constexpr int kConverterUnitsDefault =
      !kConsumersConvert ? kConverterUnitsMax
      : (kUnits - kConsumerThreads) / kConverterThreads > 0 ? (kUnits - kConsumerThreads) / kConverterThreads
                                                            : 0;
  static constexpr int kChunkSlots = kWgN * kStages;
  static constexpr uint32_t kPackedBytes = 128 * 64;  // 128 weight rows x 128 K nibbles
  static constexpr uint32_t kScaleBytes = 512;        // 128 fp32, or 4 x 128 E8M0 bytes
  static constexpr uint32_t kStageBytes = kWgM * Base::kBytesA + kWgN * (kPackedBytes + kScaleBytes);

  // Converted B: the layout W8A8's TMA writes (K-major, 128-byte swizzle), kConvBufs buffers.
  using SmemLayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<_128, Int<Base::kBlockK>, Int<kWgN * kConvBufs>>{}));
  using SmemLayoutBq = Layout<Shape<_128, _64, Int<kChunkSlots>>, Stride<_64, _1, Int<kPackedBytes>>>;
  using ShapeBq = Shape<int32_t, int32_t, int32_t>;  // (n, k/2, experts)
  using StrideBq = Stride<int64_t, _1, int64_t>;
  using TmaBq = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                       make_tensor(make_gmem_ptr(static_cast<uint8_t const*>(nullptr)), ShapeBq{},
                                                   StrideBq{}),
                                       take<0, 2>(SmemLayoutBq{}), Shape<_128, _64>{}, Int<1>{}));
};

// ---------------------------------------------------------------------------------------------
template <class Traits, template <class> class EpiloguePolicy>
struct MoeW4A8Kernel {
  using T = Traits;
  using Epilogue = EpiloguePolicy<T>;
  using Element = typename T::Element;
  static constexpr int kStages = T::kStages;      // TMA ring
  static constexpr int kConvBufs = T::kConvBufs;  // converted-B ring
  static constexpr int kWgM = T::kWgM;
  static constexpr int kWgN = T::kWgN;
  static constexpr int kConvThreads = T::kConvThreads;
  using Pipeline = TmaPipeline<kStages, 1>;
  using State = PipeState<kStages>;
  using CState = PipeState<kConvBufs>;
  using Scheduler = GroupedScheduler<T::kBlockM, 1, 1>;
  static constexpr int kThreads = T::kThreads;
  static constexpr int kClusterSize = 1;

  struct Params {
    typename T::TmaA tma_a;
    typename T::TmaBq tma_b;
    typename T::ShapeA shape_a;
    typename T::ShapeBq shape_b;
    typename Epilogue::Params epilogue;
    const float* a_scales;
    const float* b_scales;  // int4
    const uint8_t* b_e8m0;  // mxfp4
    const int* counts;
    const int* offsets;
    int mxfp4;
    int experts;
    int m_total;
    int n;
    int k_blocks;
    int n_blocks;
    int pingpong;  // schedule bit kSchedulePingPong: the consumer warp groups take turns issuing
    int converter_units;  // units per converter thread per stage (0 .. ceil(kUnits / 96))
#ifdef XSTAGE_MOE_STUDY
    uint32_t* trace;  // w4a8_trace.cuh; null: not recorded
#endif
  };

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<typename T::SmemLayoutA>, 1024> a;  // TMA ring
    cute::array_aligned<Element, cute::cosize_v<typename T::SmemLayoutB>, 1024> b;  // converted ring
    cute::array_aligned<uint8_t, T::kChunkSlots * T::kPackedBytes, 1024> bq;         // TMA ring: packed
    cute::array_aligned<uint8_t, T::kChunkSlots * T::kScaleBytes, 16> raw;  // TMA ring: fp32 [128] / E8M0 [4][128]
    cute::array_aligned<float, kWgN * kConvBufs * 128, 16> cscale;           // converted ring: per weight row
    cute::array_aligned<uint8_t, Epilogue::kSmemBytes, 128> epi;
    typename Pipeline::Storage pipe;  // full / empty of the TMA ring
    uint64_t cfull[kConvBufs];        // every converting thread has written its units
    uint64_t cempty[kConvBufs];       // every consumer warp is done with the buffer
    int header[kStages];              // 0: data, 1: end of the tile stream
    uint32_t lut[2 * 2];              // int4 table words (p0, n0), twice (see convert_units)
  };
  static constexpr int kSmemBytes = xstage::kernels::shared_storage_bytes<SharedStorage>();
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on sm_90");

  static int n_blocks(MoeGemmParams const& p) {
    return T::kGateUp ? (p.n / 2) / 128 : (p.n + T::kBlockN - 1) / T::kBlockN;
  }

  static Params to_params(MoeW4A8Params const& p) {
    auto shape_a = make_shape(p.m_total, p.k);
    auto shape_b = make_shape(p.n, p.k / 2, p.experts);
    Tensor mA = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.a)), shape_a,
                            make_stride(static_cast<int64_t>(p.k), _1{}));
    Tensor mB = make_tensor(make_gmem_ptr(static_cast<uint8_t const*>(p.b)), shape_b,
                            make_stride(static_cast<int64_t>(p.k / 2), _1{}, static_cast<int64_t>(p.n) * (p.k / 2)));
    auto tma_a = make_tma_copy(SM90_TMA_LOAD{}, mA, take<0, 2>(typename T::SmemLayoutA{}), Shape<_64, _128>{},
                               Int<1>{});
    auto tma_b = make_tma_copy(SM90_TMA_LOAD{}, mB, take<0, 2>(typename T::SmemLayoutBq{}), Shape<_128, _64>{},
                               Int<1>{});
    return Params{tma_a,
                  tma_b,
                  shape_a,
                  shape_b,
                  Epilogue::to_params(p),
                  p.a_scales,
                  p.b_scales,
                  p.b_e8m0,
                  p.counts,
                  p.offsets,
                  p.format == W4Format::mxfp4 ? 1 : 0,
                  p.experts,
                  p.m_total,
                  p.n,
                  p.k / 128,
                  n_blocks(p),
                  (p.schedule & 2) != 0 ? 1 : 0,
                  converter_units(p)
#ifdef XSTAGE_MOE_STUDY
                  ,
                  nullptr
#endif
    };
  }

  // Units per converter thread per stage: MoeW4A8Params::converter_units, or the trait's
  // default when negative, clamped to what leaves no unit unassigned twice.
  static int converter_units(MoeW4A8Params const& p) {
    if (!T::kConsumersConvert) return T::kConverterUnitsMax;
    const int u = p.converter_units < 0 ? T::kConverterUnitsDefault : p.converter_units;
    return u < T::kConverterUnitsMax ? u : T::kConverterUnitsMax;
  }

  static KernelInfo info() {
    return KernelInfo{TileConfig{T::kBlockM, T::kBlockN, T::kBlockK, T::kStages, T::kConsumerWGs, 1, 1}, kThreads,
                      kSmemBytes, T::kProducerRegs, T::kConsumerRegs};
  }

  // First weight row of B chunk c of a tile (as W8A8).
  __device__ static int b_row(Params const& p, WorkTile const& t, int c) {
    if constexpr (T::kGateUp) return c * (p.n / 2) + t.n_block * 128;
    else return t.n_block * T::kBlockN + c * 128;
  }

  // ---- producer: one thread ------------------------------------------------------------------
  template <class SmemA, class SmemBq>
  __device__ void produce(Params const& p, SharedStorage& ss, SmemA& sA, SmemBq& sBq) const {
    Scheduler sched(p.counts, p.offsets, p.experts, p.n_blocks, 0);
    State write = Pipeline::producer_start();
    WorkTile t;
    [[maybe_unused]] uint32_t it = 0;  // stages written (trace only)
    while (sched.next(t)) {
      int brow[kWgN];
      CUTE_UNROLL
      for (int c = 0; c < kWgN; ++c) brow[c] = b_row(p, t, c);
      produce_tile(p, ss, sA, sBq, t, brow, write, it);
    }
    produce_end(ss, write);
  }

  // Every K block of tile t into the TMA ring: A chunks, packed B chunks of weight rows
  // brow[c], raw weight scales; `write` and `it` advance by the tile's K blocks. (The Mega-MoE
  // kernel calls it per claimed tile with its own storage, SS.)
  template <class SS, class SmemA, class SmemBq>
  __device__ __forceinline__ void produce_tile(Params const& p, SS& ss, SmemA& sA, SmemBq& sBq, WorkTile const& t,
                                               const int (&brow)[kWgN], State& write, uint32_t& it) const {
    Tensor mA = p.tma_a.get_tma_tensor(p.shape_a);      // (m_total, k)
    Tensor mBall = p.tma_b.get_tma_tensor(p.shape_b);  // (n, k/2, experts)
    auto cta_a = p.tma_a.get_slice(0);
    auto cta_b = p.tma_b.get_slice(0);
    Tensor tAsA = group_modes<0, 3>(cta_a.partition_D(sA));   // (TMA, chunk slot)
    Tensor tBsB = group_modes<0, 3>(cta_b.partition_D(sBq));  // (TMA, chunk slot)
    Tensor gB = local_tile(mBall(_, _, t.expert), Shape<_128, _64>{}, make_coord(_, _));  // (128, 64, n/128, kb)
    Tensor tBgB = group_modes<0, 3>(cta_b.partition_S(gB));                             // (TMA, n/128, kb)
    for (int kb = 0; kb < p.k_blocks; ++kb) {
      bounded_wait(&ss.pipe.empty[write.index], write.phase);
      W4_TRACE(p.trace, it, kTrProducerIssue);
      *reinterpret_cast<volatile int*>(&ss.header[write.index]) = 0;
      compiler_fence();
      uint64_t& full = ss.pipe.full[write.index];
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full, T::kStageBytes);
      CUTE_UNROLL
      for (int c = 0; c < kWgM; ++c) {
        Tensor gA = local_tile(domain_offset(make_coord(t.row_begin + 64 * c, 0), mA), Shape<_64, _128>{},
                               make_coord(_0{}, kb));
        copy(p.tma_a.with(full), group_modes<0, 3>(cta_a.partition_S(gA)), tAsA(_, write.index * kWgM + c));
      }
      CUTE_UNROLL
      for (int c = 0; c < kWgN; ++c) {
        const int slot = write.index * kWgN + c;
        copy(p.tma_b.with(full, 0, TMA::CacheHintSm90::EVICT_LAST), tBgB(_, brow[c] / 128, kb), tBsB(_, slot));
        // A chunk past n (64 x 256 tiles over an odd number of 128-row blocks) loads zero
        // weights (TMA out-of-bounds fill) and is never stored; its scales come from rows
        // [0, 128) so the bulk copies stay inside the tensors.
        const int srow = brow[c] < p.n ? brow[c] : 0;
        uint8_t* dst = ss.raw.data() + slot * T::kScaleBytes;
        if (p.mxfp4) {
          const uint8_t* src = p.b_e8m0 + (static_cast<int64_t>(t.expert) * p.k_blocks * 4 + kb * 4) * p.n + srow;
          CUTE_UNROLL
          for (int i = 0; i < 4; ++i)
            SM90_BULK_COPY_G2S::copy(src + static_cast<int64_t>(i) * p.n, &full, dst + i * 128, 128);
        } else {
          const float* src = p.b_scales + (static_cast<int64_t>(t.expert) * p.k_blocks + kb) * p.n + srow;
          SM90_BULK_COPY_G2S::copy(src, &full, dst, 512);
        }
      }
      write.advance();
      ++it;
    }
  }

  // End of the stream: the converting threads stop when they see this stage's header.
  template <class SS>
  __device__ __forceinline__ static void produce_end(SS& ss, State write) {
    bounded_wait(&ss.pipe.empty[write.index], write.phase);
    *reinterpret_cast<volatile int*>(&ss.header[write.index]) = 1;
    compiler_fence();
    cutlass::arch::ClusterBarrier::arrive(&ss.pipe.full[write.index]);
  }

  // ---- conversion: warps 1..3 of warp group 0 and every consumer thread ------------------------
  // Converts converting thread g's units of TMA stage t into converted buffer c: unit x =
  // (chunk x / 512, weight row (x / 4) % 128, 32-K sub-block x % 4), for x = g, g + kConvThreads,
  // ...: 16 packed bytes in, two 16-byte fp8 chunks out at their swizzled positions; the thread
  // with sub-block 0 also writes the row's weight scale. Returns false (and converts nothing)
  // at the end of the tile stream.
  // it: the stage's position in the stream (trace only).
  // g: the thread's converting index (0..95 converter warps, 96.. consumers).
  template <class SS>
  __device__ bool convert_stage(Params const& p, SS& ss, State t, CState c, int g,
                                [[maybe_unused]] uint32_t it) const {
    wait_then_read(&ss.pipe.full[t.index], t.phase);
    if (g == 0) W4_TRACE(p.trace, it, kTrConvFull);
    if (*reinterpret_cast<volatile int const*>(&ss.header[t.index]) != 0) return false;
    wait_then_read(&ss.cempty[c.index], c.phase ^ 1u);  // the buffer starts free
    if (g == 0) W4_TRACE(p.trace, it, kTrConvEmpty);
    if constexpr (!T::kDecoupled) {
      // Lock step: units x = g, g + kConvThreads, ... over every converting thread.
      if (p.mxfp4) convert_units_lockstep<true>(ss, t.index, c.index, g);
      else convert_units_lockstep<false>(ss, t.index, c.index, g);
    } else {
      // Units x < 96 * converter_units: converter thread g takes x = g + 96 j; the rest go to
      // the consumers: x = 96 * converter_units + (g - 96) + kConsumerThreads * j.
      const int split = T::kConverterThreads * p.converter_units;
      int x0, step, xend;
      if (g < T::kConverterThreads) {
        x0 = g;
        step = T::kConverterThreads;
        xend = split < T::kUnits ? split : T::kUnits;
      } else {
        x0 = split + (g - T::kConverterThreads);
        step = T::kConsumerThreads;
        xend = T::kUnits;
      }
      if (p.mxfp4) convert_units<true>(ss, t.index, c.index, x0, step, xend);
      else convert_units<false>(ss, t.index, c.index, x0, step, xend);
    }
    compiler_fence();
    cutlass::arch::fence_view_async_shared();  // the wgmma (async proxy) reads what was written
    compiler_fence();
    // One arrival per warp (cfull counts converting warps): 480 per-thread arrivals on one
    // shared-memory word serialised on the path to the next stage's wgmma. The warp sync
    // orders every lane's writes and fence before lane 0's release.
    __syncwarp();
    if ((threadIdx.x & 31u) == 0u) cutlass::arch::ClusterBarrier::arrive(&ss.cfull[c.index]);
    if (g == 0) W4_TRACE(p.trace, it, kTrConvArrived);
    return true;
  }

  // Lock step: converting thread g's units x = g, g + kConvThreads, ... of stage t_index
  // into buffer c_index; unit x = (chunk x / 512, weight row (x / 4) % 128, sub-block x % 4).
  template <bool kMx, class SS>
  __device__ void convert_units_lockstep(SS& ss, int t_index, int c_index, int g) const {
    const uint32_t bq_base = cute::cast_smem_ptr_to_uint(ss.bq.data());
    const uint32_t b_base = cute::cast_smem_ptr_to_uint(ss.b.data());
    for (int x = g; x < kWgN * 512; x += kConvThreads) {
      const int chunk = x / 512;
      const int tslot = t_index * kWgN + chunk;
      const int cslot = c_index * kWgN + chunk;
      const int r = (x / 4) % 128;
      const int u = x % 4;
      const uint32_t src = bq_base + tslot * T::kPackedBytes + r * 64 + u * 16;
      const uint8_t* raw = ss.raw.data() + tslot * T::kScaleBytes;
      W4Lut lut;
      if constexpr (kMx) {
        const int e0 = raw[r], e1 = raw[128 + r], e2 = raw[256 + r], e3 = raw[384 + r];
        const int emax = max(max(e0, e1), max(e2, e3));
        const int eu = u == 0 ? e0 : u == 1 ? e1 : u == 2 ? e2 : e3;
        lut = mxfp4_lut(emax - eu);
        if (u == 0) ss.cscale[cslot * 128 + r] = mxfp4_block_scale(emax);
      } else {
        lut = int4_lut();
        if (u == 0) ss.cscale[cslot * 128 + r] = reinterpret_cast<const float*>(raw)[r];
      }
      const uint32_t dst = b_base + cslot * (128 * 128) + r * 128;
      const uint32_t sw = static_cast<uint32_t>(r & 7);
      const uint4 q = ld_shared_u4(src);
      st_shared_u4(dst + (((2u * u) ^ sw) << 4), convert4(q.x, lut), convert4(q.x >> 16, lut), convert4(q.y, lut),
                   convert4(q.y >> 16, lut));
      st_shared_u4(dst + (((2u * u + 1u) ^ sw) << 4), convert4(q.z, lut), convert4(q.z >> 16, lut), convert4(q.w, lut),
                   convert4(q.w >> 16, lut));
    }
  }
  // Units x0, x0 + step, ... below xend of TMA stage t_index into converted buffer c_index.
  // step is a multiple of 4, so every unit of a thread has the same 32-K sub-block u = x0 % 4.
  // With xr = x / 4 (= chunk * 128 + weight row, as chunks are 128 rows), the packed source is
  // at x * 16 bytes in the stage, the fp8 row at xr * 128 bytes in the buffer (16-byte chunks
  // 2u and 2u + 1, swizzled with xr % 8), the int4 scale at float xr of the stage's raw
  // scales and the converted scale at float xr of the buffer's. Several units at a time: all
  // loads before the conversions, so their shared-memory latency overlaps.
  template <bool kMx, class SS>
  __device__ void convert_units(SS& ss, int t_index, int c_index, int x0, int step, int xend) const {
    static_assert(T::kConverterThreads % 4 == 0 && T::kConsumerThreads % 4 == 0, "steps keep u fixed");
    static_assert(T::kScaleBytes == 128 * 4 && T::kPackedBytes == 128 * 64, "unit addressing");
    const uint32_t u = static_cast<uint32_t>(x0) & 3u;
    const uint32_t src0 = cute::cast_smem_ptr_to_uint(ss.bq.data()) + t_index * kWgN * T::kPackedBytes;
    const uint32_t dst0 = cute::cast_smem_ptr_to_uint(ss.b.data()) + c_index * kWgN * (128 * 128);
    const uint8_t* raw = ss.raw.data() + t_index * kWgN * T::kScaleBytes;
    float* cs = ss.cscale.data() + c_index * kWgN * 128;
    // The int4 table, its p0 / n0 words read from shared memory at a lane-dependent address
    // (two copies): as immediates, or as one warp-uniform load, ptxas keeps them in uniform
    // registers and copies one into a register before every table prmt that reads it (59 of
    // the 351 instructions of the 4-unit loop); per-lane values stay in registers.
    W4Lut lut4 = int4_lut();
    const int pick = 2 * (static_cast<int>(threadIdx.x) & 1);  // even / odd lanes read their own copy
    lut4.p0 = ss.lut[pick];
    lut4.n0 = ss.lut[pick + 1];
    // Table and scale of row xr (writes the converted scale when u == 0).
    auto table = [&](uint32_t xr) {
      if constexpr (kMx) {
        const uint8_t* e = raw + xr + (xr >> 7) * (T::kScaleBytes - 128);  // chunk * 512 + r
        const int e0 = e[0], e1 = e[128], e2 = e[256], e3 = e[384];
        const int emax = max(max(e0, e1), max(e2, e3));
        const int eu = u == 0 ? e0 : u == 1 ? e1 : u == 2 ? e2 : e3;
        if (u == 0) cs[xr] = mxfp4_block_scale(emax);
        return mxfp4_lut(emax - eu);
      } else {
        if (u == 0) cs[xr] = reinterpret_cast<const float*>(raw)[xr];
        return lut4;
      }
    };
    auto emit = [&](uint32_t xr, uint4 q, W4Lut const& l) {
      const uint32_t d = dst0 + xr * 128u + (((2u * u) ^ (xr & 7u)) << 4);
      st_shared_u4(d, convert4(q.x, l), convert4(q.x >> 16, l), convert4(q.y, l), convert4(q.y >> 16, l));
      st_shared_u4(d ^ 16u, convert4(q.z, l), convert4(q.z >> 16, l), convert4(q.w, l), convert4(q.w >> 16, l));
    };
    // kBatch units per step (int4 4, mxfp4 with its per-unit table 2), then one at a time.
    constexpr int kBatch = kMx ? 2 : 4;
    int x = x0;
    for (; x + (kBatch - 1) * step < xend; x += kBatch * step) {
      uint4 q[kBatch];
      CUTE_UNROLL
      for (int i = 0; i < kBatch; ++i) q[i] = ld_shared_u4(src0 + static_cast<uint32_t>(x + i * step) * 16u);
      CUTE_UNROLL
      for (int i = 0; i < kBatch; ++i) {
        const uint32_t xr = static_cast<uint32_t>(x + i * step) >> 2;
        emit(xr, q[i], table(xr));
      }
    }
    for (; x < xend; x += step) {
      const uint32_t xr = static_cast<uint32_t>(x) >> 2;
      const uint4 q = ld_shared_u4(src0 + static_cast<uint32_t>(x) * 16u);
      emit(xr, q, table(xr));
    }
  }

  // Ring positions of the it-th stage of the stream (every role walks the same sequence).
  __device__ static State tma_state(uint32_t it) { return State{static_cast<int>(it % kStages), (it / kStages) & 1u}; }
  __device__ static CState conv_state(uint32_t it) {
    return CState{static_cast<int>(it % kConvBufs), (it / kConvBufs) & 1u};
  }

  // ---- consumers ------------------------------------------------------------------------------
  // A token scale: written before the launch (read-only path), or while the kernel runs
  // (through L2; W4Traits::kInKernelScales).
  __device__ __forceinline__ static float load_a_scale(const float* p) {
    if constexpr (T::kInKernelScales) return __ldcg(p);
    else return __ldg(p);
  }
  // Per K block: wait for A (full) and the converted B (cfull), issue the wgmmas, convert this
  // thread's share of the next stage while they run, wait, promote, release both buffers.
  // it: stages this thread has consumed; more: whether stage it + 1 may still hold data (false
  // once the end marker was seen). Stage it was converted (by every converting thread) before.
  // kTileBounded (the Mega-MoE kernel): the consumer converts only stages of this tile, its
  // share of the tile's first kConvBufs - 1 stages before the first wgmma. Its tiles depend on
  // each other (a Linear-2 tile's producer waits for Linear-1 counts that this CTA's current
  // tile may still have to release), so finishing a tile must never wait for the next tile's
  // stages; the converter warps still run ahead across tiles.
  template <bool kTileBounded = false, class SS, class SmemA, class SmemB, class Frg>
  __device__ void mma(Params const& p, SS& ss, uint32_t& it, bool& more, int g, WorkTile const& t, int wt,
                      int wm, int wn, SmemA const& sA, SmemB const& sB, Frg& acc) const {
    typename T::TiledMma tiled_mma;
    auto thr = tiled_mma.get_slice(wt);
    Tensor tCrA = thr.partition_fragment_A(sA);  // (MMA, 1, 4, A chunk slot)
    Tensor tCrB = thr.partition_fragment_B(sB);  // (MMA, 1, 4, converted chunk slot)
    const int r0 = 64 * wm + (wt / 32) * 16 + (wt % 32) / 4;
    // Ping-pong (p.pingpong): the warp groups issue their wgmmas in turn (IssueToken,
    // mainloop.cuh), so one group's promotion and conversion
    // run while the others' wgmmas keep the tensor cores busy, instead of all three waiting
    // on the same cfull, computing and promoting in lock step.
    const bool pingpong = p.pingpong != 0;
    const int wg = wm * kWgN + wn;
    [[maybe_unused]] const int tr_base = kTrConsumerBase + 5 * wg;
    Tensor part = partition_fragment_C(tiled_mma, Shape<_64, _128>{});
    static_assert(decltype(size(part))::value == 64);
    clear(acc);
    if constexpr (kTileBounded && T::kConsumersConvert)
      for (int s = 0; s < kConvBufs - 1 && s < p.k_blocks; ++s)
        convert_stage(p, ss, tma_state(it + s), conv_state(it + s), g, it + s);
    // Token scales of the next K block are loaded after this block's conversion (whose proxy
    // fence would otherwise wait for the loads), a whole stage before the promotion uses them.
    // (Lock step: loaded after the conversion, used after the wgmmas.)
    const bool ok0 = r0 < t.rows;
    const bool ok1 = r0 + 8 < t.rows;
    const float* sa0 = p.a_scales + t.row_begin + r0;
    float c0 = 0.f, c1 = 0.f;
    if constexpr (T::kPrefetchScales) {
      c0 = ok0 ? load_a_scale(sa0) : 0.f;
      c1 = ok1 ? load_a_scale(sa0 + 8) : 0.f;
    }
    for (int kb = 0; kb < p.k_blocks; ++kb) {
      const State read = tma_state(it);
      const CState cread = conv_state(it);
      wait_then_read(&ss.pipe.full[read.index], read.phase);
      wait_then_read(&ss.cfull[cread.index], cread.phase);
      if (wt == 0) W4_TRACE(p.trace, it, tr_base + 0);
      if (pingpong) IssueToken<T::kConsumerWGs>::wait(wg);
      warpgroup_fence_operand(part);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      CUTE_UNROLL
      for (int k = 0; k < size<2>(tCrA); ++k) {
        cute::gemm(tiled_mma, tCrA(_, _, k, read.index * kWgM + wm), tCrB(_, _, k, cread.index * kWgN + wn), part);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      if (pingpong) IssueToken<T::kConsumerWGs>::pass(wg);
      if (wt == 0) W4_TRACE(p.trace, it, tr_base + 1);
      // This thread's share of stage it + kConvBufs - 1, while the tensor cores work.
      if constexpr (kTileBounded) {
        if (T::kConsumersConvert && kb + kConvBufs - 1 < p.k_blocks)
          convert_stage(p, ss, tma_state(it + kConvBufs - 1), conv_state(it + kConvBufs - 1), g, it + kConvBufs - 1);
      } else if (T::kConsumersConvert && more) {
        more = convert_stage(p, ss, tma_state(it + kConvBufs - 1), conv_state(it + kConvBufs - 1), g,
                             it + kConvBufs - 1);
      }
      if (wt == 0) W4_TRACE(p.trace, it, tr_base + 2);
      float n0 = 0.f, n1 = 0.f;
      if constexpr (T::kPrefetchScales) {
        if (kb + 1 < p.k_blocks) {
          const float* sa = sa0 + static_cast<int64_t>(kb + 1) * p.m_total;
          n0 = ok0 ? load_a_scale(sa) : 0.f;
          n1 = ok1 ? load_a_scale(sa + 8) : 0.f;
        }
      } else {
        const float* sa = sa0 + static_cast<int64_t>(kb) * p.m_total;
        c0 = ok0 ? load_a_scale(sa) : 0.f;
        c1 = ok1 ? load_a_scale(sa + 8) : 0.f;
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(part);
      if (wt == 0) W4_TRACE(p.trace, it, tr_base + 3);
      // Value i of the m64n128 fragment: column (wt % 4) * 2 + (i & 1) + 8 * (i / 4), row + 8 if i & 2.
      const float2* bs =
          reinterpret_cast<const float2*>(ss.cscale.data() + (cread.index * kWgN + wn) * 128 + (wt % 4) * 2);
      CUTE_UNROLL
      for (int j = 0; j < 16; ++j) {
        const float2 b = bs[4 * j];
        acc(4 * j + 0) += part(4 * j + 0) * (c0 * b.x);
        acc(4 * j + 1) += part(4 * j + 1) * (c0 * b.y);
        acc(4 * j + 2) += part(4 * j + 2) * (c1 * b.x);
        acc(4 * j + 3) += part(4 * j + 3) * (c1 * b.y);
      }
      compiler_fence();
      __syncwarp();  // every lane has read the scales before lane 0 releases the buffers
      if ((threadIdx.x & 31u) == 0u) {
        cutlass::arch::ClusterBarrier::arrive(&ss.pipe.empty[read.index]);
        cutlass::arch::ClusterBarrier::arrive(&ss.cempty[cread.index]);
      }
      if (wt == 0) W4_TRACE(p.trace, it, tr_base + 4);
      if constexpr (T::kPrefetchScales) {
        c0 = n0;
        c1 = n1;
      }
      ++it;
    }
  }

  __device__ void operator()(Params const& params, char* smem_buf) const {
    SharedStorage& ss = XSTAGE_SHARED_STORAGE(SharedStorage, smem_buf);
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
    const int warp_group = warp / 4;

    if (threadIdx.x == 0) {
      Pipeline::init(ss.pipe, T::kConsumerWarps);
      for (int s = 0; s < kConvBufs; ++s) {
        cutlass::arch::ClusterBarrier::init(&ss.cfull[s], kConvThreads / 32);
        cutlass::arch::ClusterBarrier::init(&ss.cempty[s], T::kConsumerWarps);
      }
      for (int i = 0; i < 4; i += 2) {
        const W4Lut l = int4_lut();
        ss.lut[i] = l.p0;
        ss.lut[i + 1] = l.n0;
      }
      cute::prefetch_tma_descriptor(params.tma_a.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_b.get_tma_descriptor());
    }
    cutlass::arch::fence_barrier_init();
    __syncthreads();

    Tensor sA = make_tensor(make_smem_ptr(ss.a.data()), typename T::SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(ss.b.data()), typename T::SmemLayoutB{});

    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (warp == 0) {
        if (threadIdx.x == 0) {
          Tensor sBq = make_tensor(make_smem_ptr(ss.bq.data()), typename T::SmemLayoutBq{});
          produce(params, ss, sA, sBq);
        }
      } else {
        const int g = static_cast<int>(threadIdx.x) - 32;  // 0..95
        for (uint32_t it = 0; convert_stage(params, ss, tma_state(it), conv_state(it), g, it); ++it) {
        }
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
      const int ct = static_cast<int>(threadIdx.x) - 128;
      const int wg = ct / 128;
      const int wt = ct % 128;
      const int wm = wg / kWgN;
      const int wn = wg % kWgN;
      const int g = T::kConverterThreads + ct;
      Epilogue::consumer_init(wn);
      // Ping-pong: warp group 0 holds the first issue token.
      if (params.pingpong != 0) IssueToken<T::kConsumerWGs>::start(wg);
      const Epilogue epilogue{};
      Scheduler sched(params.counts, params.offsets, params.experts, params.n_blocks, 0);
      // The first kConvBufs - 1 stages now; every later one while the wgmmas of the stage
      // kConvBufs - 1 before it run.
      bool more = T::kConsumersConvert;
      for (int s = 0; s < kConvBufs - 1 && more; ++s)
        more = convert_stage(params, ss, tma_state(s), conv_state(s), g, static_cast<uint32_t>(s));
      uint32_t it = 0;
      WorkTile tile;
      while (sched.next(tile)) {
        Tensor acc = partition_fragment_C(typename T::TiledMma{}, Shape<_64, _128>{});
        mma(params, ss, it, more, g, tile, wt, wm, wn, sA, sB, acc);
        epilogue.store(params.epilogue, ss.epi.data(), acc, tile, wt, wm, wn);
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    moe_w4a8_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
  XSTAGE_RUN_KERNEL(Kernel, params);
}

template <class Kernel>
cudaError_t launch_moe_w4a8(MoeW4A8Params const& p, cudaStream_t stream) {
  const long long tiles =
      (static_cast<long long>(p.m_total) / Kernel::T::kBlockM + p.experts) * Kernel::n_blocks(p);
  if (tiles <= 0 || p.k % 128 != 0 || p.n % 128 != 0) return cudaErrorInvalidValue;
  MoeW4A8Params q = p;
#ifdef XSTAGE_MOE_STUDY
  // Measurement build: XSTAGE_W4A8_CONVERTER_UNITS overrides the kernel's default split of the
  // conversion when the caller left it at the default.
  if (q.converter_units < 0)
    if (const char* e = std::getenv("XSTAGE_W4A8_CONVERTER_UNITS"); e != nullptr && *e != '\0')
      q.converter_units = std::atoi(e);
#endif
  int ctas = 0;
  if (const cudaError_t g = persistent_grid(p.num_ctas, tiles, ctas); g != cudaSuccess) return g;
#ifdef XSTAGE_MOE_STUDY
  typename Kernel::Params kp = Kernel::to_params(q);
  W4TraceHost trace;
  if (const cudaError_t t = trace.begin(ctas, stream); t != cudaSuccess) return t;
  kp.trace = trace.buf;
#else
  const typename Kernel::Params kp = Kernel::to_params(q);
#endif
  auto* fn = moe_w4a8_kernel<Kernel>;
  const cudaError_t e = launch_persistent<1>(fn, kp, ctas, Kernel::kThreads, Kernel::kSmemBytes, stream);
  if (e != cudaSuccess) return e;
#ifdef XSTAGE_MOE_STUDY
  char header[256];
  std::snprintf(header, sizeof header,
                "# w4a8 trace: block_m %d block_n %d consumer_wgs %d mxfp4 %d m_total %d n %d k %d ctas %d",
                Kernel::T::kBlockM, Kernel::T::kBlockN, Kernel::T::kConsumerWGs, p.format == W4Format::mxfp4 ? 1 : 0,
                p.m_total, p.n, p.k, ctas);
  if (const cudaError_t t = trace.finish(stream, ctas, header); t != cudaSuccess) return t;
#endif
  return cudaGetLastError();
}

template <TileConfig kTile, bool kGateUp, template <class> class EpiloguePolicy, bool kDecoupled>
using ShippedW4A8Kernel = MoeW4A8Kernel<W4Traits<kTile.block_m, kTile.block_n, kGateUp, kDecoupled>, EpiloguePolicy>;

}  // namespace xstage::kernels::moe
