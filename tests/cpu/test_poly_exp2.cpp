// poly_exp2, the softmax's exponential on the FMA pipe (docs/attention.md §Exponentials off the
// SFU): its error against exp2 over every exponent the softmax can produce, and its edges.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/attention/poly_exp2.hpp"

using xstage::kernels::attention::kPolyExp2MaxRelError;
using xstage::kernels::attention::poly_exp2;

TEST(PolyExp2, RelativeErrorOverTheSoftmaxRange) {
  // Scores minus the (lazy) row max, in exp2 units: from the clamp up to the lazy-max bound (8)
  // and a little beyond; dense enough to land on every rounding boundary of rint(x).
  double worst = 0.0;
  float worst_x = 0.f;
  for (int i = 0; i <= 4'000'000; ++i) {
    const float x = -125.f + 137.f * static_cast<float>(i) / 4'000'000.f;
    const double rel = std::fabs(static_cast<double>(poly_exp2(x)) / std::exp2(static_cast<double>(x)) - 1.0);
    if (rel > worst) worst = rel, worst_x = x;
  }
  EXPECT_LE(worst, kPolyExp2MaxRelError) << "at x = " << worst_x;
  EXPECT_GT(worst, 1e-6) << "a polynomial of degree 3 cannot be this exact: is poly_exp2 calling exp2?";
}

TEST(PolyExp2, HalfIntegersAndExactPowers) {
  for (int j = -124; j <= 12; ++j) {
    for (float off : {-0.5f, -0.25f, 0.f, 0.25f, 0.5f}) {
      const float x = static_cast<float>(j) + off;
      EXPECT_NEAR(poly_exp2(x) / std::exp2(x), 1.f, kPolyExp2MaxRelError) << x;
    }
  }
}

TEST(PolyExp2, MaskedScoresAreNegligibleAndNaNStaysNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {-inf, -1e30f, -126.f, -200.f}) {
    const float y = poly_exp2(x);
    EXPECT_GE(y, 0.f) << x;
    EXPECT_LE(y, std::ldexp(1.f, -124)) << x;  // far below any row sum (>= 1)
    EXPECT_TRUE(std::isnormal(y) || y == 0.f) << x;
  }
  EXPECT_TRUE(std::isnan(poly_exp2(std::numeric_limits<float>::quiet_NaN())));
}
