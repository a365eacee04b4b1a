// The MoE grouped-GEMM mainloop: tile traits (shared-memory layouts, the wgmma atom, TMA
// copies), the producer (TMA loads of A and B per 128-wide K block) and the consumer (FP8
// wgmma into a per-K-block accumulator, promoted into an fp32 accumulator with the scales).
//
// Roles: warp group 0 is the producer (thread 0 issues every TMA; warp 1 copies the stage's
// scales, unless they are written during the kernel); warp groups 1..W (W = 2,
// or 3 for 192-row tiles) are consumers, each computing a 64 x 128 piece of the tile: piece (wm, wn) = rows
// [64 wm, 64 wm + 64) x columns [128 wn, 128 wn + 128). Shared memory holds A in 64 x 128
// chunks and B in 128 x 128 chunks (128-byte swizzle, K-major, as FP8 wgmma needs); a stage
// is kBlockM/64 A chunks + kBlockN/128 B chunks, so warp group (wm, wn) reads A chunk wm and
// B chunk wn of a stage.
//
// Precision (DeepGEMM's scheme): for each K block of 128 the four m64n128k32 wgmmas start
// from zero, so the tensor core's reduced-precision FP8 accumulation only spans 128
// products; the block result is then added into the fp32 accumulator, multiplied by
// a_scale[row, kb] * b_scale[n block, kb]. The consumer warp groups interleave: one
// promotes on the CUDA cores while another's wgmma runs (see the schedules below).
#pragma once
#include <cstdint>
#include <utility>

#include <cute/algorithm/copy.hpp>
#include <cute/algorithm/gemm.hpp>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "kernels/moe/params.hpp"
#include "kernels/moe/pipeline.cuh"
#include "kernels/moe/tile_scheduler.cuh"

namespace xstage::kernels::moe {

using namespace cute;

// Named barriers (user ids; CUTLASS adds its reserved count).
enum class NamedBarrierId : uint32_t {
  epilogue_wg0 = 0,  // 0..2: the 128 threads of consumer warp group w
  swiglu_full = 3,   // up-projection values staged for the gate warp group
  swiglu_free = 4,   // the gate warp group has read them: the staging may be rewritten
  pingpong_wg0 = 5,  // 5..7: issue token of consumer warp group w
};

// The ping-pong issue token of kGroups consumer warp groups (named barriers pingpong_wg0 + w;
// 256 = the waiting group + the passing one): wait for it before issuing the wgmmas, pass it
// on after committing them; warp group 0 holds it first.
template <int kGroups>
struct IssueToken {
  __device__ static void wait(int wg) {
    cutlass::arch::NamedBarrier::sync(256, static_cast<uint32_t>(NamedBarrierId::pingpong_wg0) + wg);
  }
  __device__ static void pass(int wg) {
    const int next = wg + 1 == kGroups ? 0 : wg + 1;
    cutlass::arch::NamedBarrier::arrive(256, static_cast<uint32_t>(NamedBarrierId::pingpong_wg0) + next);
  }
  __device__ static void start(int wg) {
    if (wg == 0) cutlass::arch::NamedBarrier::arrive(256, static_cast<uint32_t>(NamedBarrierId::pingpong_wg0));
  }
};

// kGateUp: B rows of chunk c come from [c * n/2 + n_block * 128, ...): chunk 0 = gate, chunk 1
// = up rows of the same 128 output channels (Linear-1 with a fused SwiGLU epilogue).
// Clusters (kClusterM x kClusterN CTAs, rank = cm + kClusterM * cn): the CTAs of a cluster
// row (same cm, same m-block) share A, those of a cluster column (same cn) share B. Each
// loads its 1/kClusterN slice of the A chunk and 1/kClusterM slice of the B chunks and
// multicasts it to its partners, which cuts the L2 -> shared memory traffic per CTA.
// kInKernelScales: the A scales may be written while the kernel runs (the Mega-MoE kernel's h
// scales, written by other CTAs' Linear-1 epilogues): its scale warp reads them through L2
// (ld.global.cg, copy_scales_in_kernel), never the non-coherent read-only path; the caller
// guarantees they are complete when it hands the tile over.
template <int kBlockM_, int kBlockN_, int kStages_, bool kGateUp_, int kClusterM_ = 1, int kClusterN_ = 1,
          bool kInKernelScales_ = false>
struct MoeTraits {
  using Element = cutlass::float_e4m3_t;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kBlockK = 128;
  static constexpr int kStages = kStages_;
  static constexpr bool kGateUp = kGateUp_;
  static constexpr bool kInKernelScales = kInKernelScales_;
  // Scales of input tensors travel with their K block: a producer warp copies them into the
  // stage (cp.async, arriving on the stage's full barrier), so a consumer reads them from
  // shared memory after its stage wait instead of waiting on L2 (profiled: the consumers'
  // scale products stalled on ld.global for ~10 % of their time; docs/moe-gemm.md §Design).
  static constexpr bool kSmemScales = !kInKernelScales_;  // the Mega-MoE traits set it too (MegaSmemScales)
  static constexpr int kWgM = kBlockM / 64;   // consumer warp groups along M
  // Columns per consumer warp group: 128, or 192 for the 128 x 192 tile (m64n192 wgmmas; its
  // 96 + 96 accumulator registers leave no room for the overlap schedule's second block).
  static constexpr int kPieceN = kBlockN_ == 192 ? 192 : 128;
  static constexpr int kWgN = kBlockN / kPieceN;  // B chunks per stage (N pieces of the tile)
  // 128 x 256 tiles: each warp group owns 64 rows and both N pieces, one after the other per K
  // block (two accumulators, one per-K-block accumulator). For gate/up (128 gate + 128 up rows
  // per stage) a thread then holds gate and up of the same channels: no exchange. Either way the
  // tile moves the operand bytes of a 128-row tile per FLOP.
  static constexpr bool kDual = kWgM == 2 && kWgN == 2;
  static constexpr bool kGateUpDual = kGateUp && kDual;
  static constexpr int kWgNThreads = kDual ? 1 : kWgN;  // consumer warp groups along N
  static constexpr int kConsumerWGs = kWgM * kWgNThreads;
  static constexpr int kConsumerThreads = 128 * kConsumerWGs;
  static constexpr int kConsumerWarps = kConsumerThreads / 32;
  static constexpr int kThreads = 128 + kConsumerThreads;
  static constexpr int kClusterM = kClusterM_;
  static constexpr int kClusterN = kClusterN_;
  static constexpr int kClusterSize = kClusterM * kClusterN;
  static_assert(kClusterSize >= 1 && kClusterSize <= 4 && (kClusterM == 1 || kClusterM == 2) &&
                    (kClusterN == 1 || kClusterN == 2), "clusters of 1, 2 or 2 x 2 CTAs");
  static_assert(!kGateUp_ || kClusterN == 1, "gate/up tiles pair along M only (no dummy n-blocks)");
  // setmaxnreg budgets: two consumer warp groups get 232 registers (room for the second
  // per-K-block accumulator of the overlap schedule), three get 160 (no overlap schedule).
  static constexpr int kProducerRegs = kConsumerWGs == 2 ? 40 : 24;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 232 : 160;
  // Gate/up with one N chunk (the 128 x 128 SwiGLU tile): a tile is two passes over K, first
  // the gate rows of its 128 channels, then the up rows (WorkTile::half), both warp groups on
  // the same chunk (split M); the epilogue parks the gate result in shared memory until the up
  // pass ends, so the registers stay free for the overlap schedule's second accumulator.
  static constexpr bool kGateUpSerial = kGateUp && kWgN == 1;
  static constexpr bool kOverlapAllowed = kConsumerWGs == 2 && kPieceN == 128 && !kDual;
  static_assert(kConsumerWGs == 2 || (kConsumerWGs == 3 && kWgN == 1 && kClusterSize == 1),
                "two consumer warp groups (64 x 128 each), or three along M (192 x 128)");
  // (In-kernel scales with 128 rows: the Mega-MoE 128 x 256 tile, MoeMainloop::mma_dual.)
  static_assert(!kGateUp || (kWgN == 2 && (kWgM == 1 || !kInKernelScales || kClusterSize == 1)) ||
                    (kWgM == 2 && kPieceN == 128 && !kInKernelScales && kClusterSize == 1),
                "gate/up fusion: the two N chunks (64 or 128 rows), or the 128 x 128 tile's two passes");
  static_assert(kPieceN == 128 || (kWgM == 2 && !kGateUp && !kInKernelScales && kClusterN == 1),
                "192-column pieces: the 128 x 192 tile of the standalone GEMM");
  static_assert(128 * kProducerRegs + kConsumerThreads * kConsumerRegs <= 65536, "register file");

