// The Mega-MoE persistent kernel on 2 GPUs (include/xstage/ops/mega_moe.hpp), both tile
// orders, against the host reference of the whole layer: balanced and skewed routing, uneven
// and empty experts, a hidden size that leaves half-width Linear-2 tiles (1408), many waves,
// two calls per layer (parity-buffered scratch, monotonic counters); the span recording and the
// local-store control; a bad expert id and a rank that never calls end in clear errors.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/moe_layer_case.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/ops/mega_moe.hpp"

using namespace xstage;
using namespace xstage::moe_test;

namespace {

model::Params preset() { return model::load_params(std::string(XSTAGE_SOURCE_DIR) + "/presets/h200-nvlink.json"); }

LayerFactory mega(moe::MoeSchedule which, int ctas = 0, bool dynamic_claim = true) {
  return [which, ctas, dynamic_claim](Team& t, const ops::EpMoeConfig& cfg) {
    auto layer = std::make_shared<ops::MegaMoeLayer>(t, cfg, preset(), 7.0, ctas);
    ops::MegaMoeOptions opt;
    opt.schedule = which;
    opt.dynamic_claim = dynamic_claim;
    return LayerForward([layer, opt](int i, const ops::EpMoeRankInputs& d, cudaStream_t s) { layer->forward(i, d, s, opt); });
  };
}

const char* name(moe::MoeSchedule s) { return s == moe::MoeSchedule::expert_wave ? "mega expert-wave" : "mega interleaved"; }

}  // namespace

// P ranks: real GPUs where there are enough, else virtual ranks of one GPU (each on its own
// SM partition, so the cooperative grid is the partition's SMs).
class MegaMoeRanks : public ::testing::TestWithParam<int> {};

TEST_P(MegaMoeRanks, MatchesTheHostReferenceOfTheLayer) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
    check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 11, name(which), mega(which));
    check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::balanced, 12, name(which), mega(which));
    check_layer(*team, moe::ModelShape{"wide", 512, 256, 16, 2, 0, 0}, 1, moe::RoutingKind::skewed, 13, name(which), mega(which));
    check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 14, name(which), mega(which));
    // More tiles than CTAs: several waves, Linear-2 tiles waiting on other CTAs' Linear-1 tiles.
    check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 150, moe::RoutingKind::skewed, 15, name(which), mega(which));
    // The static tile split (c, c + K, ...) instead of dynamic claiming.
    check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 150, moe::RoutingKind::skewed, 16,
                std::string(name(which)) + " static", mega(which, 0, false));
    check_layer(*team, moe::ModelShape{"small", 256, 384, 2 * P, 2, 0, 0}, 24, moe::RoutingKind::balanced, 17,
                std::string(name(which)) + " empty ranks", mega(which), ops::MoeQuant::w8a8, route_to_first_half);
  }
}

TEST_P(MegaMoeRanks, AnExpertIdOutOfRangeIsAClearError) {
  XS_TEAM(team, GetParam(), 2.0);
  check_bad_expert(*team, mega(moe::MoeSchedule::interleaved));
}

TEST_P(MegaMoeRanks, ARankThatNeverCallsGivesTheOthersATimeout) {
  XS_TEAM(team, GetParam(), 1.0);
  check_rank_never_calls(*team, mega(moe::MoeSchedule::expert_wave));
}

INSTANTIATE_TEST_SUITE_P(P, MegaMoeRanks, ::testing::Values(2, 4, 8));

// One rank: every expert local, dispatch and combine inside one GPU; the same kernel and checks.
TEST(MegaMoe, OneGpuMatchesTheHostReferenceOfTheLayer) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
    check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 21, name(which), mega(which));
    check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 140, moe::RoutingKind::balanced, 22, name(which), mega(which));
    check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 300, moe::RoutingKind::skewed, 23, name(which), mega(which));
  }
}

// Few CTAs: many tiles per CTA, Linear-2 tiles waiting on the same CTA's earlier Linear-1 tiles.
TEST(MegaMoe, OneGpuFewCtas) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  for (int ctas : {1, 3})
    for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
      const std::string label = std::string(name(which)) + " ctas " + std::to_string(ctas);
      check_layer(*team, moe::ModelShape{"one-expert", 256, 256, 1, 1, 0, 0}, 50, moe::RoutingKind::balanced, 31, label,
                  mega(which, ctas));
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 21, label, mega(which, ctas));
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 24,
                  label + " static", mega(which, ctas, false));
    }
}

