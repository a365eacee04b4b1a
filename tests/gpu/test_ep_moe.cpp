// The unfused expert-parallel MoE layer on 2 GPUs (include/xstage/ops/ep_moe.hpp) against the
// host reference of the whole layer (ops::moe_layer_reference): balanced and skewed routing,
// uneven and empty experts, two calls per layer (epochs, counters, double-buffered counts),
// NaN-poisoned outputs, W8A8 and W4A8 (INT4, MXFP4) weights; and a rank that never calls gives
// the other a timeout error.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/moe_layer_case.hpp"
#include "xstage/error.hpp"

using namespace xstage;
using namespace xstage::moe_test;

namespace {

LayerForward unfused(Team& t, const ops::EpMoeConfig& cfg) {
  auto layer = std::make_shared<ops::EpMoeLayer>(t, cfg);
  return [layer](int i, const ops::EpMoeRankInputs& d, cudaStream_t s) { layer->forward(i, d, s); };
}

void run_case(Team& team, const moe::ModelShape& shape, int tokens, moe::RoutingKind kind, uint64_t seed,
              ops::MoeQuant quant = ops::MoeQuant::w8a8) {
  const std::string label = quant == ops::MoeQuant::w8a8 ? "ep moe" : quant == ops::MoeQuant::w4a8_int4 ? "ep moe int4" : "ep moe mxfp4";
  check_layer(team, shape, tokens, kind, seed, label, unfused, quant);
}

}  // namespace

TEST(EpMoe, MatchesTheHostReferenceOfTheLayer) {
  XS_REQUIRE_GPUS(2);
  auto team = two_gpu_team(10);
  run_case(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 11);
  run_case(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::balanced, 12);
  run_case(*team, moe::ModelShape{"wide", 512, 256, 16, 2, 0, 0}, 1, moe::RoutingKind::skewed, 13);  // mostly empty experts
  run_case(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 70, moe::RoutingKind::balanced, 14);
}

// W4A8 weights (INT4 group-128, MXFP4): the same layer with the W4A8 grouped GEMMs, against the
// reference on the weights those kernels compute with.
TEST(EpMoe, W4A8MatchesTheHostReferenceOfTheLayer) {
  XS_REQUIRE_GPUS(2);
  auto team = two_gpu_team(10);
  for (auto q : {ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4}) {
    run_case(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 41, q);
    run_case(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 70, moe::RoutingKind::balanced, 42, q);
  }
}

TEST(EpMoe, BadConfigsAreClearErrors) {
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 7, 2, 8}, 2), InvalidArgument);   // 7 experts over 2 ranks
  EXPECT_THROW(ops::validate_ep_moe({200, 256, 8, 2, 8}, 2), InvalidArgument);   // hidden
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 8, 9, 8}, 2), InvalidArgument);   // top_k > experts
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 8, 2, 0}, 2), InvalidArgument);   // tokens
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 8, 2, 8}, 0), InvalidArgument);   // world
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 8, 2, 8}, 9), InvalidArgument);   // world above 8
  EXPECT_NO_THROW(ops::validate_ep_moe({256, 256, 8, 2, 8}, 1));                // one GPU: all experts local
  EXPECT_NO_THROW(ops::validate_ep_moe({256, 256, 8, 2, 8}, 2));
}

TEST(EpMoe, AnExpertIdOutOfRangeIsAClearError) {
  XS_REQUIRE_GPUS(2);
  check_bad_expert(unfused);
}

TEST(EpMoe, ARankThatNeverCallsGivesTheOtherATimeout) {
  XS_REQUIRE_GPUS(2);
  check_rank_never_calls(unfused);
}
#endif
