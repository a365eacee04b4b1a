// The register-operand W4A8 grouped GEMM (symmetric INT4 group-128 weights, bf16 output): the GEMM runs
// transposed, out^T = W * X^T, so the 4-bit weights are wgmma's A operand and come from
// registers (the m64nNk32 e4m3 "RS" form). Each consumer thread converts exactly the nibbles of
// its own A fragment (two 16-byte shared loads per K block from the prepacked sign-magnitude
// layout of w4a8_rs_layout.hpp, one instruction per value) while its warp group's previous
// wgmmas run. Nothing converted goes back to shared memory: no converted
// ring, no proxy fence, no converter warps (w4a8.cuh's designs are bound by those, docs/moe-gemm.md).
//
// Tile: 128 weight rows (output columns) x 128 tokens x K blocks of 128. Warp group 0 is the
// producer (warp 0: lane 0 issues the TMA load of the fp8 token tile, the bulk copies of the
// prepacked weight chunk and of the 128 weight scales; all 32 lanes copy the 128 token scales
// with cp.async, zero past the expert's tokens, and arrive on the stage's full barrier when
// they land). Consumer warp groups 1 and 2 own weight rows [64g, 64g + 64) of the tile: per K
// block, four m64n128k32 wgmmas from zero (A = converted registers, B = the token tile), and
// while they run the next block's fragments are converted; then the block is promoted,
// acc += part * w_scale[row, kb] * a_scale[token, kb] (the W8A8 precision scheme with both
// scales as vectors), and the stage is released. Epilogue: each warp group stages its 64 x 128
// piece transposed (token-major bf16) in shared memory and stores 16-byte row pieces.
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

#include "kernels/moe/launch.hpp"
#include "kernels/moe/mainloop.cuh"
#include "kernels/moe/params_w4a8.hpp"
#include "kernels/moe/persistent_grid.hpp"
#include "kernels/moe/pipeline.cuh"
#include "kernels/moe/tile_scheduler.cuh"
#include "kernels/moe/w4a8_convert.cuh"
#include "kernels/moe/w4a8_rs_layout.hpp"

namespace xstage::kernels::moe {

using namespace cute;

// kStudy_ (measurement builds only, XSTAGE_W4RS_STUDY): bit 0 skips the conversion (the packed
// words go to wgmma as they are), bit 1 the scales of the promotion (acc += part). Wrong
// results by design: they say what each part costs (docs/moe-gemm.md, runs 26-31).
template <int kStages_, int kStudy_ = 0>
struct W4RsTraits {
  static constexpr int kStudy = kStudy_;
  using Element = cutlass::float_e4m3_t;
  static constexpr int kBlockW = 128;  // weight rows per tile (two consumer warp groups x 64)
  static constexpr int kBlockT = 128;  // tokens per tile
  static constexpr int kBlockK = 128;
  static constexpr int kStages = kStages_;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kConsumerWarps = 4 * kConsumerWGs;
  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static_assert(128 * kProducerRegs + 128 * kConsumerWGs * kConsumerRegs <= 65536, "register file");

  using MmaAtom = SM90_64x128x32_F32E4M3E4M3_RS_TN<>;
  using TiledMma = decltype(make_tiled_mma(MmaAtom{}));  // one warp group, 64 x 128 x 32

  // Token tile: K-major, 128-byte swizzle (what the e4m3 wgmma's B operand reads).
  using SmemLayoutX = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<Int<kBlockT>, Int<kBlockK>, Int<kStages>>{}));
  using ShapeX = Shape<int32_t, int32_t>;  // (m_total, k)
  using StrideX = Stride<int64_t, _1>;
  using TmaX = decltype(make_tma_copy(SM90_TMA_LOAD{},
                                      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeX{},
                                                  StrideX{}),
                                      take<0, 2>(SmemLayoutX{}), Shape<Int<kBlockT>, Int<kBlockK>>{}, Int<1>{}));

  static constexpr uint32_t kBytesX = kBlockT * kBlockK;
  static constexpr uint32_t kPackedBytes = kRsChunkBytes;  // 128 rows x 128 K nibbles, prepacked
  static constexpr uint32_t kWScaleBytes = kBlockW * 4;
  static constexpr uint32_t kTxBytes = kBytesX + kPackedBytes + kWScaleBytes;  // TMA + bulk copies
  static constexpr int kScaleLanes = 32;  // producer lanes copying token scales (cp.async arrivals)
  // Token scales of a stage in shared memory, ordered by the consumer thread that reads them:
  // thread quad position q needs tokens 2q + 8i + {0, 1} (i < 16), kept as 32 consecutive floats
  // at 36 q (+4 floats of padding: the four rows fall in different banks for 16-byte loads).
  static constexpr int kAsRow = 36;
  static constexpr int kAsStage = 4 * kAsRow;
  __host__ __device__ static constexpr int as_index(int token) {
    return ((token % 8) / 2) * kAsRow + (token / 8) * 2 + token % 2;
  }
};

