// The 4-bit weight formats of W4A8 (INT4 group-128, MXFP4 = E2M1 + E8M0 per 32) on the host:
// every code, the rounding and saturation rules, the scale rules, the packing order and the
// quantise -> dequantise error bounds.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/moe/w4a8_rs_layout.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"

using namespace xstage::ops;

TEST(Int4, EveryCodeRoundTripsAndIsExactInFp8) {
  for (int v = -8; v <= 7; ++v) {
    EXPECT_EQ(int4_decode(int4_encode(v)), v);
    EXPECT_EQ(fp8_e4m3_decode(fp8_e4m3_encode(static_cast<float>(v))), static_cast<float>(v)) << v;
  }
  EXPECT_EQ(int4_decode(int4_encode(9)), 7);
  EXPECT_EQ(int4_decode(int4_encode(-12)), -8);
}

TEST(E2M1, EveryCodeRoundTripsAndIsExactInFp8) {
  const float mags[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_decode(static_cast<uint8_t>(c));
    EXPECT_EQ(std::fabs(v), mags[c & 7]);
    if (c != 8) {
      EXPECT_EQ(e2m1_encode(v), c);  // -0 encodes as 0x8 too, +0 as 0
    }
    EXPECT_EQ(fp8_e4m3_decode(fp8_e4m3_encode(v)), v);
  }
}

TEST(E2M1, RoundsToNearestTiesToEvenAndSaturates) {
  EXPECT_EQ(e2m1_decode(e2m1_encode(0.25f)), 0.f);   // tie 0 / 0.5 -> 0 (even)
  EXPECT_EQ(e2m1_decode(e2m1_encode(0.26f)), 0.5f);
  EXPECT_EQ(e2m1_decode(e2m1_encode(0.75f)), 1.f);   // tie 0.5 / 1 -> 1
  EXPECT_EQ(e2m1_decode(e2m1_encode(1.75f)), 2.f);   // tie 1.5 / 2 -> 2
  EXPECT_EQ(e2m1_decode(e2m1_encode(2.5f)), 2.f);    // tie 2 / 3 -> 2
  EXPECT_EQ(e2m1_decode(e2m1_encode(3.5f)), 4.f);    // tie 3 / 4 -> 4
  EXPECT_EQ(e2m1_decode(e2m1_encode(5.f)), 4.f);     // tie 4 / 6 -> 4
  EXPECT_EQ(e2m1_decode(e2m1_encode(5.1f)), 6.f);
  EXPECT_EQ(e2m1_decode(e2m1_encode(100.f)), 6.f);
  EXPECT_EQ(e2m1_decode(e2m1_encode(-100.f)), -6.f);
  EXPECT_EQ(e2m1_decode(e2m1_encode(std::nanf(""))), 0.f);
}

TEST(E8M0, SharedExponentFollowsTheOcpRule) {
  EXPECT_EQ(e8m0_decode(e8m0_for_amax(6.f)), 1.f);       // floor(log2 6) - 2 = 0
  EXPECT_EQ(e8m0_decode(e8m0_for_amax(7.9f)), 1.f);
  EXPECT_EQ(e8m0_decode(e8m0_for_amax(8.f)), 2.f);
  EXPECT_EQ(e8m0_decode(e8m0_for_amax(0.75f)), 0.125f);  // floor(log2 0.75) = -1 -> 2^-3
  EXPECT_EQ(e8m0_decode(e8m0_for_amax(0.f)), 1.f);       // an all-zero block
  EXPECT_EQ(e8m0_for_amax(1e38f), 251);                  // floor(log2 1e38) = 126: 124 + 127
  EXPECT_EQ(e8m0_for_amax(1e-45f), 0);                   // log2 = -149: clamped at 2^-127
  EXPECT_TRUE(std::isnan(e8m0_decode(0xFF)));
}

namespace {
std::vector<float> random_weights(int rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 0.02f);
  std::vector<float> w(size_t(rows) * cols);
  for (auto& x : w) x = n(rng);
  return w;
}
}  // namespace

TEST(Int4, GroupQuantisationIsWithinHalfAStepAndPacksLowNibbleFirst) {
  const int rows = 3, cols = 256;
  auto w = random_weights(rows, cols, 7);
  w[5] = 0.1f;  // one large value in group 0 of row 0
  std::vector<uint8_t> q(rows * cols / 2, 0xAA);
  std::vector<float> s(rows * cols / kInt4Group, -1.f), back(w.size());
  quantize_int4_g128(w.data(), rows, cols, q.data(), s.data());
  dequantize_int4_g128(q.data(), s.data(), rows, cols, back.data());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const float scale = s[(c / kInt4Group) * rows + r];
      EXPECT_GT(scale, 0.f);
      EXPECT_LE(std::fabs(back[r * cols + c] - w[r * cols + c]), 0.5f * scale + 1e-7f) << r << "," << c;
    }
  EXPECT_FLOAT_EQ(s[0], 0.1f / 7.f);                 // K-group-major: row 0, group 0
  EXPECT_EQ(int4_decode(q[2] >> 4), 7);              // w[5] = amax: column 5 = byte 2, high nibble
  EXPECT_EQ(int4_decode(q[2] & 0x0F), static_cast<int>(std::nearbyint(w[4] / s[0])));  // column 4: low nibble
  EXPECT_FLOAT_EQ(back[5], 0.1f);
}

TEST(Mxfp4, BlockQuantisationKeepsTheLargestValueAndBoundsTheError) {
  const int rows = 2, cols = 128;
  auto w = random_weights(rows, cols, 11);
  std::vector<uint8_t> q(rows * cols / 2), s(rows * cols / kMxfp4Block);
  std::vector<float> back(w.size());
  quantize_mxfp4(w.data(), rows, cols, q.data(), s.data());
  dequantize_mxfp4(q.data(), s.data(), rows, cols, back.data());
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < cols / kMxfp4Block; ++b) {
      const float scale = e8m0_decode(s[b * rows + r]);
      float amax = 0.f;
      for (int i = 0; i < kMxfp4Block; ++i) amax = std::max(amax, std::fabs(w[r * cols + b * kMxfp4Block + i]));
      // amax / scale lies in [4, 8): it lands on 4 or 6 (clipped above 6).
      EXPECT_GE(amax / scale, 4.f);
      EXPECT_LT(amax / scale, 8.f);
      for (int i = 0; i < kMxfp4Block; ++i) {
        const int c = b * kMxfp4Block + i;
        const float x = w[r * cols + c] / scale, y = back[r * cols + c] / scale;
        // Below 6 the grid step is at most 2 (between 4 and 6): error <= half a step; above
        // 6 the value clips to 6.
        const float bound = std::fabs(x) >= 6.f ? std::fabs(x) - 6.f : (std::fabs(x) >= 2.f ? 1.f : 0.25f);
        EXPECT_LE(std::fabs(x - y), bound + 1e-6f) << r << "," << c;
      }
    }
}

