// A build without XSTAGE_MEGA_W4A8_TOK: the per-token W4A8 Mega-MoE kernel is not compiled
// (mega_moe_w4a8_tok.cu); the operator refuses per-token activations with a named error.
#include "kernels/moe/mega_launch.hpp"

namespace xstage::kernels::moe {

bool mega_moe_w4a8_tok_built() { return false; }

cudaError_t mega_moe_launch_w4a8_tok(const MegaMoeArgs&, const MegaWeights&, int, cudaStream_t) {
  return cudaErrorNotSupported;
}

}  // namespace xstage::kernels::moe
