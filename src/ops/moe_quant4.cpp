// Host 4-bit weight formats (see include/xstage/ops/moe_quant4.hpp).
#include "xstage/ops/moe_quant4.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/moe/w4a8_rs_layout.hpp"
#include "runtime/parallel_for.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_quant.hpp"

namespace xstage::ops {

namespace {

// Round half to even, the rounding of the device conversions.
float round_even(float x) { return std::nearbyint(x); }  // default FE_TONEAREST

void put_nibble(uint8_t* packed, int64_t index, uint8_t nibble) {
  uint8_t& b = packed[index / 2];
  b = (index % 2 == 0) ? static_cast<uint8_t>((b & 0xF0) | nibble) : static_cast<uint8_t>((b & 0x0F) | (nibble << 4));
}
uint8_t get_nibble(const uint8_t* packed, int64_t index) {
  const uint8_t b = packed[index / 2];
  return index % 2 == 0 ? (b & 0x0F) : (b >> 4);
}

// The largest E8M0 exponent of row r's four 32-value sub-blocks in 128-column block g.
int mxfp4_block_emax(const uint8_t* scales, int rows, int r, int g) {
  constexpr int kSub = kInt4Group / kMxfp4Block;
  int emax = 0;
  for (int i = 0; i < kSub; ++i) emax = std::max<int>(emax, scales[int64_t(g * kSub + i) * rows + r]);
  return emax;
}

// Writes one sign + 3-bit magnitude code at its place in the register-operand layout.
void put_rs_code(uint8_t* out, const kernels::moe::RsCodePos& pos, uint32_t magnitude, uint32_t sign) {
  uint32_t word;
  std::memcpy(&word, out + pos.word_byte, 4);
  word |= magnitude << pos.mag_bit;
  word |= sign << pos.sign_bit;
  std::memcpy(out + pos.word_byte, &word, 4);
}

void check_rs_shape(const char* fn, int rows, int cols) {
  if (rows <= 0 || cols <= 0 || rows % 128 != 0 || cols % 128 != 0)
    throw InvalidArgument(std::string(fn) + ": rows " + std::to_string(rows) + " and cols " + std::to_string(cols) +
                          " must be positive multiples of 128");
}

// The plain int4 lut arrays: any positive number of rows, whole 128-column groups (the prepacked
// layout needs whole 128 x 128 chunks: check_rs_shape).
void check_lut_shape(const char* fn, int rows, int cols) {
  if (rows <= 0 || cols <= 0 || cols % kInt4Group != 0)
    throw InvalidArgument(std::string(fn) + ": rows " + std::to_string(rows) + " must be positive and cols " +
                          std::to_string(cols) + " a positive multiple of 128");
}

std::string hex_byte(uint8_t b) {
  static const char kDigits[] = "0123456789abcdef";
  return std::string("0x") + kDigits[b >> 4] + kDigits[b & 0xF];
}

// The group scale byte of (row, group kb) decoded, or InvalidArgument for a byte the int4 lut
// kernel cannot use: a NaN, a sign (the quantiser's scales are >= 0) or a scale above 64, whose
// table entries 7 * gs would pass 448 and saturate.
float lut_group_scale(const char* fn, uint8_t gs, int row, int kb) {
  const float v = fp8_e4m3_decode(gs);
  const bool nan = (gs & 0x7F) == 0x7F, negative = (gs & 0x80) != 0;
  if (!nan && !negative && v <= kInt4LutGroupScaleMax) return v;
  const std::string where = std::string(fn) + ": group scale of row " + std::to_string(row) + ", group " +
                            std::to_string(kb) + " is " + hex_byte(gs);
  if (nan) throw InvalidArgument(where + ", a NaN");
  if (negative) throw InvalidArgument(where + ", negative; group scales are in [0, 64]");
  throw InvalidArgument(where + " = " + std::to_string(v) + ", larger than kInt4LutGroupScaleMax = 64");
}

// Byte m of the kernel's conversion table: e4m3(m * gs).
uint8_t lut_byte(int m, float gs) { return fp8_e4m3_encode(static_cast<float>(m) * gs); }

// The table's entries as values.
void lut_table(float gs, float table[8]) {
  for (int m = 0; m < 8; ++m) table[m] = fp8_e4m3_decode(lut_byte(m, gs));
}

// w' of code q with the group's table and the row's channel scale.
float lut_value(const float table[8], float channel_scale, int q) {
  const float v = channel_scale * table[q < 0 ? -q : q];
  return q < 0 ? -v : v;
}

// A code of -8 where only symmetric INT4 fits (sign + 3-bit magnitude): `holder` names the
// format, `producer` the quantiser that never writes -8.
void throw_minus_eight(const char* fn, int row, int col, const char* holder, const char* producer) {
  throw InvalidArgument(std::string(fn) + ": weight (" + std::to_string(row) + ", " + std::to_string(col) +
                        ") is -8; the " + holder + " holds symmetric INT4 (-7..7, what " + producer + " produces)");
}
}  // namespace

uint8_t int4_encode(int v) { return static_cast<uint8_t>(std::clamp(v, -8, 7) & 0xF); }

int int4_decode(uint8_t nibble) {
  const int v = nibble & 0xF;
  return v >= 8 ? v - 16 : v;
}

uint8_t e2m1_encode(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  // The 8 magnitudes, and the midpoints between neighbours; ties go to the even code
  // (mantissa bit 0), i.e. to 0, 1, 2, 4 rather than 0.5, 1.5, 3, 6.
  static const float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const float mid = 0.5f * (kMag[c - 1] + kMag[c]);
    if (a > mid || (a == mid && (c % 2 == 0))) best = c;
  }
  return sign | static_cast<uint8_t>(best);
}

