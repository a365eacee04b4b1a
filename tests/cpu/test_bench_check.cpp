// The output check of the `xstage bench ...` commands (src/cli/bench_check.hpp, issue 33): a
// correct output passes; one wrong row, one NaN anywhere or an unwritten (poisoned) output
// fails; the row sample is deterministic and holds the first and last rows. With the MoE build:
// the bench's host reading of every weight layout (src/cli/bench_moe_check.hpp) equals the
// library's own host references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cli/bench_check.hpp"

#ifdef XSTAGE_HAVE_MOE
#include "cli/bench_moe_check.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"
#endif

namespace xc = xstage::cli;

namespace {

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// A [rows, cols] problem: fp64 reference values and a bf16 "kernel output" of them.
struct Output {
  int rows, cols;
  std::vector<double> ref;
  std::vector<uint16_t> out;
};
Output make_output(int rows, int cols, uint32_t seed) {
  Output o{rows, cols, std::vector<double>(size_t(rows) * cols), std::vector<uint16_t>(size_t(rows) * cols)};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (size_t i = 0; i < o.ref.size(); ++i) {
    o.ref[i] = u(rng);
    o.out[i] = to_bf16(static_cast<float>(o.ref[i]));
  }
  return o;
}

// The bench's recipe on a host output: the full scan, the sample, the per-row comparison.
xc::CheckRecord check(const Output& o, const std::vector<size_t>& must = {}, int k = 64, uint64_t seed = 7) {
  const std::vector<size_t> rows = xc::sample_rows(size_t(o.rows), size_t(k), seed, must);
  xc::RowChecker rc(xc::RowTolerance{1e-2, 2e-2, 1e-6});
  std::vector<float> got(o.cols);
  for (size_t r : rows) {
    for (int c = 0; c < o.cols; ++c) got[c] = xc::bf16_bits_to_float(o.out[r * o.cols + c]);
    rc.add_row(static_cast<long long>(r), got.data(), o.ref.data() + r * o.cols, size_t(o.cols));
  }
  return rc.finish(xc::count_nonfinite_16(o.out.data(), o.out.size(), true), "test");
}

}  // namespace

TEST(BenchCheck, SampleIsDeterministicWithFirstAndLastRows) {
  const auto a = xc::sample_rows(100000, 64, 42);
  const auto b = xc::sample_rows(100000, 64, 42);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 64u);
  EXPECT_EQ(a.front(), 0u);
  EXPECT_EQ(a.back(), 99999u);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_LT(a[i - 1], a[i]) << "sorted and distinct";
  EXPECT_NE(a, xc::sample_rows(100000, 64, 43)) << "the seed picks the rows";
  // Rows the bench names (tile borders) are always in; out-of-range ones are dropped.
  const auto c = xc::sample_rows(100000, 64, 42, {127, 128, 5000, 100000, 777777});
  ASSERT_EQ(c.size(), 64u);
  for (size_t r : {size_t(0), size_t(127), size_t(128), size_t(5000), size_t(99999)})
    EXPECT_TRUE(std::binary_search(c.begin(), c.end(), r)) << r;
  // Small outputs: every row.
  const auto d = xc::sample_rows(10, 64, 1);
  ASSERT_EQ(d.size(), 10u);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i], i);
  EXPECT_TRUE(xc::sample_rows(0, 64, 1).empty());
  // Two rows: the first and the last.
  EXPECT_EQ(xc::sample_rows(1000, 2, 9), (std::vector<size_t>{0, 999}));
}

