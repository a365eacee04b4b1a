// The Mega-MoE kernel with 64 x 256 tiles (MegaTraits64; the default, docs/megamoe.md).
#include "kernels/moe/mega_launch.cuh"

namespace xstage::kernels::moe {

cudaError_t mega_moe_launch_m64n256(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  return mega_moe_launch_with<MegaTraits64>(m, w, ctas, s);
}

}  // namespace xstage::kernels::moe
