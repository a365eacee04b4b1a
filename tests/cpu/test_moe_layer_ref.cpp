// The host reference of the whole expert-parallel MoE layer (the Mega-MoE kernel's future
// oracle): dispatch/combine bookkeeping against a token-by-token recomputation, exact
// invariances of the quantised math, W4A8 weights against W8A8 weights holding the same values,
// and shape validation.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <cmath>

#include "xstage/error.hpp"
#include "xstage/moe_routing.hpp"
#include "xstage/ops/moe_layer_ref.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"

#include <random>

using namespace xstage;

namespace {

moe::ModelShape tiny() { return moe::ModelShape{"tiny", 256, 256, 8, 3, 0, 0}; }

moe::Routing routing(int ranks, int tokens, moe::RoutingKind kind = moe::RoutingKind::skewed) {
  moe::RoutingConfig c;
  c.kind = kind;
  return moe::make_routing(tiny(), ranks, tokens, c);
}

}  // namespace

TEST(MoeLayerRef, EqualsATokenByTokenRecomputation) {
  const auto r = routing(2, 24);
  const auto w = ops::make_moe_layer_weights(8, 256, 256, 7);
  const auto in = ops::make_moe_layer_inputs(r, 8);
  const auto out = ops::moe_layer_reference(r, w, in);
  ASSERT_EQ(out.size(), 2u);
  std::vector<float> y(256), xs(2);
  double norm = 0;
  for (int src = 0; src < 2; ++src)
    for (int t = 0; t < 24; ++t) {
      std::vector<float> want(256, 0.f);
      for (int j = 0; j < 3; ++j) {
        xs[0] = in[src].x_scales[t];
        xs[1] = in[src].x_scales[24 + t];
        ops::moe_expert_row(w, r.per_rank[src].experts[t * 3 + j], r.per_rank[src].weights[t * 3 + j],
                            in[src].x.data() + t * 256, xs.data(), y.data());
        for (int n = 0; n < 256; ++n) want[n] += y[n];
      }
      for (int n = 0; n < 256; ++n) {
        const float got = out[src][t * 256 + n];
        ASSERT_TRUE(std::isfinite(got));
        EXPECT_NEAR(got, want[n], 1e-6f * (1.f + std::fabs(want[n]))) << "rank " << src << " token " << t << " n " << n;
        norm += double(got) * got;
      }
    }
  EXPECT_GT(norm, 1.0) << "the layer produced (almost) nothing";
}

TEST(MoeLayerRef, ScalingEveryRouterWeightScalesTheOutputExactly) {
  // h scales by 2, its per-128 fp8 requantisation is scale-invariant (amax and scale double,
  // the codes stay), Linear-2 doubles, bf16 rounding commutes with x2: out doubles bit for bit.
  auto r = routing(2, 16, moe::RoutingKind::balanced);
  const auto w = ops::make_moe_layer_weights(8, 256, 256, 11);
  const auto in = ops::make_moe_layer_inputs(r, 12);
  const auto a = ops::moe_layer_reference(r, w, in);
  for (auto& pr : r.per_rank)
    for (auto& x : pr.weights) x *= 2.f;
  const auto b = ops::moe_layer_reference(r, w, in);
  for (int src = 0; src < 2; ++src)
    for (size_t i = 0; i < a[src].size(); ++i) ASSERT_EQ(b[src][i], 2.f * a[src][i]) << i;
}

TEST(MoeLayerRef, ATokenSentNowhereElseIsUnchangedByOtherRanksTokens) {
  // Output rows are per token: changing rank 1's activations leaves rank 0's output alone.
  const auto r = routing(2, 8);
  const auto w = ops::make_moe_layer_weights(8, 256, 256, 3);
  auto in = ops::make_moe_layer_inputs(r, 4);
  const auto a = ops::moe_layer_reference(r, w, in);
  for (auto& v : in[1].x) v ^= 0x01;  // perturb every fp8 code of rank 1
  const auto b = ops::moe_layer_reference(r, w, in);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
}

