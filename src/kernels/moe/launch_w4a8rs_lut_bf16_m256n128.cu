// The register-operand INT4 kernel for two-level scales (MoeWeightLayout::int4_rs_lut), bf16
// output, 256-token tiles (two 128-token pieces per converted fragment, as w4a8rs_bf16_m256n128).
#include <cstdio>
#include <cstdlib>

#include "kernels/moe/w4a8_rs.cuh"

namespace xstage::kernels::moe {

using KernelW4A8RsLutBf16M256N128 = MoeW4A8RsKernel<W4RsTraits<4, false, 0, false, 2, true>>;

cudaError_t moe_w4a8rs_lut_bf16_m256n128(const MoeW4A8Params& p, cudaStream_t stream) {
#if defined(XSTAGE_W4RS_STUDY) || defined(XSTAGE_W4A8_TRACE)
  // Measurement builds (trace or study): XSTAGE_W4RS_STUDY = 1 (no conversion), 2 (no token
  // scales), 4 (no promotion) or 5 (neither conversion nor promotion) runs a variant with parts
  // left out (W4RsTraits::kStudy, wrong results); 0 the shipped kernel, anything else an error.
  if (const char* e = std::getenv("XSTAGE_W4RS_STUDY"); e != nullptr) {
    switch (std::atoi(e)) {
      case 1: return launch_moe_w4a8_rs<MoeW4A8RsKernel<W4RsTraits<4, false, 1, false, 2, true>>>(p, stream);
      case 2: return launch_moe_w4a8_rs<MoeW4A8RsKernel<W4RsTraits<4, false, 2, false, 2, true>>>(p, stream);
      case 4: return launch_moe_w4a8_rs<MoeW4A8RsKernel<W4RsTraits<4, false, 4, false, 2, true>>>(p, stream);
      case 5: return launch_moe_w4a8_rs<MoeW4A8RsKernel<W4RsTraits<4, false, 5, false, 2, true>>>(p, stream);
      case 0: break;
      default:  // an unknown variant must not time the shipped kernel under its name
        std::fprintf(stderr, "XSTAGE_W4RS_STUDY=%s: this kernel has variants 0, 1, 2, 4, 5\n", e);
        return cudaErrorInvalidValue;
    }
  }
#endif
  return launch_moe_w4a8_rs<KernelW4A8RsLutBf16M256N128>(p, stream);
}
KernelInfo moe_w4a8rs_lut_bf16_m256n128_info() { return KernelW4A8RsLutBf16M256N128::info(); }

}  // namespace xstage::kernels::moe
