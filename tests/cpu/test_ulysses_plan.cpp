// Ulysses store shaping (model::plan_ulysses) and operator validation, on the CPU.
#include <gtest/gtest.h>

#include <string>

#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/ulysses_plan.hpp"
#ifdef XSTAGE_HAVE_ULYSSES
#include "xstage/ops/ulysses.hpp"
#endif

using namespace xstage;

namespace {

// Hand-made parameters so every number below can be checked by hand.
model::Params params(double r_agg_gbps, double q_cold_bytes) {
  model::Params p;
  p.t0_table = {{1024, 0.5}, {65536, 2.0}};
  p.r_table = {{16, 160.0}, {132, 370.0}};
  p.r_agg_gbps = r_agg_gbps;
  p.delta_table = {{16, 0.2}, {132, 0.5}};
  p.q_table = {{16, 4e6, true}, {132, 32e6, true}};
  p.q_cold_table = {{16, q_cold_bytes}, {132, q_cold_bytes}};
  model::check_params(p);
  return p;
}

model::UlyssesPlanInput input() {
  model::UlyssesPlanInput in;
  in.world = 2;
  in.ctas = 132;
  in.consumer_wgs = 2;
  in.slice_bytes = 64 * 128 * 2;  // 16 KiB: 8 vectors per thread
  in.wg_bytes_per_vec = 128 * 16;
  in.steps_per_tile = 127;
  in.step_us = 1.7;
  in.attention_us = 2500;
  in.remote_bytes = 25'000'000;
  in.sm_count = 132;
  return in;
}

}  // namespace

TEST(UlyssesPlan, ChunkIsTheLargestThatDrainsWithinAStep) {
  // Per vector and step: 132 CTAs x 2 WGs x 2048 B x 1/2 remote = 270336 B.
  // Drain budget 373 GB/s x 1.7 us = 634100 B -> 2 vectors (540672 B); 3 would be 811008 B.
  const auto plan = model::plan_ulysses(params(373.0, 2.5e6), input());
  EXPECT_EQ(plan.chunk_vecs, 2);
  EXPECT_EQ(plan.chunks_per_slice, 4);
  EXPECT_NEAR(plan.drain_budget_bytes, 634100.0, 1.0);
  EXPECT_DOUBLE_EQ(plan.step_remote_bytes, 2 * 270336.0);
  EXPECT_NE(plan.chunk_rule.find("drain"), std::string::npos);
}

TEST(UlyssesPlan, ChunkGrowsWithTheStepAndIsCappedByTheColdStage) {
  auto in = input();
  in.step_us = 3.4;  // twice the time: 4 vectors drain
  EXPECT_EQ(model::plan_ulysses(params(373.0, 2.5e6), in).chunk_vecs, 4);
  // A cold stage of 600 kB allows only 2 vectors (540672 B) whatever the drain allows.
  in.step_us = 100;
  const auto plan = model::plan_ulysses(params(373.0, 6e5), in);
  EXPECT_EQ(plan.chunk_vecs, 2);
  EXPECT_NE(plan.chunk_rule.find("Q_cold"), std::string::npos);
}

TEST(UlyssesPlan, AtLeastOneVectorAndASliceLeavesWithinTheNextTile) {
  auto in = input();
  in.step_us = 0.01;  // budget below one vector
  auto plan = model::plan_ulysses(params(373.0, 2.5e6), in);
  EXPECT_EQ(plan.chunk_vecs, 1);
  EXPECT_EQ(plan.chunks_per_slice, 8);
  in.steps_per_tile = 3;  // 8 vectors over 3 steps need 3 per step
  plan = model::plan_ulysses(params(373.0, 2.5e6), in);
  EXPECT_EQ(plan.chunk_vecs, 3);
  EXPECT_EQ(plan.chunks_per_slice, 3);
  EXPECT_NE(plan.chunk_rule.find("tile"), std::string::npos);
  in.steps_per_tile = 0;  // nothing to spread over: the whole slice at most
  in.step_us = 1e6;
  EXPECT_EQ(model::plan_ulysses(params(373.0, 1e12), in).chunk_vecs, 8);
}