TEST(MegaMoe, RecordsOneSpanPerLinear2PieceAndRunsTheLocalControl) {
  XS_TEAM(team, 2, 10.0);
  const moe::ModelShape shape{"dit-like", 1408, 640, 4, 2, 0, 0};
  const int tokens = 300;
  const moe::Routing r = moe::make_routing(shape, 2, tokens, {});
  const auto w = ops::make_moe_layer_weights(4, 1408, 640, 3);
  const auto in = ops::make_moe_layer_inputs(r, 4);
  ops::MegaMoeLayer layer(*team, {1408, 640, 4, 2, tokens}, preset());
  const auto stats = moe::routing_stats(r);
  team->run([&](int i) {
    const int rank = team->rank(i);
    const ops::EpMoeRankInputs d = upload_rank(r, w, in, rank, 2);
    // Pieces: 64-row blocks of each local expert x 1408 / 128 = 11 column pieces; tiles per
    // block: 640 / 128 = 5 Linear-1 (128 h channels = 256 gate/up columns), ceil(1408 / 256) = 6 Linear-2.
    size_t blocks = 0;
    for (int le = 0; le < 2; ++le) blocks += size_t((stats.expert_rows[rank * 2 + le] + 63) / 64);
    const size_t pieces = blocks * 11;
    for (bool control : {false, true}) {
      ops::MegaMoeOptions opt;
      opt.record_spans = true;
      opt.control_local = control;
      layer.forward(i, d, team->stream(i), opt);
      team->synchronize(i, "the Mega-MoE call");
      team->check_device_status(i);
      const ops::MegaMoeSpans sp = layer.last_spans(i);
      EXPECT_EQ(sp.us.size(), pieces) << "control " << control;
      EXPECT_GT(sp.sm_ghz, 0.5);
      EXPECT_LT(sp.sm_ghz, 3.0);
      EXPECT_GT(sp.kernel_us, 0.0);
      for (double u : sp.us) EXPECT_TRUE(u > 0 && u < sp.kernel_us) << u;
      // The tile trace: every tile once, plausible times.
      EXPECT_EQ(sp.tiles.l1.tiles, static_cast<long long>(blocks * 5)) << "control " << control;
      EXPECT_EQ(sp.tiles.l2.tiles, static_cast<long long>(blocks * 6)) << "control " << control;
      EXPECT_GT(sp.tiles.l1.mainloop_us, 0.0);
      EXPECT_GT(sp.tiles.l2.epilogue_us, 0.0);
      EXPECT_GE(sp.tiles.l2.input_wait_us, 0.0);
      EXPECT_GT(sp.tiles.busy_share, 0.0);
      EXPECT_LE(sp.tiles.busy_share, 1.0);
      EXPECT_LE(sp.tiles.last_tile_end_us_max, sp.kernel_us + 1.0);
      // Linear-1 epilogue phases are ordered: hand-over <= staged <= the whole epilogue.
      EXPECT_GE(sp.tiles.l1.handover_us, 0.0);
      EXPECT_LE(sp.tiles.l1.handover_us, sp.tiles.l1.staged_us);
      EXPECT_LE(sp.tiles.l1.staged_us, sp.tiles.l1.epilogue_us);
      EXPECT_LE(sp.tiles.l1.store_tail_us, sp.tiles.l1.epilogue_us);
    }
    free_rank(d);
  });
}

TEST(MegaMoe, BadConfigsAreClearErrors) {
  XS_TEAM(team, 2, 2.0);
  EXPECT_THROW(ops::MegaMoeLayer(*team, {256, 256, 7, 2, 8}, preset()), InvalidArgument);   // 7 experts over 2 ranks
  EXPECT_THROW(ops::MegaMoeLayer(*team, {200, 256, 8, 2, 8}, preset()), InvalidArgument);   // hidden
  EXPECT_THROW(ops::MegaMoeLayer(*team, {256, 200, 8, 2, 8}, preset()), InvalidArgument);   // intermediate
}

// The fused kernel is W8A8 only: W4A8 weights are refused before anything is launched.
TEST(MegaMoe, W4A8WeightsAreAClearError) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  ops::MegaMoeLayer layer(*team, {256, 256, 4, 2, 8}, preset());
  ops::EpMoeRankInputs d;
  d.quant = ops::MoeQuant::w4a8_int4;
  EXPECT_THROW(layer.forward(0, d, team->stream(0)), InvalidArgument);
}


#endif
