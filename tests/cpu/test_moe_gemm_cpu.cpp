// MoE grouped GEMM without a GPU: fp8 e4m3 encode/decode and the per-128 quantisation
// helpers, validation (one clear error per problem), routing checks, block-M planning and the
// choice of instantiation.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/moe/launch.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_gemm.hpp"
#include "xstage/ops/moe_quant.hpp"

using namespace xstage;
using ops::MoeEpilogue;
using ops::MoeGemmArgs;

namespace {

// ---- fp8 e4m3 --------------------------------------------------------------------------
TEST(MoeQuant, Fp8RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float f = ops::fp8_e4m3_decode(code);
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(ops::fp8_e4m3_encode(f), code) << "code " << c << " value " << f;
  }
}

TEST(MoeQuant, Fp8KnownValuesRoundingAndSaturation) {
  EXPECT_EQ(ops::fp8_e4m3_encode(1.f), 0x38);
  EXPECT_EQ(ops::fp8_e4m3_encode(-2.f), 0xC0);
  EXPECT_EQ(ops::fp8_e4m3_encode(448.f), 0x7E);
  EXPECT_EQ(ops::fp8_e4m3_encode(1000.f), 0x7E);    // saturates
  EXPECT_EQ(ops::fp8_e4m3_encode(-1e30f), 0xFE);
  EXPECT_EQ(ops::fp8_e4m3_encode(0x1p-9f), 0x01);   // smallest subnormal
  EXPECT_EQ(ops::fp8_e4m3_encode(0x1p-11f), 0x00);  // below half of it: zero
  EXPECT_EQ(ops::fp8_e4m3_encode(1.0625f), 0x38);   // tie -> even mantissa (1.0)
  EXPECT_EQ(ops::fp8_e4m3_encode(1.1875f), 0x3A);   // tie -> even mantissa (1.25)
  EXPECT_EQ(ops::fp8_e4m3_encode(1.07f), 0x39);
  EXPECT_EQ(ops::fp8_e4m3_encode(std::nanf("")), 0x7F);
  EXPECT_FLOAT_EQ(ops::fp8_e4m3_decode(0x7E), 448.f);
  EXPECT_FLOAT_EQ(ops::fp8_e4m3_decode(0x08), 0x1p-6f);
  EXPECT_FLOAT_EQ(ops::fp8_e4m3_decode(0x07), 7 * 0x1p-9f);
}

TEST(MoeQuant, PerTokenScalesAreTokenContiguousAndRoundTrip) {
  const int rows = 5, cols = 256;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = nd(rng);
  for (int c = 0; c < 128; ++c) x[2 * cols + 128 + c] = 0.f;  // an all-zero block
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(2 * rows);
  ops::quantize_per_token_128(x.data(), rows, cols, q.data(), s.data());
  for (int r = 0; r < rows; ++r)
    for (int cb = 0; cb < 2; ++cb) {
      float amax = 0.f;
      for (int c = 0; c < 128; ++c) amax = std::max(amax, std::fabs(x[r * cols + cb * 128 + c]));
      const float scale = s[cb * rows + r];  // [cols/128, rows]
      EXPECT_FLOAT_EQ(scale, std::max(amax, ops::kQuantAmaxFloor) / 448.f) << r << " " << cb;
      double err = 0, ref = 0;
      bool has_max_code = false;
      for (int c = 0; c < 128; ++c) {
        const float v = x[r * cols + cb * 128 + c];
        const uint8_t code = q[r * cols + cb * 128 + c];
        const float dq = ops::fp8_e4m3_decode(code) * scale;
        err += (dq - v) * (dq - v);
        ref += v * v;
        has_max_code |= (code & 0x7F) == 0x7E;
      }
      if (amax > 0) {
        EXPECT_TRUE(has_max_code) << "the amax element must map to +-448";
        EXPECT_LT(std::sqrt(err / ref), 1.0 / 16) << r << " " << cb;
      } else {
        EXPECT_EQ(err, 0.0);
      }
    }
}