TEST(MoeLayerRef, Bf16RoundingIsNearestEven) {
  EXPECT_EQ(ops::bf16_round(1.0f), 1.0f);
  EXPECT_EQ(ops::bf16_round(1.0f + 1.0f / 256), 1.0f);             // tie -> even (1.0)
  EXPECT_EQ(ops::bf16_round(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);  // tie -> even (1 + 2^-6)
  EXPECT_EQ(ops::bf16_round(1.0f + 1.5f / 256), 1.0f + 2.0f / 256);  // above the tie: up
  EXPECT_TRUE(std::isnan(ops::bf16_round(NAN)));
}

TEST(MoeLayerRef, ShapeMismatchesAreClearErrors) {
  const auto r = routing(2, 4);
  const auto in = ops::make_moe_layer_inputs(r, 1);
  EXPECT_THROW(ops::moe_layer_reference(r, ops::make_moe_layer_weights(4, 256, 256, 1), in), InvalidArgument);
  EXPECT_THROW(ops::moe_layer_reference(r, ops::make_moe_layer_weights(8, 128, 256, 1), in), InvalidArgument);
  const auto w = ops::make_moe_layer_weights(8, 256, 256, 1);
  EXPECT_THROW(ops::moe_layer_reference(r, w, {in[0]}), InvalidArgument);
  EXPECT_THROW(ops::make_moe_layer_weights(8, 200, 256, 1), InvalidArgument);
}

namespace {

// W4A8 weights whose values W8A8 represents exactly, and those W8A8 weights: every 4-bit code
// random; INT4 group scales / MXFP4 exponents constant over each 128 x 128 block and powers of
// two, so code x scale is exact in both formats.
std::pair<ops::MoeLayerWeights, ops::MoeLayerWeights> twin_weights(ops::MoeQuant q, int E, int H, int I) {
  ops::MoeLayerWeights w4, w8;
  for (auto* w : {&w4, &w8}) {
    w->experts = E;
    w->hidden = H;
    w->intermediate = I;
  }
  w4.quant = q;
  std::mt19937 g(5);
  auto make = [&](int rows, int cols, std::vector<uint8_t>& p4, std::vector<float>& s4, std::vector<uint8_t>& e8,
                  std::vector<uint8_t>& c8, std::vector<float>& s8) {
    for (int e = 0; e < E; ++e) {
      std::vector<float> block(size_t(rows / 128) * (cols / 128));
      for (auto& b : block) b = std::ldexp(1.f, -5 - int(g() % 4));  // 2^-5 .. 2^-8
      std::vector<uint8_t> packed(size_t(rows) * cols / 2, 0);
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
          const uint8_t nib = static_cast<uint8_t>(g() % 16);
          packed[(size_t(r) * cols + c) / 2] |= static_cast<uint8_t>(nib << ((c & 1) * 4));
          const float v = q == ops::MoeQuant::w4a8_int4 ? float(ops::int4_decode(nib)) : ops::e2m1_decode(nib);
          c8.push_back(ops::fp8_e4m3_encode(v));  // exact: |v| <= 8
        }
      p4.insert(p4.end(), packed.begin(), packed.end());
      s8.insert(s8.end(), block.begin(), block.end());
      if (q == ops::MoeQuant::w4a8_int4) {
        for (int kg = 0; kg < cols / 128; ++kg)
          for (int r = 0; r < rows; ++r) s4.push_back(block[(r / 128) * (cols / 128) + kg]);
      } else {
        // E8M0 byte for 2^x is 127 + x; every 32-column sub-block of a row shares its block's.
        for (int sb = 0; sb < cols / 32; ++sb)
          for (int r = 0; r < rows; ++r)
            e8.push_back(static_cast<uint8_t>(127 + std::ilogb(block[(r / 128) * (cols / 128) + sb / 4])));
      }
    }
  };
  make(2 * I, H, w4.w1, w4.w1_scales, w4.w1_e8m0, w8.w1, w8.w1_scales);
  make(H, I, w4.w2, w4.w2_scales, w4.w2_e8m0, w8.w2, w8.w2_scales);
  return {w4, w8};
}

}  // namespace