TEST(BenchCheck, CorrectOutputPasses) {
  const Output o = make_output(5000, 128, 1);
  const xc::CheckRecord rec = check(o);
  EXPECT_TRUE(rec.checked);
  EXPECT_TRUE(rec.passed) << rec.to_json().dump();
  EXPECT_EQ(rec.rows_checked, 64);
  EXPECT_EQ(rec.rows_failed, 0);
  EXPECT_EQ(rec.nonfinite, 0u);
  EXPECT_LT(rec.rel_err, 1e-2);
  EXPECT_GT(rec.max_abs_err, 0.0) << "bf16 rounding is seen";
  EXPECT_STREQ(rec.verdict(), "ok");
  // The fields python/xsbench/correctness.py reads.
  const auto j = rec.to_json();
  EXPECT_EQ(j["checked"], true);
  EXPECT_EQ(j["passed"], true);
  EXPECT_TRUE(j["max_abs_err"].is_number());
  EXPECT_TRUE(j["rel_err"].is_number());
  EXPECT_EQ(j["rows_checked"], 64);
  EXPECT_EQ(j["nonfinite"], 0);
  EXPECT_LE(j["rel_err"].get<double>(), j["rel_tol"].get<double>());
}

TEST(BenchCheck, OneWrongRowFails) {
  // One row of 20000 zeroed: a global L2 error would be ~0.7 %, the row's own is 100 %.
  Output o = make_output(20000, 128, 2);
  const size_t bad = 12345;
  for (int c = 0; c < o.cols; ++c) o.out[bad * o.cols + c] = 0;
  const xc::CheckRecord rec = check(o, {bad});
  EXPECT_FALSE(rec.passed);
  EXPECT_EQ(rec.rows_failed, 1);
  EXPECT_EQ(rec.first_failed_row, static_cast<long long>(bad));
  EXPECT_EQ(rec.worst_row, static_cast<long long>(bad));
  EXPECT_NEAR(rec.rel_err, 1.0, 1e-9);
  EXPECT_EQ(rec.nonfinite, 0u);
  EXPECT_STREQ(rec.verdict(), "FAILED");
  EXPECT_EQ(rec.to_json()["passed"], false);
  // The last row too (always sampled, no hint needed), and a row negated.
  Output o2 = make_output(20000, 128, 3);
  for (int c = 0; c < o2.cols; ++c) {
    uint16_t& h = o2.out[size_t(o2.rows - 1) * o2.cols + c];
    h ^= 0x8000u;
  }
  EXPECT_FALSE(check(o2).passed);
}

TEST(BenchCheck, OneWrongElementFailsItsRow) {
  // One element of one 4096-wide row off by 5 % of the row's largest value: the row's L2 error
  // stays far below 1e-2, its largest element error does not.
  Output o = make_output(300, 4096, 4);
  const size_t r = 0, c = 1000;
  double rmax = 0;
  for (int i = 0; i < o.cols; ++i) rmax = std::max(rmax, std::fabs(o.ref[r * o.cols + i]));
  o.out[r * o.cols + c] = to_bf16(static_cast<float>(o.ref[r * o.cols + c] + 0.05 * rmax));
  const xc::CheckRecord rec = check(o);
  EXPECT_LT(rec.rel_err, 1e-2) << "the L2 error alone would pass";
  EXPECT_FALSE(rec.passed);
  EXPECT_EQ(rec.rows_failed, 1);
}

TEST(BenchCheck, NanAnywhereFails) {
  // In a checked row: the row fails and the errors are not finite (null in the JSON).
  Output o = make_output(5000, 128, 5);
  o.out[0 * 128 + 17] = 0x7FC0u;  // bf16 NaN, row 0 (always checked)
  xc::CheckRecord rec = check(o);
  EXPECT_FALSE(rec.passed);
  EXPECT_EQ(rec.nonfinite, 1u);
  EXPECT_GE(rec.rows_failed, 1);
  EXPECT_TRUE(rec.to_json()["max_abs_err"].is_null());
  EXPECT_TRUE(rec.to_json()["rel_err"].is_null());
  // In a row no sample holds: the full scan finds it.
  Output o2 = make_output(5000, 128, 6);
  const auto rows = xc::sample_rows(5000, 64, 7);
  size_t unsampled = 1;
  while (std::binary_search(rows.begin(), rows.end(), unsampled)) ++unsampled;
  o2.out[unsampled * 128 + 3] = 0x7F80u;  // +inf
  rec = check(o2);
  EXPECT_EQ(rec.rows_failed, 0) << "no checked row holds it";
  EXPECT_EQ(rec.nonfinite, 1u);
  EXPECT_FALSE(rec.passed);
  EXPECT_EQ(rec.to_json()["nonfinite"], 1);
}

