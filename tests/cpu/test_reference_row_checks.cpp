// The per-row tolerances of the GPU references (tests/gpu/attention_reference.hpp,
// tests/gpu/moe_reference.hpp; issue 33) on host-emulated kernel outputs: a correct bf16 / fp8
// kernel's rows pass, one zeroed or negated row (or one NaN) of a 17,776-row output fails (a
// zeroed row moves the global relative L2 by 1/133: it alone would pass), and so does a SwiGLU
// row with the wrong router weight.
#if defined(XSTAGE_HAVE_ATTENTION) && defined(XSTAGE_HAVE_MOE)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../gpu/attention_reference.hpp"
#include "../gpu/moe_reference.hpp"
#include "cli/bench_check.hpp"

using namespace xstage;

namespace {

float to_bf16(float x) {  // round to nearest even, as a kernel's bf16 store
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

// fp8 e4m3 of x (round to nearest even, saturating at 448), as a float: written here from
// the format (3 mantissa bits, exponent >= -6, subnormal step 2^-9), not the library's encoder.
float to_e4m3(float x) {
  const float a = std::fabs(x);
  if (a == 0.f) return 0.f;
  const int e = std::max(std::ilogb(a), -6);
  const float step = std::ldexp(1.f, e - 3);
  const float q = std::min(std::nearbyint(a / step) * step, 448.f);
  return std::copysign(q, x);
}

struct Rows {
  int n_rows, cols;
  std::vector<float> got, ref;
};

// Attention rows as the kernel computes them: scores in fp32, P = exp(s - max) rounded to bf16
// for the P V product, the row sum of the unrounded P, the output rounded to bf16; the
// reference in double. 17776 query rows (one head) of d = 64 over 96 keys.
Rows attention_rows() {
  const int q_len = 17776, kv = 96, d = 64;
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> q(size_t(q_len) * d), k(size_t(kv) * d), v(size_t(kv) * d);
  for (auto& x : q) x = to_bf16(u(g));
  for (auto& x : k) x = to_bf16(u(g));
  for (auto& x : v) x = to_bf16(u(g));
  Rows r{q_len, d, std::vector<float>(size_t(q_len) * d), std::vector<float>(size_t(q_len) * d)};
  const float scale = 1.f / std::sqrt(float(d));
  std::vector<float> s(kv);
  std::vector<double> sd(kv);
  for (int i = 0; i < q_len; ++i) {
    float m = -INFINITY;
    double md = -INFINITY;
    for (int j = 0; j < kv; ++j) {
      float dot = 0.f;
      double dd = 0;
      for (int c = 0; c < d; ++c) {
        dot += q[size_t(i) * d + c] * k[size_t(j) * d + c];
        dd += double(q[size_t(i) * d + c]) * k[size_t(j) * d + c];
      }
      s[j] = dot * scale;
      sd[j] = dd * scale;
      m = std::max(m, s[j]);
      md = std::max(md, sd[j]);
    }
    float l = 0.f;
    double ld = 0;
    std::vector<float> acc(d, 0.f);
    std::vector<double> accd(d, 0.0);
    for (int j = 0; j < kv; ++j) {
      const float p = std::exp(s[j] - m);
      const double pd = std::exp(sd[j] - md);
      l += p;
      ld += pd;
      const float pb = to_bf16(p);
      for (int c = 0; c < d; ++c) {
        acc[c] += pb * v[size_t(j) * d + c];
        accd[c] += pd * v[size_t(j) * d + c];
      }
    }
    for (int c = 0; c < d; ++c) {
      r.got[size_t(i) * d + c] = to_bf16(acc[c] / l);
      r.ref[size_t(i) * d + c] = static_cast<float>(accd[c] / ld);
    }
  }
  return r;
}

cli::CheckRecord check(const Rows& r, const cli::RowTolerance& tol) {
  cli::RowChecker c(tol);
  unsigned long long nonfinite = 0;
  for (float x : r.got) nonfinite += !std::isfinite(x);
  for (int i = 0; i < r.n_rows; ++i)
    c.add_row(i, r.got.data() + size_t(i) * r.cols, r.ref.data() + size_t(i) * r.cols, size_t(r.cols));
  return c.finish(nonfinite, "host");
}

double global_rel(const Rows& r) {
  double e = 0, n = 0;
  for (size_t i = 0; i < r.got.size(); ++i) {
    e += double(r.got[i] - r.ref[i]) * (r.got[i] - r.ref[i]);
    n += double(r.ref[i]) * r.ref[i];
  }
  return std::sqrt(e / n);
}

}  // namespace

TEST(ReferenceRowChecks, AttentionBf16RowsPassAndOneWrongRowFails) {
  const Rows good = attention_rows();
  const cli::CheckRecord ok = check(good, gputest::kAttentionRowTolerance);
  EXPECT_TRUE(ok.passed) << ok.rows_failed << " rows failed, worst " << ok.rel_err << " at row " << ok.worst_row;
  EXPECT_EQ(ok.rows_checked, 17776);
  EXPECT_LT(ok.rel_err, 0.5 * gputest::kAttentionRowTolerance.rel_tol) << "margin for a correct bf16 kernel";
  const int d = good.cols;
  for (int mode = 0; mode < 3; ++mode) {
    Rows bad = good;
    const int row = mode == 0 ? 1 : (mode == 1 ? 17775 : 8888);
    for (int c = 0; c < d; ++c) {
      float& x = bad.got[size_t(row) * d + c];
      x = mode == 0 ? -x : (mode == 1 ? 0.f : x);
    }
    if (mode == 2) bad.got[size_t(row) * d + 5] = std::numeric_limits<float>::quiet_NaN();  // one unwritten element
    const cli::CheckRecord rec = check(bad, gputest::kAttentionRowTolerance);
    EXPECT_FALSE(rec.passed) << "mode " << mode;
    EXPECT_EQ(rec.rows_failed, 1) << "mode " << mode;
    EXPECT_EQ(rec.first_failed_row, row) << "mode " << mode;
    if (mode == 1) {
      EXPECT_LT(global_rel(bad), 1e-2) << "the global L2 alone would pass a zeroed row";
    }
  }
}

TEST(ReferenceRowChecks, MoeBf16RowsPassAndOneWrongRowFails) {
  // GEMM rows of a K = 2048 fp8 product: the kernel's fp32 sum differs from the reference's in
  // the last bits, then the bf16 store.
  const int rows = 17776, n = 256;
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.f, 25.f), tiny(0.f, 1e-6f);
  Rows r{rows, n, std::vector<float>(size_t(rows) * n), std::vector<float>(size_t(rows) * n)};
  for (size_t i = 0; i < r.ref.size(); ++i) {
    r.ref[i] = nd(g);
    r.got[i] = to_bf16(r.ref[i] * (1.f + tiny(g)));
  }
  EXPECT_TRUE(check(r, gputest::kMoeBf16RowTolerance).passed);
  Rows zero = r, neg = r;
  for (int c = 0; c < n; ++c) {
    zero.got[size_t(1) * n + c] = 0.f;
    neg.got[size_t(rows - 1) * n + c] *= -1.f;
  }
  for (const Rows* b : {&zero, &neg}) {
    const cli::CheckRecord rec = check(*b, gputest::kMoeBf16RowTolerance);
    EXPECT_FALSE(rec.passed);
    EXPECT_EQ(rec.rows_failed, 1);
  }
  EXPECT_LT(global_rel(zero), 1e-2) << "the global L2 alone would pass a zeroed row";
}

