// A build without XSTAGE_MEGA_W4A8_RS: the register-operand W4A8 Mega-MoE kernel is not compiled
// (mega_moe_w4a8_rs.cu); the operator refuses its weight layouts with a named error.
#include "kernels/moe/mega_launch.hpp"

namespace xstage::kernels::moe {

bool mega_moe_w4a8_rs_built() { return false; }

cudaError_t mega_moe_launch_w4a8_rs(const MegaMoeArgs&, const MegaWeights&, int, cudaStream_t) {
  return cudaErrorNotSupported;
}

}  // namespace xstage::kernels::moe