// ---------------------------------------------------------------------------------------------
// 4-byte cp.async with zero fill (src_bytes 0: nothing read) and its mbarrier arrival.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Arrives on the barrier once this thread's cp.asyncs so far have landed; the arrival is
// counted in the barrier's expected count (.noinc).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(cute::cast_smem_ptr_to_uint(bar))
               : "memory");
}

template <class Traits>
struct MoeW4A8RsKernel {
  using T = Traits;
  using Element = typename T::Element;
  static constexpr int kStages = T::kStages;
  using State = PipeState<kStages>;
  using Scheduler = GroupedScheduler<T::kBlockT, 1, 1>;
  static constexpr int kThreads = T::kThreads;
  static constexpr int kPitch = 64 * 2 + 16;  // bytes per staged token row of a warp group (bf16)

  struct Params {
    typename T::TmaX tma_x;
    typename T::ShapeX shape_x;
    const uint8_t* w;        // prepacked int4 weights (w4a8_rs_layout.hpp)
    const float* w_scales;   // fp32 [experts, k/128, n]
    const float* a_scales;   // fp32 [k/128, m_total]
    const int* counts;
    const int* offsets;
    __nv_bfloat16* out;      // [m_total, n], row pitch out_ld
    int64_t out_ld;
    int experts;
    int m_total;
    int n;
    int k_blocks;
    int n_blocks;
  };

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<typename T::SmemLayoutX>, 1024> x;
    cute::array_aligned<uint8_t, kStages * T::kPackedBytes, 128> w;
    cute::array_aligned<float, kStages * T::kBlockW, 16> ws;
    cute::array_aligned<float, kStages * T::kAsStage, 16> as;
    cute::array_aligned<uint8_t, T::kConsumerWGs * T::kBlockT * kPitch, 128> epi;
    uint64_t full[kStages];
    uint64_t empty[kStages];
    uint32_t lut[4];  // e4m3(0..7) twice: read per lane, the words stay in registers
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on sm_90");

