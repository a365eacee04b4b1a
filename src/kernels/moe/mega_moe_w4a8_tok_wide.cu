// The per-token W4A8 Mega-MoE kernel's wide tile (MegaW4A8TokKernel<kMx, true>,
// MegaTile::m128n256_tok: 128-row blocks, two weight chunks per K block; docs/megamoe.md §Wide
// per-token tiles), both formats. Built with XSTAGE_MEGA_W4A8_TOK and XSTAGE_MEGA_TOK_WIDE.
#include "kernels/moe/mega_w4a8_tok_launch.cuh"

namespace xstage::kernels::moe {

bool mega_moe_w4a8_tok_wide_built() { return true; }

cudaError_t mega_moe_launch_w4a8_tok_wide(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  return w.format == MegaWeightFormat::w4a8_mxfp4_tok ? mega_launch_tok<true, true>(m, w, ctas, s)
                                                      : mega_launch_tok<false, true>(m, w, ctas, s);
}

}  // namespace xstage::kernels::moe