TEST(MoeQuant, PerTokenScalesSpanTheWholeRow) {
  const int rows = 4, cols = 384;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = nd(rng);
  x[1 * cols + 300] = 40.f;                                   // row 1's amax sits in its third 128-block
  for (int c = 0; c < cols; ++c) x[3 * cols + c] = 0.f;       // an all-zero row
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(rows);
  ops::quantize_fp8_per_token(x.data(), rows, cols, q.data(), s.data());
  for (int r = 0; r < rows; ++r) {
    float amax = 0.f;
    for (int c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
    EXPECT_FLOAT_EQ(s[r], std::max(amax, ops::kQuantAmaxFloor) / 448.f) << r;
    for (int c = 0; c < cols; ++c) {
      const uint8_t code = q[r * cols + c];
      EXPECT_EQ(code, ops::fp8_e4m3_encode(x[r * cols + c] / s[r])) << r << " " << c;
    }
  }
  EXPECT_EQ(q[1 * cols + 300], 0x7E);  // the row's amax -> 448
  // The per-128 quantiser on the same row gives its first block a finer scale than the row's.
  std::vector<float> s128(3 * rows);
  std::vector<uint8_t> q128(rows * cols);
  ops::quantize_per_token_128(x.data(), rows, cols, q128.data(), s128.data());
  EXPECT_LT(s128[0 * rows + 1], s[1]);
  EXPECT_FLOAT_EQ(s128[2 * rows + 1], s[1]);
}

TEST(MoeQuant, BlockScales128x128) {
  const int rows = 256, cols = 384;
  std::vector<float> w(rows * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) w[r * cols + c] = std::sin(0.01f * (r * cols + c)) * (1 + r / 128 + 10 * (c / 128));
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(2 * 3);
  ops::quantize_blocks_128x128(w.data(), rows, cols, q.data(), s.data());
  for (int rb = 0; rb < 2; ++rb)
    for (int cb = 0; cb < 3; ++cb) {
      float amax = 0.f;
      for (int r = rb * 128; r < rb * 128 + 128; ++r)
        for (int c = cb * 128; c < cb * 128 + 128; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      EXPECT_FLOAT_EQ(s[rb * 3 + cb], amax / 448.f);
    }
  const float v = w[200 * cols + 300];
  const float dq = ops::fp8_e4m3_decode(q[200 * cols + 300]) * s[1 * 3 + 2];
  EXPECT_NEAR(dq, v, std::fabs(v) / 16 + 1e-6);
}

// ---- validation --------------------------------------------------------------------------
void* fake(uintptr_t addr) { return reinterpret_cast<void*>(addr); }

MoeGemmArgs good_args(MoeEpilogue epi = MoeEpilogue::bf16) {
  MoeGemmArgs a;
  a.epilogue = epi;
  a.experts = 4;
  a.m_total = 1000;
  a.n = 4096;
  a.k = 2048;
  a.a = fake(0x10000);
  a.b = fake(0x20000);
  a.out = fake(0x30000);
  a.a_scales = static_cast<const float*>(fake(0x40000));
  a.b_scales = static_cast<const float*>(fake(0x50000));
  a.counts = static_cast<const int*>(fake(0x60000));
  a.offsets = static_cast<const int*>(fake(0x70000));
  if (epi == MoeEpilogue::swiglu_fp8) {
    a.k = 4096;
    a.out_scales = static_cast<float*>(fake(0x80000));
    a.row_weights = static_cast<const float*>(fake(0x90000));
  }
  return a;
}

template <class F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected InvalidArgument containing '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

template <class Mutate>
void expect_invalid_args(Mutate&& m, const std::string& needle, MoeEpilogue epi = MoeEpilogue::bf16) {
  MoeGemmArgs a = good_args(epi);
  m(a);
  expect_invalid([&] { ops::validate(a); }, needle);
}

TEST(MoeGemmValidate, GoodArgumentsPass) {
  EXPECT_NO_THROW(ops::validate(good_args()));
  EXPECT_NO_THROW(ops::validate(good_args(MoeEpilogue::swiglu_fp8)));
  MoeGemmArgs a = good_args();
  a.n = 1408;  // DiT-MoE-G hidden: 11 x 128
  a.k = 5632;
  EXPECT_NO_THROW(ops::validate(a));
  a.m_total = 0;  // nothing routed: valid, launches nothing
  EXPECT_NO_THROW(ops::validate(a));
}

TEST(MoeGemmValidate, EachProblemHasItsMessage) {
  expect_invalid_args([](auto& a) { a.quant = static_cast<ops::MoeQuant>(9); }, "unsupported quantisation 9");
  expect_invalid_args([](auto& a) { a.epilogue = static_cast<MoeEpilogue>(7); }, "unsupported epilogue");
  expect_invalid_args([](auto& a) { a.experts = 0; }, "sizes must be positive");
  expect_invalid_args([](auto& a) { a.m_total = -1; }, "sizes must be positive");
  expect_invalid_args([](auto& a) { a.k = 2000; }, "k = 2000 must be a multiple of 128");
  expect_invalid_args([](auto& a) { a.n = 4000; }, "n = 4000 must be a multiple of 128");
  expect_invalid_args([](auto& a) { a.n = 128 * 3; }, "swiglu_fp8 needs n = 2 * intermediate",
                      MoeEpilogue::swiglu_fp8);
  expect_invalid_args([](auto& a) { a.m_total = 2000000000; }, "row index range");
  expect_invalid_args([](auto& a) { a.n = 1 << 20; a.k = 1 << 20; }, "TMA stride limit");
  expect_invalid_args([](auto& a) { a.block_m = 96; }, "block_m 96 must be 0 (planned), 64, 128, 192 or 256");
  expect_invalid_args([](auto& a) { a.block_m = 192; a.cluster_m = 2; a.cluster_n = 1; },
                      "no w8a8 bf16 kernel with block_m 192 and cluster 2x1");
  expect_invalid_args([](auto& a) { a.block_m = 192; }, "no w8a8 swiglu_fp8 kernel with block_m 192 and cluster",
                      MoeEpilogue::swiglu_fp8);
  expect_invalid_args([](auto& a) { a.block_m = 128; a.block_n = 128; a.cluster_m = 2; a.cluster_n = 1; },
                      "no w8a8 swiglu_fp8 kernel with block_m 128, block_n 128 and cluster 2x1", MoeEpilogue::swiglu_fp8);
  expect_invalid_args([](auto& a) { a.block_m = 128; a.block_n = 256; a.schedule = 3; },
                      "w8a8_swiglu_m128n256 kernel has schedules 0 and 2 (ping-pong, its default); schedule 3",
                      MoeEpilogue::swiglu_fp8);
  expect_invalid_args([](auto& a) { a.block_m = 128; a.block_n = 256; a.schedule = 1; },
                      "w8a8_bf16_m128n256_c2x1 kernel has schedules 0 and 2 (ping-pong, its default); schedule 1");
  expect_invalid_args([](auto& a) { a.block_n = 96; }, "block_n 96 must be 0 (planned), 128, 192 or 256");
  expect_invalid_args([](auto& a) { a.block_n = 192; a.schedule = 3; },
                      "w8a8_bf16_m128n192_c2x1 kernel has schedules 0 and 2 (ping-pong, its default); schedule 3");
  expect_invalid_args([](auto& a) { a.block_n = 192; a.schedule = 1; }, "schedule 1 needs the overlap bit");
  expect_invalid_args([](auto& a) { a.block_n = 192; a.cluster_m = 1; a.cluster_n = 2; },
                      "no w8a8 bf16 kernel with block_m 128, block_n 192 and cluster 1x2");
  expect_invalid_args([](auto& a) { a.block_n = 192; }, "no w8a8 swiglu_fp8 kernel with block_m 128, block_n 192",
                      MoeEpilogue::swiglu_fp8);
  expect_invalid_args([](auto& a) { a.block_m = 192; a.block_n = 192; }, "no w8a8 bf16 kernel with block_m 192, block_n 192");
  expect_invalid_args([](auto& a) { a.num_ctas = -2; }, "num_ctas -2");
  expect_invalid_args([](auto& a) { a.schedule = 4; }, "schedule 4 must be -1 (default) or 0..3");
  expect_invalid_args([](auto& a) { a.cluster_m = 2; }, "cluster 2x0 must be 0x0 (planned) or 1 or 2");
  expect_invalid_args([](auto& a) { a.cluster_m = 4; a.cluster_n = 1; }, "cluster 4x1 must be");
  expect_invalid_args([](auto& a) { a.block_m = 64; a.cluster_m = 1; a.cluster_n = 2; }, "no w8a8 swiglu_fp8 kernel with block_m 64 and cluster 1x2",
                      MoeEpilogue::swiglu_fp8);
  expect_invalid_args([](auto& a) { a.block_m = 64; a.cluster_m = 2; a.cluster_n = 1; },
                      "no w8a8 bf16 kernel with block_m 64 and cluster 2x1");
  expect_invalid_args([](auto& a) { a.a = nullptr; }, "a is a null pointer");
  expect_invalid_args([](auto& a) { a.b = fake(0x20008); }, "b = 0x20008 is not 16-byte aligned");
  expect_invalid_args([](auto& a) { a.out = fake(0x30004); }, "out = 0x30004 is not 16-byte aligned");
  expect_invalid_args([](auto& a) { a.a_scales = static_cast<const float*>(fake(0x40002)); },
                      "a_scales = 0x40002 is not 4-byte aligned");
  expect_invalid_args([](auto& a) { a.b_scales = nullptr; }, "b_scales is a null pointer");
  expect_invalid_args([](auto& a) { a.counts = nullptr; }, "counts is a null pointer");
  expect_invalid_args([](auto& a) { a.offsets = nullptr; }, "offsets is a null pointer");
  expect_invalid_args([](auto& a) { a.out_scales = nullptr; }, "out_scales is a null pointer",
                      MoeEpilogue::swiglu_fp8);
  expect_invalid_args([](auto& a) { a.row_weights = nullptr; }, "row_weights is a null pointer",
                      MoeEpilogue::swiglu_fp8);
  const std::vector<int> counts{1, 2, 3, 4};
  expect_invalid_args([&](auto& a) { a.host_counts = counts.data(); }, "must be given together");
}

// ---- W4A8 --------------------------------------------------------------------------------
MoeGemmArgs good_w4_args(ops::MoeQuant q, MoeEpilogue epi = MoeEpilogue::bf16) {
  MoeGemmArgs a = good_args(epi);
  a.quant = q;
  if (q == ops::MoeQuant::w4a8_mxfp4) {
    a.b_scales = nullptr;  // not used by mxfp4
    a.b_e8m0 = static_cast<const uint8_t*>(fake(0xA0000));
  }
  return a;
}

TEST(MoeGemmValidate, W4A8ArgumentsAndMessages) {
  using ops::MoeQuant;
  for (MoeQuant q : {MoeQuant::w4a8_int4, MoeQuant::w4a8_mxfp4}) {
    EXPECT_NO_THROW(ops::validate(good_w4_args(q)));
    EXPECT_NO_THROW(ops::validate(good_w4_args(q, MoeEpilogue::swiglu_fp8)));
    MoeGemmArgs a = good_w4_args(q);
    a.n = 1408;  // DiT-MoE-G: 11 x 128 and 44 x 128
    a.k = 5632;
    EXPECT_NO_THROW(ops::validate(a));
    a.schedule = 0;
    EXPECT_NO_THROW(ops::validate(a));
    a.m_total = 0;
    EXPECT_NO_THROW(ops::validate(a));
    const auto check = [&](auto mutate, const std::string& needle, MoeEpilogue epi = MoeEpilogue::bf16) {
      MoeGemmArgs b = good_w4_args(q, epi);
      mutate(b);
      expect_invalid([&] { ops::validate(b); }, needle);
    };
    check([](auto& b) { b.k = 1000; }, "k = 1000 must be a multiple of 128");
    check([](auto& b) { b.n = 4000; }, "n = 4000 must be a multiple of 128");
    check([](auto& b) { b.schedule = 3; }, "w4a8 kernels have two consumer schedules; schedule 3");
    check([](auto& b) { b.schedule = 1; }, "w4a8 kernels have two consumer schedules; schedule 1");
    check([](auto& b) { b.block_m = 128; }, "bf16 kernel with block_m 128 and cluster 1x1 (w4a8 ships");
    check([](auto& b) { b.cluster_m = 2; b.cluster_n = 1; }, "kernel with block_m 192 and cluster 2x1 (w4a8 ships");
    check([](auto& b) { b.block_m = 192; }, "swiglu_fp8 kernel with block_m 192", MoeEpilogue::swiglu_fp8);
    check([](auto& b) { b.b = fake(0x20008); }, "b = 0x20008 is not 16-byte aligned");
    check([](auto& b) { b.out = nullptr; }, "out is a null pointer");
    check([](auto& b) { b.row_weights = nullptr; }, "row_weights is a null pointer", MoeEpilogue::swiglu_fp8);
  }
  const auto w4 = [](ops::MoeQuant q, auto mutate, const std::string& needle) {
    MoeGemmArgs b = good_w4_args(q);
    mutate(b);
    expect_invalid([&] { ops::validate(b); }, needle);
  };
  w4(MoeQuant::w4a8_int4, [](auto& b) { b.b_scales = nullptr; }, "b_scales is a null pointer");
  w4(MoeQuant::w4a8_int4, [](auto& b) { b.b_scales = static_cast<const float*>(fake(0x50004)); },
     "b_scales = 0x50004 is not 16-byte aligned (bulk copies of the int4 scales)");
  w4(MoeQuant::w4a8_mxfp4, [](auto& b) { b.b_e8m0 = nullptr; }, "b_e8m0 is a null pointer");
  w4(MoeQuant::w4a8_mxfp4, [](auto& b) { b.b_e8m0 = static_cast<const uint8_t*>(fake(0xA0001)); },
     "b_e8m0 = 0xa0001 is not 16-byte aligned (bulk copies of the mxfp4 scales)");
  // mxfp4 needs no fp32 weight scales; w8a8 still needs them.
  MoeGemmArgs m = good_w4_args(MoeQuant::w4a8_mxfp4);
  EXPECT_EQ(m.b_scales, nullptr);
  EXPECT_NO_THROW(ops::validate(m));
  m.quant = MoeQuant::w8a8;
  expect_invalid([&] { ops::validate(m); }, "b_scales is a null pointer");
}

// The int4_rs weight layout (one-level INT4 scales, register operand) validates as before, but no
// shipped kernel reads it: a call names what ships instead.
TEST(MoeGemmValidate, Int4RegisterOperandLayout) {
  using ops::MoeQuant;
  MoeGemmArgs a = good_w4_args(MoeQuant::w4a8_int4);
  a.b_layout = ops::MoeWeightLayout::int4_rs;
  expect_invalid([&] { ops::validate(a); },
                 "no w4a8_int4 bf16 kernel for the int4_rs layout with per-128 activation scales (no shipped kernel "
                 "reads the int4_rs layout)");
  const auto check = [](auto mutate, const std::string& needle) {
    MoeGemmArgs b = good_w4_args(MoeQuant::w4a8_int4);
    b.b_layout = ops::MoeWeightLayout::int4_rs;
    mutate(b);
    expect_invalid([&] { ops::validate(b); }, needle);
  };
  check([](auto& b) { b.quant = MoeQuant::w4a8_mxfp4; b.b_e8m0 = static_cast<const uint8_t*>(fake(0xA0000)); },
        "int4_rs weight layout serves w4a8_int4 only; got w4a8_mxfp4");
  check([](auto& b) { b.quant = MoeQuant::w8a8; }, "int4_rs weight layout serves w4a8_int4 only; got w8a8");
  check([](auto& b) { b.schedule = 2; }, "int4_rs kernel has one consumer schedule; schedule 2");
  EXPECT_TRUE(ops::moe_schedule_shipped(MoeQuant::w4a8_int4, ops::MoeWeightLayout::int4_rs, 0));
  EXPECT_FALSE(ops::moe_schedule_shipped(MoeQuant::w4a8_int4, ops::MoeWeightLayout::int4_rs, 2));
  EXPECT_TRUE(ops::moe_schedule_shipped(MoeQuant::w4a8_int4, ops::MoeWeightLayout::rows, 2));
  check([](auto& b) { b.b_layout = static_cast<ops::MoeWeightLayout>(7); }, "unsupported weight layout 7");
  // The row-major int4 kernels do not take a 128-row tile.
  MoeGemmArgs rows = good_w4_args(MoeQuant::w4a8_int4);
  rows.block_m = 128;
  expect_invalid([&] { ops::validate(rows); }, "(w4a8 ships");
}

// The register-operand MXFP4 kernels: the mxfp4_rs layout (w4a8_mxfp4) with fp32 block scales in
// b_scales (b_e8m0 unused), the same two tiles and schedule 0; sizes of the prepacked buffers.
TEST(MoeGemmValidate, Mxfp4RegisterOperandLayout) {
  using ops::MoeQuant;
  using ops::MoeWeightLayout;
  const auto good = [](MoeEpilogue epi = MoeEpilogue::bf16) {
    MoeGemmArgs a = good_w4_args(MoeQuant::w4a8_mxfp4, epi);
    a.b_layout = MoeWeightLayout::mxfp4_rs;
    a.b_e8m0 = nullptr;
    a.b_scales = static_cast<const float*>(fake(0x50000));
    return a;
  };
  // Per-128 activation scales: no shipped kernel (the per-token ones below replace them).
  MoeGemmArgs a = good();
  expect_invalid([&] { ops::validate(a); },
                 "no w4a8_mxfp4 bf16 kernel for the mxfp4_rs layout with per-128 activation scales (the mxfp4_rs "
                 "layout ships with per-token activation scales only: bf16 m256n128 1x1)");
  const auto check = [&](auto mutate, const std::string& needle, MoeEpilogue epi = MoeEpilogue::bf16) {
    MoeGemmArgs b = good(epi);
    b.a_scale_granularity = ops::MoeActScales::per_token;  // the shipped recipe
    mutate(b);
    expect_invalid([&] { ops::validate(b); }, needle);
  };
  check([](auto& b) { b.quant = MoeQuant::w4a8_int4; }, "mxfp4_rs weight layout serves w4a8_mxfp4 only; got w4a8_int4");
  check([](auto& b) { b.quant = MoeQuant::w8a8; }, "mxfp4_rs weight layout serves w4a8_mxfp4 only; got w8a8");
  check([](auto& b) { b.b_scales = nullptr; }, "b_scales is a null pointer");
  check([](auto& b) { b.b_scales = static_cast<const float*>(fake(0x50008)); },
        "b_scales = 0x50008 is not 16-byte aligned (bulk copies of the mxfp4_rs block scales from prepack_mxfp4_rs)");
  check([](auto& b) { b.schedule = 2; }, "mxfp4_rs kernel has one consumer schedule; schedule 2");
  // mxfp4 in the rows layout still wants its E8M0 exponents.
  MoeGemmArgs rows = good();
  rows.b_layout = MoeWeightLayout::rows;
  expect_invalid([&] { ops::validate(rows); }, "b_e8m0 is a null pointer");
  EXPECT_STREQ(ops::moe_weight_layout_name(MoeWeightLayout::mxfp4_rs), "mxfp4_rs");
  {
    // Per-token activation scales: the 256-token bf16 tile at every token count; Linear-1 only on
    // gate/up-interleaved rows (mxfp4_rs_glu, 1 x 2 clusters), which take per-token scales only.
    MoeGemmArgs t = good();
    t.a_scale_granularity = ops::MoeActScales::per_token;
    t.tokens_per_expert_hint = 16;
    EXPECT_NO_THROW(ops::validate(t));
    const auto ti = ops::select_moe_instantiation(t);
    EXPECT_EQ(ti.name, "w4a8rs_mxfp4_tok_bf16_m256n128");
    EXPECT_LE(ti.smem_bytes, 227 * 1024);
    EXPECT_LE(128 * ti.producer_regs + 256 * ti.consumer_regs, 65536);
    t.tokens_per_expert_hint = 8192;
    EXPECT_EQ(ops::select_moe_instantiation(t).name, "w4a8rs_mxfp4_tok_bf16_m256n128");
    MoeGemmArgs ts = good(MoeEpilogue::swiglu_fp8);
    ts.a_scale_granularity = ops::MoeActScales::per_token;
    expect_invalid([&] { ops::validate(ts); },
                   "MXFP4 with per-token activation scales runs Linear-1 (swiglu_fp8) on gate/up-interleaved rows "
                   "only: layout mxfp4_rs_glu");
    MoeGemmArgs g = ts;
    g.b_layout = MoeWeightLayout::mxfp4_rs_glu;
    EXPECT_NO_THROW(ops::validate(g));
    const auto gi = ops::select_moe_instantiation(g);
    EXPECT_EQ(gi.name, "w4a8rs_mxfp4_tok_glu_m256n128");
    EXPECT_EQ(gi.cluster_m, 1);
    EXPECT_EQ(gi.cluster_n, 2);
    EXPECT_LE(gi.smem_bytes, 227 * 1024);
    EXPECT_LE(128 * gi.producer_regs + 256 * gi.consumer_regs, 65536);
    MoeGemmArgs gp = g;
    gp.a_scale_granularity = ops::MoeActScales::per_128;
    expect_invalid([&] { ops::validate(gp); }, "the mxfp4_rs_glu weight layout (gate/up-interleaved rows) serves "
                                                "Linear-1 only: swiglu_fp8 with per-token activation scales; got "
                                                "swiglu_fp8 with per-128 scales");
    MoeGemmArgs gi4 = g;
    gi4.quant = MoeQuant::w4a8_int4;
    expect_invalid([&] { ops::validate(gi4); }, "the mxfp4_rs_glu weight layout serves w4a8_mxfp4 only; got w4a8_int4");
    MoeGemmArgs gs = g;
    gs.b_scales = static_cast<const float*>(fake(0x50004));
    expect_invalid([&] { ops::validate(gs); }, "is not 16-byte aligned (bulk copies of the mxfp4_rs block scales");
  }
  EXPECT_STREQ(ops::moe_weight_layout_name(MoeWeightLayout::mxfp4_rs_glu), "mxfp4_rs_glu");
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w4a8_mxfp4, MoeWeightLayout::mxfp4_rs_glu, 3, 256, 384), 3LL * 2 * 3 * 8704);
  EXPECT_EQ(ops::moe_weight_scale_bytes(MoeQuant::w4a8_mxfp4, MoeWeightLayout::mxfp4_rs_glu, 3, 256, 384),
            3LL * 3 * 256 * 4);
  // Buffer sizes: 8704 bytes per 128 x 128 chunk and fp32 block scales; other layouts unchanged.
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w4a8_mxfp4, MoeWeightLayout::mxfp4_rs, 3, 256, 384), 3LL * 2 * 3 * 8704);
  EXPECT_EQ(ops::moe_weight_scale_bytes(MoeQuant::w4a8_mxfp4, MoeWeightLayout::mxfp4_rs, 3, 256, 384),
            3LL * 3 * 256 * 4);
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w4a8_mxfp4, MoeWeightLayout::rows, 3, 256, 384), 3LL * 256 * 384 / 2);
  EXPECT_EQ(ops::moe_weight_scale_bytes(MoeQuant::w4a8_mxfp4, MoeWeightLayout::rows, 3, 256, 384), 3LL * 12 * 256);
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w4a8_int4, MoeWeightLayout::int4_rs, 3, 256, 384), 3LL * 256 * 384 / 2);
}

