// The Mega-MoE kernel with per-token W4A8 activations (MegaW4A8TokKernel, 256-row blocks;
// docs/megamoe.md "Per-token activations in the fused kernel"): INT4 two-level (W1
// int4_rs_lut_glu, W2 int4_rs_lut) and MXFP4 (mxfp4_rs_glu, mxfp4_rs), both instantiations here.
// Built with XSTAGE_MEGA_W4A8_TOK only.
#include "kernels/moe/mega_w4a8_tok_launch.cuh"

namespace xstage::kernels::moe {

bool mega_moe_w4a8_tok_built() { return true; }

cudaError_t mega_moe_launch_w4a8_tok(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  return w.format == MegaWeightFormat::w4a8_mxfp4_tok ? mega_launch_tok<true, false>(m, w, ctas, s)
                                                      : mega_launch_tok<false, false>(m, w, ctas, s);
}

}  // namespace xstage::kernels::moe
