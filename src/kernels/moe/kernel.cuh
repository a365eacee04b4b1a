// The MoE grouped-GEMM kernel assembled from its parts: grouped persistent scheduler,
// mainloop (TMA producer + FP8 wgmma consumers with fp32 promotion), epilogue policy. One
// CTA per SM, 128 producer threads + 2 or 3 consumer warp groups, all shared memory in one
// struct; optionally clusters of 2 or 4 CTAs sharing operands by TMA multicast.
// Included only by the launch_*.cu files, which instantiate it.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/common/kernel_entry.cuh"
#include "kernels/common/launch.cuh"
#include "kernels/common/shared_storage.cuh"
#include "kernels/moe/epilogue.cuh"
#include "kernels/moe/launch.hpp"
#include "kernels/moe/mainloop.cuh"
#include "kernels/moe/params.hpp"
#include "kernels/moe/tile_scheduler.cuh"

namespace xstage::kernels::moe {

template <class Traits, template <class> class EpiloguePolicy>
struct MoeGemmKernel {
  using T = Traits;
  using Mainloop = MoeMainloop<T>;
  using Epilogue = EpiloguePolicy<T>;
  using Pipeline = typename Mainloop::Pipeline;
  using State = typename Mainloop::State;
  using Scheduler = GroupedScheduler<T::kBlockM, T::kClusterM, T::kClusterN, T::kGateUpSerial ? 2 : 1>;
  static constexpr int kThreads = T::kThreads;
  static constexpr int kClusterSize = T::kClusterSize;

  struct Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    const int* counts;
    const int* offsets;
    int experts;
    int n_blocks;
  };

  struct SharedStorage {
    cute::array_aligned<typename T::Element, cute::cosize_v<typename T::SmemLayoutA>, 1024> a;
    cute::array_aligned<typename T::Element, cute::cosize_v<typename T::SmemLayoutB>, 1024> b;
    cute::array_aligned<uint8_t, Epilogue::kSmemBytes, 128> epi;
    typename T::ScaleStorage scales;
    typename Pipeline::Storage pipe;
  };
  static constexpr int kSmemBytes = xstage::kernels::shared_storage_bytes<SharedStorage>();
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on sm_90");

  // Output tile columns: plain GEMMs cover n in block_n steps; the gate/up fusion covers n/2
  // output channels in steps of 128 (the serial gate/up tile: each visited twice, Scheduler).
  static int n_blocks(MoeGemmParams const& p) {
    return T::kGateUp ? (p.n / 2) / 128 : (p.n + T::kBlockN - 1) / T::kBlockN;
  }

  static Params to_params(MoeGemmParams const& p, typename Epilogue::Params const& ep) {
    return Params{Mainloop::to_params(p), ep, p.counts, p.offsets, p.experts, n_blocks(p)};
  }

  static KernelInfo info() {
    return KernelInfo{TileConfig{T::kBlockM, T::kBlockN, T::kBlockK, T::kStages, T::kConsumerWGs, T::kClusterM,
                                 T::kClusterN},
                      kThreads, kSmemBytes, T::kProducerRegs, T::kConsumerRegs};
  }

