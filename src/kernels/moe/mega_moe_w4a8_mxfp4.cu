// The Mega-MoE kernel with W4A8 MXFP4 weights (MegaW4A8Kernel, 64 x 256 tiles; docs/megamoe.md).
#include "kernels/moe/mega_launch.cuh"

namespace xstage::kernels::moe {

cudaError_t mega_moe_launch_w4a8_mxfp4(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  return mega_moe_w4a8_launch_with<true>(m, w, ctas, s);
}

}  // namespace xstage::kernels::moe
