// Device-side quantisation helpers of the MoE kernels, the same arithmetic as the host
// helpers of include/xstage/ops/moe_quant.hpp: fp8 e4m3 with saturation, one scale per 128
// values = max(amax, 1e-4) / 448, values multiplied by 448 / max(amax, 1e-4).
#pragma once
#include <cstdint>

#include <cuda_fp8.h>

namespace xstage::kernels::moe {

constexpr float kFp8Max = 448.f;
constexpr float kAmaxFloor = 1e-4f;

struct QuantScale {
  float scale;  // dequantisation factor (stored)
  float inv;    // quantisation factor (applied)
};

__device__ __forceinline__ QuantScale quant_scale(float amax) {
  const float a = fmaxf(amax, kAmaxFloor);
  return QuantScale{a / kFp8Max, kFp8Max / a};
}

// Two floats -> two fp8 e4m3 bytes (x in the low byte), round to nearest even, saturating.
__device__ __forceinline__ uint16_t fp8x2_e4m3(float x, float y) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(x, y), __NV_SATFINITE, __NV_E4M3));
}

// Fast division (MUFU.RCP, ~2 ulp): the IEEE division's per-element slow-path check made the
// SwiGLU epilogue, which one warp group runs alone, cost microseconds per tile. The host
// reference divides exactly; the difference is far below the fp8 rounding that follows.
__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.f + __expf(-x)); }
__device__ __forceinline__ float swiglu(float gate, float up) { return silu(gate) * up; }

}  // namespace xstage::kernels::moe