// INT4 with two-level scales (int4_rs_lut): w4a8_int4 only, the three register-operand tiles as
// their own kernels (bigger chunks), fp32 channel scales in b_scales (4-byte aligned: read per row
// in the epilogue, no bulk copy), the buffer sizes of the prepacked codes + tables.
TEST(MoeGemmValidate, Int4LutRegisterOperandLayout) {
  using ops::MoeQuant;
  using ops::MoeWeightLayout;
  const auto good = [](MoeEpilogue epi = MoeEpilogue::bf16) {
    MoeGemmArgs a = good_w4_args(MoeQuant::w4a8_int4, epi);
    a.b_layout = MoeWeightLayout::int4_rs_lut;
    a.b_scales = static_cast<const float*>(fake(0x50004));  // 4-byte aligned is enough
    return a;
  };
  MoeGemmArgs a = good();
  a.experts = 8;
  a.m_total = 8 * 1024;
  EXPECT_NO_THROW(ops::validate(a));
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w4a8rs_lut_bf16_m256n128");
  a.m_total = 8 * 1023;
  const auto inst = ops::select_moe_instantiation(a);
  EXPECT_EQ(inst.name, "w4a8rs_lut_bf16_m128n128");
  EXPECT_LE(inst.smem_bytes, 227 * 1024);
  EXPECT_LE(128 * inst.producer_regs + 256 * inst.consumer_regs, 65536);
  MoeGemmArgs sw = good(MoeEpilogue::swiglu_fp8);
  EXPECT_NO_THROW(ops::validate(sw));
  sw.tokens_per_expert_hint = 1023;
  EXPECT_EQ(ops::select_moe_instantiation(sw).name, "w4a8rs_lut_swiglu_m64n256");
  sw.tokens_per_expert_hint = 1024;  // from 1024 tokens: two 64-token pieces per converted fragment
  const auto sw128 = ops::select_moe_instantiation(sw);
  EXPECT_EQ(sw128.name, "w4a8rs_lut_swiglu_m128n256");
  EXPECT_EQ(sw128.block_m, 128);
  EXPECT_EQ(sw128.block_n, 256);
  EXPECT_LE(sw128.smem_bytes, 227 * 1024);
  EXPECT_LE(128 * sw128.producer_regs + 256 * sw128.consumer_regs, 65536);
  sw.tokens_per_expert_hint = 16;
  sw.block_m = 128;  // forced
  EXPECT_EQ(ops::select_moe_instantiation(sw).name, "w4a8rs_lut_swiglu_m128n256");
  const auto check = [&](auto mutate, const std::string& needle, MoeEpilogue epi = MoeEpilogue::bf16) {
    MoeGemmArgs b = good(epi);
    mutate(b);
    expect_invalid([&] { ops::validate(b); }, needle);
  };
  check([](auto& b) { b.quant = MoeQuant::w4a8_mxfp4; b.b_e8m0 = static_cast<const uint8_t*>(fake(0xA0000)); },
        "int4_rs_lut weight layout serves w4a8_int4 only; got w4a8_mxfp4");
  check([](auto& b) { b.quant = MoeQuant::w8a8; }, "int4_rs_lut weight layout serves w4a8_int4 only; got w8a8");
  check([](auto& b) { b.b_scales = nullptr; }, "b_scales is a null pointer");
  check([](auto& b) { b.b_scales = static_cast<const float*>(fake(0x50002)); },
        "b_scales = 0x50002 is not 4-byte aligned (fp32 channel scales from quantize_int4_lut)");
  check([](auto& b) { b.schedule = 2; }, "int4_rs_lut kernel has one consumer schedule; schedule 2");
  check([](auto& b) { b.block_m = 192; }, "block_m 192 and cluster 1x1 (the int4_rs_lut layout with per-128 activation scales ships: bf16 m128n128 1x1");
  check([](auto& b) { b.block_m = 256; },
        "swiglu_fp8 kernel with block_m 256 and cluster 1x1 (the int4_rs_lut layout with per-128 activation scales "
        "ships: bf16 m128n128 1x1, bf16 m256n128 1x1, swiglu_fp8 m64n256 1x1, swiglu_fp8 m128n256 1x1)",
        MoeEpilogue::swiglu_fp8);
  // Per-token activation scales: the two-piece tiles at every token count, nothing else.
  {
    MoeGemmArgs t = good();
    t.a_scale_granularity = ops::MoeActScales::per_token;
    t.tokens_per_expert_hint = 16;
    EXPECT_NO_THROW(ops::validate(t));
    EXPECT_EQ(ops::select_moe_instantiation(t).name, "w4a8rs_lut_tok_bf16_m256n128");
    t.tokens_per_expert_hint = 8192;
    EXPECT_EQ(ops::select_moe_instantiation(t).name, "w4a8rs_lut_tok_bf16_m256n128");
    MoeGemmArgs ts = good(MoeEpilogue::swiglu_fp8);
    ts.a_scale_granularity = ops::MoeActScales::per_token;
    ts.tokens_per_expert_hint = 64;
    const auto inst_t = ops::select_moe_instantiation(ts);
    EXPECT_EQ(inst_t.name, "w4a8rs_lut_tok_swiglu_m128n256");
    EXPECT_LE(inst_t.smem_bytes, 227 * 1024);
    EXPECT_LE(128 * inst_t.producer_regs + 256 * inst_t.consumer_regs, 65536);
    // The per-128 plan is unchanged by the new entries.
    ts.a_scale_granularity = ops::MoeActScales::per_128;
    EXPECT_EQ(ops::select_moe_instantiation(ts).name, "w4a8rs_lut_swiglu_m64n256");
  }
  check([](auto& b) { b.a_scale_granularity = ops::MoeActScales::per_token; b.block_m = 128; },
        "no w4a8_int4 bf16 kernel with block_m 128 and cluster 1x1 (the int4_rs_lut layout with per-token "
        "activation scales ships: bf16 m256n128 1x1, swiglu_fp8 m128n256 1x1)");
  check([](auto& b) { b.a_scale_granularity = static_cast<ops::MoeActScales>(7); },
        "unsupported activation scale granularity 7");
  {
    MoeGemmArgs r = good_w4_args(MoeQuant::w4a8_int4);
    r.b_layout = MoeWeightLayout::int4_rs;
    r.a_scale_granularity = ops::MoeActScales::per_token;
    expect_invalid([&] { ops::validate(r); }, "per-token activation scales need the int4_rs_lut[_glu] or mxfp4_rs[_glu] weight layout; got int4_rs");
    MoeGemmArgs w8 = good_w4_args(MoeQuant::w4a8_int4);
    w8.quant = MoeQuant::w8a8;
    w8.b_layout = MoeWeightLayout::rows;
    w8.b_scales = static_cast<const float*>(fake(0x50004));
    w8.a_scale_granularity = ops::MoeActScales::per_token;
    expect_invalid([&] { ops::validate(w8); }, "per-token activation scales need the int4_rs_lut[_glu] or mxfp4_rs[_glu] weight layout; got rows");
  }
  {
    // Gate/up-interleaved rows: Linear-1 with per-token scales only, on the 256 x 64-channel tile
    // in 1 x 2 clusters.
    MoeGemmArgs g = good(MoeEpilogue::swiglu_fp8);
    g.b_layout = MoeWeightLayout::int4_rs_lut_glu;
    g.a_scale_granularity = ops::MoeActScales::per_token;
    EXPECT_NO_THROW(ops::validate(g));
    const auto inst = ops::select_moe_instantiation(g);
    EXPECT_EQ(inst.name, "w4a8rs_lut_tok_glu_m256n128");
    EXPECT_EQ(inst.cluster_m, 1);
    EXPECT_EQ(inst.cluster_n, 2);
    EXPECT_LE(inst.smem_bytes, 227 * 1024);
    EXPECT_LE(128 * inst.producer_regs + 256 * inst.consumer_regs, 65536);
    MoeGemmArgs gp = g;
    gp.a_scale_granularity = ops::MoeActScales::per_128;
    expect_invalid([&] { ops::validate(gp); }, "the int4_rs_lut_glu weight layout (gate/up-interleaved rows) serves "
                                                "Linear-1 only: swiglu_fp8 with per-token activation scales; got "
                                                "swiglu_fp8 with per-128 scales");
    MoeGemmArgs gb = good(MoeEpilogue::bf16);
    gb.b_layout = MoeWeightLayout::int4_rs_lut_glu;
    gb.a_scale_granularity = ops::MoeActScales::per_token;
    expect_invalid([&] { ops::validate(gb); }, "serves Linear-1 only: swiglu_fp8 with per-token activation scales; "
                                                "got bf16 with per-token scales");
    MoeGemmArgs gw = g;
    gw.quant = MoeQuant::w4a8_mxfp4;
    expect_invalid([&] { ops::validate(gw); }, "the int4_rs_lut_glu weight layout serves w4a8_int4 only");
  }
  EXPECT_STREQ(ops::moe_weight_layout_name(MoeWeightLayout::int4_rs_lut_glu), "int4_rs_lut_glu");
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w4a8_int4, MoeWeightLayout::int4_rs_lut_glu, 3, 256, 384),
            3LL * 2 * 3 * 9216);
  EXPECT_STREQ(ops::moe_weight_layout_name(MoeWeightLayout::int4_rs_lut), "int4_rs_lut");
  // 8192 code bytes + 1024 table bytes per 128 x 128 chunk; one fp32 channel scale per row.
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w4a8_int4, MoeWeightLayout::int4_rs_lut, 3, 256, 384), 3LL * 2 * 3 * 9216);
  EXPECT_EQ(ops::moe_weight_scale_bytes(MoeQuant::w4a8_int4, MoeWeightLayout::int4_rs_lut, 3, 256, 384), 3LL * 256 * 4);
}

