// W4A8 grouped GEMM with the weights as wgmma's register operand (INT4 group-128, prepacked
// layout of w4a8_rs_layout.hpp), bf16 output, 128 tokens x 128 output columns per tile: many
// tokens per expert.
#include <cstdio>
#include <cstdlib>

#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsBf16M128N128 = MoeW4A8RsKernel<W4RsTraits<6, false>>;

cudaError_t moe_w4a8rs_bf16_m128n128(const MoeW4A8Params& p, cudaStream_t stream) {
#ifdef XSTAGE_W4RS_STUDY
  // Measurement build: XSTAGE_W4RS_STUDY=1..3 runs a variant with parts left out (W4RsTraits::kStudy).
  if (const char* e = std::getenv("XSTAGE_W4RS_STUDY"); e != nullptr) {
    switch (std::atoi(e)) {
      case 1: return launch_moe_w4a8_rs<MoeW4A8RsKernel<W4RsTraits<6, false, 1>>>(p, stream);
      case 2: return launch_moe_w4a8_rs<MoeW4A8RsKernel<W4RsTraits<6, false, 2>>>(p, stream);
      case 3: return launch_moe_w4a8_rs<MoeW4A8RsKernel<W4RsTraits<6, false, 3>>>(p, stream);
      case 0: break;
      default:  // an unknown variant must not time the shipped kernel under its name
        std::fprintf(stderr, "XSTAGE_W4RS_STUDY=%s: this kernel has variants 0, 1, 2, 3\n", e);
        return cudaErrorInvalidValue;
    }
  }
#endif
  return launch_moe_w4a8_rs<KernelW4A8RsBf16M128N128>(p, stream);
}
KernelInfo moe_w4a8rs_bf16_m128n128_info() { return KernelW4A8RsBf16M128N128::info(); }

}  // namespace xstage::kernels::moe
