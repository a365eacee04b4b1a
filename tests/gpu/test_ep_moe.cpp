// The unfused expert-parallel MoE layer on 2 GPUs (include/xstage/ops/ep_moe.hpp) against the
// host reference of the whole layer (ops::moe_layer_reference): balanced and skewed routing,
// uneven and empty experts, two calls per layer (epochs, counters, double-buffered counts),
// NaN-poisoned outputs, W8A8 and W4A8 (INT4, MXFP4) weights; the phase events; and a rank that
// never calls gives the other a timeout error.
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

// P ranks: real GPUs where there are enough, else virtual ranks of one GPU. Experts per rank
// go down to 1 at P = 8; "wide" with one token leaves most experts (and ranks) empty.
class EpMoeRanks : public ::testing::TestWithParam<int> {};

TEST_P(EpMoeRanks, MatchesTheHostReferenceOfTheLayer) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  run_case(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 11);
  run_case(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::balanced, 12);
  run_case(*team, moe::ModelShape{"wide", 512, 256, 16, 2, 0, 0}, 1, moe::RoutingKind::skewed, 13);  // mostly empty experts
  run_case(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 14);
  check_layer(*team, moe::ModelShape{"small", 256, 384, 2 * P, 2, 0, 0}, 24, moe::RoutingKind::balanced, 15,
              "ep moe empty ranks", unfused, ops::MoeQuant::w8a8, route_to_first_half);
}

// W4A8 weights (INT4 group-128, MXFP4): the same layer with the W4A8 grouped GEMMs, against the
// reference on the weights those kernels compute with.
TEST_P(EpMoeRanks, W4A8MatchesTheHostReferenceOfTheLayer) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  for (auto q : {ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4}) {
    run_case(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 41, q);
    run_case(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 42, q);
  }
}

// INT4 two-level weights prepacked for the register-operand grouped GEMMs (int4_rs_lut: the
// per-128 kernels w4a8rs_lut_swiglu_* and w4a8rs_lut_bf16_*): the unfused counterpart of the
// fused register-operand kernel, on the same weights and activation scales.
TEST_P(EpMoeRanks, W4A8RegisterOperandMatchesTheHostReferenceOfTheLayer) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  const auto lut = ops::MoeWeightLayout::int4_rs_lut;
  const auto q = ops::MoeQuant::w4a8_int4;
  check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 43,
              "ep moe int4 lut rs", unfused, q, {}, lut);
  check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 44,
              "ep moe int4 lut rs", unfused, q, {}, lut);
}

// Per-token activations (EpMoeRankInputs::act): x with one scale per token, the per-token
// register-operand grouped GEMMs (gate/up-interleaved Linear-1, 256-token tiles), h requantised
// to one scale per token between them; INT4 two-level and MXFP4, skewed routing, H 1408.
TEST_P(EpMoeRanks, W4A8PerTokenMatchesTheHostReferenceOfTheLayer) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  const auto tok = ops::MoeActScales::per_token;
  for (auto l : {ops::MoeWeightLayout::int4_rs_lut, ops::MoeWeightLayout::mxfp4_rs}) {
    const auto q = l == ops::MoeWeightLayout::int4_rs_lut ? ops::MoeQuant::w4a8_int4 : ops::MoeQuant::w4a8_mxfp4;
    const std::string n = l == ops::MoeWeightLayout::int4_rs_lut ? "ep moe int4 lut per-token" : "ep moe mxfp4 per-token";
    check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 45, n, unfused, q,
                {}, l, tok);
    check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 46, n,
                unfused, q, {}, l, tok);
  }
}

// The phase events (the bench's breakdown): the layer's output stays right with them recorded,
// every phase is timed, the GEMMs take time, and the phases add up to the whole call.
TEST_P(EpMoeRanks, PhaseEventsSplitTheCall) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  std::vector<ops::EpMoePhaseEvents> ev(team->local_count());
  team->run([&](int i) {
    for (auto& e : ev[i].at) ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  });
  auto with_phases = [&ev](Team& t, const ops::EpMoeConfig& cfg) -> LayerForward {
    auto layer = std::make_shared<ops::EpMoeLayer>(t, cfg);
    return [layer, &ev](int i, const ops::EpMoeRankInputs& d, cudaStream_t s) { layer->forward(i, d, s, ev[i]); };
  };
  check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 16,
              "ep moe phases", with_phases);
  team->run([&](int i) {
    const ops::EpMoePhaseTimes t = ops::ep_moe_phase_times(ev[i]);
    float whole_ms = 0;
    ASSERT_EQ(cudaEventElapsedTime(&whole_ms, ev[i].at[0], ev[i].at[5]), cudaSuccess);
    EXPECT_GT(t.l1_us, 0.0);
    EXPECT_GT(t.l2_us, 0.0);
    for (double v : {t.dispatch_us, t.combine_us, t.reduce_us}) EXPECT_GE(v, 0.0);
    EXPECT_NEAR(t.dispatch_us + t.l1_us + t.l2_us + t.combine_us + t.reduce_us, whole_ms * 1e3, 1.0);
    for (auto& e : ev[i].at) cudaEventDestroy(e);
  });
}