  __device__ void operator()(Params const& params, char* smem_buf) const {
    SharedStorage& ss = XSTAGE_SHARED_STORAGE(SharedStorage, smem_buf);
    const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
    const int warp_group = warp / 4;

    if (threadIdx.x == 0) {
      Pipeline::init(ss.pipe, T::kConsumerWarps, T::kFullArrivals);
      Mainloop::prefetch_descriptors(params.mainloop);
    }
    cutlass::arch::fence_barrier_init();
    // In a cluster the partners' barriers must be initialised before anyone multicasts or
    // arrives remotely.
    if constexpr (kClusterSize > 1) cute::cluster_sync();
    else __syncthreads();
    const int cta_rank = kClusterSize > 1 ? static_cast<int>(cute::block_rank_in_cluster()) : 0;

    Pipeline pipe{&ss.pipe};
    Tensor sA = make_tensor(make_smem_ptr(ss.a.data()), typename T::SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(ss.b.data()), typename T::SmemLayoutB{});
    const Mainloop mainloop{};

    if (warp_group == 0) {
      // Producer: give registers away; lane 0 of warp 0 loads A and B, warp 1 the scales, the
      // rest is done.
      cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
      if (threadIdx.x == 0) {
        Scheduler sched(params.counts, params.offsets, params.experts, params.n_blocks, cta_rank);
        State write = Pipeline::producer_start();
        WorkTile tile;
        while (sched.next(tile)) mainloop.load(params.mainloop, pipe, write, tile, cta_rank, sA, sB);
        if constexpr (kClusterSize > 1) pipe.producer_tail(write);
      } else if constexpr (T::kSmemScales) {
        if (warp == 1) {
          Scheduler sched(params.counts, params.offsets, params.experts, params.n_blocks, cta_rank);
          State write = Pipeline::producer_start();
          WorkTile tile;
          while (sched.next(tile)) mainloop.copy_scales(params.mainloop, pipe, write, tile, ss.scales);
        }
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
      // From the warp index broadcast above, so the compiler knows both are warp-uniform and
      // keeps the wgmma descriptors in uniform registers.
      const int wg = warp_group - 1;
      const int wt = static_cast<int>(threadIdx.x) % 128;
      const int wm = wg / T::kWgNThreads;
      const int wn = wg % T::kWgNThreads;
      Epilogue::consumer_init(wn);
      Mainloop::consumer_init(params.mainloop.schedule, wg);
      const Epilogue epilogue{};
      Scheduler sched(params.counts, params.offsets, params.experts, params.n_blocks, cta_rank);
      State read{};
      static_assert(T::kSmemScales, "the standalone kernels carry their scales in the stages");
      const int schedule = params.mainloop.schedule;
      if constexpr (T::kDual) {
        auto store_dual = [&](auto const& acc_gate, auto const& acc_up, WorkTile const& t) {
          epilogue.store_dual(params.epilogue, ss.epi.data(), acc_gate, acc_up, t, wt, wm);
        };
        if (schedule & Mainloop::kSchedulePingPong)
          mainloop.template mma_tiles_dual<true>(params.mainloop, pipe, read, sched, wt, wm, sA, sB, &ss.scales, store_dual);
        else
          mainloop.template mma_tiles_dual<false>(params.mainloop, pipe, read, sched, wt, wm, sA, sB, &ss.scales, store_dual);
      } else {
        auto store = [&](auto const& acc, WorkTile const& t) {
          epilogue.store(params.epilogue, ss.epi.data(), acc, t, wt, wm, wn);
        };
        if constexpr (T::kOverlapAllowed) {
          if (schedule & Mainloop::kScheduleOverlap) {
            mainloop.mma_tiles(params.mainloop, pipe, read, sched, schedule, wt, wm, wn, sA, sB, &ss.scales, store);
            return;
          }
        }
        if (schedule & Mainloop::kSchedulePingPong)
          mainloop.template mma_tiles_serial<true>(params.mainloop, pipe, read, sched, wt, wm, wn, sA, sB, &ss.scales, store);
        else
          mainloop.template mma_tiles_serial<false>(params.mainloop, pipe, read, sched, wt, wm, wn, sA, sB, &ss.scales,
                                                    store);
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    moe_gemm_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
  XSTAGE_RUN_KERNEL(Kernel, params);
}

// Upper bound of the CTA tile count without reading the device counts: every expert adds at
// most one partial cluster m-block.
template <class Kernel>
long long moe_max_tiles(MoeGemmParams const& p) {
  constexpr int bm = Kernel::T::kBlockM * Kernel::T::kClusterM;
  constexpr int cn = Kernel::T::kClusterN;
  return (static_cast<long long>(p.m_total) / bm + p.experts) * ((Kernel::n_blocks(p) + cn - 1) / cn) *
         Kernel::kClusterSize;
}

// Host: builds the TMA descriptors and launches the persistent grid on `stream`. The
// epilogue's parameters come from the caller (a fused Mega-MoE kernel passes its remote
// destination); the local policies derive them from p (overload below).
template <class Kernel>
cudaError_t launch_moe_gemm(MoeGemmParams const& p, typename Kernel::Epilogue::Params const& ep, cudaStream_t stream) {
  const long long tiles = moe_max_tiles<Kernel>(p);
  if (tiles <= 0 || p.k % 128 != 0 || p.n % 128 != 0) return cudaErrorInvalidValue;
  int ctas = 0;
  if (const cudaError_t g = persistent_grid(p.num_ctas, tiles, ctas); g != cudaSuccess) return g;
  const typename Kernel::Params kp = Kernel::to_params(p, ep);
  auto* fn = moe_gemm_kernel<Kernel>;
  const cudaError_t e =
      launch_persistent<Kernel::kClusterSize>(fn, kp, ctas, Kernel::kThreads, Kernel::kSmemBytes, stream);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

template <class Kernel>
cudaError_t launch_moe_gemm(MoeGemmParams const& p, cudaStream_t stream) {
  return launch_moe_gemm<Kernel>(p, Kernel::Epilogue::to_params(p), stream);
}

template <TileConfig kTile, bool kGateUp, template <class> class EpiloguePolicy>
using ShippedKernel = MoeGemmKernel<
    MoeTraits<kTile.block_m, kTile.block_n, kTile.stages, kGateUp, kTile.cluster_m, kTile.cluster_n>, EpiloguePolicy>;

}  // namespace xstage::kernels::moe