TEST(MoeGemmPlan, W4A8TilesAndInstantiations) {
  using ops::MoeQuant;
  for (MoeQuant q : {MoeQuant::w4a8_int4, MoeQuant::w4a8_mxfp4}) {
    auto plan_block_m = [q](MoeEpilogue e, int tokens) {
      MoeGemmArgs t = good_w4_args(q, e);
      t.tokens_per_expert_hint = tokens;
      return ops::select_moe_instantiation(t).block_m;
    };
    EXPECT_EQ(plan_block_m(MoeEpilogue::bf16, 16), 64);
    EXPECT_EQ(plan_block_m(MoeEpilogue::bf16, 64), 64);
    EXPECT_EQ(plan_block_m(MoeEpilogue::bf16, 65), 192);
    EXPECT_EQ(plan_block_m(MoeEpilogue::bf16, 128), 192);
    EXPECT_EQ(plan_block_m(MoeEpilogue::bf16, 8192), 192);
    EXPECT_EQ(plan_block_m(MoeEpilogue::swiglu_fp8, 8192), 64);
    MoeGemmArgs a = good_w4_args(q);
    a.experts = 8;
    a.m_total = 8 * 1024;
    auto big = ops::select_moe_instantiation(a);
    EXPECT_EQ(big.name, "w4a8_bf16_m192n128");
    EXPECT_EQ(big.consumer_warpgroups, 3);
    EXPECT_EQ(big.threads, 512);
    // int4 runs the decoupled design (3 TMA stages), mxfp4 the lock-step one (4); w4a8.cuh.
    EXPECT_EQ(big.stages, q == MoeQuant::w4a8_int4 ? 3 : 4);
    EXPECT_LE(big.smem_bytes, 227 * 1024);
    EXPECT_LE(128 * big.producer_regs + 384 * big.consumer_regs, 65536);
    EXPECT_GE(big.producer_regs, 32);  // the converter warps live in the producer warp group
    a.m_total = 8 * 16;
    const auto small = ops::select_moe_instantiation(a);
    EXPECT_EQ(small.name, "w4a8_bf16_m64n256");
    EXPECT_EQ(small.threads, 384);
    EXPECT_LE(small.smem_bytes, 227 * 1024);
    EXPECT_LE(128 * small.producer_regs + 256 * small.consumer_regs, 65536);
    const auto sw = ops::select_moe_instantiation(good_w4_args(q, MoeEpilogue::swiglu_fp8));
    EXPECT_EQ(sw.name, "w4a8_swiglu_m64n256");
    EXPECT_EQ(sw.block_n, 256);
    EXPECT_LE(sw.smem_bytes, 227 * 1024);
  }
}