// The kernel's MXFP4 math: equal to the plain dequantisation while every sub-block's exponent
// is within 14 of its 128-column block's largest, sub-blocks further below are zero.
TEST(Mxfp4, KernelMathFlushesOnlySubBlocksFarBelowTheBlockMaximum) {
  const int rows = 3, cols = 256;
  std::mt19937 rng(5);
  std::vector<uint8_t> q(rows * cols / 2);
  for (auto& b : q) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> s(rows * cols / kMxfp4Block);
  for (auto& e : s) e = static_cast<uint8_t>(120 + rng() % 15);  // gaps <= 14: exact everywhere
  std::vector<float> plain(rows * cols), kern(rows * cols);
  dequantize_mxfp4(q.data(), s.data(), rows, cols, plain.data());
  dequantize_mxfp4_w4a8(q.data(), s.data(), rows, cols, kern.data());
  EXPECT_EQ(plain, kern);
  // Row 1, block 1 (sub-blocks 4..7): exponents 140, 126 (gap 14: kept), 125 (gap 15: flushed),
  // 0 (flushed). Row 2, block 0: 255 (never produced by the quantiser) and 241 (kept) ...
  const auto sc = [&](int sub, int r) -> uint8_t& { return s[sub * rows + r]; };
  sc(4, 1) = 140;
  sc(5, 1) = 126;
  sc(6, 1) = 125;
  sc(7, 1) = 0;
  sc(0, 2) = 254;
  sc(1, 2) = 240;
  sc(2, 2) = 239;
  sc(3, 2) = 254;
  dequantize_mxfp4(q.data(), s.data(), rows, cols, plain.data());
  dequantize_mxfp4_w4a8(q.data(), s.data(), rows, cols, kern.data());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int sub = c / kMxfp4Block;
      const bool flushed = (r == 1 && (sub == 6 || sub == 7)) || (r == 2 && sub == 2);
      EXPECT_EQ(kern[r * cols + c], flushed ? 0.f : plain[r * cols + c]) << r << "," << c;
    }
  // Something non-zero was flushed (the test data is not all zero codes there).
  int nonzero = 0;
  for (int c = 6 * kMxfp4Block; c < 8 * kMxfp4Block; ++c) nonzero += plain[1 * cols + c] != 0.f;
  EXPECT_GT(nonzero, 0);
  // Every kept value is e2m1 * 2^(e - 127) with its own exponent, e.g. the gap-14 sub-block.
  for (int c = 5 * kMxfp4Block; c < 6 * kMxfp4Block; ++c)
    EXPECT_EQ(kern[1 * cols + c], e2m1_decode((q[(cols + c) / 2] >> ((c % 2) * 4)) & 0xF) * std::ldexp(1.f, -1));
}
// Random symmetric INT4 (-7..7) packed [rows, cols / 2], two's complement nibbles.
std::vector<uint8_t> random_symmetric_int4(int rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> packed(size_t(rows) * cols / 2);
  for (auto& b : packed)
    b = static_cast<uint8_t>(int4_encode(static_cast<int>(rng() % 15) - 7) |
                             (int4_encode(static_cast<int>(rng() % 15) - 7) << 4));
  return packed;
}