TEST(EpMoe, PhaseTimesOfUnrecordedEventsAreAnError) {
  XS_REQUIRE_GPUS(1);
  ops::EpMoePhaseEvents ev;
  for (auto& e : ev.at) ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  EXPECT_THROW(ops::ep_moe_phase_times(ev), Error);
  // The reported error is consumed: the next launch check must not see it (it once failed the
  // next test's symmetric-buffer allocation with this error).
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  for (auto& e : ev.at) cudaEventDestroy(e);
}

TEST_P(EpMoeRanks, AnExpertIdOutOfRangeIsAClearError) {
  XS_TEAM(team, GetParam(), 2.0);
  check_bad_expert(*team, unfused);
}

TEST_P(EpMoeRanks, ARankThatNeverCallsGivesTheOthersATimeout) {
  XS_TEAM(team, GetParam(), 1.0);
  check_rank_never_calls(*team, unfused);
}

INSTANTIATE_TEST_SUITE_P(P, EpMoeRanks, ::testing::Values(2, 4, 8));

TEST(EpMoe, BadConfigsAreClearErrors) {
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 7, 2, 8}, 2), InvalidArgument);   // 7 experts over 2 ranks
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 12, 2, 8}, 8), InvalidArgument);  // 12 experts over 8 ranks
  EXPECT_THROW(ops::validate_ep_moe({200, 256, 8, 2, 8}, 2), InvalidArgument);   // hidden
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 8, 9, 8}, 2), InvalidArgument);   // top_k > experts
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 8, 2, 0}, 2), InvalidArgument);   // tokens
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 8, 2, 8}, 0), InvalidArgument);   // world
  EXPECT_THROW(ops::validate_ep_moe({256, 256, 8, 2, 8}, 9), InvalidArgument);   // world above 8
  EXPECT_NO_THROW(ops::validate_ep_moe({256, 256, 8, 2, 8}, 1));                // one GPU: all experts local
  EXPECT_NO_THROW(ops::validate_ep_moe({256, 256, 8, 2, 8}, 8));
}

// Per-token activations need a register-operand layout; a layout that does not match the weight
// format is refused; both before the call counts, so the next call still runs.
TEST(EpMoe, ActivationAndLayoutMismatchesAreClearErrors) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  const moe::ModelShape shape{"small", 256, 256, 4, 2, 0, 0};
  const moe::Routing r = moe::make_routing(shape, 1, 8, {});
  const auto w = ops::make_moe_layer_weights(4, 256, 256, 1);
  const auto in = ops::make_moe_layer_inputs(r, 2);
  ops::EpMoeLayer layer(*team, {256, 256, 4, 2, 8});
  EP_T(cudaSetDevice(team->device(0)));
  ops::EpMoeRankInputs d = upload_rank(r, w, in, 0, 4);
  auto refused = [&](const char* what) {
    try {
      layer.forward(0, d, team->stream(0));
      ADD_FAILURE() << "no error for " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  d.act = ops::MoeActScales::per_token;  // W8A8 rows weights
  refused("per-token");
  d.act = ops::MoeActScales::per_128;
  d.w_layout = ops::MoeWeightLayout::int4_rs_lut;  // with W8A8 weights
  refused("int4_rs_lut");
  d.w_layout = ops::MoeWeightLayout::rows;
  // mxfp4_rs with per-128 activations: no grouped GEMM serves it, refused before the dispatch.
  const auto w_mx = ops::make_moe_layer_weights(4, 256, 256, 1, ops::MoeQuant::w4a8_mxfp4);
  const RsWeights rs_mx = prepack_rs(w_mx, ops::MoeWeightLayout::mxfp4_rs);
  ops::EpMoeRankInputs d_mx = upload_rank(r, w_mx, in, 0, 4, &rs_mx, ops::MoeWeightLayout::mxfp4_rs);
  std::swap(d, d_mx);
  refused("per-token activations in the unfused layer");
  std::swap(d, d_mx);
  free_rank(d_mx);
  layer.forward(0, d, team->stream(0));  // the refused calls did not count
  team->synchronize(0, "the layer's call");
  team->check_device_status(0);
  free_rank(d);
}
#endif