TEST(MoeGemmPlan, WeightBytes) {
  using ops::MoeQuant;
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w8a8, 3, 4096, 2048), 3ll * 4096 * 2048);
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w4a8_int4, 3, 4096, 2048), 3ll * 4096 * 1024);
  EXPECT_EQ(ops::moe_weight_bytes(MoeQuant::w4a8_mxfp4, 3, 4096, 2048), 3ll * 4096 * 1024);
  EXPECT_EQ(ops::moe_weight_scale_bytes(MoeQuant::w8a8, 3, 4096, 2048), 3ll * 32 * 16 * 4);
  EXPECT_EQ(ops::moe_weight_scale_bytes(MoeQuant::w4a8_int4, 3, 4096, 2048), 3ll * 16 * 4096 * 4);
  EXPECT_EQ(ops::moe_weight_scale_bytes(MoeQuant::w4a8_mxfp4, 3, 4096, 2048), 3ll * 64 * 4096);
}

TEST(MoeGemmValidate, HostRoutingIsChecked) {
  const std::vector<int> counts{3, 0, 5, 2};
  std::vector<int> offsets{0, 3, 3, 8};
  EXPECT_NO_THROW(ops::check_routing(counts.data(), offsets.data(), 4, 10));
  EXPECT_NO_THROW(ops::check_routing(counts.data(), std::vector<int>{1, 5, 6, 20}.data(), 4, 30));  // gaps are fine
  expect_invalid([&] { ops::check_routing(counts.data(), offsets.data(), 4, 9); }, "expert 3 rows [8, 10) exceed m_total 9");
  expect_invalid([&] { ops::check_routing(counts.data(), std::vector<int>{0, 3, 2, 8}.data(), 4, 10); },
                 "offsets[2] = 2 overlaps the previous expert's rows (which end at 3)");
  expect_invalid([&] { ops::check_routing(std::vector<int>{3, -1, 5, 2}.data(), offsets.data(), 4, 10); },
                 "counts[1] = -1 is negative");
  expect_invalid([&] { ops::check_routing(counts.data(), std::vector<int>{-4, 3, 3, 8}.data(), 4, 10); },
                 "offsets[0] = -4 is negative");
  // Through validate(): the host copies are checked against m_total.
  MoeGemmArgs a = good_args();
  a.m_total = 9;
  a.host_counts = counts.data();
  a.host_offsets = offsets.data();
  expect_invalid([&] { ops::validate(a); }, "exceed m_total 9");
  a.m_total = 10;
  EXPECT_NO_THROW(ops::validate(a));
}

// ---- planning --------------------------------------------------------------------------
// The planner is select_moe_instantiation: a search over the shipped kernels (configs.def).
// These ask it the questions the tests below pose, on a shape (experts, n, persistent CTAs).
ops::MoeInstantiation plan_of(ops::MoeQuant q, MoeEpilogue e, int tokens, int experts, int n, int ctas, int block_m = 0,
                              int schedule = -1) {
  MoeGemmArgs a = q == ops::MoeQuant::w8a8 ? good_args(e) : good_w4_args(q, e);
  a.experts = experts;
  a.n = n;
  a.m_total = tokens * experts;
  a.tokens_per_expert_hint = tokens;
  a.num_ctas = ctas;
  a.block_m = block_m;
  a.schedule = schedule;
  return ops::select_moe_instantiation(a);
}
int plan_block_n(ops::MoeQuant q, MoeEpilogue e, int block_m, int tokens, int experts, int n, int ctas,
                 int schedule = -1) {
  return plan_of(q, e, tokens, experts, n, ctas, block_m, schedule).block_n;
}
int plan_swiglu_block_m(int tokens, int experts, int n, int ctas) {
  return plan_of(ops::MoeQuant::w8a8, MoeEpilogue::swiglu_fp8, tokens, experts, n, ctas).block_m;
}