// prmt in its default mode with selector nibbles below 8: byte i = byte sel[i] of {b, a}.
uint32_t prmt_host(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t bytes = (uint64_t(b) << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((bytes >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}

// One consumer thread's conversion of word wd of K step j (the kernel's arithmetic): thread t of
// warp group g reads the word at g * 4096 + (j / 2) * 2048 + 16 t + 8 (j % 2) + 4 wd of the chunk
// and builds A registers 2 wd (row r0, table a0:a1) and 2 wd + 1 (row r0 + 8, table b0:b1).
struct ThreadRegs {
  uint32_t reg[2];
};
ThreadRegs convert_word(const uint8_t* chunk, int g, int t, int j, int wd, uint32_t a0, uint32_t a1, uint32_t b0,
                        uint32_t b1) {
  uint32_t x;
  std::memcpy(&x, chunk + g * 4096 + (j / 2) * 2048 + t * 16 + (j % 2) * 8 + 4 * wd, 4);
  return {{prmt_host(a0, a1, x & 0x7777u) | (x & 0x80808080u),
           prmt_host(b0, b1, (x >> 16) & 0x7777u) | ((x << 4) & 0x80808080u)}};
}

// Weight row and column (inside the chunk of row block rb, K block kb) of byte i of A register
// reg of thread t in warp group g at K step j (CuTe's m64k32 8-bit A layout).
int frag_row(int rb, int g, int t, int reg) { return 128 * rb + 64 * g + 16 * (t / 32) + (t % 32) / 4 + 8 * (reg % 2); }
int frag_col(int kb, int j, int t, int reg, int i) { return 128 * kb + 32 * j + 16 * (reg / 2) + 4 * (t % 4) + i; }

// The prepacked layout of the register-operand kernel, read and converted the way a consumer
// thread does (w4a8_rs.cuh): thread t of warp group g loads 16 bytes at g * 4096 + h * 2048 +
// 16 t of a 128 x 128 chunk (K steps 2h, 2h + 1); K step j's word w at byte 8 (j % 2) + 4 w
// gives A registers 2w = prmt(T, x & 0x7777) | (x & 0x80808080) and 2w + 1 = prmt(T, (x >> 16) &
// 0x7777) | ((x << 4) & 0x80808080), T = e4m3(0..7). Register reg must hold the e4m3 codes of
// CuTe's m64k32 8-bit A layout: reg 0 = row r0, K 4q..4q+3; reg 1 = row r0 + 8; reg 2 = row r0,
// K + 16; reg 3 = row r0 + 8, K + 16 (r0 = 16 (t / 32) + (t % 32) / 4, q = t % 4).
TEST(Int4Prepack, EveryThreadConvertsItsWgmmaFragment) {
  const int rows = 256, cols = 384;
  const std::vector<uint8_t> packed = random_symmetric_int4(rows, cols, 7);
  std::vector<uint8_t> pre(packed.size(), 0xEE);
  prepack_int4_rs(packed.data(), rows, cols, pre.data());
  const uint32_t t0 = 0x44403800u, t1 = 0x4E4C4A48u;  // e4m3(0..7)
  for (int v = 0; v < 8; ++v) ASSERT_EQ((prmt_host(t0, t1, v) & 0xFF), fp8_e4m3_encode(float(v)));
  long checked = 0;
  for (int rb = 0; rb < rows / 128; ++rb)
    for (int kb = 0; kb < cols / 128; ++kb) {
      const size_t chunk = (size_t(rb) * (cols / 128) + kb) * 8192;
      for (int g = 0; g < 2; ++g)
        for (int t = 0; t < 128; ++t)
          for (int j = 0; j < 4; ++j)
            for (int w = 0; w < 2; ++w) {
              const ThreadRegs tr = convert_word(pre.data() + chunk, g, t, j, w, t0, t1, t0, t1);
              const uint32_t* regs = tr.reg;
              for (int b = 0; b < 2; ++b) {
                const int reg = 2 * w + b;
                for (int i = 0; i < 4; ++i) {
                  const int row = frag_row(rb, g, t, reg);
                  const int col = frag_col(kb, j, t, reg, i);
                  const int q = int4_decode(packed[(size_t(row) * cols + col) / 2] >> (4 * (col % 2)));
                  ASSERT_EQ((regs[b] >> (8 * i)) & 0xFF, fp8_e4m3_encode(float(q)))
                      << "row " << row << " col " << col << " q " << q;
                  ++checked;
                }
              }
            }
    }
  EXPECT_EQ(checked, long(rows) * cols);  // every value of the output was converted exactly once
}

TEST(Int4Prepack, CodePositionsCoverEveryBitOnce) {
  const int rows = 128, cols = 256;
  std::vector<int> hits(rows * cols * 4, 0);  // bits of the output
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const auto p = xstage::kernels::moe::rs_code_pos(r, c, cols);
      ASSERT_GE(p.word_byte, 0);
      ASSERT_LT(p.word_byte + 4, rows * cols / 2 + 1);
      ASSERT_EQ(p.word_byte % 4, 0);
      for (int b = 0; b < 3; ++b) ++hits[p.word_byte * 8 + p.mag_bit + b];
      ++hits[p.word_byte * 8 + p.sign_bit];
    }
  for (int h : hits) ASSERT_EQ(h, 1);
}

TEST(Int4Prepack, RejectsMinusEightAndShapesThatAreNotWholeChunks) {
  std::vector<uint8_t> a = random_symmetric_int4(128, 256, 3), b(a.size());
  EXPECT_NO_THROW(prepack_int4_rs(a.data(), 128, 256, b.data()));
  a[1000] = static_cast<uint8_t>((a[1000] & 0x0F) | 0x80);  // value 2001 = row 7, column 209 := -8
  try {
    prepack_int4_rs(a.data(), 128, 256, b.data());
    ADD_FAILURE() << "-8 accepted";
  } catch (const xstage::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("weight (7, 209) is -8"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> c(128 * 192 / 2), d(c.size());
  EXPECT_THROW(prepack_int4_rs(c.data(), 128, 192, d.data()), xstage::InvalidArgument);
  EXPECT_THROW(prepack_int4_rs(c.data(), 96, 128, d.data()), xstage::InvalidArgument);
  EXPECT_THROW(prepack_int4_rs(nullptr, 128, 128, d.data()), xstage::InvalidArgument);
}

// Random MXFP4 weights whose exponent gaps inside each row's 128-column block run 0..13: gaps
// 12 and 13 are past the register-operand kernels' limit (11) and get flushed.
struct MxWeights {
  std::vector<uint8_t> packed, e8m0;
};
MxWeights random_mxfp4(int rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  MxWeights w;
  w.packed.resize(size_t(rows) * cols / 2);
  for (auto& b : w.packed) b = static_cast<uint8_t>(rng());
  w.e8m0.resize(size_t(cols / 32) * rows);
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < cols / 128; ++g) {
      const int emax = 110 + static_cast<int>(rng() % 30);
      const int top = static_cast<int>(rng() % 4);
      for (int i = 0; i < 4; ++i)
        w.e8m0[size_t(4 * g + i) * rows + r] = static_cast<uint8_t>(i == top ? emax : emax - int(rng() % 14));
    }
  return w;
}

// The MXFP4 prepacked layout read and converted the way a consumer thread of the register-
// operand kernel does (w4a8_rs.cuh, kMx): codes as for INT4, the thread's 8 gap bytes at 8192 +
// 8 (32 g + 8 (t / 32) + (t % 32) / 4) of the 8704-byte chunk, and per K step j the tables
// T0 - (8 gap * 0x01010100) and T1 - 8 gap * 0x01010101 with T = e4m3({0, .5, 1, 1.5, 2, 3, 4,
// 6} * 2^6). Every converted byte times the row's block scale must equal the kernel's defined
// math, dequantize_mxfp4_w4a8 with gap limit 11 (and the fp8 byte must be exactly e4m3 of
// e2m1 * 2^(6 - gap), or zero where flushed).
TEST(Mxfp4Prepack, EveryThreadConvertsItsWgmmaFragment) {
  const int rows = 256, cols = 384;
  const MxWeights w = random_mxfp4(rows, cols, 11);
  std::vector<uint8_t> pre(size_t(prepacked_mxfp4_rs_bytes(rows, cols)), 0xEE);
  ASSERT_EQ(pre.size(), size_t(rows / 128) * (cols / 128) * 8704);
  std::vector<float> bs(size_t(cols / 128) * rows, -1.f);
  const long long flushed = prepack_mxfp4_rs(w.packed.data(), w.e8m0.data(), rows, cols, pre.data(), bs.data());
  std::vector<float> kern(size_t(rows) * cols), plain(kern.size());
  dequantize_mxfp4_w4a8(w.packed.data(), w.e8m0.data(), rows, cols, kern.data(), kMxfp4RsMaxExponentGap);
  dequantize_mxfp4(w.packed.data(), w.e8m0.data(), rows, cols, plain.data());
  long long expect_flushed = 0;
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < cols / 128; ++g) {
      int emax = 0;
      for (int i = 0; i < 4; ++i) emax = std::max<int>(emax, w.e8m0[size_t(4 * g + i) * rows + r]);
      for (int i = 0; i < 4; ++i) expect_flushed += emax - w.e8m0[size_t(4 * g + i) * rows + r] > 11;
      ASSERT_EQ(bs[size_t(g) * rows + r], std::ldexp(1.f, emax - 133)) << r << "," << g;
    }
  EXPECT_EQ(flushed, expect_flushed);
  EXPECT_GT(flushed, 0);
  const uint32_t t0 = 0x6C686000u, t1 = 0x7C787470u;
  const float t[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int v = 0; v < 8; ++v) ASSERT_EQ((prmt_host(t0, t1, v) & 0xFF), fp8_e4m3_encode(t[v] * 64.f)) << v;
  long checked = 0, differs_from_plain = 0;
  for (int rb = 0; rb < rows / 128; ++rb)
    for (int kb = 0; kb < cols / 128; ++kb) {
      const size_t chunk = (size_t(rb) * (cols / 128) + kb) * 8704;
      for (int g = 0; g < 2; ++g)
        for (int t = 0; t < 128; ++t) {
          uint32_t gaps[2];
          std::memcpy(gaps, pre.data() + chunk + 8192 + 8 * (32 * g + 8 * (t / 32) + (t % 32) / 4), 8);
          for (int j = 0; j < 4; ++j) {
            uint32_t tab[2][2];
            for (int h = 0; h < 2; ++h) {
              const uint32_t d = prmt_host(gaps[h], 0u, 0x1111u * j);
              tab[h][0] = t0 - (d << 8);
              tab[h][1] = t1 - d;
            }
            for (int wd = 0; wd < 2; ++wd) {
              const ThreadRegs tr =
                  convert_word(pre.data() + chunk, g, t, j, wd, tab[0][0], tab[0][1], tab[1][0], tab[1][1]);
              const uint32_t* regs = tr.reg;
              for (int b = 0; b < 2; ++b) {
                const int reg = 2 * wd + b;
                for (int i = 0; i < 4; ++i) {
                  const int row = frag_row(rb, g, t, reg);
                  const int col = frag_col(kb, j, t, reg, i);
                  const size_t idx = size_t(row) * cols + col;
                  const uint8_t byte = (regs[b] >> (8 * i)) & 0xFF;
                  const float got = fp8_e4m3_decode(byte) * bs[size_t(kb) * rows + row];
                  ASSERT_EQ(got, kern[idx]) << "row " << row << " col " << col;
                  const int emax_gap = [&] {
                    int emax = 0;
                    for (int u = 0; u < 4; ++u) emax = std::max<int>(emax, w.e8m0[size_t(4 * kb + u) * rows + row]);
                    return emax - w.e8m0[size_t(col / 32) * rows + row];
                  }();
                  const float q = e2m1_decode((w.packed[idx / 2] >> (4 * (col % 2))) & 0xF);
                  if (emax_gap <= 11) ASSERT_EQ(byte, fp8_e4m3_encode(q * std::ldexp(1.f, 6 - emax_gap)));
                  else ASSERT_EQ(byte & 0x7F, 0) << "flushed";
                  differs_from_plain += kern[idx] != plain[idx];
                  ++checked;
                }
              }
            }
          }
        }
    }
  EXPECT_EQ(checked, long(rows) * cols);
  EXPECT_GT(differs_from_plain, 0);  // the flushed sub-blocks held non-zero values
}

// Counts, per output bit, the codes of a rows x cols matrix prepacked in chunks of chunk_bytes
// (sign + 3-bit magnitude, all within each chunk's first 8 KiB).
void mark_code_bits(std::vector<int>& hits, int rows, int cols, int chunk_bytes) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const auto p = xstage::kernels::moe::rs_code_pos(r, c, cols, chunk_bytes);
      ASSERT_EQ(p.word_byte % 4, 0);
      ASSERT_LT(p.word_byte % chunk_bytes, 8192);
      for (int b = 0; b < 3; ++b) ++hits[size_t(p.word_byte) * 8 + p.mag_bit + b];
      ++hits[size_t(p.word_byte) * 8 + p.sign_bit];
    }
}

