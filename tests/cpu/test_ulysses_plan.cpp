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

// One slice of every warp group of every CTA, remote part: 132 x 2 x 16384 B / 2 = 2162688 B.
TEST(UlyssesPlan, ASliceThatFitsTheColdStageLeavesAsOneChunk) {
  const auto plan = model::plan_ulysses(params(373.0, 2.5e6), input());
  EXPECT_DOUBLE_EQ(plan.slice_remote_bytes, 2162688.0);
  EXPECT_FALSE(plan.drain_bound);  // 2.16 MB per 127 x 1.7 us tile is far below 373 GB/s
  EXPECT_EQ(plan.chunks_per_slice, 1);
  EXPECT_EQ(plan.chunk_vecs, 8);
  EXPECT_EQ(plan.chunk_every, 1);
  EXPECT_NE(plan.chunk_rule.find("whole slice"), std::string::npos);
  // One chunk per slice is the fused burst, once per tile: the same predicted span.
  EXPECT_DOUBLE_EQ(plan.predicted_shaped_span_us, plan.predicted_fused_span_us);
}

TEST(UlyssesPlan, ChunksFitTheColdStageAndAreSpacedByTheirDrainTime) {
  // Q_cold 600 kB: ceil(2162688 / 6e5) = 4 chunks of 2 vectors (540672 B each), which drain
  // in 540672 B / 373 GB/s = 1.4495 us, i.e. one chunk every ceil(1.4495 / 0.5) = 3 steps,
  // rounded up to the kernel's power-of-two spacing: 4.
  auto in = input();
  in.step_us = 0.5;
  const auto plan = model::plan_ulysses(params(373.0, 6e5), in);
  EXPECT_EQ(plan.chunks_per_slice, 4);
  EXPECT_EQ(plan.chunk_vecs, 2);
  EXPECT_DOUBLE_EQ(plan.chunk_remote_bytes, 540672.0);
  EXPECT_NEAR(plan.drain_us_per_chunk, 540672.0 / 373e3, 1e-9);
  EXPECT_EQ(plan.chunk_every, 4);
  EXPECT_NE(plan.chunk_rule.find("Q_cold"), std::string::npos);
}

TEST(UlyssesPlan, SpacingRoundsDownWhenTheRoundedUpSpacingNoLongerFitsTheTile) {
  // Same 4 chunks draining in 1.4495 us each, but steps of 0.25 us: 6 steps apart by the
  // drain, 8 as a power of two, and 4 chunks x 8 > 28 steps: the largest power of two that
  // fits 28 / 4 = 7 steps, 4, is taken.
  auto in = input();
  in.step_us = 0.25;
  in.steps_per_tile = 28;
  const auto plan = model::plan_ulysses(params(373.0, 6e5), in);
  EXPECT_EQ(plan.chunks_per_slice, 4);
  EXPECT_EQ(plan.chunk_every, 4);
  in.steps_per_tile = 40;  // 40 / 4 = 10 >= 8: rounded up
  EXPECT_EQ(model::plan_ulysses(params(373.0, 6e5), in).chunk_every, 8);
}

TEST(UlyssesPlan, DrainBoundSlicesAreSpreadEvenly) {
  // 2162688 B per tile of 3 steps x 0.01 us needs 72 TB/s: no chunking avoids backpressure.
  auto in = input();
  in.steps_per_tile = 3;
  in.step_us = 0.01;
  const auto plan = model::plan_ulysses(params(373.0, 2.5e6), in);
  EXPECT_TRUE(plan.drain_bound);
  EXPECT_EQ(plan.chunks_per_slice, 3);  // one chunk per step: 3, 3, 2 vectors
  EXPECT_EQ(plan.chunk_vecs, 3);
  EXPECT_EQ(plan.chunk_every, 1);
  EXPECT_NE(plan.chunk_rule.find("drain-bound"), std::string::npos);
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
  const auto p = params(373.0, 6e5);
  auto in = input();
  in.step_us = 0.5;
  const auto plan = model::plan_ulysses(p, in);
  const auto burst = model::predict(p, 132, 16384, 127 * 0.5);
  EXPECT_DOUBLE_EQ(plan.predicted_fused_span_us, burst.issue_us);
  EXPECT_DOUBLE_EQ(plan.predicted_fused_cold_span_us, burst.cold_issue_us);
  const auto chunk = model::predict(p, 132, 2 * 2048, 3 * 0.5);
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