TEST(BenchCheck, UnwrittenPoisonedOutputFails) {
  Output o = make_output(1000, 64, 8);
  std::memset(o.out.data(), xc::kPoisonByte, o.out.size() * 2);  // what the bench does before timing
  xc::CheckRecord rec = check(o);
  EXPECT_FALSE(rec.passed);
  EXPECT_EQ(rec.nonfinite, o.out.size());
  EXPECT_EQ(rec.rows_failed, rec.rows_checked);
  // One unwritten row only.
  Output o2 = make_output(1000, 64, 9);
  std::memset(o2.out.data() + 500 * 64, xc::kPoisonByte, 64 * 2);
  rec = check(o2);
  EXPECT_FALSE(rec.passed);
  EXPECT_EQ(rec.nonfinite, 64u);
  // The poison byte is NaN in every output type the benches write.
  uint16_t h;
  std::memset(&h, xc::kPoisonByte, 2);
  EXPECT_TRUE(std::isnan(xc::bf16_bits_to_float(h)));
  EXPECT_TRUE(std::isnan(xc::fp16_bits_to_float(h)));
  const uint8_t b = xc::kPoisonByte;
  EXPECT_EQ(xc::count_nonfinite_fp8(&b, 1), 1u);
  float f;
  std::memset(&f, xc::kPoisonByte, 4);
  EXPECT_EQ(xc::count_nonfinite_f32(&f, 1), 1u);
}

TEST(BenchCheck, NoRowsCheckedFails) {
  xc::RowChecker rc(xc::RowTolerance{});
  const xc::CheckRecord rec = rc.finish(0, "nothing");
  EXPECT_FALSE(rec.passed);
  EXPECT_EQ(rec.rows_checked, 0);
  const auto f = xc::failed_check("no GPU", xc::RowTolerance{}, "x");
  EXPECT_FALSE(f.passed);
  EXPECT_EQ(f.to_json()["error"], "no GPU");
}

TEST(BenchCheck, RowFailedForAnotherReason) {
  const Output o = make_output(100, 128, 10);
  xc::RowChecker rc(xc::RowTolerance{});
  std::vector<float> got(o.cols);
  for (int r = 0; r < o.rows; ++r) {
    for (int c = 0; c < o.cols; ++c) got[c] = xc::bf16_bits_to_float(o.out[size_t(r) * o.cols + c]);
    EXPECT_TRUE(rc.add_row(r, got.data(), o.ref.data() + size_t(r) * o.cols, size_t(o.cols)));
  }
  rc.fail_row(42);  // e.g. a SwiGLU output scale off its reference
  const auto rec = rc.finish(0, "x");
  EXPECT_FALSE(rec.passed);
  EXPECT_EQ(rec.rows_failed, 1);
  EXPECT_EQ(rec.first_failed_row, 42);
}