TEST(MoeGemmPlan, BlockMFollowsTokensPerExpert) {
  auto bm = [](int tokens) { return plan_of(ops::MoeQuant::w8a8, MoeEpilogue::bf16, tokens, 8, 4096, 132).block_m; };
  EXPECT_EQ(bm(1), 64);
  EXPECT_EQ(bm(16), 64);
  EXPECT_EQ(bm(64), 64);
  EXPECT_EQ(bm(65), 128);
  EXPECT_EQ(bm(128), 128);
  EXPECT_EQ(bm(256), 128);
  EXPECT_EQ(bm(1024), 128);
  EXPECT_EQ(bm(8192), 128);
  EXPECT_EQ(plan_of(ops::MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8, 8192, 8, 4096, 132).block_m, 64);
  MoeGemmArgs dit = good_args(MoeEpilogue::swiglu_fp8);
  dit.k = 1408;
  dit.n = 11264;
  dit.experts = 12;
  dit.num_ctas = 132;
  dit.tokens_per_expert_hint = 8192;  // the 128 x 256 tile, in 2 x 1 clusters from 1024 tokens
  EXPECT_EQ(ops::select_moe_instantiation(dit).name, "w8a8_swiglu_m128n256_c2x1");
  EXPECT_EQ(ops::select_moe_instantiation(dit).schedule, 2);
  dit.schedule = 3;  // an overlap schedule forced: the 64-row tile (the 128-row one has no room for it)
  EXPECT_EQ(ops::select_moe_instantiation(dit).name, "w8a8_swiglu_m64n256_c2x1");
  dit.schedule = -1;
  dit.block_n = 128;  // no SwiGLU tile is 128 weight rows wide
  EXPECT_THROW(ops::select_moe_instantiation(dit), xstage::InvalidArgument);
  dit.block_n = 0;
  dit.tokens_per_expert_hint = 128;  // 528 tiles of 128 rows fill four waves exactly
  EXPECT_EQ(ops::select_moe_instantiation(dit).name, "w8a8_swiglu_m128n256");
  dit.tokens_per_expert_hint = 64;  // up to 64 tokens: 64 x 256
  EXPECT_EQ(ops::select_moe_instantiation(dit).name, "w8a8_swiglu_m64n256");
}

// The w8a8 SwiGLU height with whole waves counted, on the seven models as benchmarked in
// docs/perf-log.md "The acceptance call, the wave-counting plans and the 256-wide tiles"
// (experts rotated so the inputs exceed L2; n = 2 x intermediate; 132 CTAs).
TEST(MoeGemmPlan, SwiGluHeightCountsWaves) {
  struct Shape {
    const char* model;
    int experts, n;
  };
  const Shape shapes[] = {{"DiT-MoE-G", 12, 11264}, {"Qwen3.5-397B-A17B", 22, 2048}, {"Hy3", 15, 3072},
                          {"MiMo-V2.5", 11, 4096},  {"GLM-5.2", 8, 4096},            {"DSv4-Flash", 11, 4096},
                          {"DSv4-Pro", 5, 6144}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.model);
    EXPECT_EQ(plan_swiglu_block_m(16, s.experts, s.n, 132), 64);
    EXPECT_EQ(plan_swiglu_block_m(64, s.experts, s.n, 132), 64);
    for (int t : {256, 512, 1024, 8192})  // measured faster on all seven (docs/perf-log.md, "SwiGLU tiles")
      EXPECT_EQ(plan_swiglu_block_m(t, s.experts, s.n, 132), 128) << t << " tokens";
  }
  // 128 tokens (docs/perf-log.md, the wave-counting plans): 128 x 256 won where its tiles fill the waves (DiT-MoE-G 528 tiles = 4
  // waves, GLM-5.2 128 and DSv4-Pro 120 = 1 wave; 1.06-1.15x) and lost where 176-180 tiles need
  // two waves against three of 352-360 64-row tiles (0.93-0.98x).
  EXPECT_EQ(plan_swiglu_block_m(128, 12, 11264, 132), 128);
  EXPECT_EQ(plan_swiglu_block_m(128, 8, 4096, 132), 128);
  EXPECT_EQ(plan_swiglu_block_m(128, 5, 6144, 132), 128);
  EXPECT_EQ(plan_swiglu_block_m(128, 22, 2048, 132), 64);
  EXPECT_EQ(plan_swiglu_block_m(128, 15, 3072, 132), 64);
  EXPECT_EQ(plan_swiglu_block_m(128, 11, 4096, 132), 64);
  // 192 tokens: two 128-row blocks hold a third of padding; three 64-row blocks none.
  EXPECT_EQ(plan_swiglu_block_m(192, 8, 4096, 132), 64);
  // A grid of other size moves the waves: 176 tiles in one wave of 176 CTAs.
  EXPECT_EQ(plan_swiglu_block_m(128, 22, 2048, 176), 128);
}

TEST(MoeGemmPlan, InstantiationNamesAndSchedules) {
  MoeGemmArgs a = good_args();
  a.experts = 64;
  a.m_total = 64 * 16;
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m64n256");
  a.m_total = 64 * 1024;
  a.num_ctas = 132;  // the width plan counts waves of the grid (H200: 132 SMs)
  // 63 waves of 256 (x 256 / 1.11: 14529) against 86 of 192 (x 192 / 1.07: 15432) and 125 of 128
  // (16000): the 128 x 256 tile, in 2 x 1 clusters from 1024 tokens per expert
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n256_c2x1");
  EXPECT_EQ(ops::select_moe_instantiation(a).schedule, 2);
  a.n = 6144;
  a.experts = 5;  // DSv4-Pro Linear-1 at 1024 tokens: 8 waves of 256 pad more than 10 of 192
  a.m_total = 5 * 1024;
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n192_c2x1");  // 128 x 192 runs in 2 x 1
  a.n = 4096;
  a.experts = 64;
  a.m_total = 64 * 1024;
  a.schedule = 3;  // the overlap schedule: 128 x 128 only
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n128");
  a.schedule = -1;
  a.block_n = 128;  // a forced width wins
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n128");
  a.block_n = 0;
  a.block_m = 192;  // not shipped for w8a8
  EXPECT_THROW(ops::select_moe_instantiation(a), InvalidArgument);
  a.block_m = 0;
  a.m_total = 64 * 128;  // 128 tokens: below the wide tile's 1024
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n128");
  a.m_total = 64 * 1024;
  a.tokens_per_expert_hint = 16;  // the hint wins over m_total / experts
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m64n256");
  a.block_m = 128;  // and a forced height wins over both
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n128");
  a.block_m = 0;
  a.block_n = 192;  // a forced width brings its height (and, as planned widths, 2 x 1 clusters)
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n192_c2x1");
  a.cluster_m = 1;  // it ships in 2 x 1 only
  a.cluster_n = 1;
  EXPECT_THROW(ops::select_moe_instantiation(a), InvalidArgument);
  a.cluster_m = 2;  // with a forced cluster
  a.cluster_n = 1;
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n192_c2x1");
  EXPECT_EQ(ops::select_moe_instantiation(a).schedule, 2);
  a.cluster_m = 0;
  a.cluster_n = 0;
  a.block_n = 256;
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m64n256");
  a.block_m = 128;  // with 128 rows: the 128 x 256 tile (two pieces per warp group), 2 x 1 as planned
  a.tokens_per_expert_hint = 0;  // (1024 tokens per expert again)
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n256_c2x1");
  EXPECT_EQ(ops::select_moe_instantiation(a).schedule, 2);
  EXPECT_EQ(ops::select_moe_instantiation(a).cluster_m, 2);
  a.tokens_per_expert_hint = 1023;  // below its 1024 tokens too, when forced: the one 128 x 256 bf16 kernel
  EXPECT_EQ(ops::select_moe_instantiation(a).name, "w8a8_bf16_m128n256_c2x1");
  a.tokens_per_expert_hint = 0;
  a.cluster_m = 1;  // no 1 x 1 variant
  a.cluster_n = 1;
  EXPECT_THROW(ops::select_moe_instantiation(a), InvalidArgument);
  a.cluster_m = 0;
  a.cluster_n = 0;
  a.block_m = 0;
  a.block_n = 0;
  a.block_m = 128;
  a.cluster_m = 2;  // a forced cluster picks among the 128-row tiles that ship in it
  a.cluster_n = 1;
  EXPECT_EQ(ops::select_moe_instantiation(a).cluster_m, 2);
  a.cluster_n = 2;  // 2 x 2: none
  EXPECT_THROW(ops::select_moe_instantiation(a), InvalidArgument);
  // 250 tokens on 4 experts, n = 4096: 128 tiles of 128 rows fill one wave of 132 CTAs (256 of 64
  // rows would need two): 128 x 256.
  EXPECT_EQ(ops::select_moe_instantiation(good_args(MoeEpilogue::swiglu_fp8)).name, "w8a8_swiglu_m128n256");
  MoeGemmArgs s = good_args(MoeEpilogue::swiglu_fp8);
  s.tokens_per_expert_hint = 1024;  // from 1024 tokens: 128 x 256 in 2 x 1 clusters
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m128n256_c2x1");
  s.tokens_per_expert_hint = 1023;
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m128n256");
  s.tokens_per_expert_hint = 64;  // up to 64 tokens: 64 x 256
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m64n256");
  s.tokens_per_expert_hint = 0;
  s.block_m = 64;
  s.cluster_m = 2;
  s.cluster_n = 1;
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m64n256_c2x1");
  s.cluster_m = 0;  // planned for a forced 64-row tile: 2 x 1 from 8192 tokens per expert
  s.cluster_n = 0;
  s.tokens_per_expert_hint = 8192;
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m64n256_c2x1");
  s.tokens_per_expert_hint = 8191;
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m64n256");
  s.block_m = 128;  // no SwiGLU tile of 128 weight rows
  s.block_n = 128;
  EXPECT_THROW(ops::select_moe_instantiation(s), InvalidArgument);
  s.block_n = 0;  // 128 rows in 2 x 1 clusters: the 128 x 256 tile's variant
  s.cluster_m = 2;
  s.cluster_n = 1;
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m128n256_c2x1");
  s.cluster_m = 0;
  s.cluster_n = 0;
  s.schedule = 1;  // an overlap schedule: no 128-row SwiGLU tile has room for it
  expect_invalid([&] { ops::select_moe_instantiation(s); }, "w8a8_swiglu_m128n256");
  s.schedule = -1;
  s.block_n = 256;  // the 128 x 256 tile (gate and up per warp group), forced; 2 x 1 at 8191 tokens
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m128n256_c2x1");
  EXPECT_EQ(ops::select_moe_instantiation(s).schedule, 2);
  s.block_n = 0;  // planned width for 128 rows: the same
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m128n256_c2x1");
  s.cluster_m = 1;  // a forced 1 x 1
  s.cluster_n = 1;
  EXPECT_EQ(ops::select_moe_instantiation(s).name, "w8a8_swiglu_m128n256");
  s.cluster_m = 0;
  s.cluster_n = 0;
  s.block_m = 0;
  MoeGemmArgs w4 = good_w4_args(ops::MoeQuant::w4a8_int4, MoeEpilogue::swiglu_fp8);
  w4.tokens_per_expert_hint = 8192;  // the w4a8 SwiGLU tile has no cluster variant
  EXPECT_EQ(ops::select_moe_instantiation(w4).name, "w4a8_swiglu_m64n256");

  for (int t : {16, 128, 129, 1023, 1024, 8192}) {
    // SwiGLU on 8 x 4096: 128 x 256 (64 x 256 up to 64 tokens), in 2 x 1 clusters from 1024 tokens
    const auto sw = plan_of(ops::MoeQuant::w8a8, MoeEpilogue::swiglu_fp8, t, 8, 4096, 132);
    EXPECT_EQ(sw.cluster_m, t >= 1024 ? 2 : 1);
    EXPECT_EQ(sw.cluster_n, 1);
  }
}

