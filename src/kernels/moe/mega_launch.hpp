// Host entry of the Mega-MoE persistent kernel (mega_kernel.cuh); no device code here. The
// operator (src/ops/mega_moe_op.cpp) validates everything first; this returns the first
// CUDA error and never throws.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/mega_args.hpp"
#include "xstage/mega_tile.hpp"

namespace xstage::kernels::moe {

// w4a8_int4_lut / w4a8_mxfp4_rs: the register-operand W4A8 kernel (mega_w4a8_rs_kernel.cuh), built
// with XSTAGE_MEGA_W4A8_RS only (mega_moe_w4a8_rs_built()).
// w4a8_int4_lut_tok / w4a8_mxfp4_tok: the per-token W4A8 kernel (mega_w4a8_tok_kernel.cuh; W1 in the
// gate/up-interleaved glu layouts), built with XSTAGE_MEGA_W4A8_TOK only (mega_moe_w4a8_tok_built()).
enum class MegaWeightFormat : int {
  w8a8 = 0,
  w4a8_int4 = 1,
  w4a8_mxfp4 = 2,
  w4a8_int4_lut = 3,
  w4a8_mxfp4_rs = 4,
  w4a8_int4_lut_tok = 5,
  w4a8_mxfp4_tok = 6
};

struct MegaWeights {
  MegaWeightFormat format = MegaWeightFormat::w8a8;
  // W8A8: fp8 [E/P, 2I, H] with block scales [E/P, 2I/128, H/128]; W4A8: packed 4-bit
  // [E/P, 2I, H/2] with INT4 group scales [E/P, H/128, 2I] or MXFP4 exponents w1_e8m0
  // [E/P, H/32, 2I] (kernels/moe/params_w4a8.hpp). W2 likewise with (H, I).
  // w4a8_int4_lut: prepacked int4_rs_lut chunks with fp32 channel scales [E/P, 2I]; w4a8_mxfp4_rs:
  // prepacked mxfp4_rs chunks with fp32 block scales [E/P, H/128, 2I] (ops/moe_quant4.hpp).
  const void* w1 = nullptr;
  const float* w1_scales = nullptr;
  const void* w2 = nullptr;
  const float* w2_scales = nullptr;
  const uint8_t* w1_e8m0 = nullptr;
  const uint8_t* w2_e8m0 = nullptr;
};

// One call: `ctas` co-resident CTAs (cooperative launch; at most one per SM), one function per
// tile configuration (xstage/mega_tile.hpp) and W4A8 format, each in its own translation unit.
// W4A8 runs the 64 x 256 tile (per-token: m256n128_tok or m128n256_tok). cudaErrorInvalidValue: arguments the kernel cannot take.
cudaError_t mega_moe_launch_m64n256(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);
cudaError_t mega_moe_launch_m128n256(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);
cudaError_t mega_moe_launch_w4a8_int4(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);
cudaError_t mega_moe_launch_w4a8_mxfp4(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);
// Both register-operand formats (w4a8_int4_lut, w4a8_mxfp4_rs); cudaErrorNotSupported in a build
// without XSTAGE_MEGA_W4A8_RS.
cudaError_t mega_moe_launch_w4a8_rs(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);
// Whether this build has that kernel (XSTAGE_MEGA_W4A8_RS; mega_moe_w4a8_rs.cu or its stub).
bool mega_moe_w4a8_rs_built();
// Both per-token formats (w4a8_int4_lut_tok, w4a8_mxfp4_tok) on MegaTile::m256n128_tok; needs
// MegaMoeArgs::h16 and h_amax; cudaErrorNotSupported in a build without XSTAGE_MEGA_W4A8_TOK.
cudaError_t mega_moe_launch_w4a8_tok(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);
bool mega_moe_w4a8_tok_built();
// The same formats on MegaTile::m128n256_tok (the wide few-row tile); cudaErrorNotSupported in a
// build without XSTAGE_MEGA_TOK_WIDE.
cudaError_t mega_moe_launch_w4a8_tok_wide(const MegaMoeArgs& m, const MegaWeights& w, int ctas, cudaStream_t s);
bool mega_moe_w4a8_tok_wide_built();

inline cudaError_t mega_moe_launch(::xstage::moe::MegaTile tile, const MegaMoeArgs& m, const MegaWeights& w, int ctas,
                                   cudaStream_t s) {
  switch (w.format) {
    case MegaWeightFormat::w4a8_int4:
      return tile == ::xstage::moe::MegaTile::m64n256 ? mega_moe_launch_w4a8_int4(m, w, ctas, s) : cudaErrorInvalidValue;
    case MegaWeightFormat::w4a8_mxfp4:
      return tile == ::xstage::moe::MegaTile::m64n256 ? mega_moe_launch_w4a8_mxfp4(m, w, ctas, s) : cudaErrorInvalidValue;
    case MegaWeightFormat::w4a8_int4_lut:
    case MegaWeightFormat::w4a8_mxfp4_rs:
      return tile == ::xstage::moe::MegaTile::m64n256 ? mega_moe_launch_w4a8_rs(m, w, ctas, s) : cudaErrorInvalidValue;
    case MegaWeightFormat::w4a8_int4_lut_tok:
    case MegaWeightFormat::w4a8_mxfp4_tok:
      return tile == ::xstage::moe::MegaTile::m256n128_tok   ? mega_moe_launch_w4a8_tok(m, w, ctas, s)
             : tile == ::xstage::moe::MegaTile::m128n256_tok ? mega_moe_launch_w4a8_tok_wide(m, w, ctas, s)
                                                             : cudaErrorInvalidValue;
    default:
      return tile == ::xstage::moe::MegaTile::m128n256 ? mega_moe_launch_m128n256(m, w, ctas, s)
                                                       : mega_moe_launch_m64n256(m, w, ctas, s);
  }
}

}  // namespace xstage::kernels::moe
