// The layer bench's choice among a token's alternate per-token scales (src/cli/bench_moe_scale_alts.*):
// the closest combination, exhaustively and by coordinate passes past kMaxCombinations, and the
// primary when the kernel wrote it.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cli/bench_moe_scale_alts.hpp"

using xstage::cli::closest_reference;
using xstage::cli::kMaxCombinations;
using xstage::cli::ScaleAlternatives;

namespace {

// groups ambiguous expert rows with `per` alternates each: random deltas ~1e-2 of a unit ref.
struct Case {
  std::vector<double> ref;
  std::vector<ScaleAlternatives> alts;
  Case(size_t cols, size_t groups, size_t per, unsigned seed) : ref(cols), alts(groups) {
    std::mt19937 g(seed);
    std::normal_distribution<double> n(0.0, 1.0);
    for (auto& v : ref) v = n(g);
    for (auto& a : alts)
      for (size_t i = 0; i < per; ++i) {
        a.deltas.emplace_back(cols);
        for (auto& v : a.deltas.back()) v = static_cast<float>(1e-2 * n(g));
      }
  }
  // ref + the chosen deltas (0: none, else 1 + index) + noise of sd `noise`
  std::vector<float> got(const std::vector<size_t>& choice, double noise, unsigned seed) const {
    std::mt19937 g(seed);
    std::normal_distribution<double> n(0.0, noise);
    std::vector<float> out(ref.size());
    for (size_t c = 0; c < ref.size(); ++c) {
      double v = ref[c] + n(g);
      for (size_t a = 0; a < alts.size(); ++a)
        if (choice[a] > 0) v += alts[a].deltas[choice[a] - 1][c];
      out[c] = static_cast<float>(v);
    }
    return out;
  }
  std::vector<double> expect(const std::vector<size_t>& choice) const {
    std::vector<double> r = ref;
    for (size_t a = 0; a < alts.size(); ++a)
      if (choice[a] > 0)
        for (size_t c = 0; c < r.size(); ++c) r[c] += alts[a].deltas[choice[a] - 1][c];
    return r;
  }
};

void expect_near(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t c = 0; c < a.size(); ++c) ASSERT_NEAR(a[c], b[c], 1e-12) << c;
}

}  // namespace

TEST(BenchMoeScaleAlts, PrimaryWhenTheKernelWroteIt) {
  const Case k(512, 3, 2, 1);
  const std::vector<size_t> none(3, 0);
  const auto r = closest_reference(k.ref.data(), k.alts, k.got(none, 1e-4, 2).data(), 512);
  EXPECT_FALSE(r.used_alternate);
  expect_near(r.ref, k.ref);
}

TEST(BenchMoeScaleAlts, FindsTheCombinationExhaustively) {
  const Case k(512, 3, 2, 3);  // 27 combinations
  for (const std::vector<size_t>& choice : {std::vector<size_t>{0, 2, 0}, {1, 0, 2}, {2, 2, 1}}) {
    const auto r = closest_reference(k.ref.data(), k.alts, k.got(choice, 1e-4, 4).data(), 512);
    EXPECT_TRUE(r.used_alternate);
    expect_near(r.ref, k.expect(choice));
  }
}

TEST(BenchMoeScaleAlts, FindsTheCombinationByCoordinatePasses) {
  const Case k(2048, 12, 1, 5);  // 4096 combinations > kMaxCombinations
  static_assert(kMaxCombinations < 4096);
  std::vector<size_t> choice(12, 0);
  for (size_t a : {0u, 3u, 4u, 9u, 11u}) choice[a] = 1;
  const auto r = closest_reference(k.ref.data(), k.alts, k.got(choice, 1e-4, 6).data(), 2048);
  EXPECT_TRUE(r.used_alternate);
  expect_near(r.ref, k.expect(choice));
}

// Many independent one-delta choices (the ambiguous h codes of a row): the passes find the
// subset the kernel took, and report each choice.
TEST(BenchMoeScaleAlts, FindsManyCodeChoicesByCoordinatePasses) {
  const Case k(1408, 60, 1, 9);
  std::vector<size_t> choice(60, 0);
  for (size_t a : {2u, 7u, 19u, 33u, 41u, 58u}) choice[a] = 1;
  const auto r = closest_reference(k.ref.data(), k.alts, k.got(choice, 1e-4, 10).data(), 1408);
  EXPECT_TRUE(r.used_alternate);
  EXPECT_EQ(r.choice, choice);
  expect_near(r.ref, k.expect(choice));
}

// A wrong row stays wrong: no combination of ~1 % deltas brings a row off by 10 % near.
TEST(BenchMoeScaleAlts, NoCombinationRescuesAWrongRow) {
  const Case k(512, 4, 2, 7);
  std::vector<float> got = k.got(std::vector<size_t>(4, 0), 1e-4, 8);
  for (auto& v : got) v *= 1.1f;
  const auto r = closest_reference(k.ref.data(), k.alts, got.data(), 512);
  double err = 0, ref = 0;
  for (size_t c = 0; c < 512; ++c) {
    err += (got[c] - r.ref[c]) * (got[c] - r.ref[c]);
    ref += r.ref[c] * r.ref[c];
  }
  EXPECT_GT(std::sqrt(err / ref), 0.05);
}
#endif  // XSTAGE_HAVE_MOE
