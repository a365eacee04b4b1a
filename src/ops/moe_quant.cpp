// Host FP8 e4m3 quantisation helpers (see include/xstage/ops/moe_quant.hpp).
#include "xstage/ops/moe_quant.hpp"

#include <algorithm>
#include <cmath>

namespace xstage::ops {

uint8_t fp8_e4m3_encode(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kFp8E4M3Max) return sign | 0x7E;
  if (a < 0x1p-6f) {  // subnormal: multiples of 2^-9; 8 * 2^-9 = 2^-6 is code 0x08, the first normal
    const int m = static_cast<int>(std::nearbyint(a * 512.f));
    return sign | static_cast<uint8_t>(m);
  }
  int e = 0;
  const float frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  int exp = e - 1;                       // a = (2 frac) * 2^exp, 2 frac in [1, 2)
  int m = static_cast<int>(std::nearbyint((2.f * frac - 1.f) * 8.f));
  if (m == 8) {
    m = 0;
    ++exp;
  }
  const int code = ((exp + 7) << 3) | m;
  return sign | static_cast<uint8_t>(std::min(code, 0x7E));
}

float fp8_e4m3_decode(uint8_t v) {
  const float sign = (v & 0x80) ? -1.f : 1.f;
  const int exp = (v >> 3) & 0xF;
  const int m = v & 7;
  if ((v & 0x7F) == 0x7F) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.f + m / 8.f, exp - 7);
}

Fp8Scale fp8_scale_for_amax(float amax) {
  const float a = std::max(amax, kQuantAmaxFloor);
  return Fp8Scale{a / kFp8E4M3Max, kFp8E4M3Max / a};
}

namespace {
// One fp8 scale for x[0..n): q[i] = e4m3(x[i] / scale), scale = max(amax, floor) / 448.
float quantize_run(const float* x, int n, uint8_t* q) {
  float amax = 0.f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const Fp8Scale s = fp8_scale_for_amax(amax);
  for (int i = 0; i < n; ++i) q[i] = fp8_e4m3_encode(x[i] * s.inv);
  return s.scale;
}
}  // namespace

void quantize_per_token_128(const float* x, int rows, int cols, uint8_t* q, float* scales) {
  for (int r = 0; r < rows; ++r)
    for (int cb = 0; cb < cols / 128; ++cb) {
      const int64_t at = static_cast<int64_t>(r) * cols + cb * 128;
      scales[static_cast<int64_t>(cb) * rows + r] = quantize_run(x + at, 128, q + at);
    }
}

void quantize_fp8_per_token(const float* x, int rows, int cols, uint8_t* q, float* scales) {
  for (int r = 0; r < rows; ++r) {
    const int64_t at = static_cast<int64_t>(r) * cols;
    scales[r] = quantize_run(x + at, cols, q + at);
  }
}

void quantize_blocks_128x128(const float* w, int rows, int cols, uint8_t* q, float* scales) {
  const int cbs = cols / 128;
  for (int rb = 0; rb < rows / 128; ++rb)
    for (int cb = 0; cb < cbs; ++cb) {
      float amax = 0.f;
      for (int r = rb * 128; r < rb * 128 + 128; ++r)
        for (int c = cb * 128; c < cb * 128 + 128; ++c) amax = std::max(amax, std::fabs(w[static_cast<int64_t>(r) * cols + c]));
      const Fp8Scale s = fp8_scale_for_amax(amax);
      for (int r = rb * 128; r < rb * 128 + 128; ++r)
        for (int c = cb * 128; c < cb * 128 + 128; ++c)
          q[static_cast<int64_t>(r) * cols + c] = fp8_e4m3_encode(w[static_cast<int64_t>(r) * cols + c] * s.inv);
      scales[static_cast<int64_t>(rb) * cbs + cb] = s.scale;
    }
}

}  // namespace xstage::ops
