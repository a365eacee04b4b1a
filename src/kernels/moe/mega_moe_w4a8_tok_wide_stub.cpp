// A build without XSTAGE_MEGA_TOK_WIDE (or without the per-token kernel): the wide per-token tile
// (mega_moe_w4a8_tok_wide.cu) is not compiled; the operator never picks it and refuses it by name.
#include "kernels/moe/mega_launch.hpp"

namespace xstage::kernels::moe {

bool mega_moe_w4a8_tok_wide_built() { return false; }

cudaError_t mega_moe_launch_w4a8_tok_wide(const MegaMoeArgs&, const MegaWeights&, int, cudaStream_t) {
  return cudaErrorNotSupported;
}

}  // namespace xstage::kernels::moe