TEST(Mxfp4Prepack, CodeAndGapPositionsCoverEveryBitOnce) {
  const int rows = 256, cols = 256;
  const int64_t bytes = prepacked_mxfp4_rs_bytes(rows, cols);
  std::vector<int> hits(size_t(bytes) * 8, 0);
  mark_code_bits(hits, rows, cols, xstage::kernels::moe::kRsMxChunkBytes);
  for (int r = 0; r < rows; ++r)
    for (int sub = 0; sub < cols / 32; ++sub) {
      const int64_t at = xstage::kernels::moe::rs_gap_pos(r, sub, cols);
      ASSERT_GE(at % 8704, 8192);
      for (int b = 0; b < 8; ++b) ++hits[size_t(at) * 8 + b];
    }
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "bit " << i;
}

TEST(Mxfp4Prepack, GapLimitAndShapes) {
  // Gap exactly 11 is kept, 12 flushed; dequantize_mxfp4_w4a8's limit follows its argument.
  const int rows = 128, cols = 128;
  std::vector<uint8_t> packed(size_t(rows) * cols / 2, 0x22), e8(size_t(4) * rows);  // every value 1.0
  for (int r = 0; r < rows; ++r) {
    e8[0 * rows + r] = 127;
    e8[1 * rows + r] = 116;  // gap 11
    e8[2 * rows + r] = 115;  // gap 12
    e8[3 * rows + r] = 113;  // gap 14
  }
  std::vector<uint8_t> pre(size_t(prepacked_mxfp4_rs_bytes(rows, cols)));
  std::vector<float> bs(rows);
  EXPECT_EQ(prepack_mxfp4_rs(packed.data(), e8.data(), rows, cols, pre.data(), bs.data()), 2 * rows);
  std::vector<float> k11(size_t(rows) * cols), k14(k11.size());
  dequantize_mxfp4_w4a8(packed.data(), e8.data(), rows, cols, k11.data(), kMxfp4RsMaxExponentGap);
  dequantize_mxfp4_w4a8(packed.data(), e8.data(), rows, cols, k14.data());
  EXPECT_EQ(k11[40], std::ldexp(1.f, -11));
  EXPECT_EQ(k11[70], 0.f);
  EXPECT_EQ(k14[70], std::ldexp(1.f, -12));
  EXPECT_EQ(k11[100], 0.f);
  EXPECT_EQ(k14[100], std::ldexp(1.f, -14));
  EXPECT_THROW(prepack_mxfp4_rs(packed.data(), e8.data(), 128, 192, pre.data(), bs.data()), xstage::InvalidArgument);
  EXPECT_THROW(prepack_mxfp4_rs(packed.data(), e8.data(), 64, 128, pre.data(), bs.data()), xstage::InvalidArgument);
  EXPECT_THROW(prepack_mxfp4_rs(packed.data(), nullptr, 128, 128, pre.data(), bs.data()), xstage::InvalidArgument);
  EXPECT_THROW(prepack_mxfp4_rs(packed.data(), e8.data(), 128, 128, pre.data(), nullptr), xstage::InvalidArgument);
  EXPECT_THROW(prepacked_mxfp4_rs_bytes(128, 100), xstage::InvalidArgument);
}

// INT4 with two-level scales (quantize_int4_lut): an fp32 scale S per row, an e4m3 scale gs per
// row and 128-K group, codes -7..7; w' = S * e4m3(|q| * gs) * sign(q).
namespace {
float e4m3_round(float x) { return fp8_e4m3_decode(fp8_e4m3_encode(x)); }

struct LutWeights {
  std::vector<uint8_t> packed, gs;
  std::vector<float> channel;
};
LutWeights quantize_lut(const std::vector<float>& w, int rows, int cols) {
  LutWeights q{std::vector<uint8_t>(size_t(rows) * cols / 2, 0xAA),
               std::vector<uint8_t>(size_t(cols / 128) * rows, 0xEE), std::vector<float>(rows, -1.f)};
  quantize_int4_lut(w.data(), rows, cols, q.packed.data(), q.gs.data(), q.channel.data());
  return q;
}
int code_at(const std::vector<uint8_t>& packed, int cols, int r, int c) {
  return int4_decode(packed[(size_t(r) * cols + c) / 2] >> (4 * (c % 2)));
}
}  // namespace

