// Routing of the Mega-MoE benchmark: shapes, determinism, distinct experts, weights,
// the skew the docs promise, dispatch accounting, and input validation.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>

#include "xstage/error.hpp"
#include "xstage/moe_routing.hpp"

using namespace xstage;

TEST(MoeRouting, SevenShapesOfMoeMd) {
  ASSERT_EQ(moe::model_shapes().size(), 7u);
  const auto& d = moe::find_model("DSv4-Pro");
  EXPECT_EQ(d.hidden, 7168);
  EXPECT_EQ(d.intermediate, 3072);
  EXPECT_EQ(d.experts, 384);
  EXPECT_EQ(d.top_k, 6);
  EXPECT_EQ(moe::find_model("DiT-MoE-G").intermediate, 5632);
  EXPECT_EQ(moe::find_model("MiMo-V2.5").shared, 0);
  for (const auto& m : moe::model_shapes()) {
    EXPECT_EQ(m.hidden % 128, 0) << m.name;
    EXPECT_EQ(m.intermediate % 128, 0) << m.name;
    EXPECT_EQ(m.experts % 8, 0) << m.name << ": must split over 2, 4 and 8 ranks";
  }
  try {
    moe::find_model("GPT-5");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("DSv4-Flash"), std::string::npos) << "lists the known models";
  }
}

TEST(MoeRouting, TokensGetDistinctExpertsAndWeightsSummingToOne) {
  for (auto kind : {moe::RoutingKind::balanced, moe::RoutingKind::skewed}) {
    moe::RoutingConfig cfg;
    cfg.kind = kind;
    const auto r = moe::make_routing(moe::find_model("Qwen3.5-397B-A17B"), 2, 300, cfg);
    ASSERT_EQ(r.per_rank.size(), 2u);
    EXPECT_EQ(r.experts_per_rank, 256);
    for (const auto& rr : r.per_rank) {
      ASSERT_EQ(rr.experts.size(), 300u * 10);
      for (int t = 0; t < 300; ++t) {
        std::set<int> seen;
        double sum = 0;
        for (int j = 0; j < 10; ++j) {
          const int e = rr.experts[t * 10 + j];
          ASSERT_GE(e, 0);
          ASSERT_LT(e, 512);
          seen.insert(e);
          const float w = rr.weights[t * 10 + j];
          ASSERT_TRUE(std::isfinite(w));
          ASSERT_GT(w, 0.f);
          sum += w;
        }
        EXPECT_EQ(seen.size(), 10u) << "token " << t;
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
  }
}

TEST(MoeRouting, SameInputsSameRoutingOtherSeedOtherRouting) {
  moe::RoutingConfig cfg;
  cfg.kind = moe::RoutingKind::skewed;
  const auto& m = moe::find_model("Hy3");
  const auto a = moe::make_routing(m, 4, 128, cfg);
  const auto b = moe::make_routing(m, 4, 128, cfg);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(a.per_rank[r].experts, b.per_rank[r].experts);
    EXPECT_EQ(a.per_rank[r].weights, b.per_rank[r].weights);
  }
  EXPECT_NE(a.per_rank[0].experts, a.per_rank[1].experts) << "ranks draw different tokens";
  cfg.seed += 1;
  EXPECT_NE(moe::make_routing(m, 4, 128, cfg).per_rank[0].experts, a.per_rank[0].experts);
}

TEST(MoeRouting, SkewedConcentratesLoadBalancedDoesNot) {
  const auto& m = moe::find_model("DSv4-Flash");  // 256 experts, top-6
  moe::RoutingConfig bal, skew;
  skew.kind = moe::RoutingKind::skewed;
  const auto sb = moe::routing_stats(moe::make_routing(m, 2, 8192, bal));
  const auto ss = moe::routing_stats(moe::make_routing(m, 2, 8192, skew));
  // Balanced: 16384 x 6 / 256 = 384 rows per expert on average, binomial spread (sd ~19.5):
  // the hottest of 256 stays within ~+4 sd.
  EXPECT_LT(sb.max_expert_over_mean, 1.25);
  EXPECT_EQ(sb.empty_experts, 0);
  // Skewed (s = 1): the hottest expert is picked by a large share of tokens, many times the
  // mean, and at most once per token (distinct experts), so below 256 / 6 x the mean.
  EXPECT_GT(ss.max_expert_over_mean, 8.0);
  EXPECT_LE(ss.max_expert_over_mean, 256.0 / 6.0);
  // Rows are conserved: every (token, expert) pair goes to exactly one rank.
  for (const auto* s : {&sb, &ss}) {
    EXPECT_EQ(std::accumulate(s->expert_rows.begin(), s->expert_rows.end(), int64_t{0}), 16384 * 6);
    EXPECT_EQ(std::accumulate(s->received.begin(), s->received.end(), int64_t{0}), 16384 * 6);
    for (int src = 0; src < 2; ++src)
      EXPECT_EQ(s->rows[src][0] + s->rows[src][1], 8192 * 6) << "rank " << src << " sends each pair once";
  }
}

TEST(MoeRouting, OwnerSplitsExpertsEvenly) {
  const auto r = moe::make_routing(moe::find_model("DiT-MoE-G"), 8, 16, {});
  EXPECT_EQ(r.experts_per_rank, 2);
  EXPECT_EQ(r.owner(0), 0);
  EXPECT_EQ(r.owner(1), 0);
  EXPECT_EQ(r.owner(15), 7);
}

TEST(MoeRouting, BadInputGetsClearErrors) {
  const auto& m = moe::find_model("Hy3");  // 192 experts
  EXPECT_THROW(moe::make_routing(m, 0, 16, {}), InvalidArgument);
  EXPECT_THROW(moe::make_routing(m, 5, 16, {}), InvalidArgument);  // 192 % 5 != 0
  EXPECT_THROW(moe::make_routing(m, 2, 0, {}), InvalidArgument);
  moe::RoutingConfig c;
  c.kind = moe::RoutingKind::skewed;
  c.zipf_s = -1;
  EXPECT_THROW(moe::make_routing(m, 2, 16, c), InvalidArgument);
  c.zipf_s = NAN;
  EXPECT_THROW(moe::make_routing(m, 2, 16, c), InvalidArgument);
  EXPECT_THROW(moe::parse_routing("zipf"), InvalidArgument);
  EXPECT_EQ(moe::parse_routing("skewed"), moe::RoutingKind::skewed);
}

TEST(MoeRouting, JsonCarriesSchemaShapeAndTokens) {
  const auto r = moe::make_routing(moe::find_model("GLM-5.2"), 2, 4, {});
  const auto j = moe::to_json(r);
  EXPECT_EQ(j["schema"], "xstage.moe.routing.v1");
  EXPECT_EQ(j["experts_per_rank"], 128);
  EXPECT_EQ(j["per_rank"].size(), 2u);
  EXPECT_EQ(j["per_rank"][1]["experts"].size(), 4u * 8);
  EXPECT_FALSE(moe::to_json(r, false).contains("per_rank"));
}
