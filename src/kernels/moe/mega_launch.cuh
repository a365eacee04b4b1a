// The launchers of the Mega-MoE kernel instantiations (one per tile configuration and weight
// format, each in its own translation unit: mega_moe_m64n256.cu, mega_moe_m128n256.cu,
// mega_moe_w4a8_int4.cu, mega_moe_w4a8_mxfp4.cu): GEMM parameters (TMA descriptors), epilogue
// destinations, cooperative launch (every CTA resident, since CTAs wait on each other's counters).
#pragma once
#include "kernels/moe/mega_kernel.cuh"
#include "kernels/moe/mega_launch.hpp"
#include "kernels/moe/mega_w4a8_kernel.cuh"

namespace xstage::kernels::moe {

// Both GEMMs' parameters as the grouped GEMM takes them: Linear-1 reads the received rows and
// W1, Linear-2 h and W2.
inline void mega_gemm_params(const MegaMoeArgs& m, const MegaWeights& w, MoeGemmParams& g1, MoeGemmParams& g2) {
  const EpMoeArgs& a = m.ep;
  g1.a = a.recv_x_at[a.rank];
  g1.a_scales = a.recv_xs_at[a.rank];
  g1.b = w.w1;
  g1.b_scales = w.w1_scales;
  g1.experts = a.experts_per_rank;
  g1.m_total = a.cap;
  g1.n = 2 * m.intermediate;
  g1.k = a.hidden;
  g2 = g1;
  g2.a = m.h;
  g2.a_scales = m.h_scales;
  g2.b = w.w2;
  g2.b_scales = w.w2_scales;
  g2.n = a.hidden;
  g2.k = m.intermediate;
}

// The epilogue destinations, the order's tile counts and the call's arguments, for any of the
// kernels (K::Params has epi1, epi2, m, n1, n2). store_warps: the kernel's store warps write the
// Linear-2 store tail into the trace themselves.
template <class K>
void mega_common_params(const MegaMoeArgs& m, bool store_warps, typename K::Params& kp) {
  const EpMoeArgs& a = m.ep;
  const int parity = static_cast<int>(a.epoch & 1u);
  const bool traced = m.trace != nullptr && m.trace_hook != nullptr;
  kp.epi1.dest = HDestination{m.h, m.intermediate, m.h_scales, a.cap, m.l1_done + size_t(parity) * m.max_blocks,
                              traced ? m.trace_hook : nullptr};
  kp.epi1.row_weights = a.recv_w_at[a.rank];
  CombineDestination cd{};
  for (int r = 0; r < a.world; ++r) cd.at[r] = m.control_local ? a.combine_at[a.rank] : a.combine_at[r];
  cd.recv_src = a.recv_src_at[a.rank];
  cd.hidden = a.hidden;
  cd.spans = m.spans;
  // With store warps the Linear-2 store tail goes into the trace directly (the hook word is the
  // consumers' Linear-1 one, written while the store warps run).
  cd.hook = traced && !store_warps ? m.trace_hook : nullptr;
  kp.epi2.dest = cd;
  kp.epi2.n = a.hidden;
  kp.m = m;
  constexpr ::xstage::moe::MegaTileShape shape = ::xstage::moe::mega_tile_shape(K::T::kTile);
  kp.n1 = ::xstage::moe::mega_l1_tiles(shape, m.intermediate);
  kp.n2 = ::xstage::moe::mega_l2_tiles(shape, a.hidden);
}

// One cooperative launch of `ctas` CTAs.
template <class Params>
cudaError_t mega_cooperative_launch(void (*fn)(Params), const Params& kp, int ctas, int threads, int smem,
                                    cudaStream_t s) {
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.gridDim = dim3(static_cast<unsigned>(ctas), 1, 1);
  cfg.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  e = cudaLaunchKernelEx(&cfg, fn, kp);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

inline bool mega_args_fit(const MegaMoeArgs& m, int ctas) {
  const EpMoeArgs& a = m.ep;
  return ctas > 0 && a.world <= kEpMaxRanks && a.experts <= kEpMaxExperts && a.experts_per_rank <= kMegaMaxLocalExperts;
}

// W8A8 (mega_kernel.cuh), tile configuration Traits.
template <class Traits>
cudaError_t mega_moe_launch_with(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  using K = MegaMoeKernel<Traits>;
  if (!mega_args_fit(m, ctas) || w.format != MegaWeightFormat::w8a8) return cudaErrorInvalidValue;
  MoeGemmParams g1, g2;
  mega_gemm_params(m, w, g1, g2);
  typename K::Params kp{};
  kp.l1 = K::Mainloop::to_params(g1);
  kp.l2 = K::Mainloop::to_params(g2);
  kp.l2.gate_up = false;
  mega_common_params<K>(m, K::kStoreWarps, kp);
  return mega_cooperative_launch(mega_moe_kernel<Traits>, kp, ctas, K::kThreads, K::kSmemBytes, s);
}

// W4A8 (mega_w4a8_kernel.cuh): kMx = MXFP4, else INT4 group-128.
template <bool kMx>
cudaError_t mega_moe_w4a8_launch_with(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  using K = MegaW4A8Kernel<kMx>;
  const MegaWeightFormat want = kMx ? MegaWeightFormat::w4a8_mxfp4 : MegaWeightFormat::w4a8_int4;
  if (!mega_args_fit(m, ctas) || w.format != want) return cudaErrorInvalidValue;
  MoeW4A8Params g1, g2;
  mega_gemm_params(m, w, g1, g2);
  g1.format = g2.format = kMx ? W4Format::mxfp4 : W4Format::int4_g128;
  g1.b_e8m0 = w.w1_e8m0;
  g2.b_e8m0 = w.w2_e8m0;
  // Schedule 0: no ping-pong issue token (the fused kernel never hands the token out; with
  // MoeGemmParams' default of 3 its consumers waited for it forever).
  g1.schedule = g2.schedule = 0;
  typename K::Params kp{};
  kp.l1 = K::W4::to_params(g1);
  kp.l2 = K::W4::to_params(g2);
  if (kp.l1.pingpong != 0 || kp.l2.pingpong != 0) return cudaErrorInvalidValue;
  mega_common_params<K>(m, false, kp);
  return mega_cooperative_launch(mega_moe_w4a8_kernel<kMx>, kp, ctas, K::kThreads, K::kSmemBytes, s);
}

}  // namespace xstage::kernels::moe