// Rows of very different magnitudes: 0..4 normal (sd 0.02), 5 large (sd 5) with an all-zero
// group (its scale, 1e-4 / 7, is below 2^-16 of the row's largest: gs rounds to 0), 6 small
// (sd 1e-3), 7 (sd 1) with group 1 at 2^-13 of the rest (a subnormal gs) and group 3 at 1/16.
TEST(Int4Lut, QuantisationBoundsAndRanges) {
  const int rows = 8, cols = 512, groups = cols / 128;
  std::vector<float> w = random_weights(rows, cols, 21);
  const auto scale = [&](int r, int c0, int c1, float f) {
    for (int c = c0; c < c1; ++c) w[size_t(r) * cols + c] *= f;
  };
  scale(5, 0, cols, 250.f);
  scale(5, 256, 384, 0.f);
  scale(6, 0, cols, 0.05f);
  scale(7, 0, cols, 50.f);
  scale(7, 128, 256, std::ldexp(1.f, -13));
  scale(7, 384, 512, 1.f / 16);
  const LutWeights q = quantize_lut(w, rows, cols);
  std::vector<float> back(w.size());
  dequantize_int4_lut(q.packed.data(), q.gs.data(), q.channel.data(), rows, cols, back.data());
  const uint8_t gs64 = fp8_e4m3_encode(64.f);
  ASSERT_EQ(fp8_e4m3_decode(gs64), 64.f);
  double err2 = 0, ref2 = 0;
  long moved = 0, subnormal_groups = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> sg(groups);
    for (int g = 0; g < groups; ++g) {
      float amax = 0.f;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(w[size_t(r) * cols + 128 * g + i]));
      sg[g] = std::max(amax, kInt4AmaxFloor) / 7.f;
    }
    const int top = int(std::max_element(sg.begin(), sg.end()) - sg.begin());
    const float S = q.channel[r];
    EXPECT_EQ(S, sg[top] / 64.f) << "row " << r;
    EXPECT_EQ(q.gs[size_t(top) * rows + r], gs64) << "row " << r;  // the row's largest group: exactly 64
    for (int g = 0; g < groups; ++g) {
      const uint8_t gs = q.gs[size_t(g) * rows + r];
      const float d = fp8_e4m3_decode(gs), rho = sg[g] / S;
      ASSERT_TRUE(std::isfinite(d)) << r << "," << g;
      ASSERT_GE(d, 0.f);
      ASSERT_LE(d, 64.f);
      EXPECT_EQ(gs, fp8_e4m3_encode(rho));
      subnormal_groups += d > 0.f && d < 0x1p-6f;
      // The error bound. With y = w / S and q0 = round(y / d) clamped to +-7, the quantiser's
      // choice is never worse than q0, whose error / S is at most
      //   E1 = |y - q0 d| <= max(d / 2, 7 (rho - d)): half a step of the grid m * d, or, where gs
      //        rounded below rho (|y| <= 7 rho) far enough that |y| / d > 7.5, the clamp at 7;
      //   E2 = ||q0| d - e4m3(|q0| d)| <= max(7 d / 16, 2^-10): the e4m3 rounding of the table
      //        entry, half an ulp: 2^-4 of |q0| d <= 7 d when normal, 2^-10 in the subnormal range.
      // For a normal gs (|d - rho| <= rho / 16, so 7 rho <= 7.47 d) that is 15 d / 16 <= s_g.
      // It is not much looser than the worst case: half the table step between e4m3(6 d) and
      // e4m3(7 d) reaches 0.75 s_g (rho = 0.083: d = 0.0859375, entries 0.5 and 0.625), so a
      // bound of 0.6 s_g or so would not hold in general.
      const float bound = S * (std::max(d / 2, 7 * (rho - d)) + std::max(7 * d / 16, 0x1p-10f)) * (1 + 1e-5f);
      if (d >= 0x1p-6f) {
        EXPECT_LE(bound, sg[g] * (1 + 1e-5f)) << r << "," << g;
      }
      float table[8];
      for (int m = 0; m < 8; ++m) table[m] = e4m3_round(m * d);
      for (int i = 0; i < 128; ++i) {
        const int c = 128 * g + i;
        const size_t idx = size_t(r) * cols + c;
        const int code = code_at(q.packed, cols, r, c);
        ASSERT_GE(code, -7) << r << "," << c;
        ASSERT_LE(code, 7) << r << "," << c;
        if (d == 0.f) {
          ASSERT_EQ(code, 0) << r << "," << c;
        }
        const float x = w[idx], e = std::fabs(back[idx] - x);
        ASSERT_LE(e, bound) << "row " << r << " col " << c << " w " << x << " w' " << back[idx];
        // ... and it is the nearest value of the group's table (half a table step).
        for (int m = 0; m < 8; ++m)
          ASSERT_LE(e, std::fabs(std::copysign(S * table[m], x) - x) * (1 + 1e-6f)) << r << "," << c << " m " << m;
        if (d > 0.f) moved += code != int(std::clamp(std::nearbyint(x / (d * S)), -7.f, 7.f));
        err2 += double(e) * e;
        ref2 += double(x) * x;
      }
    }
  }
  // The premises of the rows above: the all-zero group of row 5 got gs 0, row 7 has a
  // subnormal group scale, and the table rounding moved some codes off the plain INT4 grid.
  EXPECT_EQ(q.gs[2 * rows + 5], 0);
  EXPECT_GT(subnormal_groups, 0);
  EXPECT_GT(moved, 0);
  // Relative RMS error. Group-128 INT4 of Gaussian weights: amax of 128 samples ~ 2.5..3.3 sd,
  // step s_g = amax / 7 ~ 0.36..0.47 sd, uniform rounding error s_g / sqrt(12) ~ 0.10..0.14 sd.
  // Row 5 (sd 5) dominates the sums, so the matrix's figure is a Gaussian row's: below 0.16,
  // while a lost scale or sign would give 1 or more (and 0 no quantisation at all). Against
  // quantize_int4_g128 on the same weights: the step d S is within 1/16 of INT4's s_g and the
  // table's e4m3 rounding (at most 1/16 of a value, independent of the grid error) adds in
  // quadrature, so the error is at most ~10% above INT4's (about 0.5% above, measured).
  const double rel_rms = std::sqrt(err2 / ref2);
  EXPECT_LT(rel_rms, 0.16);
  EXPECT_GT(rel_rms, 0.05);
  std::vector<uint8_t> p4(q.packed.size());
  std::vector<float> s4(q.gs.size()), back4(w.size());
  quantize_int4_g128(w.data(), rows, cols, p4.data(), s4.data());
  dequantize_int4_g128(p4.data(), s4.data(), rows, cols, back4.data());
  double err2_int4 = 0;
  for (size_t i = 0; i < w.size(); ++i) err2_int4 += double(back4[i] - w[i]) * (back4[i] - w[i]);
  EXPECT_LT(err2, 1.1 * 1.1 * err2_int4);
}

// The dequantised value is the table value: S * e4m3(|q| * gs) with the code's sign, the byte
// prepack_int4_lut_rs writes into the row's table. Row 0 is made by hand: group 0's amax 448
// gives S = 448 / 7 / 64 = 1 and gs 64, group 1's amax 7.875 gives gs = 1.125, where table
// entries round: 3 * 1.125 = 3.375 -> 3.5 (tie to even), 5.625 -> 5.5, 6.75 -> 7 (tie),
// 7.875 -> 8.
TEST(Int4Lut, DequantisedValueIsTheTableValue) {
  const int rows = 128, cols = 256;
  std::vector<float> w = random_weights(rows, cols, 5);
  std::fill(w.begin(), w.begin() + cols, 0.f);
  const float group1[] = {7.875f, 6.25f, 3.95f, -3.95f, 6.3f, 1.1f, 0.5f, -7.8f};
  // Expected w' (S = 1): 7.875 -> 8; 6.25 is midway 5.5 / 7 -> the smaller code 5; 3.95 / 1.125
  // = 3.51 rounds to 4 (4.5) but 3 (3.5) is nearer; 6.3 -> 7 (code 6); 0.5 -> 0; -7.8 -> -8.
  const float expect1[] = {8.f, 5.5f, 3.5f, -3.5f, 7.f, 1.125f, 0.f, -8.f};
  const int codes1[] = {7, 5, 3, -3, 6, 1, 0, -7};
  w[0] = 448.f;
  w[1] = -100.f;
  for (int i = 0; i < 8; ++i) w[128 + i] = group1[i];
  const LutWeights q = quantize_lut(w, rows, cols);
  ASSERT_EQ(q.channel[0], 1.f);
  ASSERT_EQ(q.gs[0], fp8_e4m3_encode(64.f));
  ASSERT_EQ(q.gs[rows], fp8_e4m3_encode(1.125f));
  ASSERT_EQ(fp8_e4m3_decode(q.gs[rows]), 1.125f);
  std::vector<float> back(w.size());
  dequantize_int4_lut(q.packed.data(), q.gs.data(), q.channel.data(), rows, cols, back.data());
  EXPECT_EQ(back[0], 448.f);
  EXPECT_EQ(back[1], -128.f);  // table 0, 64, 128, ...: code -2 (-64 is 36 away, -128 28)
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(code_at(q.packed, cols, 0, 128 + i), codes1[i]) << group1[i];
    EXPECT_EQ(back[128 + i], expect1[i]) << group1[i];
  }
  std::vector<uint8_t> pre(size_t(prepacked_int4_lut_rs_bytes(rows, cols)));
  prepack_int4_lut_rs(q.packed.data(), q.gs.data(), rows, cols, pre.data());
  const float table1[8] = {0.f, 1.125f, 2.25f, 3.5f, 4.5f, 5.5f, 7.f, 8.f};
  for (int m = 0; m < 8; ++m) {
    EXPECT_EQ(fp8_e4m3_decode(pre[size_t(xstage::kernels::moe::rs_lut_table_pos(0, 1, cols)) + m]), table1[m]);
    EXPECT_EQ(fp8_e4m3_decode(pre[size_t(xstage::kernels::moe::rs_lut_table_pos(0, 0, cols)) + m]), 64.f * m);
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int code = code_at(q.packed, cols, r, c);
      const uint8_t byte = pre[size_t(xstage::kernels::moe::rs_lut_table_pos(r, c / 128, cols)) + std::abs(code)];
      const float v = q.channel[r] * fp8_e4m3_decode(byte);
      ASSERT_EQ(back[size_t(r) * cols + c], code < 0 ? -v : v) << r << "," << c;
    }
}

