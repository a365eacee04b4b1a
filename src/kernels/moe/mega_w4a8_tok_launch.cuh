// The per-token W4A8 Mega-MoE kernel's launch (MegaW4A8TokKernel<kMx, kWide>), shared by the
// 256 x 128 unit (mega_moe_w4a8_tok.cu) and the wide 128 x 256 one (mega_moe_w4a8_tok_wide.cu).
#pragma once
#include "kernels/moe/mega_launch.cuh"
#include "kernels/moe/mega_w4a8_tok_kernel.cuh"

namespace xstage::kernels::moe {

template <bool kMx, bool kWide>
cudaError_t mega_launch_tok(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  using K = MegaW4A8TokKernel<kMx, kWide>;
  const MegaWeightFormat want = kMx ? MegaWeightFormat::w4a8_mxfp4_tok : MegaWeightFormat::w4a8_int4_lut_tok;
  if (!mega_args_fit(m, ctas) || w.format != want || m.intermediate % 128 != 0 || m.ep.hidden % 128 != 0 ||
      m.h16 == nullptr || m.h_amax == nullptr || m.h_qclaim == nullptr || m.h == nullptr || m.h_scales == nullptr)
    return cudaErrorInvalidValue;
  MoeW4A8Params g1, g2;
  mega_gemm_params(m, w, g1, g2);
  // Linear-1 reads x's per-token scales from the first group of the receive scales (the dispatch
  // writes only that one: mega_prologue<true>); Linear-2 the per-token h scales the quantisation
  // writes ([cap]).
  g1.format = g2.format = kMx ? W4Format::mxfp4 : W4Format::int4_g128;
  typename K::Params kp{};
  kp.l1 = K::Rs::to_params(g1);
  kp.l2 = K::Rs::to_params(g2);
  mega_common_params<K>(m, false, kp);
  kp.h16 = reinterpret_cast<__nv_bfloat16*>(m.h16);
  kp.h_amax = m.h_amax;
  kp.h = m.h;
  kp.h_scales = m.h_scales;
  kp.intermediate = m.intermediate;
  kp.n2_pairs = (m.ep.hidden + 255) / 256;
  kp.b1 = K::Boxes::make(g1);
  kp.b2 = K::Boxes::make(g2);
  return mega_cooperative_launch(mega_moe_w4a8_tok_kernel<kMx, kWide>, kp, ctas, K::kThreads, K::kSmemBytes, s);
}

}  // namespace xstage::kernels::moe