float e2m1_decode(uint8_t nibble) {
  static const float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = kMag[nibble & 0x7];
  return (nibble & 0x8) ? -m : m;
}

float e8m0_decode(uint8_t e) { return e == 0xFF ? std::nanf("") : std::ldexp(1.f, int(e) - 127); }

uint8_t e8m0_for_amax(float amax) {
  if (!(amax > 0.f) || !std::isfinite(amax)) return 127;  // all zero (or bad): scale 1
  int e = 0;
  std::frexp(amax, &e);   // amax = f * 2^e, f in [0.5, 1): floor(log2(amax)) = e - 1
  const int shared = std::clamp(e - 1 - 2, -127, 127);
  return static_cast<uint8_t>(shared + 127);
}

void quantize_int4_g128(const float* w, int rows, int cols, uint8_t* packed, float* scales) {
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < cols / kInt4Group; ++g) {
      const float* x = w + int64_t(r) * cols + g * kInt4Group;
      float amax = 0.f;
      for (int i = 0; i < kInt4Group; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = std::max(amax, kInt4AmaxFloor) / 7.f;
      for (int i = 0; i < kInt4Group; ++i)
        put_nibble(packed, int64_t(r) * cols + g * kInt4Group + i,
                   int4_encode(static_cast<int>(round_even(x[i] / scale))));
      scales[int64_t(g) * rows + r] = scale;
    }
}

void quantize_mxfp4(const float* w, int rows, int cols, uint8_t* packed, uint8_t* scales) {
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < cols / kMxfp4Block; ++b) {
      const float* x = w + int64_t(r) * cols + b * kMxfp4Block;
      float amax = 0.f;
      for (int i = 0; i < kMxfp4Block; ++i) amax = std::max(amax, std::fabs(x[i]));
      const uint8_t e = e8m0_for_amax(amax);
      const float inv = std::ldexp(1.f, 127 - int(e));
      for (int i = 0; i < kMxfp4Block; ++i)
        put_nibble(packed, int64_t(r) * cols + b * kMxfp4Block + i, e2m1_encode(x[i] * inv));
      scales[int64_t(b) * rows + r] = e;
    }
}

void dequantize_int4_g128(const uint8_t* packed, const float* scales, int rows, int cols, float* out) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int64_t i = int64_t(r) * cols + c;
      out[i] = static_cast<float>(int4_decode(get_nibble(packed, i))) * scales[int64_t(c / kInt4Group) * rows + r];
    }
}

void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int rows, int cols, float* out) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int64_t i = int64_t(r) * cols + c;
      out[i] = e2m1_decode(get_nibble(packed, i)) * e8m0_decode(scales[int64_t(c / kMxfp4Block) * rows + r]);
    }
}

