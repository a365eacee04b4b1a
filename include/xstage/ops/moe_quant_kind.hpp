// The weight/activation quantisation of the MoE GEMMs and layers (formats in moe_gemm.hpp and
// moe_quant4.hpp). Its own header so host-only code (the layer reference) can name it without
// the GPU operator's header.
#pragma once

namespace xstage::ops {

enum class MoeQuant : int { w8a8 = 0, w4a8_int4 = 1, w4a8_mxfp4 = 2 };
inline constexpr bool moe_is_w4a8(MoeQuant q) { return q == MoeQuant::w4a8_int4 || q == MoeQuant::w4a8_mxfp4; }

}  // namespace xstage::ops