// The int4 lut prepacked layout read and converted the way a consumer thread of the register-
// operand kernel does: codes as for INT4 in the first 8192 bytes of each 9216-byte chunk; the
// thread's 16 table bytes at 8192 + 16 (32 g + 8 (t / 32) + (t % 32) / 4), words x, y = row r0's
// table (A registers 0 and 2, the "group A" conversion) and z, w = row r0 + 8's (registers 1
// and 3). Every converted byte must be e4m3(|q| * gs) with q's sign, and times S the kernel's
// math, dequantize_int4_lut. Random codes and group scales cover every gs byte 0..64
// (subnormal scales and rounding products).
TEST(Int4LutPrepack, EveryThreadConvertsItsWgmmaFragment) {
  const int rows = 256, cols = 384;
  const std::vector<uint8_t> packed = random_symmetric_int4(rows, cols, 13);
  std::mt19937 rng(17);
  std::vector<uint8_t> gs(size_t(cols / 128) * rows);
  for (auto& b : gs) b = static_cast<uint8_t>(rng() % (fp8_e4m3_encode(64.f) + 1));
  std::vector<float> S(rows);
  for (auto& s : S) s = std::ldexp(1.f + float(rng() % 1000) / 1000, -int(rng() % 20));
  std::vector<uint8_t> pre(size_t(prepacked_int4_lut_rs_bytes(rows, cols)), 0xEE);
  ASSERT_EQ(pre.size(), size_t(rows / 128) * (cols / 128) * 9216);
  prepack_int4_lut_rs(packed.data(), gs.data(), rows, cols, pre.data());
  std::vector<float> kern(size_t(rows) * cols);
  dequantize_int4_lut(packed.data(), gs.data(), S.data(), rows, cols, kern.data());
  std::vector<int> seen(size_t(rows) * cols, 0);
  for (int rb = 0; rb < rows / 128; ++rb)
    for (int kb = 0; kb < cols / 128; ++kb) {
      const size_t chunk = (size_t(rb) * (cols / 128) + kb) * 9216;
      for (int g = 0; g < 2; ++g)
        for (int t = 0; t < 128; ++t) {
          uint32_t tb[4];  // x, y, z, w
          std::memcpy(tb, pre.data() + chunk + 8192 + 16 * (32 * g + 8 * (t / 32) + (t % 32) / 4), 16);
          for (int j = 0; j < 4; ++j)
            for (int wd = 0; wd < 2; ++wd) {
              const ThreadRegs tr = convert_word(pre.data() + chunk, g, t, j, wd, tb[0], tb[1], tb[2], tb[3]);
              const uint32_t* regs = tr.reg;
              for (int b = 0; b < 2; ++b) {
                const int reg = 2 * wd + b;
                for (int i = 0; i < 4; ++i) {
                  const int row = frag_row(rb, g, t, reg);
                  const int col = frag_col(kb, j, t, reg, i);
                  const size_t idx = size_t(row) * cols + col;
                  const int q = code_at(packed, cols, row, col);
                  const float d = fp8_e4m3_decode(gs[size_t(kb) * rows + row]);
                  const uint8_t byte = (regs[b] >> (8 * i)) & 0xFF;
                  ASSERT_EQ(byte, fp8_e4m3_encode(float(std::abs(q)) * d) | (q < 0 ? 0x80 : 0))
                      << "row " << row << " col " << col << " q " << q << " gs " << d;
                  ASSERT_EQ(fp8_e4m3_decode(byte) * S[row], kern[idx]) << "row " << row << " col " << col;
                  ++seen[idx];
                }
              }
            }
        }
    }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "value " << i;  // every value converted once
}

TEST(Int4LutPrepack, PositionsCoverEveryByteOnce) {
  const int rows = 256, cols = 384;
  const int64_t bytes = prepacked_int4_lut_rs_bytes(rows, cols);
  ASSERT_EQ(bytes, int64_t(rows / 128) * (cols / 128) * xstage::kernels::moe::kRsLutChunkBytes);
  std::vector<int> hits(size_t(bytes) * 8, 0);  // bits of the output
  mark_code_bits(hits, rows, cols, xstage::kernels::moe::kRsLutChunkBytes);
  for (int r = 0; r < rows; ++r)
    for (int kb = 0; kb < cols / 128; ++kb) {
      const int64_t at = xstage::kernels::moe::rs_lut_table_pos(r, kb, cols);
      ASSERT_GE(at % 9216, 8192);
      ASSERT_EQ(at / 9216, int64_t(r / 128) * (cols / 128) + kb);  // the chunk of its codes
      for (int b = 0; b < 64; ++b) ++hits[size_t(at) * 8 + b];     // 8 whole bytes
    }
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "bit " << i;
}