  using MmaAtom = cute::conditional_t<kPieceN == 192, SM90_64x192x32_F32E4M3E4M3_SS_TN<>,
                                      SM90_64x128x32_F32E4M3E4M3_SS_TN<>>;
  using TiledMma = decltype(make_tiled_mma(MmaAtom{}));  // one warp group, 64 x kPieceN x 32
  using PieceShape = Shape<_64, Int<kPieceN>>;

  using SmemLayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<_64, Int<kBlockK>, Int<kWgM * kStages>>{}));
  using SmemLayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<Int<kPieceN>, Int<kBlockK>, Int<kWgN * kStages>>{}));

  // Global tensors as TMA sees them: A (m_total, k), B (n, k, experts).
  using ShapeA = Shape<int32_t, int32_t>;
  using StrideA = Stride<int64_t, _1>;
  using ShapeB = Shape<int32_t, int32_t, int32_t>;
  using StrideB = Stride<int64_t, _1, int64_t>;
  using TmaOpA = cute::conditional_t<(kClusterN > 1), SM90_TMA_LOAD_MULTICAST, SM90_TMA_LOAD>;
  using TmaOpB = cute::conditional_t<(kClusterM > 1), SM90_TMA_LOAD_MULTICAST, SM90_TMA_LOAD>;
  using TmaA = decltype(make_tma_copy(TmaOpA{},
                                      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeA{},
                                                  StrideA{}),
                                      take<0, 2>(SmemLayoutA{}), Shape<_64, Int<kBlockK>>{}, Int<kClusterN>{}));
  using TmaB = decltype(make_tma_copy(TmaOpB{},
                                      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeB{},
                                                  StrideB{}),
                                      take<0, 2>(SmemLayoutB{}), Shape<Int<kPieceN>, Int<kBlockK>>{}, Int<kClusterM>{}));

  static constexpr uint32_t kBytesA = 64 * kBlockK;   // one A chunk (fp8)
  static constexpr uint32_t kBytesB = kPieceN * kBlockK;  // one B chunk
  static constexpr uint32_t kStageBytes = kWgM * kBytesA + kWgN * kBytesB;
  static_assert(cosize_v<SmemLayoutA> == 64 * kBlockK * kWgM * kStages);
  static_assert(cosize_v<SmemLayoutB> == kPieceN * kBlockK * kWgN * kStages);

  // Per stage: the tile's A scales of the K block (row i of the tile at a[i]; rows past the
  // expert's tokens read as 0) and the B scale of each N chunk.
  struct StageScales {
    float a[kBlockM];
    float b[4];
  };
  struct ScaleStorage {
    StageScales stage[kSmemScales ? kStages : 1];
  };
  // A consumer thread's scale products for one K block: rows r0 and r0 + 8, and for 192-column
  // pieces the same for each of three 64-column sections, each inside one 128-wide weight scale
  // block (columns [64 s, 64 s + 64) of the piece use scale block (first column + 64 s) / 128).
  static constexpr int kScaleSections = kPieceN == 192 ? 3 : 1;
  struct BlockScale {
    float c[2 * kScaleSections];
  };
  // Arrivals on a full barrier per stage: the TMA thread, plus one per lane of the scale warp.
  static constexpr int kFullArrivals = kSmemScales ? 1 + 32 : 1;
};