void dequantize_mxfp4_w4a8(const uint8_t* packed, const uint8_t* scales, int rows, int cols, float* out,
                           int max_gap) {
  constexpr int kSub = kInt4Group / kMxfp4Block;  // 4 sub-blocks per 128 columns
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < cols / kInt4Group; ++g) {
      const int emax = mxfp4_block_emax(scales, rows, r, g);
      for (int i = 0; i < kSub; ++i) {
        const int e = scales[int64_t(g * kSub + i) * rows + r];
        const float s = emax - e > max_gap ? 0.f : std::ldexp(1.f, e - 127);
        for (int j = 0; j < kMxfp4Block; ++j) {
          const int c = g * kInt4Group + i * kMxfp4Block + j;
          const int64_t idx = int64_t(r) * cols + c;
          out[idx] = e2m1_decode(get_nibble(packed, idx)) * s;
        }
      }
    }
}


void prepack_int4_rs(const uint8_t* packed, int rows, int cols, uint8_t* out) {
  if (packed == nullptr || out == nullptr) throw InvalidArgument("prepack_int4_rs: null buffer");
  check_rs_shape("prepack_int4_rs", rows, cols);
  const size_t bytes = static_cast<size_t>(rows) * cols / 2;
  std::memset(out, 0, bytes);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int q = int4_decode(get_nibble(packed, int64_t(r) * cols + c));
      if (q == -8) throw_minus_eight("prepack_int4_rs", r, c, "register-operand layout", "quantize_int4_g128");
      put_rs_code(out, kernels::moe::rs_code_pos(r, c, cols), static_cast<uint32_t>(q < 0 ? -q : q),
                  static_cast<uint32_t>(q < 0));
    }
}

long long prepacked_mxfp4_rs_bytes(int rows, int cols) {
  check_rs_shape("prepacked_mxfp4_rs_bytes", rows, cols);
  return static_cast<long long>(rows / 128) * (cols / 128) * kernels::moe::kRsMxChunkBytes;
}

long long prepack_mxfp4_rs(const uint8_t* packed, const uint8_t* e8m0, int rows, int cols, uint8_t* out,
                           float* block_scales) {
  if (packed == nullptr || e8m0 == nullptr || out == nullptr || block_scales == nullptr)
    throw InvalidArgument("prepack_mxfp4_rs: null buffer");
  check_rs_shape("prepack_mxfp4_rs", rows, cols);
  static_assert(kernels::moe::kRsMxMaxGap == kMxfp4RsMaxExponentGap, "one gap limit");
  constexpr int kSub = kInt4Group / kMxfp4Block;
  std::memset(out, 0, static_cast<size_t>(prepacked_mxfp4_rs_bytes(rows, cols)));
  long long flushed = 0;
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < cols / kInt4Group; ++g) {
      const int emax = mxfp4_block_emax(e8m0, rows, r, g);
      block_scales[int64_t(g) * rows + r] = std::ldexp(1.f, emax - 133);
      for (int i = 0; i < kSub; ++i) {
        const int sub = g * kSub + i;
        const int gap = emax - e8m0[int64_t(sub) * rows + r];
        if (gap > kMxfp4RsMaxExponentGap) {
          ++flushed;  // codes stay zero; the gap byte too
          continue;
        }
        out[kernels::moe::rs_gap_pos(r, sub, cols)] = static_cast<uint8_t>(8 * gap);
        for (int j = 0; j < kMxfp4Block; ++j) {
          const int c = sub * kMxfp4Block + j;
          const uint8_t code = get_nibble(packed, int64_t(r) * cols + c);
          put_rs_code(out, kernels::moe::rs_code_pos(r, c, cols, kernels::moe::kRsMxChunkBytes), code & 0x7u,
                      code >> 3);
        }
      }
    }
  return flushed;
}