TEST(UlyssesPlan, CommCtasFollowTheNeededRate) {
  auto in = input();
  // 25 MB in 2500 us = 10 GB/s; per CTA at K=16: 160/16 = 10 GB/s -> 2 x 10 / 10 = 2 CTAs.
  auto plan = model::plan_ulysses(params(373.0, 2.5e6), in);
  EXPECT_NEAR(plan.comm_needed_gbps, 10.0, 1e-9);
  EXPECT_EQ(plan.comm_ctas, 2);
  in.attention_us = 250;  // 100 GB/s -> 20 CTAs, capped at 132/8 = 16
  plan = model::plan_ulysses(params(373.0, 2.5e6), in);
  EXPECT_EQ(plan.comm_ctas, 16);
}

TEST(UlyssesPlan, PredictedSpansComeFromTheModel) {
  const auto p = params(373.0, 2.5e6);
  const auto plan = model::plan_ulysses(p, input());
  const auto burst = model::predict(p, 132, 16384, 127 * 1.7);
  EXPECT_DOUBLE_EQ(plan.predicted_fused_span_us, burst.issue_us);
  EXPECT_DOUBLE_EQ(plan.predicted_fused_cold_span_us, burst.cold_issue_us);
  const auto chunk = model::predict(p, 132, 2 * 2048, 1.7);
  EXPECT_DOUBLE_EQ(plan.predicted_shaped_span_us, 4 * chunk.issue_us);
}

TEST(UlyssesPlan, RejectsBadInputs) {
  const auto p = params(373.0, 2.5e6);
  auto expect_bad = [&](auto mutate, const char* what) {
    auto in = input();
    mutate(in);
    try {
      model::plan_ulysses(p, in);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_bad([](auto& in) { in.world = 1; }, "world");
  expect_bad([](auto& in) { in.ctas = 0; }, "ctas");
  expect_bad([](auto& in) { in.slice_bytes = 1000; }, "slice_bytes");
  expect_bad([](auto& in) { in.step_us = 0; }, "step_us");
  expect_bad([](auto& in) { in.attention_us = -1; }, "attention_us");
}

#ifdef XSTAGE_HAVE_ULYSSES
TEST(UlyssesValidation, ClearErrorsForBadShapes) {
  auto msg = [](ops::UlyssesConfig c, int world) -> std::string {
    try {
      ops::validate_ulysses(c, world);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  ops::UlyssesConfig ok;
  ok.seq_len = 4096;
  ok.heads = 24;
  EXPECT_EQ(msg(ok, 2), "");
  EXPECT_NE(msg(ok, 1).find("needs 2..8 ranks"), std::string::npos);
  EXPECT_NE(msg(ok, 16).find("needs 2..8 ranks"), std::string::npos);
  auto c = ok;
  c.heads = 25;
  EXPECT_NE(msg(c, 2).find("cannot be split over 2 ranks"), std::string::npos);
  c = ok;
  c.seq_len = 4097;
  EXPECT_NE(msg(c, 2).find("uneven shards are not supported"), std::string::npos);
  c = ok;
  c.head_dim = 96;
  EXPECT_NE(msg(c, 2).find("head dim 96"), std::string::npos);
  c = ok;
  c.batch = 0;
  EXPECT_NE(msg(c, 2).find("sizes must be positive"), std::string::npos);
  c = ok;
  c.softmax_scale = -1.f;
  EXPECT_NE(msg(c, 2).find("softmax scale"), std::string::npos);
  EXPECT_EQ(ops::parse_variant("fused-shaped"), ops::UlyssesVariant::fused_shaped);
  EXPECT_THROW(ops::parse_variant("fast"), InvalidArgument);
}
#endif
