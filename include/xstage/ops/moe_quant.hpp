// Host-side FP8 quantisation of the MoE GEMM's operands (tests, benchmarks, references): fp8
// e4m3 ("fn": max 448, no infinities) encode/decode and the two scale granularities of W8A8.
// The arithmetic is the device epilogue's (src/kernels/moe/quant.cuh): per 128 values,
// scale = max(amax, 1e-4) / 448 and q = fp8(x * 448 / max(amax, 1e-4)), round to nearest
// even, saturating at +-448.
#pragma once
#include <cstdint>

namespace xstage::ops {

inline constexpr float kFp8E4M3Max = 448.f;
inline constexpr float kQuantAmaxFloor = 1e-4f;

uint8_t fp8_e4m3_encode(float x);  // NaN -> 0x7F; |x| > 448 saturates to +-448
float fp8_e4m3_decode(uint8_t v);

struct Fp8Scale {
  float scale;  // dequantisation factor
  float inv;    // quantisation factor
};
Fp8Scale fp8_scale_for_amax(float amax);

// Activations: x [rows, cols] (cols a multiple of 128) -> q [rows, cols] and one scale per
// (row, 128 columns) stored token-contiguous: scales[(c / 128) * rows + r].
void quantize_per_token_128(const float* x, int rows, int cols, uint8_t* q, float* scales);

// Activations with one scale per row for all columns (MoeActScales::per_token): x [rows, cols]
// -> q [rows, cols], scales[r] (the same arithmetic over the whole row).
void quantize_fp8_per_token(const float* x, int rows, int cols, uint8_t* q, float* scales);

// Weights: w [rows, cols] (both multiples of 128) -> q and one scale per 128 x 128 block:
// scales[(r / 128) * (cols / 128) + c / 128].
void quantize_blocks_128x128(const float* w, int rows, int cols, uint8_t* q, float* scales);

}  // namespace xstage::ops