void quantize_int4_lut(const float* w, int rows, int cols, uint8_t* packed, uint8_t* group_e4m3,
                       float* channel_scales) {
  if (w == nullptr || packed == nullptr || group_e4m3 == nullptr || channel_scales == nullptr)
    throw InvalidArgument("quantize_int4_lut: null buffer");
  check_lut_shape("quantize_int4_lut", rows, cols);
  const int groups = cols / kInt4Group;
  for (int64_t i = 0; i < int64_t(rows) * cols; ++i)  // first, so the error names the first bad weight
    if (!std::isfinite(w[i]))
      throw InvalidArgument("quantize_int4_lut: weight (" + std::to_string(i / cols) + ", " +
                            std::to_string(i % cols) + ") is not finite");
  // Rows are independent (each writes its own bytes and scales): blocks of 64 rows on host threads.
  constexpr int kRowBlock = 64;
  parallel_for(size_t((rows + kRowBlock - 1) / kRowBlock), [&](size_t blk) {
  std::vector<float> group_scale(groups);
  const int r_end = std::min(rows, int(blk + 1) * kRowBlock);
  for (int r = int(blk) * kRowBlock; r < r_end; ++r) {
    const float* x = w + int64_t(r) * cols;
    float row_max = 0.f;
    for (int g = 0; g < groups; ++g) {
      float amax = 0.f;
      for (int i = 0; i < kInt4Group; ++i) amax = std::max(amax, std::fabs(x[g * kInt4Group + i]));
      group_scale[g] = std::max(amax, kInt4AmaxFloor) / 7.f;
      row_max = std::max(row_max, group_scale[g]);
    }
    // A power-of-two divisor: the largest group's ratio is exactly 64.
    const float channel = row_max / kInt4LutGroupScaleMax;
    channel_scales[r] = channel;
    for (int g = 0; g < groups; ++g) {
      const uint8_t gs = fp8_e4m3_encode(group_scale[g] / channel);
      group_e4m3[int64_t(g) * rows + r] = gs;
      const float gs_value = fp8_e4m3_decode(gs);
      const float step = gs_value * channel;
      float table[8];
      lut_table(gs_value, table);
      for (int i = 0; i < kInt4Group; ++i) {
        const int c = g * kInt4Group + i;
        int best = 0;  // also every code of a group whose scale rounded to 0
        if (step > 0.f) {
          const int q0 = static_cast<int>(std::clamp(round_even(x[c] / step), -7.f, 7.f));
          float best_err = INFINITY;
          for (int q = std::max(q0 - 1, -7); q <= std::min(q0 + 1, 7); ++q) {
            const float err = std::fabs(x[c] - lut_value(table, channel, q));
            if (err < best_err || (err == best_err && std::abs(q) < std::abs(best))) {
              best = q;
              best_err = err;
            }
          }
        }
        put_nibble(packed, int64_t(r) * cols + c, int4_encode(best));
      }
    }
  }
  });
}

void dequantize_int4_lut(const uint8_t* packed, const uint8_t* group_e4m3, const float* channel_scales, int rows,
                         int cols, float* out) {
  if (packed == nullptr || group_e4m3 == nullptr || channel_scales == nullptr || out == nullptr)
    throw InvalidArgument("dequantize_int4_lut: null buffer");
  check_lut_shape("dequantize_int4_lut", rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < cols / kInt4Group; ++g) {
      float table[8];
      lut_table(lut_group_scale("dequantize_int4_lut", group_e4m3[int64_t(g) * rows + r], r, g), table);
      for (int i = 0; i < kInt4Group; ++i) {
        const int c = g * kInt4Group + i;
        const int64_t idx = int64_t(r) * cols + c;
        const int q = int4_decode(get_nibble(packed, idx));
        if (q == -8) throw_minus_eight("dequantize_int4_lut", r, c, "int4 lut format", "quantize_int4_lut");
        out[idx] = lut_value(table, channel_scales[r], q);
      }
    }
}

long long prepacked_int4_lut_rs_bytes(int rows, int cols) {
  check_rs_shape("prepacked_int4_lut_rs_bytes", rows, cols);
  return static_cast<long long>(rows / 128) * (cols / 128) * kernels::moe::kRsLutChunkBytes;
}

