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

// silu(x) = x * sigmoid(x) with sigmoid(x) = (1 + tanh(x / 2)) / 2: one MUFU.TANH per value
// instead of an exponential and a reciprocal (two MUFU operations; the MUFU pipe serves 16
// results per clock per SM). The SwiGLU epilogue runs while the tensor cores wait, so its
// MUFU count matters (docs/moe-gemm.md §Epilogue policy). tanh.approx's error (about 2^-11
// relative) is far below the fp8 e4m3 rounding that follows; the host reference computes silu
// exactly.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float silu(float x) {
  const float h = 0.5f * x;
  return fmaf(h, tanh_approx(h), h);
}
__device__ __forceinline__ float swiglu(float gate, float up) { return silu(gate) * up; }

}  // namespace xstage::kernels::moe
