// 2^x on the FMA pipe, for the share of a block's exponentials that the softmax takes off the
// SFU (docs/attention.md §Exponentials off the SFU). Host and device: the host copy runs the
// same operations with the same rounding, so the CPU test checks what the kernel computes.
//
// x = j + f with j = rint(x) and f in [-0.5, 0.5]; 2^f from a degree-3 minimax polynomial
// (relative error 7.5e-5, under half an ulp of a bf16 or fp16 probability), times 2^j built in
// the exponent bits. x is clamped to -125 so 2^j stays normal: a masked score (-inf) gives
// 2^-125 (~2e-38) where the SFU gives 0, which no row sum or output can tell apart. A NaN
// score stays NaN, as with the SFU.
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>

#if defined(__CUDACC__)
#define XSTAGE_POLY_EXP2_FN __host__ __device__ __forceinline__
#else
#define XSTAGE_POLY_EXP2_FN inline
#endif

namespace xstage::kernels::attention {

// Minimax coefficients of 2^f on [-0.5, 0.5] (relative error), lowest order first.
inline constexpr float kPolyExp2C0 = 0.99992812f, kPolyExp2C1 = 0.69326097f, kPolyExp2C2 = 0.24261054f,
                       kPolyExp2C3 = 0.05517132f;
inline constexpr float kPolyExp2MaxRelError = 7.6e-5f;

XSTAGE_POLY_EXP2_FN float poly_exp2(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: x + kRound holds rint(x) in its low mantissa bits
#if defined(__CUDA_ARCH__)
  asm("max.NaN.f32 %0, %0, 0fC2FA0000;" : "+f"(x));  // -125, NaN kept
  const float t = __fadd_rn(x, kRound);
  const float f = __fsub_rn(x, __fsub_rn(t, kRound));
  float p = __fmaf_rn(kPolyExp2C3, f, kPolyExp2C2);
  p = __fmaf_rn(p, f, kPolyExp2C1);
  p = __fmaf_rn(p, f, kPolyExp2C0);
  // (bits(t) << 23) == j << 23 (kRound's own bits shift out); + 127 << 23: the float 2^j.
  return p * __int_as_float((__float_as_int(t) << 23) + 0x3f800000);
#else
  if (!std::isnan(x)) x = std::fmax(x, -125.f);
  const float t = x + kRound;
  const float f = x - (t - kRound);
  float p = std::fma(kPolyExp2C3, f, kPolyExp2C2);
  p = std::fma(p, f, kPolyExp2C1);
  p = std::fma(p, f, kPolyExp2C0);
  uint32_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits << 23) + 0x3f800000u;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
#endif
}

}  // namespace xstage::kernels::attention