void prepack_int4_lut_rs(const uint8_t* packed, const uint8_t* group_e4m3, int rows, int cols, uint8_t* out) {
  if (packed == nullptr || group_e4m3 == nullptr || out == nullptr)
    throw InvalidArgument("prepack_int4_lut_rs: null buffer");
  check_rs_shape("prepack_int4_lut_rs", rows, cols);
  std::memset(out, 0, static_cast<size_t>(prepacked_int4_lut_rs_bytes(rows, cols)));
  for (int r = 0; r < rows; ++r) {
    for (int g = 0; g < cols / kInt4Group; ++g) {
      const float gs = lut_group_scale("prepack_int4_lut_rs", group_e4m3[int64_t(g) * rows + r], r, g);
      uint8_t* table = out + kernels::moe::rs_lut_table_pos(r, g, cols);
      for (int m = 0; m < 8; ++m) table[m] = lut_byte(m, gs);
    }
    for (int c = 0; c < cols; ++c) {
      const int q = int4_decode(get_nibble(packed, int64_t(r) * cols + c));
      if (q == -8) throw_minus_eight("prepack_int4_lut_rs", r, c, "int4 lut format", "quantize_int4_lut");
      put_rs_code(out, kernels::moe::rs_code_pos(r, c, cols, kernels::moe::kRsLutChunkBytes),
                  static_cast<uint32_t>(q < 0 ? -q : q), static_cast<uint32_t>(q < 0));
    }
  }
}

int glu_source_row(int row, int rows) {
  const int j = row / 128, rr = row % 128;
  const int slab = rr / 16, up = (rr % 16) / 8, i = rr % 8;
  return (up != 0 ? rows / 2 : 0) + 64 * j + 8 * slab + i;
}

namespace {

// The gate/up-interleaved rows of a Linear-1 weight (glu_source_row): the packed codes [rows,
// cols / 2] and one byte table stored group-major [groups, rows] (group scales or exponents),
// permuted; rows checked to be whole 128-channel blocks of gate and up.
struct GluRows {
  std::vector<uint8_t> packed, table;
};
GluRows permute_glu_rows(const char* what, const uint8_t* packed, const uint8_t* table, int groups, int rows,
                         int cols) {
  if (rows <= 0 || rows % 256 != 0)
    throw InvalidArgument(std::string(what) + ": rows = " + std::to_string(rows) +
                          " must be a positive multiple of 256 (gate and up halves of 128-channel blocks)");
  check_rs_shape(what, rows, cols);
  const size_t row_bytes = static_cast<size_t>(cols) / 2;
  GluRows g{std::vector<uint8_t>(static_cast<size_t>(rows) * row_bytes),
            std::vector<uint8_t>(static_cast<size_t>(groups) * rows)};
  for (int r = 0; r < rows; ++r) {
    const int src = glu_source_row(r, rows);
    std::memcpy(g.packed.data() + r * row_bytes, packed + src * row_bytes, row_bytes);
    for (int i = 0; i < groups; ++i) g.table[static_cast<size_t>(i) * rows + r] = table[static_cast<size_t>(i) * rows + src];
  }
  return g;
}

}  // namespace

void prepack_int4_lut_rs_glu(const uint8_t* packed, const uint8_t* group_e4m3, const float* channel_scales, int rows,
                             int cols, uint8_t* out, float* out_channel_scales) {
  if (packed == nullptr || group_e4m3 == nullptr || channel_scales == nullptr || out == nullptr ||
      out_channel_scales == nullptr)
    throw InvalidArgument("prepack_int4_lut_rs_glu: null buffer");
  const GluRows g = permute_glu_rows("prepack_int4_lut_rs_glu", packed, group_e4m3, cols / kInt4Group, rows, cols);
  for (int r = 0; r < rows; ++r) out_channel_scales[r] = channel_scales[glu_source_row(r, rows)];
  prepack_int4_lut_rs(g.packed.data(), g.table.data(), rows, cols, out);
}

long long prepack_mxfp4_rs_glu(const uint8_t* packed, const uint8_t* e8m0, int rows, int cols, uint8_t* out,
                               float* block_scales) {
  if (packed == nullptr || e8m0 == nullptr || out == nullptr || block_scales == nullptr)
    throw InvalidArgument("prepack_mxfp4_rs_glu: null buffer");
  // E8M0 exponents per 32 columns, stored [cols / 32, rows].
  const GluRows g = permute_glu_rows("prepack_mxfp4_rs_glu", packed, e8m0, cols / kMxfp4Block, rows, cols);
  return prepack_mxfp4_rs(g.packed.data(), g.table.data(), rows, cols, out, block_scales);
}

}  // namespace xstage::ops
