// Host-side 4-bit weight formats for the W4A8 MoE GEMM (issue 7; the kernel converts them to
// FP8 e4m3 in shared memory inside the mainloop, src/kernels/moe/w4a8.cuh): references for
// tests and the inputs of benchmarks. Weights are [rows = N, cols = K], K a multiple of the group.
//
// INT4, group 128 along K (symmetric): per (row, 128-column group) scale = max(amax, 1e-4) / 7,
// q = clamp(round_half_even(x / scale), -8, 7); two values per byte, the even column in the low
// nibble (two's complement). Scales are stored K-group-major, scales[(c / 128) * rows + r], so
// the scales of one K block for an N tile are contiguous. Every q in -8..7 is exact in FP8
// e4m3, so the in-kernel conversion is exact and the scale folds into the fp32 promotion.
//
// MXFP4 (OCP Microscaling): FP4 E2M1 values (+-{0, 0.5, 1, 1.5, 2, 3, 4, 6}) with one E8M0
// scale (a power of two, 2^(e - 127)) per 32 values along K. Scale exponent per the OCP MX
// rule: floor(log2(amax)) - 2 (2 = E2M1's largest exponent), clamped to [-127, 127]; values
// are x / 2^scale rounded to the nearest E2M1 value (ties to even mantissa), saturating at
// +-6. Two values per byte as for INT4; scales as one byte each, scales[(c / 32) * rows + r].
#pragma once
#include <cstdint>

namespace xstage::ops {

inline constexpr int kInt4Group = 128;
inline constexpr int kMxfp4Block = 32;
inline constexpr float kInt4AmaxFloor = 1e-4f;

// One INT4 value in -8..7 to its nibble and back.
uint8_t int4_encode(int v);      // v is clamped to -8..7
int int4_decode(uint8_t nibble);  // low 4 bits

// FP4 E2M1: nibble (sign bit 3, exponent bits 2..1, mantissa bit 0) <-> float.
uint8_t e2m1_encode(float x);  // nearest, ties to even mantissa; saturates at +-6; NaN -> +0
float e2m1_decode(uint8_t nibble);

// E8M0 scale byte <-> exponent: value 2^(e - 127); 0xFF is NaN in the spec and never produced.
float e8m0_decode(uint8_t e);
uint8_t e8m0_for_amax(float amax);  // the OCP MX shared exponent for a block with this amax

// w [rows, cols] -> packed [rows, cols / 2] and scales; cols a multiple of the group/block.
void quantize_int4_g128(const float* w, int rows, int cols, uint8_t* packed, float* scales);
void quantize_mxfp4(const float* w, int rows, int cols, uint8_t* packed, uint8_t* scales);

// The dequantised weights the kernel's math is defined on (references of the same
// quantised math): out [rows, cols].
void dequantize_int4_g128(const uint8_t* packed, const float* scales, int rows, int cols, float* out);
void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int rows, int cols, float* out);

// The MXFP4 weights the W4A8 kernel computes with (cols a multiple of 128). Per row and
// 128-column block, emax = the largest of its four E8M0 exponents; a 32-value sub-block with
// exponent e is converted to fp8 e4m3 as value * 2^(6 - (emax - e)) and the block scale
// 2^(emax - 133) is applied in the fp32 promotion. That is exact (= dequantize_mxfp4) when
// emax - e <= max_gap; a sub-block further below its block's largest scale is flushed to
// zero. max_gap: kMxfp4MaxExponentGap for the kernels that convert in shared memory,
// kMxfp4RsMaxExponentGap for the register-operand kernels (prepack_mxfp4_rs). out [rows, cols].
inline constexpr int kMxfp4MaxExponentGap = 14;
inline constexpr int kMxfp4RsMaxExponentGap = 11;
void dequantize_mxfp4_w4a8(const uint8_t* packed, const uint8_t* scales, int rows, int cols, float* out,
                           int max_gap = kMxfp4MaxExponentGap);

// INT4 weights in the layout of the register-operand W4A8 kernel (MoeWeightLayout::int4_rs):
// packed [rows, cols / 2] as above -> out, the same number of bytes, rows and cols multiples
// of 128. Each consumer thread's wgmma A fragment lands in one place, every value as sign +
// 3-bit magnitude (src/kernels/moe/w4a8_rs_layout.hpp), a one-time step when weights are
// loaded. Symmetric INT4 only: a weight of -8 (never produced by quantize_int4_g128) throws
// InvalidArgument naming it. For several experts, call it per expert ([experts, rows, cols / 2]
// maps expert by expert).
void prepack_int4_rs(const uint8_t* packed, int rows, int cols, uint8_t* out);

// MXFP4 weights for the register-operand kernels (MoeWeightLayout::mxfp4_rs): packed [rows,
// cols / 2] and E8M0 exponents [cols / 32, rows] as quantize_mxfp4 writes them -> out
// (prepacked_mxfp4_rs_bytes(rows, cols) bytes: the int4_rs code layout plus 512 bytes of
// exponent gaps per 128 x 128 chunk) and block_scales fp32 [cols / 128, rows] = 2^(emax - 133)
// per row and 128-column block (the kernel's b_scales). The kernel's math is
// dequantize_mxfp4_w4a8(..., kMxfp4RsMaxExponentGap): the codes of a sub-block more than 11
// binades below its block's largest are zeroed here. Returns how many sub-blocks were zeroed
// (0 for any weights whose four exponents per 128 columns span at most 11). rows and cols
// multiples of 128; per expert as prepack_int4_rs.
long long prepack_mxfp4_rs(const uint8_t* packed, const uint8_t* e8m0, int rows, int cols, uint8_t* out,
                           float* block_scales);
