// Host reference pieces of `xstage bench moe-gemm`'s output check (cli/bench_check.hpp): one
// expert's weight row in fp32 exactly as the grouped-GEMM kernels compute with it, for every
// weight format and layout the bench runs, read from the bytes the kernel was given. Header-only
// (tests/cpu/test_bench_check.cpp checks every layout against the library's own host
// references: dequantize_int4_g128, dequantize_mxfp4_w4a8, dequantize_int4_lut).
//
//   w8a8 rows:        fp8(B[j, c]) * b_scales[j / 128, c / 128]
//   w4a8_int4 rows:   dequantize_int4_g128 of the row (two's complement nibbles, b_scales [k/128, n])
//   w4a8_int4 int4_rs: the sign-magnitude code at rs_code_pos(j, c) * b_scales[c / 128, j]
//   w4a8_mxfp4 rows:  dequantize_mxfp4_w4a8 of the row (E8M0 [k/32, n], flush gap 14)
//   mxfp4_rs[_glu]:   e2m1(code) * 2^(6 - gap) * b_scales[c / 128, p]  (gap: the chunk's gap byte / 8)
//   int4_rs_lut[_glu]: sign * e4m3(table[|code|]) * b_scales[p]        (table: the chunk's row table)
// The _glu layouts hold logical row j (gate rows [0, n/2), up rows [n/2, n)) at physical row
// p = glu_physical_row(j, n) (the inverse of ops::glu_source_row); scales are per physical row.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/moe/w4a8_rs_layout.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_gemm.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"

namespace xstage::cli {

// The physical row of a gate/up-interleaved layout that holds logical row `row` (n rows, a
// multiple of 256): the inverse of ops::glu_source_row.
inline int glu_physical_row(int row, int n) {
  const int up = row >= n / 2 ? 1 : 0;
  const int ch = row - up * (n / 2);
  return 128 * (ch / 64) + 16 * ((ch % 64) / 8) + 8 * up + ch % 8;
}

// One expert's weights as the kernel reads them: b (moe_weight_bytes(quant, layout, 1, n, k)
// bytes), scales (fp32: w8a8, w4a8_int4 and the prepacked mxfp4 / lut layouts) or e8m0
// (w4a8_mxfp4 rows), each this expert's slice.
struct MoeExpertWeights {
  ops::MoeQuant quant = ops::MoeQuant::w8a8;
  ops::MoeWeightLayout layout = ops::MoeWeightLayout::rows;
  int n = 0, k = 0;
  const uint8_t* b = nullptr;
  const float* scales = nullptr;
  const uint8_t* e8m0 = nullptr;
};

namespace detail {
inline uint32_t load_word(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);  // little-endian, as the device reads it
  return w;
}
}  // namespace detail

// Logical weight row j of the expert -> out[0..k), the fp32 values the kernel multiplies the
// dequantised activations with (weight scales applied). scratch: reused between calls.
inline void moe_weight_row(const MoeExpertWeights& w, int j, float* out, std::vector<uint8_t>& scratch) {
  namespace km = xstage::kernels::moe;
  using L = ops::MoeWeightLayout;
  const int n = w.n, k = w.k;
  const int p = ops::moe_layout_is_glu(w.layout) ? glu_physical_row(j, n) : j;
  switch (w.layout) {
    case L::rows:
      if (w.quant == ops::MoeQuant::w8a8) {
        const uint8_t* row = w.b + size_t(p) * k;
        const float* s = w.scales + size_t(p / 128) * (k / 128);
        for (int c = 0; c < k; ++c) out[c] = ops::fp8_e4m3_decode(row[c]) * s[c / 128];
      } else if (w.quant == ops::MoeQuant::w4a8_int4) {
        std::vector<float> s(k / 128);
        for (int g = 0; g < k / 128; ++g) s[g] = w.scales[size_t(g) * n + p];
        ops::dequantize_int4_g128(w.b + size_t(p) * (k / 2), s.data(), 1, k, out);
      } else {
        scratch.resize(k / 32);
        for (int g = 0; g < k / 32; ++g) scratch[g] = w.e8m0[size_t(g) * n + p];
        ops::dequantize_mxfp4_w4a8(w.b + size_t(p) * (k / 2), scratch.data(), 1, k, out, ops::kMxfp4MaxExponentGap);
      }
      return;
    case L::int4_rs:
      for (int c = 0; c < k; ++c) {
        const km::RsCodePos pos = km::rs_code_pos(p, c, k);
        const uint32_t word = detail::load_word(w.b + pos.word_byte);
        const int m = static_cast<int>((word >> pos.mag_bit) & 7u);
        const float v = ((word >> pos.sign_bit) & 1u) ? -float(m) : float(m);
        out[c] = v * w.scales[size_t(c / 128) * n + p];
      }
      return;
    case L::mxfp4_rs:
    case L::mxfp4_rs_glu:
      for (int c = 0; c < k; ++c) {
        const km::RsCodePos pos = km::rs_code_pos(p, c, k, km::kRsMxChunkBytes);
        const uint32_t word = detail::load_word(w.b + pos.word_byte);
        const uint8_t nib = static_cast<uint8_t>(((word >> pos.mag_bit) & 7u) | (((word >> pos.sign_bit) & 1u) << 3));
        const int gap = w.b[km::rs_gap_pos(p, c / 32, k)] / 8;
        out[c] = ops::e2m1_decode(nib) * std::ldexp(1.f, 6 - gap) * w.scales[size_t(c / 128) * n + p];
      }
      return;
    case L::int4_rs_lut:
    case L::int4_rs_lut_glu:
      for (int c = 0; c < k; ++c) {
        const km::RsCodePos pos = km::rs_code_pos(p, c, k, km::kRsLutChunkBytes);
        const uint32_t word = detail::load_word(w.b + pos.word_byte);
        const int m = static_cast<int>((word >> pos.mag_bit) & 7u);
        const float t = ops::fp8_e4m3_decode(w.b[km::rs_lut_table_pos(p, c / 128, k) + m]);
        out[c] = (((word >> pos.sign_bit) & 1u) ? -t : t) * w.scales[p];
      }
      return;
  }
  throw InvalidArgument("moe_weight_row: unknown weight layout");
}

}  // namespace xstage::cli