TEST(BenchCheck, HalfDecoding) {
  EXPECT_EQ(xc::fp16_bits_to_float(0x3C00), 1.f);
  EXPECT_EQ(xc::fp16_bits_to_float(0xC000), -2.f);
  EXPECT_EQ(xc::fp16_bits_to_float(0x3555), 0x155 / 1024.f / 4.f + 0.25f);
  EXPECT_EQ(xc::fp16_bits_to_float(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(xc::fp16_bits_to_float(0x7BFF), 65504.f);
  EXPECT_TRUE(std::isinf(xc::fp16_bits_to_float(0x7C00)));
  EXPECT_TRUE(std::isnan(xc::fp16_bits_to_float(0x7E00)));
  EXPECT_EQ(xc::bf16_bits_to_float(0x3F80), 1.f);
  EXPECT_EQ(xc::bf16_bits_to_float(0xC040), -3.f);
  const uint16_t v[4] = {0x3C00, 0x7C00, 0xFC00, 0x7E01};
  EXPECT_EQ(xc::count_nonfinite_16(v, 4, false), 3u);
  const uint8_t e4m3[4] = {0x7F, 0xFF, 0x7E, 0x00};
  EXPECT_EQ(xc::count_nonfinite_fp8(e4m3, 4), 2u);
}

TEST(BenchCheck, ParallelForVisitsEveryIndexOnce) {
  std::vector<int> hits(1000, 0);
  xc::parallel_for(hits.size(), [&](size_t i) { hits[i] += 1; });
  for (int h : hits) EXPECT_EQ(h, 1);
}

#ifdef XSTAGE_HAVE_MOE
namespace {

namespace ops = xstage::ops;

// Random weights [rows, cols] whose 32-value sub-blocks span many binades (so MXFP4 exponent
// gaps above the register-operand kernels' 11 occur and are flushed).
std::vector<float> random_weights(int rows, int cols, uint32_t seed, int binades) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      w[size_t(r) * cols + c] = u(rng) * std::ldexp(1.f, -int((r * 7 + (c / 32) * 5) % (binades + 1)));
  return w;
}

// Every logical row of the expert through moe_weight_row against `want` [n, k].
void expect_rows(const xc::MoeExpertWeights& w, const std::vector<float>& want, const char* what) {
  std::vector<float> row(w.k);
  std::vector<uint8_t> scratch;
  long long bad = 0;
  for (int j = 0; j < w.n; ++j) {
    xc::moe_weight_row(w, j, row.data(), scratch);
    for (int c = 0; c < w.k; ++c)
      if (row[c] != want[size_t(j) * w.k + c] && ++bad <= 5)
        ADD_FAILURE() << what << ": row " << j << " col " << c << ": " << row[c] << " != " << want[size_t(j) * w.k + c];
  }
  EXPECT_EQ(bad, 0) << what;
}

constexpr int kN = 256, kK = 384;

}  // namespace

TEST(BenchCheckMoe, GluPhysicalRowInvertsGluSourceRow) {
  for (int n : {256, 512, 4096})
    for (int p = 0; p < n; ++p) ASSERT_EQ(xc::glu_physical_row(ops::glu_source_row(p, n), n), p) << n;
}

TEST(BenchCheckMoe, W8a8RowsMatchesDequantisation) {
  const auto w = random_weights(kN, kK, 1, 6);
  std::vector<uint8_t> q(w.size());
  std::vector<float> s((kN / 128) * (kK / 128)), want(w.size());
  ops::quantize_blocks_128x128(w.data(), kN, kK, q.data(), s.data());
  for (int r = 0; r < kN; ++r)
    for (int c = 0; c < kK; ++c)
      want[size_t(r) * kK + c] = ops::fp8_e4m3_decode(q[size_t(r) * kK + c]) * s[(r / 128) * (kK / 128) + c / 128];
  xc::MoeExpertWeights v{ops::MoeQuant::w8a8, ops::MoeWeightLayout::rows, kN, kK, q.data(), s.data(), nullptr};
  expect_rows(v, want, "w8a8");
}

TEST(BenchCheckMoe, Int4RowsAndPrepackedMatchDequantisation) {
  const auto w = random_weights(kN, kK, 2, 6);
  std::vector<uint8_t> packed(w.size() / 2), rs(w.size() / 2);
  std::vector<float> s((kK / 128) * kN), want(w.size());
  ops::quantize_int4_g128(w.data(), kN, kK, packed.data(), s.data());
  ops::dequantize_int4_g128(packed.data(), s.data(), kN, kK, want.data());
  xc::MoeExpertWeights v{ops::MoeQuant::w4a8_int4, ops::MoeWeightLayout::rows, kN, kK, packed.data(), s.data(),
                         nullptr};
  expect_rows(v, want, "int4 rows");
  ops::prepack_int4_rs(packed.data(), kN, kK, rs.data());
  v.layout = ops::MoeWeightLayout::int4_rs;
  v.b = rs.data();
  expect_rows(v, want, "int4_rs");
}

TEST(BenchCheckMoe, Mxfp4RowsAndPrepackedMatchDequantisation) {
  const auto w = random_weights(kN, kK, 3, 16);  // gaps up to 16: some sub-blocks flush
  std::vector<uint8_t> packed(w.size() / 2), ex((kK / 32) * kN);
  ops::quantize_mxfp4(w.data(), kN, kK, packed.data(), ex.data());
  std::vector<float> want(w.size());
  ops::dequantize_mxfp4_w4a8(packed.data(), ex.data(), kN, kK, want.data(), ops::kMxfp4MaxExponentGap);
  xc::MoeExpertWeights v{ops::MoeQuant::w4a8_mxfp4, ops::MoeWeightLayout::rows, kN, kK, packed.data(), nullptr,
                         ex.data()};
  expect_rows(v, want, "mxfp4 rows");

  ops::dequantize_mxfp4_w4a8(packed.data(), ex.data(), kN, kK, want.data(), ops::kMxfp4RsMaxExponentGap);
  std::vector<uint8_t> rs(size_t(ops::prepacked_mxfp4_rs_bytes(kN, kK)));
  std::vector<float> bs((kK / 128) * kN);
  const long long zeroed = ops::prepack_mxfp4_rs(packed.data(), ex.data(), kN, kK, rs.data(), bs.data());
  EXPECT_GT(zeroed, 0) << "the case exercises the flush";
  xc::MoeExpertWeights r{ops::MoeQuant::w4a8_mxfp4, ops::MoeWeightLayout::mxfp4_rs, kN, kK, rs.data(), bs.data(),
                         nullptr};
  expect_rows(r, want, "mxfp4_rs");

  std::vector<uint8_t> glu(rs.size());
  std::vector<float> gbs(bs.size());
  ops::prepack_mxfp4_rs_glu(packed.data(), ex.data(), kN, kK, glu.data(), gbs.data());
  xc::MoeExpertWeights g{ops::MoeQuant::w4a8_mxfp4, ops::MoeWeightLayout::mxfp4_rs_glu, kN, kK, glu.data(),
                         gbs.data(), nullptr};
  expect_rows(g, want, "mxfp4_rs_glu (logical rows)");
}

TEST(BenchCheckMoe, Int4LutPrepackedMatchesDequantisation) {
  const auto w = random_weights(kN, kK, 4, 4);
  std::vector<uint8_t> packed(w.size() / 2), gs((kK / 128) * kN);
  std::vector<float> cs(kN), want(w.size());
  ops::quantize_int4_lut(w.data(), kN, kK, packed.data(), gs.data(), cs.data());
  ops::dequantize_int4_lut(packed.data(), gs.data(), cs.data(), kN, kK, want.data());
  std::vector<uint8_t> rs(size_t(ops::prepacked_int4_lut_rs_bytes(kN, kK)));
  ops::prepack_int4_lut_rs(packed.data(), gs.data(), kN, kK, rs.data());
  xc::MoeExpertWeights v{ops::MoeQuant::w4a8_int4, ops::MoeWeightLayout::int4_rs_lut, kN, kK, rs.data(), cs.data(),
                         nullptr};
  expect_rows(v, want, "int4_rs_lut");

  std::vector<uint8_t> glu(rs.size());
  std::vector<float> gcs(kN);
  ops::prepack_int4_lut_rs_glu(packed.data(), gs.data(), cs.data(), kN, kK, glu.data(), gcs.data());
  xc::MoeExpertWeights g{ops::MoeQuant::w4a8_int4, ops::MoeWeightLayout::int4_rs_lut_glu, kN, kK, glu.data(),
                         gcs.data(), nullptr};
  expect_rows(g, want, "int4_rs_lut_glu (logical rows)");
}
#endif  // XSTAGE_HAVE_MOE