  static Params to_params(MoeW4A8Params const& p) {
    auto shape_x = make_shape(p.m_total, p.k);
    Tensor mX = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.a)), shape_x,
                            make_stride(static_cast<int64_t>(p.k), _1{}));
    auto tma_x = make_tma_copy(SM90_TMA_LOAD{}, mX, take<0, 2>(typename T::SmemLayoutX{}),
                               Shape<Int<T::kBlockT>, Int<T::kBlockK>>{}, Int<1>{});
    return Params{tma_x,
                  shape_x,
                  static_cast<const uint8_t*>(p.b),
                  p.b_scales,
                  p.a_scales,
                  p.counts,
                  p.offsets,
                  static_cast<__nv_bfloat16*>(p.out),
                  p.out_ld,
                  p.experts,
                  p.m_total,
                  p.n,
                  p.k / 128,
                  p.n / 128};
  }

  static KernelInfo info() {
    return KernelInfo{TileConfig{T::kBlockT, T::kBlockW, T::kBlockK, kStages, T::kConsumerWGs, 1, 1}, kThreads,
                      kSmemBytes, T::kProducerRegs, T::kConsumerRegs};
  }

  // ---- producer: warp 0 of warp group 0 ---------------------------------------------------------
  template <class SmemX>
  __device__ void produce(Params const& p, SharedStorage& ss, SmemX& sX) const {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    Scheduler sched(p.counts, p.offsets, p.experts, p.n_blocks, 0);
    State write{0, 1u};  // every buffer starts empty
    Tensor mX = p.tma_x.get_tma_tensor(p.shape_x);
    auto cta_x = p.tma_x.get_slice(0);
    Tensor tXsX = group_modes<0, 3>(cta_x.partition_D(sX));  // (TMA, stage)
    WorkTile t;
    while (sched.next(t)) {
      const uint8_t* wsrc = p.w + (static_cast<int64_t>(t.expert) * p.n_blocks + t.n_block) * p.k_blocks * T::kPackedBytes;
      const float* ssrc = p.w_scales + static_cast<int64_t>(t.expert) * p.k_blocks * p.n + t.n_block * T::kBlockW;
      const float* asrc = p.a_scales + t.row_begin;
      for (int kb = 0; kb < p.k_blocks; ++kb) {
        uint64_t* full = &ss.full[write.index];
        bounded_wait(&ss.empty[write.index], write.phase);
        if (lane == 0) {
          cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(full, T::kTxBytes);
          Tensor gX = local_tile(domain_offset(make_coord(t.row_begin, 0), mX), Shape<Int<T::kBlockT>, Int<T::kBlockK>>{},
                                 make_coord(_0{}, kb));
          copy(p.tma_x.with(*full), group_modes<0, 3>(cta_x.partition_S(gX)), tXsX(_, write.index));
          SM90_BULK_COPY_G2S::copy(wsrc + static_cast<int64_t>(kb) * T::kPackedBytes, full,
                                   ss.w.data() + write.index * T::kPackedBytes, T::kPackedBytes);
          SM90_BULK_COPY_G2S::copy(ssrc + static_cast<int64_t>(kb) * p.n, full, ss.ws.data() + write.index * T::kBlockW,
                                   T::kWScaleBytes);
        }
        // Token scales: rows past the expert's tokens read as zero (their products are never stored).
        const float* a_kb = asrc + static_cast<int64_t>(kb) * p.m_total;
        const uint32_t dst = cute::cast_smem_ptr_to_uint(ss.as.data() + write.index * T::kAsStage);
        CUTE_UNROLL
        for (int j = 0; j < T::kBlockT / 32; ++j) {
          const int r = lane + 32 * j;
          const bool ok = r < t.rows;
          cp_async_4(dst + 4u * T::as_index(r), ok ? a_kb + r : p.a_scales, ok ? 4u : 0u);
        }
        cp_async_arrive(full);
        write.advance();
      }
    }
  }

  // ---- consumer: one warp group's 64 weight rows x 128 tokens ----------------------------------
  // A fragments of one K block: (MMA, 1, 4 K steps) e4m3 registers, 4 x 32 bits per K step.
  using FragA = decltype(make_tensor<Element>(partition_shape_A(typename T::TiledMma{}, Shape<_64, Int<T::kBlockK>>{})));

  // Loads and converts this thread's values of the K block in stage `s` (two 16-byte loads; the
  // sign-magnitude code of w4a8_rs_layout.hpp: 8 integer instructions per 8 values).
  __device__ __forceinline__ static void convert_block(SharedStorage& ss, int s, int g, int wt, uint32_t t0,
                                                       uint32_t t1, FragA& f) {
    const uint32_t base = cute::cast_smem_ptr_to_uint(ss.w.data() + s * T::kPackedBytes + g * 4096 + wt * 16);
    const uint4 h0 = ld_shared_u4(base);
    const uint4 h1 = ld_shared_u4(base + 2048);
    const uint32_t words[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    Tensor f32 = recast<uint32_t>(f);
    static_assert(decltype(size(f32))::value == 16, "4 registers per K step");
    CUTE_UNROLL
    for (int i = 0; i < 8; ++i) {
      const uint32_t x = words[i];
      if constexpr ((T::kStudy & 1) != 0) {
        f32(2 * i) = x;
        f32(2 * i + 1) = x >> 16;
      } else {
        f32(2 * i) = prmt(t0, t1, x & 0x7777u) | (x & 0x80808080u);
        f32(2 * i + 1) = prmt(t0, t1, (x >> 16) & 0x7777u) | ((x << 4) & 0x80808080u);
      }
    }
  }

  // Four m64n128k32 wgmmas of one K block from zero; `f` must stay untouched (and alive: fenced
  // after the wait) until they complete.
  template <class TiledMma, class FrgB, class Part>
  __device__ __forceinline__ static void issue(TiledMma& mma, FragA& f, FrgB const& tCrB, int s, Part& part) {
    warpgroup_fence_operand(f);
    warpgroup_fence_operand(part);
    warpgroup_arrive();
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int k = 0; k < size<2>(f); ++k) {
      cute::gemm(mma, f(_, _, k), tCrB(_, _, k, s), part);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  }

  template <class SmemX, class Acc>
  __device__ __forceinline__ void mma(Params const& p, SharedStorage& ss, SmemX const& sX, State& read, int g, int wt,
                                      Acc& acc) const {
    typename T::TiledMma tiled_mma;
    auto thr = tiled_mma.get_slice(wt);
    Tensor tCrB = thr.partition_fragment_B(sX);  // (MMA, 1, 4, stage) descriptors
    const int wrow0 = 64 * g + (wt / 32) * 16 + (wt % 32) / 4;  // weight rows wrow0, wrow0 + 8
    const int q = wt % 4;                                        // tokens 2q + 8i + {0, 1}
    clear(acc);
    // The table e4m3(0..7) comes from shared memory (two copies, by lane parity) so ptxas keeps
    // it in registers instead of copying immediates before every prmt.
    const int pick = 2 * (wt & 1);
    const uint32_t t0 = ss.lut[pick], t1 = ss.lut[pick + 1];
    const int kbs = p.k_blocks;

    // acc += part * a_scale[token] * w_scale[row] for the block in stage s, then the stage is
    // released. C layout (m64nNk32): value i -> row + 8 * ((i >> 1) & 1), token 2q + (i & 1) +
    // 8 * (i / 4); the token scales come 4 at a time (tokens of values 8c .. 8c + 7).
    auto promote = [&](auto& pt, int s) {
      warpgroup_fence_operand(pt);
      const float w0 = ss.ws[s * T::kBlockW + wrow0];
      const float w1 = ss.ws[s * T::kBlockW + wrow0 + 8];
      CUTE_UNROLL
      for (int c = 0; c < T::kBlockT / 16; ++c) {
        const float4 a4 = *reinterpret_cast<const float4*>(&ss.as[s * T::kAsStage + q * T::kAsRow + 4 * c]);
        CUTE_UNROLL
        for (int e = 0; e < 8; ++e) {
          const int i = 8 * c + e;
          const float a = (i & 4) ? ((i & 1) ? a4.w : a4.z) : ((i & 1) ? a4.y : a4.x);
          if constexpr ((T::kStudy & 2) != 0) acc(i) += pt(i);
          else acc(i) = fmaf(pt(i) * a, (i & 2) ? w1 : w0, acc(i));
        }
      }
      asm volatile("" ::: "memory");  // the shared reads above stay before the release
      __syncwarp();
      if ((wt & 31) == 0) cutlass::arch::ClusterBarrier::arrive(&ss.empty[s]);
    };

    FragA f0, f1;
    Tensor p0 = partition_fragment_C(tiled_mma, Shape<_64, Int<T::kBlockT>>{});
    bounded_wait(&ss.full[read.index], read.phase);
    convert_block(ss, read.index, g, wt, t0, t1, f0);
    // Block kb's fragments are in `cur`; block kb + 1's are converted into `nxt` while block kb's
    // wgmmas run. Two K blocks per loop iteration keep the buffers' names constant. (Issuing
    // block kb + 1 before promoting kb, with a second accumulator, measured the same: run 31.)
    auto step = [&](int kb, FragA& cur, FragA& nxt) {
      const int s = read.index;
      issue(tiled_mma, cur, tCrB, s, p0);
      State nx = read;
      nx.advance();
      if (kb + 1 < kbs) {
        bounded_wait(&ss.full[nx.index], nx.phase);
        convert_block(ss, nx.index, g, wt, t0, t1, nxt);
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(cur);
      promote(p0, s);
      read = nx;
    };
    int kb = 0;
    for (; kb + 1 < kbs; kb += 2) {
      step(kb, f0, f1);
      step(kb + 1, f1, f0);
    }
    if (kb < kbs) step(kb, f0, f1);
  }

  // Warp group g's piece to out[token, n_block * 128 + 64 g + ...], staged token-major.
  template <class Acc>
  __device__ __forceinline__ void store(Params const& p, SharedStorage& ss, Acc const& acc, WorkTile const& t, int g,
                                        int wt) const {
    const uint32_t bar = static_cast<uint32_t>(NamedBarrierId::epilogue_wg0) + g;
    uint8_t* staged = ss.epi.data() + g * T::kBlockT * kPitch;
    const int frow = (wt / 32) * 16 + (wt % 32) / 4;  // weight row inside the group's 64
    const int q = wt % 4;
    cutlass::arch::NamedBarrier::sync(128, bar);  // the previous tile's copy-out has read the staging
    CUTE_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      const int tok = 2 * q + (i & 1) + 8 * (i / 4);
      const int col = frow + ((i & 2) ? 8 : 0);
      *reinterpret_cast<__nv_bfloat16*>(staged + tok * kPitch + col * 2) = __float2bfloat16_rn(acc(i));
    }
    cutlass::arch::NamedBarrier::sync(128, bar);
    constexpr int kChunks = 64 * 2 / 16;  // 16-byte pieces per token row of the group
    CUTE_UNROLL
    for (int it = 0; it < T::kBlockT * kChunks / 128; ++it) {
      const int idx = wt + 128 * it;
      const int tok = idx / kChunks, c = idx % kChunks;
      if (tok < t.rows) {
        const uint4 v = *reinterpret_cast<const uint4*>(staged + tok * kPitch + c * 16);
        *reinterpret_cast<uint4*>(p.out + (t.row_begin + tok) * p.out_ld + t.n_block * T::kBlockW + 64 * g + 8 * c) = v;
      }
    }
  }

  __device__ void operator()(Params const& p, char* smem_buf) const {
    const uint32_t base = cute::cast_smem_ptr_to_uint(smem_buf);
    SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem_buf + ((1024u - (base & 1023u)) & 1023u));
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
    const int warp_group = warp / 4;
    if (threadIdx.x == 0) {
      for (int i = 0; i < kStages; ++i) {
        cutlass::arch::ClusterTransactionBarrier::init(&ss.full[i], 1 + T::kScaleLanes);
        cutlass::arch::ClusterBarrier::init(&ss.empty[i], T::kConsumerWarps);
      }
      cute::prefetch_tma_descriptor(p.tma_x.get_tma_descriptor());
      const W4Lut l = int4_lut();  // its positive half P = e4m3(0..7)
      ss.lut[0] = ss.lut[2] = l.p0;
      ss.lut[1] = ss.lut[3] = l.p1;
    }
    cutlass::arch::fence_barrier_init();
    __syncthreads();
    Tensor sX = make_tensor(make_smem_ptr(ss.x.data()), typename T::SmemLayoutX{});
    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (warp == 0) produce(p, ss, sX);
    } else {
      cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
      const int ct = static_cast<int>(threadIdx.x) - 128;
      const int g = ct / 128, wt = ct % 128;
      Scheduler sched(p.counts, p.offsets, p.experts, p.n_blocks, 0);
      State read{};
      WorkTile t;
      while (sched.next(t)) {
        Tensor acc = partition_fragment_C(typename T::TiledMma{}, Shape<_64, Int<T::kBlockT>>{});
        mma(p, ss, sX, read, g, wt, acc);
        store(p, ss, acc, t, g, wt);
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    moe_w4a8_rs_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char smem_buf[];
  Kernel{}(params, smem_buf);
#endif
}

// Host: the persistent grid (one CTA per SM or p.num_ctas, at most the tile count bound).
template <class Kernel>
cudaError_t launch_moe_w4a8_rs(MoeW4A8Params const& p, cudaStream_t stream) {
  const long long tiles = (static_cast<long long>(p.m_total) / Kernel::T::kBlockT + p.experts) * (p.n / 128);
  if (tiles <= 0 || p.k % 128 != 0 || p.n % 128 != 0 || p.format != W4Format::int4_g128) return cudaErrorInvalidValue;
  int ctas = 0;
  if (const cudaError_t g = persistent_grid(p.num_ctas, tiles, ctas); g != cudaSuccess) return g;
  const typename Kernel::Params kp = Kernel::to_params(p);
  auto* fn = moe_w4a8_rs_kernel<Kernel>;
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSmemBytes);
  if (e != cudaSuccess) return e;
  fn<<<ctas, Kernel::kThreads, Kernel::kSmemBytes, stream>>>(kp);
  return cudaGetLastError();
}

}  // namespace xstage::kernels::moe
