// The Mega-MoE kernel with 128 x 256 tiles (MegaTraits128; docs/megamoe.md "Tile configurations").
#include "kernels/moe/mega_launch.cuh"

namespace xstage::kernels::moe {

cudaError_t mega_moe_launch_m128n256(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s) {
  return mega_moe_launch_with<MegaTraits128>(m, w, ctas, s);
}

}  // namespace xstage::kernels::moe