TEST(MoeGemmPlan, BlockNCountsWaves) {
    constexpr auto q = ops::MoeQuant::w8a8;
  constexpr auto bf = MoeEpilogue::bf16;
  // Only the w8a8 bf16 128-row tile has several widths.
  EXPECT_EQ(plan_block_n(q, bf, 64, 8192, 8, 4096, 132), 256);
  EXPECT_EQ(plan_block_n(q, MoeEpilogue::swiglu_fp8, 64, 8192, 8, 4096, 132), 256);
  // Many waves: the widest tile's rate wins (8 x 64 m-blocks: 125 waves x 128 = 16000, 86 waves
  // x 192 / 1.07 = 15432, 63 waves x 256 / 1.11 = 14529).
  EXPECT_EQ(plan_block_n(q, bf, 128, 8192, 8, 4096, 132), 256);
  EXPECT_EQ(plan_block_n(q, bf, 128, 8192, 8, 4096, 132, 0), 256);
  EXPECT_EQ(plan_block_n(q, bf, 128, 8192, 8, 4096, 132, 2), 256);
  EXPECT_EQ(plan_block_n(q, bf, 128, 8192, 8, 4096, 132, 1), 128);  // overlap schedules: 128 x 128 only
  EXPECT_EQ(plan_block_n(q, bf, 128, 8192, 8, 4096, 132, 3), 128);
  // From 1024 tokens per expert only (below, the wide tiles measured slower in most cells).
  EXPECT_EQ(plan_block_n(q, bf, 128, 1024, 8, 6144, 132), 256);
  EXPECT_EQ(plan_block_n(q, bf, 128, 1023, 8, 6144, 132), 128);
  EXPECT_EQ(plan_block_n(q, bf, 128, 256, 64, 6144, 132), 128);
  // Partial last tiles and waves count. n = 1408 (5 x 256 + 128, 7 x 192 + 64), 8 x 64 m-blocks:
  // 43 waves of 128 (5504) against 32 of 192 (5742) and 24 of 256 (5535): 128. DiT-MoE-G Linear-2
  // at 8192 tokens, 12 experts: 64 waves of 128 (8192), 47 of 192 (8434), 35 of 256 (8072): 256
  // (1.059x of 128 measured, docs/perf-log.md "2 x 1 clusters for the 128 x 256 tiles"). At 1024 tokens: 8 waves of 128 (1024), 6 of 192 (1077), 5 of 256
  // (1153): 128 (256 measured 0.960x of 128). DSv4-Pro at 1024 tokens, 5 experts: n = 6144, 15
  // waves of 128 (1920), 10 of 192 (1794), 8 of 256 (1845): 192 (256 measured 0.988x, docs/perf-log.md "the 256-wide tiles"); n = 7168,
  // 17 of 128 (2176), 12 of 192 (2153), 9 of 256 (2076): 256 (measured 1.040x of 192).
  EXPECT_EQ(plan_block_n(q, bf, 128, 8192, 8, 1408, 132), 128);
  EXPECT_EQ(plan_block_n(q, bf, 128, 8192, 12, 1408, 132), 256);
  EXPECT_EQ(plan_block_n(q, bf, 128, 1024, 12, 1408, 132), 128);
  EXPECT_EQ(plan_block_n(q, bf, 128, 1024, 5, 6144, 132), 192);
  EXPECT_EQ(plan_block_n(q, bf, 128, 1024, 5, 7168, 132), 256);
  // One wave each (8 m-blocks x 4, 6 and 8 tiles, 64 CTAs): 128.
  EXPECT_EQ(plan_block_n(q, bf, 128, 1024, 1, 1024, 64), 128);
}

TEST(MoeGemmPlan, ScheduleRun) {
  MoeGemmArgs a = good_args();
  a.num_ctas = 132;
  EXPECT_EQ(ops::select_moe_instantiation(a).schedule, 3);  // 128 x 128: the overlap schedule
  a.block_n = 192;
  EXPECT_EQ(ops::select_moe_instantiation(a).schedule, 2);  // 128 x 192: ping-pong
  a.schedule = 0;
  EXPECT_EQ(ops::select_moe_instantiation(a).schedule, 0);
  EXPECT_EQ(ops::select_moe_instantiation(good_w4_args(ops::MoeQuant::w4a8_int4)).schedule, 0);
}

TEST(MoeGemmPlan, InstantiationsFitTheMachine) {
  for (int bm : {64, 128}) {
    MoeGemmArgs a = good_args();
    a.block_m = bm;
    const auto inst = ops::select_moe_instantiation(a);
    EXPECT_EQ(inst.block_m, bm);
    EXPECT_EQ(inst.block_m * inst.block_n, 128 * 128);
    EXPECT_EQ(inst.block_k, 128);
    EXPECT_EQ(inst.threads, 384);
    EXPECT_LE(inst.smem_bytes, 227 * 1024);
    EXPECT_GE(inst.stages, 4);
    EXPECT_LE(128 * inst.producer_regs + 256 * inst.consumer_regs, 65536);
  }
  MoeGemmArgs w = good_args();
  w.block_n = 192;
  const auto wide = ops::select_moe_instantiation(w);
  EXPECT_EQ(wide.block_m, 128);
  EXPECT_EQ(wide.block_n, 192);
  EXPECT_EQ(wide.consumer_warpgroups, 2);
  EXPECT_LE(wide.smem_bytes, 227 * 1024);
  EXPECT_LE(128 * wide.producer_regs + 256 * wide.consumer_regs, 65536);
  MoeGemmArgs s2 = good_args(MoeEpilogue::swiglu_fp8);
  MoeGemmArgs s3 = good_args(MoeEpilogue::swiglu_fp8);
  s3.tokens_per_expert_hint = 8192;
  const auto sw = ops::select_moe_instantiation(s3);
  EXPECT_EQ(sw.block_m, 128);
  EXPECT_EQ(sw.block_n, 256);
  EXPECT_EQ(sw.consumer_warpgroups, 2);
  EXPECT_LE(sw.smem_bytes, 227 * 1024);
  EXPECT_LE(128 * sw.producer_regs + 256 * sw.consumer_regs, 65536);
  s2.block_m = 64;
  s2.block_n = 0;
  const auto sw64 = ops::select_moe_instantiation(s2);
  EXPECT_EQ(sw64.block_n, 256);
  EXPECT_LE(sw64.smem_bytes, 227 * 1024);
}

// The planner's choices as rules (not as the tile a tuning picks; the GPU correctness tests
// force every tile and never assert a plan). Waves: tiles = m-blocks x n-blocks over `ctas`
// persistent CTAs, rounded up.
long long whole_waves_of(long long tiles, int ctas) { return (tiles + ctas - 1) / ctas; }

