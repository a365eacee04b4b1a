// The Mega-MoE kernel on the register-operand W4A8 GEMM (MegaW4A8RsKernel, 64 x 256 tiles;
// docs/megamoe.md "W4A8 on the register-operand GEMM"): INT4 two-level (int4_rs_lut) and MXFP4
// (mxfp4_rs) weights, both instantiations here. Built with XSTAGE_MEGA_W4A8_RS only.
#include "kernels/moe/mega_launch.cuh"
#include "kernels/moe/mega_w4a8_rs_kernel.cuh"

namespace xstage::kernels::moe {

namespace {

template <bool kMx>
cudaError_t launch_rs(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  using K = MegaW4A8RsKernel<kMx>;
  const MegaWeightFormat want = kMx ? MegaWeightFormat::w4a8_mxfp4_rs : MegaWeightFormat::w4a8_int4_lut;
  if (!mega_args_fit(m, ctas) || w.format != want || m.intermediate % 128 != 0 || m.ep.hidden % 128 != 0)
    return cudaErrorInvalidValue;
  MoeW4A8Params g1, g2;
  mega_gemm_params(m, w, g1, g2);
  // The grouped kernel's SwiGLU epilogue writes h where HDestination names it (mega_epilogue.cuh):
  // rows of `intermediate` bytes, scales [I/128, cap].
  g1.out = m.h;
  g1.out_ld = m.intermediate;
  g1.out_scales = m.h_scales;
  g1.row_weights = m.ep.recv_w_at[m.ep.rank];
  g1.format = g2.format = kMx ? W4Format::mxfp4 : W4Format::int4_g128;
  typename K::Params kp{};
  kp.l1 = K::Rs::to_params(g1);
  kp.l2 = K::Rs::to_params(g2);
  mega_common_params<K>(m, false, kp);
  kp.b1 = MegaTokenBoxes<typename K::T>::make(g1);
  kp.b2 = MegaTokenBoxes<typename K::T>::make(g2);
  return mega_cooperative_launch(mega_moe_w4a8_rs_kernel<kMx>, kp, ctas, K::kThreads, K::kSmemBytes, s);
}

}  // namespace

bool mega_moe_w4a8_rs_built() { return true; }

cudaError_t mega_moe_launch_w4a8_rs(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  return w.format == MegaWeightFormat::w4a8_mxfp4_rs ? launch_rs<true>(m, w, ctas, s) : launch_rs<false>(m, w, ctas, s);
}

}  // namespace xstage::kernels::moe