TEST(ReferenceRowChecks, MoeSwigluRowsAgainstTheExactH) {
  // h = silu(gate) * up * w per row (128 channels, the shortest Linear-1 rows the GPU tests run),
  // requantised per 128 channels with a scale off by the tests' 2e-3 bound and a 1e-6 jitter of
  // h (the kernel's fp32 sums): the dequantised rows against the exact h.
  const int rows = 3000, inter = 128;
  std::mt19937 g(11);
  std::normal_distribution<float> nd(0.f, 20.f), tiny(0.f, 1e-6f);
  std::uniform_real_distribution<float> wd(0.1f, 1.f);
  Rows r{rows, inter, std::vector<float>(size_t(rows) * inter), std::vector<float>(size_t(rows) * inter)};
  std::vector<float> weight(rows);
  for (int i = 0; i < rows; ++i) {
    weight[i] = wd(g);
    float amax = 0.f;
    for (int c = 0; c < inter; ++c) {
      const float gate = nd(g), up = nd(g);
      const float h = gate / (1.f + std::exp(-gate)) * up * weight[i];
      r.ref[size_t(i) * inter + c] = h;
      amax = std::max(amax, std::fabs(h));
    }
    const float scale = amax / 448.f * (1.f + 2e-3f);
    for (int c = 0; c < inter; ++c) {
      const float h = r.ref[size_t(i) * inter + c] * (1.f + tiny(g));
      r.got[size_t(i) * inter + c] = to_e4m3(h / scale) * scale;
    }
  }
  const cli::CheckRecord ok = check(r, gputest::kMoeSwigluRowTolerance);
  EXPECT_TRUE(ok.passed) << ok.rows_failed << " rows failed, worst " << ok.rel_err;
  EXPECT_LT(ok.rel_err, 0.75 * gputest::kMoeSwigluRowTolerance.rel_tol) << "margin for a correct kernel";
  Rows neg = r, wrong_weight = r, zero = r;
  for (int c = 0; c < inter; ++c) {
    neg.got[size_t(7) * inter + c] *= -1.f;
    wrong_weight.got[size_t(8) * inter + c] *= 0.8f;  // another row's router weight
    zero.got[size_t(9) * inter + c] = 0.f;
  }
  for (const Rows* b : {&neg, &wrong_weight, &zero}) {
    const cli::CheckRecord rec = check(*b, gputest::kMoeSwigluRowTolerance);
    EXPECT_FALSE(rec.passed);
    EXPECT_EQ(rec.rows_failed, 1);
  }
}
#endif