TEST(MoeLayerRef, W4A8EqualsW8A8OnWeightsBothHoldExactly) {
  const auto r = routing(2, 12);
  const auto in = ops::make_moe_layer_inputs(r, 21);
  for (auto q : {ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4}) {
    const auto [w4, w8] = twin_weights(q, 8, 256, 256);
    const auto a = ops::moe_layer_reference(r, w4, in);
    const auto b = ops::moe_layer_reference(r, w8, in);
    double norm = 0;
    for (int rank = 0; rank < 2; ++rank)
      for (size_t i = 0; i < a[rank].size(); ++i) {
        ASSERT_EQ(a[rank][i], b[rank][i]) << "quant " << int(q) << " rank " << rank << " i " << i;
        norm += double(a[rank][i]) * a[rank][i];
      }
    EXPECT_GT(norm, 0.0) << "a zero layer would pass trivially";
  }
}

TEST(MoeLayerRef, MakesW4A8WeightsOfTheKernelsLayout) {
  const auto i4 = ops::make_moe_layer_weights(3, 256, 384, 2, ops::MoeQuant::w4a8_int4);
  EXPECT_EQ(i4.w1.size(), size_t(3) * 768 * 256 / 2);
  EXPECT_EQ(i4.w1_scales.size(), size_t(3) * (256 / 128) * 768);
  EXPECT_EQ(i4.w2.size(), size_t(3) * 256 * 384 / 2);
  EXPECT_EQ(i4.w2_scales.size(), size_t(3) * (384 / 128) * 256);
  EXPECT_TRUE(i4.w1_e8m0.empty());
  const auto mx = ops::make_moe_layer_weights(3, 256, 384, 2, ops::MoeQuant::w4a8_mxfp4);
  EXPECT_EQ(mx.w1_e8m0.size(), size_t(3) * (256 / 32) * 768);
  EXPECT_EQ(mx.w2_e8m0.size(), size_t(3) * (384 / 32) * 256);
  EXPECT_TRUE(mx.w1_scales.empty());
  // The random W4A8 layer computes something finite and non-zero.
  const moe::Routing r = moe::make_routing(moe::ModelShape{"w4", 256, 384, 3, 2, 0, 0}, 1, 6, {});
  const auto in = ops::make_moe_layer_inputs(r, 3);
  for (const auto* w : {&i4, &mx}) {
    const auto out = ops::moe_layer_reference(r, *w, in);
    double norm = 0;
    for (float v : out[0]) {
      ASSERT_TRUE(std::isfinite(v));
      norm += double(v) * v;
    }
    EXPECT_GT(norm, 0.0);
  }
}

TEST(MoeLayerRef, WeightArraysOfTheWrongFormatAreClearErrors) {
  const auto r = routing(2, 4);
  const auto in = ops::make_moe_layer_inputs(r, 1);
  auto w = ops::make_moe_layer_weights(8, 256, 256, 1);  // w8a8 arrays
  w.quant = ops::MoeQuant::w4a8_int4;
  EXPECT_THROW(ops::moe_layer_reference(r, w, in), InvalidArgument);
  w.quant = ops::MoeQuant::w4a8_mxfp4;
  EXPECT_THROW(ops::moe_layer_reference(r, w, in), InvalidArgument);
  auto m = ops::make_moe_layer_weights(8, 256, 256, 1, ops::MoeQuant::w4a8_mxfp4);
  m.w2_e8m0.pop_back();
  EXPECT_THROW(ops::moe_layer_reference(r, m, in), InvalidArgument);
}
#endif