TEST(Int4LutPrepack, RejectsBadInput) {
  const int rows = 128, cols = 256;
  std::vector<uint8_t> a = random_symmetric_int4(rows, cols, 3), gs(size_t(cols / 128) * rows, 0x38);  // gs 1
  std::vector<uint8_t> out(size_t(prepacked_int4_lut_rs_bytes(rows, cols)));
  std::vector<float> S(rows, 1.f), back(size_t(rows) * cols);
  EXPECT_NO_THROW(prepack_int4_lut_rs(a.data(), gs.data(), rows, cols, out.data()));
  EXPECT_NO_THROW(dequantize_int4_lut(a.data(), gs.data(), S.data(), rows, cols, back.data()));
  const auto message = [](const auto& call) -> std::string {
    try {
      call();
    } catch (const xstage::InvalidArgument& e) {
      return e.what();
    }
    return "(no InvalidArgument)";
  };
  const auto expect_message = [](const std::string& msg, const char* part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  };
  const auto prepack = [&] { prepack_int4_lut_rs(a.data(), gs.data(), rows, cols, out.data()); };
  const auto dequant = [&] { dequantize_int4_lut(a.data(), gs.data(), S.data(), rows, cols, back.data()); };
  // A code of -8: value 2001 = row 7, column 209 (high nibble of byte 1000).
  const uint8_t saved = a[1000];
  a[1000] = static_cast<uint8_t>((a[1000] & 0x0F) | 0x80);
  expect_message(message(prepack), "prepack_int4_lut_rs: weight (7, 209) is -8");
  expect_message(message(dequant), "dequantize_int4_lut: weight (7, 209) is -8");
  a[1000] = saved;
  // Group scale bytes of row 5, group 1: NaN (both signs), negative, above 64.
  uint8_t& g = gs[1 * rows + 5];
  for (const uint8_t nan : {uint8_t(0x7F), uint8_t(0xFF)}) {
    g = nan;
    const std::string msg = message(prepack);
    expect_message(msg, "row 5, group 1");
    expect_message(msg, "NaN");
    expect_message(message(dequant), "NaN");
  }
  g = 0xB8;  // -1
  expect_message(message(prepack), "row 5, group 1 is 0xb8, negative");
  g = fp8_e4m3_encode(96.f);
  ASSERT_EQ(fp8_e4m3_decode(g), 96.f);
  expect_message(message(prepack), "row 5, group 1 is 0x6c");
  expect_message(message(prepack), "larger than kInt4LutGroupScaleMax");
  expect_message(message(dequant), "larger than kInt4LutGroupScaleMax");
  g = fp8_e4m3_encode(64.f);
  EXPECT_NO_THROW(prepack());
  // Shapes: the prepacked layout needs whole 128 x 128 chunks; the plain format 128 columns.
  expect_message(message([&] { prepack_int4_lut_rs(a.data(), gs.data(), 100, 128, out.data()); }),
                 "must be positive multiples of 128");
  expect_message(message([&] { prepacked_int4_lut_rs_bytes(128, 100); }), "must be positive multiples of 128");
  expect_message(message([&] { dequantize_int4_lut(a.data(), gs.data(), S.data(), 100, 100, back.data()); }),
                 "a positive multiple of 128");
  EXPECT_NO_THROW(dequantize_int4_lut(a.data(), gs.data(), S.data(), 100, 128, back.data()));
  // Null buffers.
  expect_message(message([&] { prepack_int4_lut_rs(nullptr, gs.data(), rows, cols, out.data()); }), "null buffer");
  expect_message(message([&] { prepack_int4_lut_rs(a.data(), nullptr, rows, cols, out.data()); }), "null buffer");
  expect_message(message([&] { prepack_int4_lut_rs(a.data(), gs.data(), rows, cols, nullptr); }), "null buffer");
  expect_message(message([&] { dequantize_int4_lut(a.data(), gs.data(), nullptr, rows, cols, back.data()); }),
                 "dequantize_int4_lut: null buffer");
  // The quantiser: a weight that is not finite, and a shape.
  std::vector<float> w = random_weights(rows, cols, 9);
  std::vector<uint8_t> qp(a.size()), qg(gs.size());
  w[size_t(3) * cols + 17] = std::nanf("");
  expect_message(message([&] { quantize_int4_lut(w.data(), rows, cols, qp.data(), qg.data(), S.data()); }),
                 "weight (3, 17) is not finite");
  expect_message(message([&] { quantize_int4_lut(w.data(), rows, 200, qp.data(), qg.data(), S.data()); }),
                 "a positive multiple of 128");
}
// Gate/up-interleaved rows (MoeWeightLayout::int4_rs_lut_glu): a permutation of the rows in
// which each 16-row slab holds 8 gate rows and then the up rows of the same channels, 128-row
// block j covering channels [64 j, 64 j + 64); prepacking it is prepack_int4_lut_rs of the
// permuted rows, with the channel scales permuted alike.
TEST(Int4Lut, GluInterleavedRowsArePairedGateAndUp) {
  const int rows = 512, half = rows / 2;
  std::vector<int> seen(rows, 0);
  for (int r = 0; r < rows; ++r) {
    const int src = glu_source_row(r, rows);
    ASSERT_GE(src, 0);
    ASSERT_LT(src, rows);
    ++seen[src];
    const bool up = (r % 16) >= 8;
    EXPECT_EQ(src >= half, up) << r;
    EXPECT_EQ((src % half) / 64, r / 128) << r;  // the tile's 64 channels
    if (up) {
      EXPECT_EQ(src, glu_source_row(r - 8, rows) + half) << r;  // same channel as its gate row
    }
  }
  for (int v : seen) EXPECT_EQ(v, 1);

  const int cols = 256;
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(size_t(half * 2) * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = u(rng) * std::ldexp(1.f, -int((i / cols) % 5));
  const int n = 256;  // one 128-channel block: gate rows 0..127, up rows 128..255
  std::vector<float> wn(w.begin(), w.begin() + size_t(n) * cols);
  const LutWeights q = quantize_lut(wn, n, cols);
  std::vector<uint8_t> glu(size_t(prepacked_int4_lut_rs_bytes(n, cols)), 0x5A);
  std::vector<float> cs(n, -1.f);
  prepack_int4_lut_rs_glu(q.packed.data(), q.gs.data(), q.channel.data(), n, cols, glu.data(), cs.data());
  // The same by hand: permute, then the plain prepacking.
  LutWeights p{std::vector<uint8_t>(q.packed.size()), std::vector<uint8_t>(q.gs.size()), std::vector<float>(n)};
  for (int r = 0; r < n; ++r) {
    const int src = glu_source_row(r, n);
    std::memcpy(p.packed.data() + size_t(r) * cols / 2, q.packed.data() + size_t(src) * cols / 2, cols / 2);
    for (int g = 0; g < cols / 128; ++g) p.gs[size_t(g) * n + r] = q.gs[size_t(g) * n + src];
    EXPECT_EQ(cs[r], q.channel[src]) << r;
  }
  std::vector<uint8_t> plain(glu.size(), 0xA5);
  prepack_int4_lut_rs(p.packed.data(), p.gs.data(), n, cols, plain.data());
  EXPECT_EQ(glu, plain);
  // Rows that are not whole 128-channel blocks of gate and up are refused, as are null buffers.
  try {
    prepack_int4_lut_rs_glu(q.packed.data(), q.gs.data(), q.channel.data(), 128, cols, glu.data(), cs.data());
    ADD_FAILURE() << "rows = 128 accepted";
  } catch (const xstage::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 256"), std::string::npos) << e.what();
  }
  EXPECT_THROW(prepack_int4_lut_rs_glu(q.packed.data(), q.gs.data(), nullptr, n, cols, glu.data(), cs.data()),
               xstage::InvalidArgument);
}

// prepack_mxfp4_rs_glu is prepack_mxfp4_rs of the gate/up-interleaved rows: the same codes, gaps
// and block scales as permuting packed and E8M0 by hand and prepacking, the same count of zeroed
// sub-blocks (rows with exponents spread past the register-operand limit make it non-zero), and
// rows that are not whole 128-channel blocks of gate and up refused.
TEST(Mxfp4Rs, GluInterleavedRowsEqualPermutedPrepack) {
  const int n = 256, cols = 256;
  std::mt19937 rng(91);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(size_t(n) * cols);
  // Per 32-value sub-block a scale 2^-(0..15): some blocks span more than 11 binades.
  for (size_t i = 0; i < w.size(); ++i) w[i] = u(rng) * std::ldexp(1.f, -int(((i / 32) * 7 + i / cols) % 16));
  std::vector<uint8_t> packed(size_t(n) * cols / 2), e8m0(size_t(cols / 32) * n);
  quantize_mxfp4(w.data(), n, cols, packed.data(), e8m0.data());
  const size_t bytes = size_t(prepacked_mxfp4_rs_bytes(n, cols));
  std::vector<uint8_t> glu(bytes, 0x5A);
  std::vector<float> bs(size_t(cols / 128) * n, -1.f);
  const long long zeroed = prepack_mxfp4_rs_glu(packed.data(), e8m0.data(), n, cols, glu.data(), bs.data());
  std::vector<uint8_t> p2(packed.size()), e2(e8m0.size());
  for (int r = 0; r < n; ++r) {
    const int src = glu_source_row(r, n);
    std::memcpy(p2.data() + size_t(r) * cols / 2, packed.data() + size_t(src) * cols / 2, cols / 2);
    for (int b = 0; b < cols / 32; ++b) e2[size_t(b) * n + r] = e8m0[size_t(b) * n + src];
  }
  std::vector<uint8_t> plain(bytes, 0xA5);
  std::vector<float> bs2(bs.size(), -2.f);
  const long long zeroed2 = prepack_mxfp4_rs(p2.data(), e2.data(), n, cols, plain.data(), bs2.data());
  EXPECT_EQ(glu, plain);
  EXPECT_EQ(bs, bs2);
  EXPECT_EQ(zeroed, zeroed2);
  EXPECT_GT(zeroed, 0);  // the spread exponents reach past the limit somewhere
  try {
    prepack_mxfp4_rs_glu(packed.data(), e8m0.data(), 128, cols, glu.data(), bs.data());
    ADD_FAILURE() << "rows = 128 accepted";
  } catch (const xstage::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 256"), std::string::npos) << e.what();
  }
  EXPECT_THROW(prepack_mxfp4_rs_glu(packed.data(), nullptr, n, cols, glu.data(), bs.data()), xstage::InvalidArgument);
}

// ---- The W4A8 references' flush rule and their distance from exact dequantisation (issue 33)
// The GPU tests' and the layer oracle's W4A8 weights are the fp32 weights the kernels compute
// with (tests/gpu/test_moe_gemm.cpp, ops::moe_layer_reference):
//   INT4 group-128 (dequantize_int4_g128): q * scale exactly; nothing is ever flushed, however
//     small a group's scale.
//   MXFP4 (dequantize_mxfp4_w4a8): e2m1 * 2^(e - 127) exactly, except that a 32-value sub-block
//     whose exponent e is more than max_gap below the largest exponent emax of its row's
//     128-column block is zero (max_gap 14 for the shared-memory kernels, 11 for the
//     register-operand ones). A flushed value is at most 6 * 2^(emax - 127 - (max_gap + 1)) in
//     magnitude, and, for weights from quantize_mxfp4 (emax's sub-block holds an |x| >= 4 *
//     2^(emax - 127) unless it is all zero), at most 1.5 * 2^-(max_gap + 1) of the 128-value
//     block's largest |weight|: 4.6e-5 (gap 14) and 3.7e-4 (gap 11).
//   INT4 two-level (dequantize_int4_lut): a group whose scale is at most 2^-16 of its row's
//     largest rounds to group scale 0 and is zero (Int4Lut.QuantisationBoundsAndRanges).
TEST(W4A8References, Int4NeverFlushes) {
  // Row 0: group 0 scale 0.5, group 1 scale 2^-40 (far below); codes -7 (0x9) and 7 (0x7).
  const int rows = 1, cols = 256;
  std::vector<uint8_t> packed(cols / 2, 0x79);  // even column -7, odd column 7
  const std::vector<float> scales = {0.5f, std::ldexp(1.f, -40)};  // [cols / 128][rows]
  std::vector<float> out(cols);
  dequantize_int4_g128(packed.data(), scales.data(), rows, cols, out.data());
  for (int c = 0; c < cols; ++c) {
    const float s = c < 128 ? 0.5f : std::ldexp(1.f, -40);
    EXPECT_EQ(out[c], (c % 2 ? 7.f : -7.f) * s) << c;  // -3.5, 3.5, then +-7 * 2^-40, not 0
  }
}

TEST(W4A8References, Mxfp4FlushIsBoundedByTheBlockMaximum) {
  // Weights whose 32-value sub-blocks span 2^0 .. 2^-24 in magnitude inside each 128-column
  // block (exponent gaps up to ~26): quantize_mxfp4, then the kernels' math against the exact
  // dequantisation.
  const int rows = 64, cols = 512;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> w(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int sb = 0; sb < cols / 32; ++sb) {
      const float mag = std::ldexp(1.f, -static_cast<int>(rng() % 25));
      for (int i = 0; i < 32; ++i) {
        float x = nd(rng) * mag;
        if (x == 0.f) x = mag;  // no all-zero sub-block (its exponent would be 127)
        w[size_t(r) * cols + sb * 32 + i] = x;
      }
    }
  std::vector<uint8_t> q(size_t(rows) * cols / 2), e8(size_t(cols / 32) * rows);
  quantize_mxfp4(w.data(), rows, cols, q.data(), e8.data());
  std::vector<float> exact(w.size()), kern(w.size());
  dequantize_mxfp4(q.data(), e8.data(), rows, cols, exact.data());
  for (int gap : {kMxfp4MaxExponentGap, kMxfp4RsMaxExponentGap}) {
    dequantize_mxfp4_w4a8(q.data(), e8.data(), rows, cols, kern.data(), gap);
    long long flushed = 0, flushed_nonzero = 0;
    double worst = 0;  // largest |kern - exact| / block amax
    for (int r = 0; r < rows; ++r)
      for (int g = 0; g < cols / 128; ++g) {
        int emax = 0;
        float amax = 0.f;
        for (int i = 0; i < 4; ++i) emax = std::max(emax, int(e8[size_t(4 * g + i) * rows + r]));
        for (int c = 128 * g; c < 128 * g + 128; ++c) amax = std::max(amax, std::fabs(w[size_t(r) * cols + c]));
        for (int c = 128 * g; c < 128 * g + 128; ++c) {
          const size_t i = size_t(r) * cols + c;
          const int e = e8[size_t(c / 32) * rows + r];
          const bool flush = emax - e > gap;
          EXPECT_EQ(kern[i], flush ? 0.f : exact[i]) << "gap " << gap << " row " << r << " col " << c;
          flushed += flush;
          flushed_nonzero += flush && exact[i] != 0.f;
          const double d = std::fabs(double(kern[i]) - exact[i]);
          EXPECT_LE(d, 6.0 * std::ldexp(1.0, emax - 127 - (gap + 1))) << "gap " << gap << " row " << r << " col " << c;
          worst = std::max(worst, d / amax);
        }
      }
    EXPECT_LE(worst, 1.5 * std::ldexp(1.0, -(gap + 1))) << "gap " << gap;
    EXPECT_GT(flushed_nonzero, 0) << "gap " << gap << ": the data exercises the flush";
    EXPECT_LT(flushed, static_cast<long long>(rows) * cols) << "gap " << gap;
  }
}

#endif  // XSTAGE_HAVE_MOE
