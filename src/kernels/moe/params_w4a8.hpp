// Parameters of a W4A8 grouped-GEMM launch (host and device): the W8A8 parameters of
// params.hpp, with B holding 4-bit weights and per-format weight scales.
//
//   B        uint8 [experts, n, k/2]   two 4-bit values per byte, the even K column in the low
//                                      nibble (include/xstage/ops/moe_quant4.hpp)
//   int4:    b_scales fp32 [experts, k/128, n]   one scale per weight row per 128 K (K-group-major)
//   mxfp4:   b_e8m0   uint8 [experts, k/32, n]   one E8M0 exponent per weight row per 32 K
//
// The kernel converts B to fp8 e4m3 in shared memory and applies the remaining scale per
// weight row per 128-K block in the fp32 promotion (docs/moe-gemm-w4a8.md).
#pragma once
#include <cstdint>

#include "kernels/moe/params.hpp"

namespace xstage::kernels::moe {

enum class W4Format : int { int4_g128 = 1, mxfp4 = 2 };

struct MoeW4A8Params : MoeGemmParams {
  W4Format format = W4Format::int4_g128;
  const uint8_t* b_e8m0 = nullptr;  // mxfp4 only; int4 uses MoeGemmParams::b_scales
  // Conversion units (weight row x 32 K) per stage given to each of the 96 converter threads;
  // the consumer threads convert the rest. Negative: the kernel's default (w4a8.cuh).
  int converter_units = -1;
};

}  // namespace xstage::kernels::moe