long long prepacked_mxfp4_rs_bytes(int rows, int cols);

// INT4 with two-level scales ("int4 lut", MoeWeightLayout::int4_rs_lut): the register-operand
// kernel applies the group scale while converting a code to e4m3 (one 8-byte table per row and
// 128-K block, src/kernels/moe/w4a8_rs_layout.hpp), so only a per-row fp32 scale is left for the
// epilogue and the promotion is one FFMA per value instead of a multiply by a per-group scale.
// Per row r a channel scale S[r]; per (row, 128-column group kb) an e4m3 group scale gs; per
// value a symmetric code q in -7..7. The kernel's math (dequantize_int4_lut):
//   w'[r, c] = S[r] * e4m3(|q| * gs) * sign(q),  e4m3 = round to nearest even (fp8_e4m3_encode)
// Quantiser rule: amax_g = max(max |w| over the group, kInt4AmaxFloor) and s_g = amax_g / 7 (the
// group scale of quantize_int4_g128); S[r] = (max over the row's groups of s_g) / 64, so the
// row's largest group scale is exactly kInt4LutGroupScaleMax = 64 and no table entry exceeds
// 7 * 64 = 448, the e4m3 maximum; gs = e4m3(s_g / S[r]) (RNE). A group whose s_g is at most 2^-16
// of the row's largest rounds to gs = 0 and all its codes are 0 (its values are at most 2^-16
// of the row's largest |w|). Codes: q0 = clamp(round_half_even(w / (gs * S)), -7, 7), then of
// q0 - 1, q0, q0 + 1 (clamped) the one whose w' is closest to w (ties: the smaller |q|): the
// e4m3 rounding of a table entry can make a neighbour of q0 nearer, never one further away.
// Codes pack as quantize_int4_g128's (int4_decode reads them); group scales are e4m3 bytes
// stored K-group-major, group_e4m3[kb * rows + r]; channel_scales[r] = S[r]. rows > 0, cols a
// positive multiple of 128; a weight that is not finite throws InvalidArgument.
inline constexpr float kInt4LutGroupScaleMax = 64.f;
void quantize_int4_lut(const float* w, int rows, int cols, uint8_t* packed, uint8_t* group_e4m3,
                       float* channel_scales);
// out [rows, cols] = w' above. Throws InvalidArgument for what the kernel cannot run: a code of
// -8 or a group scale byte that is negative, NaN or above 64 (as prepack_int4_lut_rs).
void dequantize_int4_lut(const uint8_t* packed, const uint8_t* group_e4m3, const float* channel_scales, int rows,
                         int cols, float* out);
// The bytes of one expert's prepacked int4 lut weights: (rows / 128) * (cols / 128) chunks of
// kRsLutChunkBytes (the int4_rs codes plus 1024 table bytes). rows and cols multiples of 128.
long long prepacked_int4_lut_rs_bytes(int rows, int cols);
// packed [rows, cols / 2] and group_e4m3 [cols / 128, rows] as quantize_int4_lut writes them ->
// out (prepacked_int4_lut_rs_bytes(rows, cols) bytes): the codes at the int4_rs places of each
// chunk and, per row and 128-K block, the table e4m3(m * gs), m = 0..7. The channel scales go to
// the kernel as they are. Throws InvalidArgument (naming the weight or the group) for a code of
// -8 or a group scale byte that is negative, NaN or above 64. Per expert as prepack_int4_rs.
void prepack_int4_lut_rs(const uint8_t* packed, const uint8_t* group_e4m3, int rows, int cols, uint8_t* out);
// Gate/up-interleaved rows (MoeWeightLayout::int4_rs_lut_glu) of a Linear-1 weight with rows =
// n = 2 * intermediate (gate rows [0, n/2), up rows [n/2, n)): prepacked row r holds source row
// glu_source_row(r, rows). In each 16-row slab the first 8 rows are gate rows and the next 8 the
// up rows of the same 8 channels; 128-row block j covers channels [64 j, 64 j + 64), slab s of it
// channels 64 j + 8 s .. + 7.
int glu_source_row(int row, int rows);
// prepack_int4_lut_rs of the permuted rows (packed, group_e4m3 as quantize_int4_lut writes them
// for the unpermuted matrix), and out_channel_scales [rows] = the permuted channel_scales (the
// kernel's b_scales). rows a positive multiple of 256; throws InvalidArgument otherwise, or as
// prepack_int4_lut_rs. Per expert.
void prepack_int4_lut_rs_glu(const uint8_t* packed, const uint8_t* group_e4m3, const float* channel_scales, int rows,
                             int cols, uint8_t* out, float* out_channel_scales);
// prepack_mxfp4_rs of the same gate/up-interleaved rows (MoeWeightLayout::mxfp4_rs_glu):
// packed and e8m0 as quantize_mxfp4 writes them for the unpermuted matrix; block_scales [cols /
// 128, rows] come out for the permuted rows (the kernel's b_scales). Returns the zeroed sub-blocks
// as prepack_mxfp4_rs. rows a positive multiple of 256; throws InvalidArgument otherwise, or as
// prepack_mxfp4_rs. Per expert.
long long prepack_mxfp4_rs_glu(const uint8_t* packed, const uint8_t* e8m0, int rows, int cols, uint8_t* out,
                               float* block_scales);

}  // namespace xstage::ops