template <class Traits>
struct MoeMainloop {
  using T = Traits;
  using Element = typename T::Element;
  static constexpr int kStages = T::kStages;
  static constexpr int kBlockK = T::kBlockK;
  using Pipeline = TmaPipeline<kStages, T::kClusterSize>;
  using State = PipeState<kStages>;

  struct Params {
    typename T::TmaA tma_a;
    typename T::TmaB tma_b;
    typename T::ShapeA shape_a;
    typename T::ShapeB shape_b;
    const float* a_scales;
    const float* b_scales;
    int m_total;
    int n;
    int k_blocks;
    int schedule;
    // kGateUp traits only: false makes a tile a plain one (B rows n_block * kBlockN + 128 c), so
    // one kernel can run both Linear-1 (gate/up) and Linear-2 tiles.
    bool gate_up;
  };

  static Params to_params(MoeGemmParams const& p) {
    auto shape_a = make_shape(p.m_total, p.k);
    auto shape_b = make_shape(p.n, p.k, p.experts);
    Tensor mA = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.a)), shape_a,
                            make_stride(static_cast<int64_t>(p.k), _1{}));
    Tensor mB = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.b)), shape_b,
                            make_stride(static_cast<int64_t>(p.k), _1{}, static_cast<int64_t>(p.n) * p.k));
    auto tma_a = make_tma_copy(typename T::TmaOpA{}, mA, take<0, 2>(typename T::SmemLayoutA{}),
                               Shape<_64, Int<kBlockK>>{}, Int<T::kClusterN>{});
    auto tma_b = make_tma_copy(typename T::TmaOpB{}, mB, take<0, 2>(typename T::SmemLayoutB{}),
                               Shape<Int<T::kPieceN>, Int<kBlockK>>{}, Int<T::kClusterM>{});
    return Params{tma_a, tma_b, shape_a, shape_b, p.a_scales, p.b_scales, p.m_total, p.n, p.k / kBlockK, p.schedule,
                  T::kGateUp};
  }

  __device__ static void prefetch_descriptors(Params const& mp) {
    cute::prefetch_tma_descriptor(mp.tma_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(mp.tma_b.get_tma_descriptor());
  }

  // First weight row of B chunk c (wn) of a tile. Chunks past n (a 256-wide tile over an odd
  // number of 128-row blocks) load zeros (TMA out-of-bounds fill) and are never stored.
  __device__ static int b_row(Params const& mp, WorkTile const& t, int c) {
    if constexpr (T::kGateUp) {
      if (mp.gate_up) return (T::kGateUpSerial ? t.half : c) * (mp.n / 2) + t.n_block * 128;
    }
    return t.n_block * T::kBlockN + c * T::kPieceN;
  }

  // The B scales of weight row brow's 128-row block, one per K block (nullptr-free: a row past
  // n points at the expert's first block, and ok says not to use it).
  __device__ static const float* b_scales_of(Params const& mp, WorkTile const& t, int brow, bool& ok) {
    ok = brow < mp.n;
    return mp.b_scales + (static_cast<int64_t>(t.expert) * (mp.n / 128) + (ok ? brow / 128 : 0)) * mp.k_blocks;
  }

  // ---------------------------------------------------------------------------------
  // Producer (lane 0 of the producer warp): every K block of the tile into the ring. In a
  // cluster, this CTA loads its slice of the shared chunks and multicasts it; the full
  // barrier still expects the whole stage (the partners' slices land here too).
  // kSkipEmptyA: a tile of <= 64 rows loads only A chunk 0 (the Mega-MoE 128 x 256 tile's half
  // blocks, mma_dual_split: no consumer reads chunk 1 then).
  template <bool kSkipEmptyA = false, class SmemA, class SmemB>
  __device__ void load(Params const& mp, Pipeline const& pipe, State& write, WorkTile const& t, int cta_rank,
                       SmemA& sA, SmemB& sB) const {
    const int cm = cta_rank % T::kClusterM;
    const int cn = cta_rank / T::kClusterM;
    uint16_t mask_a = 0, mask_b = 0;  // CTAs sharing this CTA's A (same cm) / B (same cn)
    CUTE_UNROLL
    for (int j = 0; j < T::kClusterN; ++j) mask_a |= static_cast<uint16_t>(1u << (cm + T::kClusterM * j));
    CUTE_UNROLL
    for (int i = 0; i < T::kClusterM; ++i) mask_b |= static_cast<uint16_t>(1u << (i + T::kClusterM * cn));
    Tensor mA = mp.tma_a.get_tma_tensor(mp.shape_a);                   // (m_total, k)
    Tensor mB = mp.tma_b.get_tma_tensor(mp.shape_b)(_, _, t.expert);   // (n, k)
    auto cta_a = mp.tma_a.get_slice(cn);
    auto cta_b = mp.tma_b.get_slice(cm);
    constexpr int kBox = T::kPieceN;  // B rows per chunk
    Tensor tAsA = group_modes<0, 3>(cta_a.partition_D(sA));  // (TMA, chunk slot)
    Tensor tBsB = group_modes<0, 3>(cta_b.partition_D(sB));  // (TMA, chunk slot)
    Tensor gB = local_tile(mB, Shape<Int<kBox>, Int<kBlockK>>{}, make_coord(_, _));  // (box, K, n/box, kb)
    Tensor tBgB = group_modes<0, 3>(cta_b.partition_S(gB));                         // (TMA, n/box, kb)
    int b_blk[T::kWgN];
    CUTE_UNROLL
    for (int c = 0; c < T::kWgN; ++c) b_blk[c] = b_row(mp, t, c) / kBox;

    const bool half_a = kSkipEmptyA && t.rows <= 64;
    for (int kb = 0; kb < mp.k_blocks; ++kb) {
      pipe.producer_acquire(write, half_a ? T::kStageBytes - T::kBytesA : T::kStageBytes);
      uint64_t& full = pipe.full_barrier(write);
      CUTE_UNROLL
      for (int c = 0; c < T::kWgM; ++c) {
        if (half_a && c > 0) break;
        // Expert rows start anywhere: offset the coordinate tensor to the chunk's first row.
        Tensor gA = local_tile(domain_offset(make_coord(t.row_begin + 64 * c, 0), mA), Shape<_64, Int<kBlockK>>{},
                               make_coord(_0{}, kb));
        copy(mp.tma_a.with(full, mask_a), group_modes<0, 3>(cta_a.partition_S(gA)), tAsA(_, write.index * T::kWgM + c));
      }
      CUTE_UNROLL
      for (int c = 0; c < T::kWgN; ++c)
        copy(mp.tma_b.with(full, mask_b, TMA::CacheHintSm90::EVICT_LAST), tBgB(_, b_blk[c], kb),
             tBsB(_, write.index * T::kWgN + c));
      write.advance();
    }
  }

  // ---------------------------------------------------------------------------------
  // Scale warp (warp 1 of the producer warp group; kSmemScales only): for every K block of
  // the tile, the tile's A scales and each N chunk's B scale into the stage by 4-byte cp.async
  // (rows past the expert's tokens and chunks past n zero-filled, nothing read for them), then
  // every lane arrives on the stage's full barrier once its own copies have landed. It waits
  // for free buffers like the TMA thread, in the same order, so the two fill the same stage.
  __device__ void copy_scales(Params const& mp, Pipeline const& pipe, State& write, WorkTile const& t,
                              typename T::ScaleStorage& sc) const {
    // One B scale per N chunk, or per 64-column section of a 192-column piece.
    constexpr int kBScales = T::kPieceN == 192 ? 3 : T::kWgN;
    static_assert(T::kSmemScales && kBScales <= 4);
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int c = lane < kBScales ? lane : 0;
    bool b_ok;
    const float* sb = b_scales_of(mp, t, T::kPieceN == 192 ? b_row(mp, t, 0) + 64 * c : b_row(mp, t, c), b_ok);
    b_ok = b_ok && lane < kBScales;
    for (int kb = 0; kb < mp.k_blocks; ++kb) {
      pipe.producer_wait_empty(write);
      typename T::StageScales& st = sc.stage[write.index];
      const float* sa = mp.a_scales + static_cast<int64_t>(kb) * mp.m_total + t.row_begin;
      CUTE_UNROLL
      for (int i = lane; i < T::kBlockM; i += 32) {
        const bool ok = i < t.rows;
        cp_async_4(cute::cast_smem_ptr_to_uint(&st.a[i]), ok ? sa + i : mp.a_scales, ok ? 4u : 0u);
      }
      if (lane < kBScales) cp_async_4(cute::cast_smem_ptr_to_uint(&st.b[lane]), b_ok ? sb + kb : mp.b_scales, b_ok ? 4u : 0u);
      cp_async_arrive(&pipe.full_barrier(write));
      write.advance();
    }
  }

  // ---------------------------------------------------------------------------------
  // Scale warp for scales written while the kernel runs (kInKernelScales with kSmemScales: the
  // Mega-MoE 128 x 256 tile, docs/megamoe.md "Tile configurations"). The same stages, order and
  // zero fill as copy_scales, but through registers: each lane reads its A scales through L2
  // (ld.global.cg: other SMs wrote them during the kernel; the caller hands the tile over only
  // after the producer's acquire of its inputs) one K block ahead, stores them into the stage
  // once it is free and arrives on its full barrier (mbarrier arrive: release at CTA scope).
  // The weights' B scales never change during the kernel (read-only path).
  __device__ void copy_scales_in_kernel(Params const& mp, Pipeline const& pipe, State& write, WorkTile const& t,
                                        typename T::ScaleStorage& sc) const {
    static_assert(T::kSmemScales && T::kInKernelScales && T::kPieceN == 128 && T::kWgN <= 4);
    constexpr int kA = T::kBlockM / 32;  // A scales per lane
    const int lane = static_cast<int>(threadIdx.x) & 31;
    bool b_ok;
    const float* sb = b_scales_of(mp, t, b_row(mp, t, lane < T::kWgN ? lane : 0), b_ok);
    b_ok = b_ok && lane < T::kWgN;
    const float* sa = mp.a_scales + t.row_begin + lane;
    float a[kA], b = 0.f;
    auto fetch = [&](int kb) {
      const float* s = sa + static_cast<int64_t>(kb) * mp.m_total;
      CUTE_UNROLL
      for (int i = 0; i < kA; ++i) a[i] = lane + 32 * i < t.rows ? __ldcg(s + 32 * i) : 0.f;
      b = b_ok ? __ldg(sb + kb) : 0.f;
    };
    fetch(0);
    for (int kb = 0; kb < mp.k_blocks; ++kb) {
      pipe.producer_wait_empty(write);
      typename T::StageScales& st = sc.stage[write.index];
      CUTE_UNROLL
      for (int i = 0; i < kA; ++i) st.a[lane + 32 * i] = a[i];
      if (lane < T::kWgN) st.b[lane] = b;
      cutlass::arch::ClusterBarrier::arrive(&pipe.full_barrier(write));
      if (kb + 1 < mp.k_blocks) fetch(kb + 1);
      write.advance();
    }
  }

  // ---------------------------------------------------------------------------------
  // Consumer side. Schedules (MoeGemmParams::schedule, uniform over the launch):
  //   kScheduleOverlap: two per-K-block accumulators; the wgmmas of block kb+1 are issued
  //     before block kb is promoted (wait_group 1), so a warp group keeps the tensor core
  //     busy while its CUDA cores promote;
  //   kSchedulePingPong: the consumer warp groups take turns issuing their wgmmas (a
  //     token passed through named barriers), so their tensor-core work does not interleave
  //     and one promotes while the other's wgmmas run.
  static constexpr int kScheduleOverlap = 1;
  static constexpr int kSchedulePingPong = 2;

  using Token = IssueToken<T::kConsumerWGs>;
  __device__ static void pingpong_sync(int wg) { Token::wait(wg); }
  __device__ static void pingpong_pass(int wg) { Token::pass(wg); }
  // Once per consumer thread at kernel start: warp group 0 holds the first token.
  __device__ static void consumer_init(int schedule, int wg) {
    if (schedule & kSchedulePingPong) Token::start(wg);
  }

  // Operands of one consumer warp group: its wgmma, the shared-memory descriptors of its A
  // and B chunks in every stage, and the rows of its accumulator values.
  template <class SmemA, class SmemB>
  struct WarpGroupMma {
    typename T::TiledMma tiled_mma;
    using Thr = decltype(std::declval<typename T::TiledMma&>().get_slice(0));
    decltype(std::declval<Thr&>().partition_fragment_A(std::declval<SmemA const&>())) a;  // (MMA, 1, 4, slot)
    decltype(std::declval<Thr&>().partition_fragment_B(std::declval<SmemB const&>())) b;
    int wm, wn, wg;
    int r0;  // accumulator rows of this thread inside the piece: r0 and r0 + 8 (value index bit 1)
    bool pingpong;
    __device__ WarpGroupMma(SmemA const& sA, SmemB const& sB, int wt, int wm_, int wn_, int schedule)
        : a(tiled_mma.get_slice(wt).partition_fragment_A(sA)),
          b(tiled_mma.get_slice(wt).partition_fragment_B(sB)),
          wm(wm_), wn(wn_), wg(wm_ * T::kWgNThreads + wn_), r0(64 * wm_ + (wt / 32) * 16 + (wt % 32) / 4),
          pingpong((schedule & kSchedulePingPong) != 0) {}

    // Waits for stage st, then issues its four wgmmas into `part` (starting from zero).
    // kPingPong: -1 follows the runtime schedule, 0 / 1 fix it at compile time. piece: the B
    // chunk (-1: this warp group's wn); kWaitStage = false when the stage was waited for already.
    template <int kPingPong = -1, bool kWaitStage = true, class Part>
    __device__ __forceinline__ void issue(Pipeline const& pipe, Part& part, State st, int piece = -1) {
      const bool pp = kPingPong < 0 ? pingpong : kPingPong == 1;
      if constexpr (kWaitStage) pipe.consumer_wait(st);
      if (pp) pingpong_sync(wg);
      // Broadcast so the compiler sees a warp-uniform stage and builds the wgmma descriptors
      // in uniform registers (no R2UR per descriptor).
      const int stage = __shfl_sync(0xffffffffu, st.index, 0);
      const int slot_a = stage * T::kWgM + wm;
      const int slot_b = stage * T::kWgN + (piece < 0 ? wn : piece);
      warpgroup_fence_operand(part);
      warpgroup_arrive();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      CUTE_UNROLL
      for (int k = 0; k < size<2>(a); ++k) {
        cute::gemm(tiled_mma, a(_, _, k, slot_a), b(_, _, k, slot_b), part);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      if (pp) pingpong_pass(wg);
    }
    // kSmemScales: the scale products of this thread's two rows for the K block in stage st
    // (read after its full-barrier wait, before its release).
    __device__ __forceinline__ typename T::BlockScale stage_scales(typename T::ScaleStorage const* sc, State st) const {
      typename T::StageScales const& ss = sc->stage[st.index];
      typename T::BlockScale s;
      const float a0 = ss.a[r0];
      const float a1 = ss.a[r0 + 8];
      if constexpr (T::kScaleSections > 1) {  // 192-column pieces: one B scale per 64-column section
        CUTE_UNROLL
        for (int x = 0; x < T::kScaleSections; ++x) {
          s.c[2 * x] = a0 * ss.b[x];
          s.c[2 * x + 1] = a1 * ss.b[x];
        }
      } else {
        const float s_b = ss.b[wn];
        s.c[0] = a0 * s_b;
        s.c[1] = a1 * s_b;
      }
      return s;
    }
    template <class Acc, class Part>
    __device__ __forceinline__ static void promote(Acc& acc, Part& part, float c0, float c1) {
      warpgroup_fence_operand(part);
      CUTE_UNROLL
      for (int i = 0; i < size(part); ++i) acc(i) += part(i) * ((i & 2) ? c1 : c0);
    }
    // Value i is in column 8 (i / 4) + ...: section i / 32 (64 columns each) of a 192-column
    // piece.
    template <class Acc, class Part>
    __device__ __forceinline__ static void promote(Acc& acc, Part& part, typename T::BlockScale const& s) {
      warpgroup_fence_operand(part);
      CUTE_UNROLL
      for (int i = 0; i < size(part); ++i) {
        const int sec = T::kScaleSections > 1 ? i / 32 : 0;
        acc(i) += part(i) * s.c[2 * sec + ((i & 2) ? 1 : 0)];
      }
    }
  };

  // One warp group's 64 x 128 piece of the tile, fp32 result (scales applied) in `acc`, one K
  // block at a time, for scales written while the kernel runs (the Mega-MoE 64 x 256 tile): the
  // scale warp put each K block's scales into its stage (copy_scales_in_kernel); the standalone
  // kernels run mma_tiles or mma_tiles_serial below. wt: thread index inside the warp group;
  // (wm, wn): the piece.
  template <class SmemA, class SmemB, class Frg>
  __device__ __forceinline__ void mma(Params const& mp, Pipeline const& pipe, State& read, int schedule, int wt,
                      int wm, int wn, SmemA const& sA, SmemB const& sB, Frg& acc,
                      typename T::ScaleStorage const* sc) const {
    static_assert(T::kInKernelScales && T::kSmemScales, "scales written while the kernel runs, in the stages");
    WarpGroupMma<SmemA, SmemB> g(sA, sB, wt, wm, wn, schedule);
    clear(acc);
    Tensor p0 = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});  // one K block, unscaled
    static_assert(decltype(size(p0))::value == T::kPieceN / 2);
    for (int kb = 0; kb < mp.k_blocks; ++kb) {
      g.issue(pipe, p0, read);
      typename T::StageScales const& ss = sc->stage[read.index];
      const float b = ss.b[wn];
      const float c0 = ss.a[g.r0] * b, c1 = ss.a[g.r0 + 8] * b;
      warpgroup_wait<0>();
      pipe.consumer_release(read);
      read.advance();
      g.promote(acc, p0, c0, c1);
    }
  }

  // The 128 x 256 tile (T::kDual) for scales written while the kernel runs (the Mega-MoE
  // kernel's 128-row tiles, docs/megamoe.md "Tile configurations"): warp group wm owns rows
  // [64 wm, 64 wm + 64) and both N pieces; per K block it issues piece 0, promotes it into acc0,
  // then piece 1 of the same stage into acc1 (mma_tiles_dual's order: one per-K-block
  // accumulator, 64 + 64 + 64 registers), with the scales from the stages (the scale warp's
  // copy_scales_in_kernel, sc).
  // Piece 0 / 1 are the gate / up rows for gate/up parameters, else columns [0, 128) / [128, 256).
  // The ping-pong token is fixed at compile time (kPingPong), as in mma_tiles_dual.
  template <bool kPingPong, class SmemA, class SmemB, class Frg>
  __device__ __forceinline__ void mma_dual(Params const& mp, Pipeline const& pipe, State& read,
                                           int wt, int wm, SmemA const& sA, SmemB const& sB, Frg& acc0,
                                           Frg& acc1, typename T::ScaleStorage const* sc) const {
    static_assert(T::kInKernelScales && T::kSmemScales && T::kDual, "the 128 x 256 tile, in-kernel scales in the stages");
    constexpr int kPP = kPingPong ? 1 : 0;
    WarpGroupMma<SmemA, SmemB> g(sA, sB, wt, wm, 0, kPingPong ? kSchedulePingPong : 0);
    clear(acc0);
    clear(acc1);
    const int kbs = mp.k_blocks;
    Tensor p0 = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});  // one K block, unscaled
    // The scale warp put each K block's scales into its stage (copy_scales_in_kernel):
    // mma_tiles_dual's loop for one tile.
    for (int kb = 0; kb < kbs; ++kb) {
      g.template issue<kPP>(pipe, p0, read, 0);
      typename T::StageScales const& ss = sc->stage[read.index];
      const float a0 = ss.a[g.r0], a1 = ss.a[g.r0 + 8];
      const float b0 = ss.b[0], b1 = ss.b[1];
      warpgroup_wait<0>();
      g.promote(acc0, p0, a0 * b0, a1 * b0);
      g.template issue<kPP, false>(pipe, p0, read, 1);
      warpgroup_wait<0>();
      pipe.consumer_release(read);
      read.advance();
      g.promote(acc1, p0, a0 * b1, a1 * b1);
    }
  }

  // The 128 x 256 tile of a block with <= 64 rows (docs/megamoe.md §Half blocks): both warp
  // groups on rows 0..63 (A chunk 0), warp group wg on N piece wg only (gate or up; a 128-column
  // half), so neither group runs an empty half's wgmmas while the other computes alone. One
  // issue per K block and group: the ping-pong token alternates as in mma_dual.
  template <bool kPingPong, class SmemA, class SmemB, class Frg>
  __device__ __forceinline__ void mma_dual_split(Params const& mp, Pipeline const& pipe, State& read, int wt, int wg,
                                                 SmemA const& sA, SmemB const& sB, Frg& acc,
                                                 typename T::ScaleStorage const* sc) const {
    static_assert(T::kInKernelScales && T::kSmemScales && T::kDual, "the 128 x 256 tile, in-kernel scales in the stages");
    constexpr int kPP = kPingPong ? 1 : 0;
    // wm = 0: A chunk 0 and its rows' scales; wn = wg: B chunk wg, and the token id stays wg.
    WarpGroupMma<SmemA, SmemB> g(sA, sB, wt, 0, wg, kPingPong ? kSchedulePingPong : 0);
    clear(acc);
    const int kbs = mp.k_blocks;
    Tensor p0 = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});  // one K block, unscaled
    for (int kb = 0; kb < kbs; ++kb) {
      g.template issue<kPP>(pipe, p0, read);
      typename T::StageScales const& ss = sc->stage[read.index];
      const float a0 = ss.a[g.r0], a1 = ss.a[g.r0 + 8];
      const float b = ss.b[wg];
      warpgroup_wait<0>();
      pipe.consumer_release(read);
      read.advance();
      g.promote(acc, p0, a0 * b, a1 * b);
    }
  }

  // The overlap schedule (kScheduleOverlap) over all of this CTA's tiles: two per-K-block
  // accumulators; the wgmmas of block kb + 1 are issued before block kb is promoted
  // (wait_group 1), so a warp group keeps the tensor core busy while its CUDA cores promote.
  // The accumulators live across tiles and the next tile's first block is issued at the end
  // of the loop body: in this form ptxas injects no wait after a tile's first block (the
  // per-tile function got one C7517 there). Issuing that block before the epilogue instead
  // (so it runs under it) measured slower (docs/moe-gemm.md §Design). Calls epilogue(acc, tile) for every tile.
  template <class Sched, class SmemA, class SmemB, class Epi>
  __device__ __forceinline__ void mma_tiles(Params const& mp, Pipeline const& pipe, State& read, Sched& sched,
                                            int schedule, int wt, int wm, int wn, SmemA const& sA, SmemB const& sB,
                                            typename T::ScaleStorage const* sc, Epi&& epilogue) const {
    static_assert(T::kOverlapAllowed && T::kSmemScales, "two accumulators and the stages' scales");
    WarpGroupMma<SmemA, SmemB> g(sA, sB, wt, wm, wn, schedule);
    Tensor acc = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});
    Tensor p0 = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});  // one K block each, unscaled
    Tensor p1 = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});
    clear(p1);  // defined before its first wgmma (kept as measured; it does not remove the one C7517 wait)
    const int kbs = mp.k_blocks;
    WorkTile tile;
    if (!sched.next(tile)) return;
    State st_issue = read;
    typename T::BlockScale s0, s1;  // scales of the blocks in p0 / p1
    g.issue(pipe, p0, st_issue);
    s0 = g.stage_scales(sc, st_issue);
    st_issue.advance();
    while (true) {
      clear(acc);
      // Every path waits the same way: the blocks with a successor inside the loop (wait_group
      // 1), the last one or two peeled after it. A wgmma issue under `kb + 1 < kbs` with
      // wait_group 1 on one side and 0 on the other made ptxas serialise every wgmma of the
      // kernel (warning C7518), whatever the schedule.
      int kb = 0;
      for (; kb + 2 < kbs; kb += 2) {  // block kb is in p0, issued
        g.issue(pipe, p1, st_issue);
        s1 = g.stage_scales(sc, st_issue);
        st_issue.advance();
        warpgroup_wait<1>();
        pipe.consumer_release(read);
        read.advance();
        g.promote(acc, p0, s0);
        g.issue(pipe, p0, st_issue);
        s0 = g.stage_scales(sc, st_issue);
        st_issue.advance();
        warpgroup_wait<1>();
        pipe.consumer_release(read);
        read.advance();
        g.promote(acc, p1, s1);
      }
      if (kb + 1 < kbs) {  // two blocks left: kb in p0, kb + 1 still to issue
        g.issue(pipe, p1, st_issue);
        s1 = g.stage_scales(sc, st_issue);
        st_issue.advance();
        warpgroup_wait<1>();
        pipe.consumer_release(read);
        read.advance();
        g.promote(acc, p0, s0);
        warpgroup_wait<0>();
        pipe.consumer_release(read);
        read.advance();
        g.promote(acc, p1, s1);
      } else {  // one block left
        warpgroup_wait<0>();
        pipe.consumer_release(read);
        read.advance();
        g.promote(acc, p0, s0);
      }
      WorkTile next = tile;  // a two-pass tile's second half is `tile` again (GroupedScheduler)
      // Broadcast: a warp-uniform branch around the wgmma issue.
      const bool more = __shfl_sync(0xffffffffu, sched.next(next) ? 1 : 0, 0) != 0;
      epilogue(acc, tile);
      if (!more) break;
      g.issue(pipe, p0, st_issue);  // the next tile's first block
      s0 = g.stage_scales(sc, st_issue);
      st_issue.advance();
      tile = next;
    }
  }

  // Schedules without the overlap bit (0 and 2, and every schedule of the three-warp-group
  // tile), scales in shared memory, over all of this CTA's tiles; the ping-pong token fixed at
  // compile time (read at run time inside the K loop it cost ~12 % of warp samples,
  // docs/moe-gemm.md §Design).
  // Per K block a warp group waits for its stage (and the token), issues (passes the token),
  // waits for its own wgmmas and promotes, under the other group's wgmmas with the token
  // (cuBLASLt's block-scaled kernel has that shape in its profile).
  template <bool kPingPong, class Sched, class SmemA, class SmemB, class Epi>
  __device__ __forceinline__ void mma_tiles_serial(Params const& mp, Pipeline const& pipe, State& read, Sched& sched,
                                                   int wt, int wm, int wn, SmemA const& sA, SmemB const& sB,
                                                   typename T::ScaleStorage const* sc, Epi&& epilogue) const {
    static_assert(T::kSmemScales, "the stages' scales");
    WarpGroupMma<SmemA, SmemB> g(sA, sB, wt, wm, wn, kPingPong ? kSchedulePingPong : 0);
    Tensor acc = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});
    Tensor p0 = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});  // one K block, unscaled
    const int kbs = mp.k_blocks;
    WorkTile tile;
    while (__shfl_sync(0xffffffffu, sched.next(tile) ? 1 : 0, 0) != 0) {
      clear(acc);
      for (int kb = 0; kb < kbs; ++kb) {
        g.template issue<kPingPong ? 1 : 0>(pipe, p0, read);
        const typename T::BlockScale s = g.stage_scales(sc, read);
        warpgroup_wait<0>();
        pipe.consumer_release(read);
        read.advance();
        g.promote(acc, p0, s);
      }
      epilogue(acc, tile);
    }
  }

  // The 128 x 256 tiles (T::kDual): per K block a warp group issues piece 0 (gate), waits,
  // promotes it into acc_gate, then piece 1 (up) of the same stage into acc_up (one per-K-block
  // accumulator for both: 64 + 64 + 64 registers). With the ping-pong token the two warp groups
  // alternate (piece 0 of group 0, of group 1, piece 1 of group 0, ...), so one promotes while
  // the other's wgmmas run. Calls epilogue(acc_gate, acc_up, tile) for every tile.
  template <bool kPingPong, class Sched, class SmemA, class SmemB, class Epi>
  __device__ __forceinline__ void mma_tiles_dual(Params const& mp, Pipeline const& pipe, State& read, Sched& sched,
                                                 int wt, int wm, SmemA const& sA, SmemB const& sB,
                                                 typename T::ScaleStorage const* sc, Epi&& epilogue) const {
    static_assert(T::kDual && T::kSmemScales, "the 128 x 256 tiles, scales in the stages");
    WarpGroupMma<SmemA, SmemB> g(sA, sB, wt, wm, 0, kPingPong ? kSchedulePingPong : 0);
    Tensor acc_gate = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});
    Tensor acc_up = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});
    Tensor p0 = partition_fragment_C(g.tiled_mma, typename T::PieceShape{});  // one K block, unscaled
    const int kbs = mp.k_blocks;
    WorkTile tile;
    while (__shfl_sync(0xffffffffu, sched.next(tile) ? 1 : 0, 0) != 0) {
      clear(acc_gate);
      clear(acc_up);
      for (int kb = 0; kb < kbs; ++kb) {
        g.template issue<kPingPong ? 1 : 0>(pipe, p0, read, 0);
        typename T::StageScales const& ss = sc->stage[read.index];
        const float a0 = ss.a[g.r0], a1 = ss.a[g.r0 + 8];
        const float b_gate = ss.b[0], b_up = ss.b[1];
        warpgroup_wait<0>();
        g.promote(acc_gate, p0, a0 * b_gate, a1 * b_gate);
        g.template issue<kPingPong ? 1 : 0, false>(pipe, p0, read, 1);
        warpgroup_wait<0>();
        pipe.consumer_release(read);
        read.advance();
        g.promote(acc_up, p0, a0 * b_up, a1 * b_up);
      }
      epilogue(acc_gate, acc_up, tile);
    }
  }
};

}  // namespace xstage::kernels::moe
