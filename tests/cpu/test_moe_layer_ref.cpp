// The host reference of the whole expert-parallel MoE layer (the Mega-MoE kernel's future
// oracle): dispatch/combine bookkeeping against a token-by-token recomputation, exact
// invariances of the quantised math, and shape validation.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <cmath>

#include "xstage/error.hpp"
#include "xstage/moe_routing.hpp"
#include "xstage/ops/moe_layer_ref.hpp"

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
#endif
