// The launcher of one Mega-MoE kernel instantiation (one per tile configuration, each in its
// own translation unit: mega_moe_m64n256.cu, mega_moe_m128n256.cu): TMA descriptors of both
// GEMMs, epilogue destinations, cooperative launch (every CTA resident, since CTAs wait on each
// other's counters).
#pragma once
#include "kernels/moe/mega_kernel.cuh"
#include "kernels/moe/mega_launch.hpp"

namespace xstage::kernels::moe {

template <class Traits>
cudaError_t mega_moe_launch_with(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  using K = MegaMoeKernel<Traits>;
  const EpMoeArgs& a = m.ep;
  if (ctas <= 0 || a.world > kEpMaxRanks || a.experts > kEpMaxExperts || a.experts_per_rank > kMegaMaxLocalExperts)
    return cudaErrorInvalidValue;
  MoeGemmParams g1;
  g1.a = a.recv_x_at[a.rank];
  g1.a_scales = a.recv_xs_at[a.rank];
  g1.b = w.w1;
  g1.b_scales = w.w1_scales;
  g1.experts = a.experts_per_rank;
  g1.m_total = a.cap;
  g1.n = 2 * m.intermediate;
  g1.k = a.hidden;
  MoeGemmParams g2 = g1;
  g2.a = m.h;
  g2.a_scales = m.h_scales;
  g2.b = w.w2;
  g2.b_scales = w.w2_scales;
  g2.n = a.hidden;
  g2.k = m.intermediate;

  typename K::Params kp{};
  kp.l1 = K::Mainloop::to_params(g1);
  kp.l2 = K::Mainloop::to_params(g2);
  kp.l2.gate_up = false;
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
  cd.hook = traced && !K::kStoreWarps ? m.trace_hook : nullptr;
  kp.epi2.dest = cd;
  kp.epi2.n = a.hidden;
  kp.m = m;
  constexpr ::xstage::moe::MegaTileShape shape = ::xstage::moe::mega_tile_shape(Traits::kTile);
  kp.n1 = ::xstage::moe::mega_l1_tiles(shape, m.intermediate);
  kp.n2 = ::xstage::moe::mega_l2_tiles(shape, a.hidden);

  auto* fn = mega_moe_kernel<Traits>;
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, K::kSmemBytes);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.gridDim = dim3(static_cast<unsigned>(ctas), 1, 1);
  cfg.blockDim = dim3(K::kThreads, 1, 1);
  cfg.dynamicSmemBytes = K::kSmemBytes;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  e = cudaLaunchKernelEx(&cfg, fn, kp);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace xstage::kernels::moe