// plan_block_n (the w8a8 bf16 128-row tile's width): the chosen width never needs more waves
// than a narrower one, and a wider width whose waves x width (the columns a CTA walks) is no
// larger than the chosen one's is never passed over (wider tiles run each column at least as
// fast). Below the wave-counting regime (fewer than 1024 tokens per expert, docs/moe-gemm.md
// "Design") the narrow tile is kept, which satisfies the first rule trivially.
TEST(MoeGemmPlan, BlockNNeverMoreWavesThanANarrowerTile) {
  constexpr auto q = ops::MoeQuant::w8a8;
  int checked = 0;
  for (int ctas : {64, 132})
    for (int experts : {1, 5, 8, 12, 22, 64})
      for (int n : {1024, 1408, 2048, 4096, 6144, 7168, 11264})
        for (int tokens : {65, 512, 1024, 2048, 4096, 8192}) {
          const int w = plan_block_n(q, MoeEpilogue::bf16, 128, tokens, experts, n, ctas);
          ASSERT_TRUE(w == 128 || w == 192 || w == 256) << w;
          const long long m_blocks = static_cast<long long>(experts) * ((tokens + 127) / 128);
          auto waves = [&](int width) { return whole_waves_of(m_blocks * ((n + width - 1) / width), ctas); };
          SCOPED_TRACE(::testing::Message() << "ctas " << ctas << " experts " << experts << " n " << n << " tokens "
                                            << tokens << " -> width " << w);
          for (int narrower : {128, 192})
            if (narrower < w) {
              EXPECT_LE(waves(w), waves(narrower));
            }
          if (tokens >= 1024)
            for (int wider : {192, 256})
              if (wider > w) {
                EXPECT_GT(waves(wider) * wider, waves(w) * w) << "a wider tile with no more work";
              }
          ++checked;
        }
  EXPECT_GT(checked, 400);
}

// plan_swiglu_block_m: the 128-row tile is never chosen when it needs more waves than the
// 64-row one, and the 64-row tile never when it walks more rows x waves than the 128-row one.
TEST(MoeGemmPlan, SwiGluHeightNeverMoreWavesThanTheAlternative) {
  for (int ctas : {64, 132, 176})
    for (int experts : {1, 5, 8, 11, 12, 15, 22})
      for (int n : {2048, 3072, 4096, 6144, 11264})
        for (int tokens : {65, 100, 128, 192, 256, 512, 1024, 8192}) {
          const int h = plan_swiglu_block_m(tokens, experts, n, ctas);
          ASSERT_TRUE(h == 64 || h == 128) << h;
          const long long n_blocks = (n + 255) / 256;
          auto waves = [&](int rows) {
            return whole_waves_of(static_cast<long long>(experts) * ((tokens + rows - 1) / rows) * n_blocks, ctas);
          };
          SCOPED_TRACE(::testing::Message() << "ctas " << ctas << " experts " << experts << " n " << n << " tokens "
                                            << tokens << " -> height " << h);
          if (h == 128)
            EXPECT_LE(waves(128), waves(64));
          else
            EXPECT_LE(waves(64) * 64, waves(128) * 128);
        }
  // Up to 64 tokens per expert a 128-row tile is at least half padding: never chosen.
  for (int tokens : {1, 16, 64}) EXPECT_EQ(plan_swiglu_block_m(tokens, 8, 4096, 132), 64);
}

// Whatever is planned is legal for the shape: it validates, its K block divides k, it fits an
// sm_90 SM (shared memory, registers, threads), its cluster has at most two CTAs, and fields a
// call forces (block_m, block_n, schedule, cluster) are the ones the instantiation runs.
TEST(MoeGemmPlan, PlannedAndForcedEntriesAreLegalForTheShape) {
  auto legal = [](const MoeGemmArgs& a, const ops::MoeInstantiation& inst) {
    EXPECT_NO_THROW(ops::validate(a));
    EXPECT_GT(inst.block_k, 0);
    if (inst.block_k > 0) {
      EXPECT_EQ(a.k % inst.block_k, 0);
    }
    EXPECT_TRUE(inst.block_m == 64 || inst.block_m == 128 || inst.block_m == 192 || inst.block_m == 256)
        << inst.block_m;
    EXPECT_GT(inst.block_n, 0);
    EXPECT_EQ(inst.block_n % 64, 0);
    EXPECT_LE(inst.smem_bytes, 227 * 1024) << "fits an sm_90 SM";
    EXPECT_GE(inst.threads, 128);
    EXPECT_LE(inst.threads, 1024);
    EXPECT_LE(inst.threads / 128 * 128 * std::max(inst.producer_regs, inst.consumer_regs), 65536 * 2);
    EXPECT_GE(inst.cluster_m, 1);
    EXPECT_GE(inst.cluster_n, 1);
    EXPECT_LE(inst.cluster_m * inst.cluster_n, 2);
    EXPECT_GE(inst.schedule, 0);
    EXPECT_LE(inst.schedule, 3);
  };
  struct Shape {
    int experts, n, k;
  };
  const Shape shapes[] = {{12, 1408, 5632}, {12, 11264, 1408}, {8, 4096, 2048}, {5, 6144, 7168}, {64, 512, 128}};
  for (MoeEpilogue epi : {MoeEpilogue::bf16, MoeEpilogue::swiglu_fp8})
    for (ops::MoeQuant q : {ops::MoeQuant::w8a8, ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4})
      for (const Shape& sh : shapes)
        for (int tokens : {1, 16, 64, 65, 128, 256, 1024, 8192}) {
          if (epi == MoeEpilogue::swiglu_fp8 && (sh.n / 2) % 128 != 0) continue;  // not a Linear-1 shape
          MoeGemmArgs a = q == ops::MoeQuant::w8a8 ? good_args(epi) : good_w4_args(q, epi);
          a.experts = sh.experts;
          a.n = sh.n;
          a.k = sh.k;
          a.m_total = sh.experts * tokens;
          a.tokens_per_expert_hint = tokens;
          a.num_ctas = 132;
          SCOPED_TRACE(::testing::Message() << ops::moe_quant_name(q) << (epi == MoeEpilogue::bf16 ? " bf16" : " swiglu")
                                            << " experts " << sh.experts << " n " << sh.n << " k " << sh.k
                                            << " tokens " << tokens);
          ops::MoeInstantiation inst;
          ASSERT_NO_THROW(inst = ops::select_moe_instantiation(a));
          legal(a, inst);
        }
  // Forced fields are honoured (the GPU tests cover each kernel by forcing them).
  MoeGemmArgs f = good_args();
  for (int bm : {64, 128}) {
    f.block_m = bm;
    EXPECT_EQ(ops::select_moe_instantiation(f).block_m, bm);
  }
  f.block_m = 128;
  for (int bn : {128, 192, 256}) {
    f.block_n = bn;
    const auto inst = ops::select_moe_instantiation(f);
    EXPECT_EQ(inst.block_n, bn);
    legal(f, inst);
    for (int sch : {0, 2}) {
      f.schedule = sch;
      EXPECT_EQ(ops::select_moe_instantiation(f).schedule, sch) << bn;
    }
    f.schedule = -1;
  }
  for (auto [bn, cm, cn] : {std::tuple{128, 1, 1}, std::tuple{192, 2, 1}, std::tuple{256, 2, 1}}) {
    f.block_n = bn;
    f.cluster_m = cm;
    f.cluster_n = cn;
    const auto inst = ops::select_moe_instantiation(f);
    EXPECT_EQ(inst.cluster_m, cm);
    EXPECT_EQ(inst.cluster_n, cn);
  }
}

// Every line of src/kernels/moe/configs.def is compiled, described by its kernel with the tile
// and cluster the line names, and reachable through the planner by forcing that tile and cluster.
TEST(MoeGemmPlan, EveryListedKernelIsInTheTable) {
  namespace km = xstage::kernels::moe;
  int lines = 0;
#define XSTAGE_MOE_CONFIG(name, rate, min_tokens, max_tokens, ...)                                  \
  {                                                                                                  \
    using namespace km;                                                                              \
    using C = __VA_ARGS__;                                                                           \
    const km::KernelInfo k = km::moe_info_##name(km::W4Format::int4_g128);                         \
    EXPECT_EQ(k.tile.block_m, C::TileShape::block_m) << #name;                                      \
    EXPECT_EQ(k.tile.cluster_m * 10 + k.tile.cluster_n, C::ClusterShape::m * 10 + C::ClusterShape::n) << #name; \
    EXPECT_LE(k.smem_bytes, 227 * 1024) << #name;                                                    \
    EXPECT_GT(rate, 0.0) << #name;                                                                   \
    EXPECT_LE(min_tokens, max_tokens) << #name;                                                      \
    ++lines;                                                                                         \
  }
#include "kernels/moe/configs.def"
#undef XSTAGE_MOE_CONFIG
  EXPECT_EQ(lines, 20);
}

TEST(MoeGemmPlan, FlopCount) {
  MoeGemmArgs a = good_args();
  EXPECT_DOUBLE_EQ(ops::moe_gemm_flops(a, 1000), 2.0 * 1000 * 4096 * 2048);
}

}  // namespace
#endif  // XSTAGE_HAVE_MOE
