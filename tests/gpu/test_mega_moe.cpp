// The Mega-MoE persistent kernel on 2 GPUs (include/xstage/ops/mega_moe.hpp), both tile
// orders, against the host reference of the whole layer: balanced and skewed routing, uneven
// and empty experts, a hidden size that leaves half-width Linear-2 tiles (1408), many waves,
// two calls per layer (parity-buffered scratch, monotonic counters; also with the other tile
// configuration in the second call); the span recording and the
// local-store control; a bad expert id and a rank that never calls end in clear errors. Every
// W8A8 case runs with both tile configurations (xstage/mega_tile.hpp: 64 x 256 and 128 x 256);
// W4A8 weights (INT4, MXFP4) with the 64 x 256 tile, their only one; per-token W4A8 activations
// (builds with XSTAGE_MEGA_W4A8_TOK) with the 256 x 128 per-token tile, theirs.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>
#include <utility>

#include "gpu/moe_layer_case.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/ops/mega_moe.hpp"

using namespace xstage;
using namespace xstage::moe_test;

namespace {

// The source tree: $XSTAGE_SOURCE_DIR when set (prebuilt binaries run from another checkout,
// scripts/megamoe-ab), else the one this binary was built from.
model::Params preset() {
  const char* env = std::getenv("XSTAGE_SOURCE_DIR");
  const std::string root = env != nullptr && *env != 0 ? env : XSTAGE_SOURCE_DIR;
  return model::load_params(root + "/presets/h200-nvlink.json");
}

// The layers of the tests hold the per-token kernel's scratch wherever the build has that kernel.
bool tok_scratch() { return ops::MegaMoeLayer::per_token_w4a8_built(); }

LayerFactory mega(moe::MoeSchedule which, moe::MegaTile tile, int ctas = 0, bool dynamic_claim = true) {
  return [which, tile, ctas, dynamic_claim](Team& t, const ops::EpMoeConfig& cfg) {
    auto layer = std::make_shared<ops::MegaMoeLayer>(t, cfg, preset(), 7.0, ctas, tok_scratch());
    ops::MegaMoeOptions opt;
    opt.schedule = which;
    opt.dynamic_claim = dynamic_claim;
    opt.tile = tile;
    return LayerForward([layer, opt](int i, const ops::EpMoeRankInputs& d, cudaStream_t s) { layer->forward(i, d, s, opt); });
  };
}

// One layer whose calls alternate between the two tile configurations, starting with `first`:
// the layer's scratch and counters (parity halves, the rows flag) must stay consistent whichever
// kernel ran the call before.
LayerFactory mega_alternating(moe::MoeSchedule which, moe::MegaTile first) {
  return [which, first](Team& t, const ops::EpMoeConfig& cfg) {
    auto layer = std::make_shared<ops::MegaMoeLayer>(t, cfg, preset(), 7.0, 0);
    auto calls = std::make_shared<std::vector<int>>(t.local_count(), 0);  // per rank: one thread each
    return LayerForward([layer, calls, which, first](int i, const ops::EpMoeRankInputs& d, cudaStream_t s) {
      ops::MegaMoeOptions opt;
      opt.schedule = which;
      const bool other = ((*calls)[i]++ & 1) != 0;
      opt.tile = other ? (first == moe::MegaTile::m64n256 ? moe::MegaTile::m128n256 : moe::MegaTile::m64n256) : first;
      layer->forward(i, d, s, opt);
    });
  };
}

// Every checked call preceded by a call whose router weights are 4096 times larger (so |h| and the
// per-token maxima are too): the per-token kernel's maxima must not leak into the next call (the
// quantisation resets them). A leaked maximum makes that call's h scale 4096 times too coarse:
// everything below ~14 % of a row's largest value falls into e4m3's subnormals or to zero, an
// error of order 1 (a smaller factor would hide it: e4m3's relative precision is the same over
// its normal range).
LayerFactory mega_after_larger_h(moe::MoeSchedule which, int ctas = 0, moe::MegaTile tile = moe::MegaTile::automatic) {
  return [which, ctas, tile](Team& t, const ops::EpMoeConfig& cfg) {
    auto layer = std::make_shared<ops::MegaMoeLayer>(t, cfg, preset(), 7.0, ctas, tok_scratch());
    const size_t n = size_t(cfg.tokens) * cfg.top_k;
    Team* team = &t;
    return LayerForward([layer, which, n, team, tile](int i, const ops::EpMoeRankInputs& d, cudaStream_t s) {
      ops::MegaMoeOptions opt;
      opt.schedule = which;
      opt.tile = tile;
      std::vector<float> wts(n);
      EP_T(cudaMemcpy(wts.data(), d.topk_weights, n * 4, cudaMemcpyDeviceToHost));
      for (float& w : wts) w *= 4096.f;
      ops::EpMoeRankInputs big = d;
      big.topk_weights = upload(wts);
      layer->forward(i, big, s, opt);
      layer->forward(i, d, s, opt);
      team->synchronize(i, "the calls around larger router weights");  // bounded, unlike a bare stream sync
      cudaFree(const_cast<float*>(big.topk_weights));
    });
  };
}

// Each checked per-token call preceded by a per-token call and a W8A8 call (zero weights, unit
// scales: another kernel, whose output is not checked) on the same layer: the per-token kernel's
// quantisation claims must start at zero whichever kernel ran the call before (a claim counter
// zeroed "for the next call" by the per-token kernel alone would be stale after the W8A8 call:
// every chunk taken, no block quantised, the Linear-2 tiles' waits timing out).
LayerFactory mega_after_other_kernel(moe::MoeSchedule which, moe::MegaTile tile = moe::MegaTile::automatic) {
  return [which, tile](Team& t, const ops::EpMoeConfig& cfg) {
    auto layer = std::make_shared<ops::MegaMoeLayer>(t, cfg, preset(), 7.0, 0, tok_scratch());
    Team* team = &t;
    const int epr = cfg.experts / t.world_size();
    return LayerForward([layer, which, team, cfg, epr, tile](int i, const ops::EpMoeRankInputs& d, cudaStream_t s) {
      ops::MegaMoeOptions opt;
      opt.schedule = which;
      opt.tile = tile;
      const size_t H = cfg.hidden, I = cfg.intermediate;
      ops::EpMoeRankInputs w8 = d;
      w8.quant = ops::MoeQuant::w8a8;
      w8.w_layout = ops::MoeWeightLayout::rows;
      w8.act = ops::MoeActScales::per_128;
      w8.x_scales = upload(std::vector<float>(H / 128 * size_t(cfg.tokens), 1.f));
      w8.w1 = upload(std::vector<uint8_t>(size_t(epr) * 2 * I * H, 0));
      w8.w2 = upload(std::vector<uint8_t>(size_t(epr) * H * I, 0));
      w8.w1_scales = upload(std::vector<float>(size_t(epr) * (2 * I / 128) * (H / 128), 1.f));
      w8.w2_scales = upload(std::vector<float>(size_t(epr) * (H / 128) * (I / 128), 1.f));
      w8.w1_e8m0 = w8.w2_e8m0 = nullptr;
      layer->forward(i, d, s, opt);
      layer->forward(i, w8, s, ops::MegaMoeOptions{});
      layer->forward(i, d, s, opt);
      team->synchronize(i, "the calls around a W8A8 call");
      for (const void* p : {static_cast<const void*>(w8.x_scales), w8.w1, w8.w2, static_cast<const void*>(w8.w1_scales),
                            static_cast<const void*>(w8.w2_scales)})
        cudaFree(const_cast<void*>(p));
    });
  };
}

std::string name(moe::MoeSchedule s, moe::MegaTile tile) {
  return std::string(s == moe::MoeSchedule::expert_wave ? "mega expert-wave " : "mega interleaved ") +
         moe::mega_tile_name(tile);
}

// The layer (ctas CTAs, per-token scratch) called with opt, interleaved, on `tile`.
LayerFactory mega_interleaved(moe::MegaTile tile, int ctas, ops::MegaMoeOptions opt) {
  opt.schedule = moe::MoeSchedule::interleaved;
  opt.tile = tile;
  return [ctas, opt](Team& t, const ops::EpMoeConfig& cfg) {
    auto layer = std::make_shared<ops::MegaMoeLayer>(t, cfg, preset(), 7.0, ctas, tok_scratch());
    return LayerForward([layer, opt](int i, const ops::EpMoeRankInputs& d, cudaStream_t s) { layer->forward(i, d, s, opt); });
  };
}

// Interleaved with lead 0 (each block's Linear-2 tiles right after its inputs, so the plain order's
// end holds few of them) and tail_l2 Linear-2 tiles kept for the end (MegaMoeOptions::tail_l2_tiles):
// the tail blocks' tiles move.
LayerFactory mega_tail(moe::MegaTile tile, int ctas, int tail_l2) {
  ops::MegaMoeOptions opt;
  opt.lead_tiles = 0;
  opt.tail_l2_tiles = tail_l2;
  return mega_interleaved(tile, ctas, opt);
}

// Interleaved with `l1_per_l2` Linear-1 tiles between Linear-2 tiles (MegaMoeOptions::l1_per_l2).
LayerFactory mega_mix(moe::MegaTile tile, int ctas, int l1_per_l2) {
  ops::MegaMoeOptions opt;
  opt.l1_per_l2 = l1_per_l2;
  return mega_interleaved(tile, ctas, opt);
}

// Every (token, choice) row to expert 0 (top-1 shapes: no duplicate expert per token).
void route_all_to_expert0(moe::Routing& r) {
  for (auto& rr : r.per_rank)
    for (auto& e : rr.experts) e = 0;
}

constexpr moe::MegaTile kTiles[] = {moe::MegaTile::m64n256, moe::MegaTile::m128n256};
constexpr ops::MoeActScales kPerToken = ops::MoeActScales::per_token;

}  // namespace

// P ranks: real GPUs where there are enough, else virtual ranks of one GPU (each on its own
// SM partition, so the cooperative grid is the partition's SMs).
// Parameters: ranks P and the tile configuration.
class MegaMoeRanks : public ::testing::TestWithParam<std::tuple<int, moe::MegaTile>> {};

TEST_P(MegaMoeRanks, MatchesTheHostReferenceOfTheLayer) {
  const int P = std::get<0>(GetParam());
  const moe::MegaTile tile = std::get<1>(GetParam());
  XS_TEAM(team, P, 10.0);
  for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
    const std::string n = name(which, tile);
    check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 11, n, mega(which, tile));
    check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::balanced, 12, n, mega(which, tile));
    check_layer(*team, moe::ModelShape{"wide", 512, 256, 16, 2, 0, 0}, 1, moe::RoutingKind::skewed, 13, n, mega(which, tile));
    check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 14, n, mega(which, tile));
    // More tiles than CTAs: several waves, Linear-2 tiles waiting on other CTAs' Linear-1 tiles.
    check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 150, moe::RoutingKind::skewed, 15, n, mega(which, tile));
    // The static tile split (c, c + K, ...) instead of dynamic claiming.
    check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 150, moe::RoutingKind::skewed, 16, n + " static",
                mega(which, tile, 0, false));
    check_layer(*team, moe::ModelShape{"small", 256, 384, 2 * P, 2, 0, 0}, 24, moe::RoutingKind::balanced, 17,
                n + " empty ranks", mega(which, tile), ops::MoeQuant::w8a8, route_to_first_half);
    // The second call runs the other tile configuration on the same layer.
    check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 18,
                n + " then the other tile", mega_alternating(which, tile));
  }
  // The end of the list at lead 0 (MegaMoeOptions::tail_l2_tiles): the plain list on a shape whose
  // plan keeps no tail, and the plan's one Linear-2 tile per CTA where Linear-2 tiles are the
  // longer (intermediate > hidden).
  check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 150, moe::RoutingKind::skewed, 19,
              name(moe::MoeSchedule::interleaved, tile) + " no tail", mega_tail(tile, 0, 0));
  check_layer(*team, moe::ModelShape{"long-l2", 256, 1024, 32, 4, 0, 0}, 150, moe::RoutingKind::skewed, 20,
              name(moe::MoeSchedule::interleaved, tile) + " plan's tail", mega_tail(tile, 0, -1));
}

TEST_P(MegaMoeRanks, AnExpertIdOutOfRangeIsAClearError) {
  XS_TEAM(team, std::get<0>(GetParam()), 2.0);
  check_bad_expert(*team, mega(moe::MoeSchedule::interleaved, std::get<1>(GetParam())));
}

TEST_P(MegaMoeRanks, ARankThatNeverCallsGivesTheOthersATimeout) {
  XS_TEAM(team, std::get<0>(GetParam()), 1.0);
  check_rank_never_calls(*team, mega(moe::MoeSchedule::expert_wave, std::get<1>(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(P, MegaMoeRanks, ::testing::Combine(::testing::Values(2, 4, 8), ::testing::ValuesIn(kTiles)),
                         [](const ::testing::TestParamInfo<std::tuple<int, moe::MegaTile>>& i) {
                           return std::to_string(std::get<0>(i.param)) + "_" + moe::mega_tile_name(std::get<1>(i.param));
                         });

// One rank: every expert local, dispatch and combine inside one GPU; the same kernel and checks.
TEST(MegaMoe, OneGpuMatchesTheHostReferenceOfTheLayer) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  for (auto tile : kTiles)
    for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
      const std::string n = name(which, tile);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 21, n, mega(which, tile));
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 140, moe::RoutingKind::balanced, 22, n,
                  mega(which, tile));
      check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 300, moe::RoutingKind::skewed, 23, n, mega(which, tile));
      // One expert takes every row, the others are empty: 300 rows = two full 128-row blocks and
      // one of 44 rows, whose second 64-row half is empty (its Linear-1 pieces must still count,
      // else the block's Linear-2 tiles wait until the timeout).
      check_layer(*team, moe::ModelShape{"hot", 512, 256, 8, 1, 0, 0}, 300, moe::RoutingKind::balanced, 25, n + " one expert",
                  mega(which, tile), ops::MoeQuant::w8a8, route_all_to_expert0);
      check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 300, moe::RoutingKind::skewed, 26,
                  n + " then the other tile", mega_alternating(which, tile));
    }
}

// Few CTAs: many tiles per CTA, Linear-2 tiles waiting on the same CTA's earlier Linear-1 tiles.
TEST(MegaMoe, OneGpuFewCtas) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  for (auto tile : kTiles)
    for (int ctas : {1, 3})
      for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
        const std::string label = name(which, tile) + " ctas " + std::to_string(ctas);
        check_layer(*team, moe::ModelShape{"one-expert", 256, 256, 1, 1, 0, 0}, 50, moe::RoutingKind::balanced, 31, label,
                    mega(which, tile, ctas));
        check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 21, label,
                    mega(which, tile, ctas));
        check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 24,
                    label + " static", mega(which, tile, ctas, false));
      }
}

TEST(MegaMoe, RecordsOneSpanPerLinear2PieceAndRunsTheLocalControl) {
  XS_TEAM(team, 2, 10.0);
  const moe::ModelShape shape{"dit-like", 1408, 640, 4, 2, 0, 0};
  const int tokens = 300;
  const moe::Routing r = moe::make_routing(shape, 2, tokens, {});
  const auto w = ops::make_moe_layer_weights(4, 1408, 640, 3);
  const auto in = ops::make_moe_layer_inputs(r, 4);
  // The register-operand W4A8 kernel too, where this build has it (64 x 256 blocks), and the
  // per-token kernel (256-row blocks; W1 gate/up-interleaved, one x scale per token).
  const bool rs_built = ops::MegaMoeLayer::register_operand_w4a8_built();
  const bool tok_built = ops::MegaMoeLayer::per_token_w4a8_built();
  const auto w_rs = ops::make_moe_layer_weights(4, 1408, 640, 3, ops::MoeQuant::w4a8_int4, true);
  const RsWeights rs = prepack_rs(w_rs, ops::MoeWeightLayout::int4_rs_lut);
  const RsWeights rs_glu = prepack_rs(w_rs, ops::MoeWeightLayout::int4_rs_lut, true);
  const auto in_tok = ops::make_moe_layer_inputs(r, 4, true);
  ops::MegaMoeLayer layer(*team, {1408, 640, 4, 2, tokens}, preset(), 7.0, 0, tok_scratch());
  const auto stats = moe::routing_stats(r);
  enum class Kernel { w8a8, rs, tok };
  team->run([&](int i) {
    const int rank = team->rank(i);
    const ops::EpMoeRankInputs d = upload_rank(r, w, in, rank, 2);
    const ops::EpMoeRankInputs d_rs = upload_rank(r, w_rs, in, rank, 2, &rs, ops::MoeWeightLayout::int4_rs_lut);
    const ops::EpMoeRankInputs d_tok =
        upload_rank(r, w_rs, in_tok, rank, 2, &rs_glu, ops::MoeWeightLayout::int4_rs_lut, kPerToken);
    std::vector<std::pair<moe::MegaTile, Kernel>> runs;  // (tile asked for, kernel)
    for (auto tile : kTiles) runs.push_back({tile, Kernel::w8a8});
    if (rs_built) runs.push_back({moe::MegaTile::m64n256, Kernel::rs});
    if (tok_built) runs.push_back({moe::MegaTile::automatic, Kernel::tok});
    for (const auto& [tile_asked, kernel] : runs)
    for (bool control : {false, true}) {
      const bool tok = kernel == Kernel::tok;
      const ops::EpMoeRankInputs& dd = tok ? d_tok : kernel == Kernel::rs ? d_rs : d;
      SCOPED_TRACE(tok ? "int4 lut tok" : kernel == Kernel::rs ? "int4 lut rs" : "w8a8");
      const moe::MegaTile tile = tok ? moe::MegaTile::m256n128_tok : tile_asked;
      EXPECT_EQ(layer.resolved_tile(tile_asked, dd.quant, dd.act), tile);
      // Pieces: blocks of each local expert x 1408 / 128 = 11 column pieces (a 128-row block's
      // piece is one span: its store warps copy all 128 rows); tiles per block: 640 / 128 = 5
      // Linear-1 (128 h channels = 256 gate/up columns), ceil(1408 / 256) = 6 Linear-2. The
      // per-token kernel: 256-row blocks, 640 / 64 = 10 Linear-1 tiles (64 h channels each) and
      // 1408 / 128 = 11 Linear-2 tiles, one span each.
      const int bm = tok ? 256 : moe::mega_tile_shape(tile).block_m;
      const size_t l1_per_block = tok ? 10 : 5, l2_per_block = tok ? 11 : 6;
      size_t blocks = 0;
      for (int le = 0; le < 2; ++le) blocks += size_t(moe::mega_blocks(stats.expert_rows[rank * 2 + le], bm));
      const size_t pieces = blocks * 11;
      ops::MegaMoeOptions opt;
      opt.tile = tile_asked;
      opt.record_spans = true;
      opt.control_local = control;
      layer.forward(i, dd, team->stream(i), opt);
      team->synchronize(i, "the Mega-MoE call");
      team->check_device_status(i);
      const ops::MegaMoeSpans sp = layer.last_spans(i);
      EXPECT_EQ(sp.us.size(), pieces) << "control " << control << " " << moe::mega_tile_name(tile);
      EXPECT_GT(sp.sm_ghz, 0.5);
      EXPECT_LT(sp.sm_ghz, 3.0);
      EXPECT_GT(sp.kernel_us, 0.0);
      for (double u : sp.us) EXPECT_TRUE(u > 0 && u < sp.kernel_us) << u;
      // The tile trace: every tile once, plausible times.
      EXPECT_EQ(sp.tiles.l1.tiles, static_cast<long long>(blocks * l1_per_block)) << "control " << control;
      EXPECT_EQ(sp.tiles.l2.tiles, static_cast<long long>(blocks * l2_per_block)) << "control " << control;
      EXPECT_GT(sp.tiles.l1.mainloop_us, 0.0);
      EXPECT_GT(sp.tiles.l2.epilogue_us, 0.0);
      // The Linear-2 store tail (the 128 x 256 tile: written by its store warps).
      EXPECT_GT(sp.tiles.l2.store_tail_us, 0.0) << moe::mega_tile_name(tile);
      EXPECT_GE(sp.tiles.l2.input_wait_us, 0.0);
      EXPECT_GT(sp.tiles.busy_share, 0.0);
      EXPECT_LE(sp.tiles.busy_share, 1.0);
      EXPECT_LE(sp.tiles.last_tile_end_us_max, sp.kernel_us + 1.0);
      // Linear-1 epilogue phases are ordered: hand-over <= staged <= the whole epilogue.
      EXPECT_GE(sp.tiles.l1.handover_us, 0.0);
      EXPECT_LE(sp.tiles.l1.handover_us, sp.tiles.l1.staged_us);
      EXPECT_LE(sp.tiles.l1.staged_us, sp.tiles.l1.epilogue_us);
      EXPECT_LE(sp.tiles.l1.store_tail_us, sp.tiles.l1.epilogue_us);
      // The phase breakdown: every CTA with a tile has a consistent record, no phase is negative,
      // and the phases add up to no more than the longest CTA (means over CTAs).
      const ops::MegaMoePhases& ph = sp.tiles.phases;
      EXPECT_GT(ph.ctas, 0);
      EXPECT_GT(ph.l1_us, 0.0);
      EXPECT_GT(ph.l2_us, 0.0);
      for (double v : {ph.prologue_us, ph.gaps_us, ph.combine_us, ph.reduce_us}) EXPECT_GE(v, 0.0);
      EXPECT_LE(ph.prologue_us + ph.l1_us + ph.l2_us + ph.gaps_us + ph.combine_us + ph.reduce_us,
                sp.kernel_us * 1.02 + 1.0);
    }
    free_rank(d);
    free_rank(d_rs);
    free_rank(d_tok);
  });
}

TEST(MegaMoe, BadConfigsAreClearErrors) {
  XS_TEAM(team, 2, 2.0);
  EXPECT_THROW(ops::MegaMoeLayer(*team, {256, 256, 7, 2, 8}, preset()), InvalidArgument);   // 7 experts over 2 ranks
  EXPECT_THROW(ops::MegaMoeLayer(*team, {200, 256, 8, 2, 8}, preset()), InvalidArgument);   // hidden
  EXPECT_THROW(ops::MegaMoeLayer(*team, {256, 200, 8, 2, 8}, preset()), InvalidArgument);   // intermediate
}

// W4A8 weights (INT4 group-128, MXFP4) in the fused kernel (mega_w4a8_kernel.cuh, 64 x 256 tiles
// only): both orders against the reference on the weights the kernels compute with; skewed
// routing, a hidden size with a half-width Linear-2 tile (1408), many waves, one expert taking
// every row (empty experts).
static std::string w4_label(ops::MoeQuant q, moe::MoeSchedule s) {
  return std::string(q == ops::MoeQuant::w4a8_int4 ? "int4 " : "mxfp4 ") + name(s, moe::MegaTile::m64n256);
}

TEST(MegaMoe, OneGpuW4A8MatchesTheHostReferenceOfTheLayer) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  for (auto q : {ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4})
    for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
      // automatic resolves to 64 x 256 for W4A8 weights
      const auto f = mega(which, moe::MegaTile::automatic);
      const std::string n = w4_label(q, which);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 51, n, f, q);
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 140, moe::RoutingKind::balanced, 52, n, f, q);
      check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 300, moe::RoutingKind::skewed, 53, n, f, q);
      check_layer(*team, moe::ModelShape{"hot", 512, 256, 8, 1, 0, 0}, 300, moe::RoutingKind::balanced, 54, n + " one expert",
                  f, q, route_all_to_expert0);
      // Few CTAs: many tiles per CTA, the conversion stream running across tiles of both GEMMs.
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 55, n + " ctas 3",
                  mega(which, moe::MegaTile::m64n256, 3), q);
    }
}

// P ranks (virtual on one GPU): the W4A8 kernels with remote dispatch and combine, empty ranks.
class MegaMoeW4A8Ranks : public ::testing::TestWithParam<int> {};

TEST_P(MegaMoeW4A8Ranks, MatchesTheHostReferenceOfTheLayer) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  for (auto q : {ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4})
    for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
      const auto f = mega(which, moe::MegaTile::m64n256);
      const std::string n = w4_label(q, which);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 61, n, f, q);
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 62, n, f, q);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 2 * P, 2, 0, 0}, 24, moe::RoutingKind::balanced, 63,
                  n + " empty ranks", f, q, route_to_first_half);
    }
}

INSTANTIATE_TEST_SUITE_P(P, MegaMoeW4A8Ranks, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param); });

// The register-operand W4A8 kernel (mega_w4a8_rs_kernel.cuh; builds with XSTAGE_MEGA_W4A8_RS):
// INT4 two-level (int4_rs_lut) and MXFP4 (mxfp4_rs) prepacked weights, both orders, the cases of
// the row-layout test (skewed, a half-width Linear-2 tile at H 1408, many waves, one expert with
// every row, 3 CTAs).
static std::string rs_label(ops::MoeWeightLayout l, moe::MoeSchedule s) {
  return std::string(l == ops::MoeWeightLayout::int4_rs_lut ? "int4 lut rs " : "mxfp4 rs ") +
         name(s, moe::MegaTile::m64n256);
}
static ops::MoeQuant rs_quant(ops::MoeWeightLayout l) {
  return l == ops::MoeWeightLayout::int4_rs_lut ? ops::MoeQuant::w4a8_int4 : ops::MoeQuant::w4a8_mxfp4;
}

TEST(MegaMoe, OneGpuW4A8RegisterOperandMatchesTheHostReferenceOfTheLayer) {
  XS_REQUIRE_GPUS(1);
  if (!ops::MegaMoeLayer::register_operand_w4a8_built()) GTEST_SKIP() << "built without XSTAGE_MEGA_W4A8_RS";
  auto team = gpu_team(1, 10);
  for (auto l : {ops::MoeWeightLayout::int4_rs_lut, ops::MoeWeightLayout::mxfp4_rs})
    for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
      const auto f = mega(which, moe::MegaTile::automatic);
      const std::string n = rs_label(l, which);
      const ops::MoeQuant q = rs_quant(l);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 71, n, f, q, {}, l);
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 140, moe::RoutingKind::balanced, 72, n, f, q,
                  {}, l);
      check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 300, moe::RoutingKind::skewed, 73, n, f, q, {},
                  l);
      check_layer(*team, moe::ModelShape{"hot", 512, 256, 8, 1, 0, 0}, 300, moe::RoutingKind::balanced, 74,
                  n + " one expert", f, q, route_all_to_expert0, l);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 75, n + " ctas 3",
                  mega(which, moe::MegaTile::m64n256, 3), q, {}, l);
    }
}

// P ranks (virtual on one GPU): remote dispatch and combine with the register-operand kernel.
class MegaMoeW4A8RsRanks : public ::testing::TestWithParam<int> {};

TEST_P(MegaMoeW4A8RsRanks, MatchesTheHostReferenceOfTheLayer) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  if (!ops::MegaMoeLayer::register_operand_w4a8_built()) GTEST_SKIP() << "built without XSTAGE_MEGA_W4A8_RS";
  for (auto l : {ops::MoeWeightLayout::int4_rs_lut, ops::MoeWeightLayout::mxfp4_rs})
    for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
      const auto f = mega(which, moe::MegaTile::m64n256);
      const std::string n = rs_label(l, which);
      const ops::MoeQuant q = rs_quant(l);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 81, n, f, q, {}, l);
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 82, n, f, q,
                  {}, l);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 2 * P, 2, 0, 0}, 24, moe::RoutingKind::balanced, 83,
                  n + " empty ranks", f, q, route_to_first_half, l);
    }
}

INSTANTIATE_TEST_SUITE_P(P, MegaMoeW4A8RsRanks, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param); });

// The per-token W4A8 kernel (mega_w4a8_tok_kernel.cuh; builds with XSTAGE_MEGA_W4A8_TOK): INT4
// two-level and MXFP4 weights, W1 prepacked gate/up-interleaved, x with one scale per token, h made
// as the kernel makes it (bf16, one scale per token: MoeLayerWeights::per_token_h_from_bf16); on
// each per-token tile of the build, asked for by name: m256n128_tok (256-row blocks, I / 64
// Linear-1 and H / 128 Linear-2 tiles each) and, with XSTAGE_MEGA_TOK_WIDE, m128n256_tok (128-row
// blocks, I / 128 and ceil(H / 256): at H 1408 a last Linear-2 tile of one chunk).
static std::string tok_label(ops::MoeWeightLayout l, moe::MoeSchedule s, moe::MegaTile tile) {
  return std::string(l == ops::MoeWeightLayout::int4_rs_lut ? "int4 lut tok " : "mxfp4 tok ") + name(s, tile);
}
static std::vector<moe::MegaTile> tok_tiles() {
  std::vector<moe::MegaTile> t{moe::MegaTile::m256n128_tok};
  if (ops::MegaMoeLayer::per_token_wide_built()) t.push_back(moe::MegaTile::m128n256_tok);
  return t;
}
TEST(MegaMoe, OneGpuW4A8PerTokenMatchesTheHostReferenceOfTheLayer) {
  XS_REQUIRE_GPUS(1);
  if (!ops::MegaMoeLayer::per_token_w4a8_built()) GTEST_SKIP() << "built without XSTAGE_MEGA_W4A8_TOK";
  auto team = gpu_team(1, 10);
  for (auto tile : tok_tiles())
  for (auto l : {ops::MoeWeightLayout::int4_rs_lut, ops::MoeWeightLayout::mxfp4_rs})
    for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
      const auto f = mega(which, tile);
      const std::string n = tok_label(l, which, tile);
      const ops::MoeQuant q = rs_quant(l);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 91, n, f, q, {}, l,
                  kPerToken, true);
      // H 1408: 11 Linear-2 tiles of 128 columns per block.
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 140, moe::RoutingKind::balanced, 92, n, f, q,
                  {}, l, kPerToken, true);
      check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 300, moe::RoutingKind::skewed, 93, n, f, q, {},
                  l, kPerToken, true);
      // One expert takes all 600 rows: blocks of 256, 256 and 88 rows (wide: 4 x 128 and 88; a
      // partial last block, whose quantisation and Linear-2 tiles cover only its rows), the other
      // experts empty.
      check_layer(*team, moe::ModelShape{"hot", 512, 256, 8, 1, 0, 0}, 600, moe::RoutingKind::balanced, 94,
                  n + " one expert", f, q, route_all_to_expert0, l, kPerToken, true);
      // One block of 150 / 190 rows: piece 1 holds 22 / 62 tokens, loaded by the 32- / 64-row boxes
      // (and piece 0 of the 30-row experts above by the 32-row one, 37-row ones by the 64-row one);
      // 129, 160, 161 and 192: each box's first and last row count (wide: the second 128-row
      // block's, the first running the two-half 128-token path).
      for (int rows : {129, 150, 160, 161, 190, 192})
        check_layer(*team, moe::ModelShape{"hot", 512, 256, 8, 1, 0, 0}, rows, moe::RoutingKind::balanced, 97,
                    n + " one block of " + std::to_string(rows), f, q, route_all_to_expert0, l, kPerToken, true);
      // Past 256 rows, where a build with the tails fold (XSTAGE_MEGA_TOK_FOLD) runs a third piece:
      // one block of 257 / 288 rows (a fold of 1 / 32), 289 (256 + 33: no fold), 540 (256 + 284:
      // the fold in the second block); built without it, 256-row blocks and their tails.
      for (int rows : {257, 288, 289, 540})
        check_layer(*team, moe::ModelShape{"hot", 512, 256, 8, 1, 0, 0}, rows, moe::RoutingKind::balanced, 99,
                    n + " fold rows " + std::to_string(rows), f, q, route_all_to_expert0, l, kPerToken, true);
      // 3 CTAs: more Linear-1 tiles per block (6) than CTAs, so a block's quantisation is done by
      // whichever CTA counts its last Linear-1 tile.
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 95, n + " ctas 3",
                  mega(which, tile, 3), q, {}, l, kPerToken, true);
      // Each checked call right after one with 4096x larger |h|: the per-token maxima start from zero.
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 96,
                  n + " after larger h", mega_after_larger_h(which, 0, tile), q, {}, l, kPerToken, true);
      // Per-token, W8A8, per-token on one layer: the quantisation claims start at zero each call.
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 98,
                  n + " after a W8A8 call", mega_after_other_kernel(which, tile), q, {}, l, kPerToken, true);
    }
}

// The interleaved list with the last blocks' Linear-2 tiles after every Linear-1 tile
// (MegaMoeOptions::tail_l2_tiles; docs/megamoe.md §Tile claiming, "The end of the list"), with
// lead 0 so the tail blocks' tiles move: none (the plain list), the plan's (none where hidden >
// intermediate, one per CTA on the long-l2 shape), the last block's (1 tile), 64, every block's;
// on 3 CTAs; per-token W4A8 too.
TEST(MegaMoe, OneGpuListEndingInLinear2TilesMatchesTheHostReference) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  const auto il = moe::MoeSchedule::interleaved;
  for (auto tile : kTiles)
    for (int tail : {0, -1, 1, 64, 100000}) {
      const std::string n = name(il, tile) + " lead 0 tail " + std::to_string(tail);
      check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 300, moe::RoutingKind::skewed, 27, n,
                  mega_tail(tile, 0, tail));
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 140, moe::RoutingKind::balanced, 28, n,
                  mega_tail(tile, 0, tail));
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 80, moe::RoutingKind::skewed, 29, n + " ctas 3",
                  mega_tail(tile, 3, tail));
      check_layer(*team, moe::ModelShape{"long-l2", 256, 1024, 16, 2, 0, 0}, 300, moe::RoutingKind::balanced, 30, n,
                  mega_tail(tile, 0, tail));
    }
  if (!ops::MegaMoeLayer::per_token_w4a8_built()) return;
  for (auto tile : tok_tiles())
  for (int tail : {0, -1, 64, 100000})
    for (int ctas : {0, 3}) {
      const auto f = mega_tail(tile, ctas, tail);
      const auto l = ops::MoeWeightLayout::int4_rs_lut;
      const std::string n =
          tok_label(l, il, tile) + " lead 0 tail " + std::to_string(tail) + " ctas " + std::to_string(ctas);
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 140, moe::RoutingKind::balanced, 92, n, f,
                  rs_quant(l), {}, l, kPerToken, true);
      check_layer(*team, moe::ModelShape{"hot", 512, 256, 8, 1, 0, 0}, 600, moe::RoutingKind::balanced, 94,
                  n + " one expert", f, rs_quant(l), route_all_to_expert0, l, kPerToken, true);
      check_layer(*team, moe::ModelShape{"long-l2", 512, 1408, 4, 2, 0, 0}, 280, moe::RoutingKind::balanced, 97, n, f,
                  rs_quant(l), {}, l, kPerToken, true);
    }
}

// The list's mix as a study option (MegaMoeOptions::l1_per_l2; bench interleaved-mixR): 1 (Linear-2
// tiles of a block almost back to back), 3, and more than a block's Linear-1 tiles; both W8A8 tiles
// and per-token INT4; 3 CTAs too.
TEST(MegaMoe, OneGpuAnyMixOfTheListMatchesTheHostReference) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  for (int r : {1, 3, 64})
    for (int ctas : {0, 3}) {
      const std::string sfx = " mix " + std::to_string(r) + " ctas " + std::to_string(ctas);
      for (auto tile : kTiles)
        check_layer(*team, moe::ModelShape{"many", 1024, 512, 32, 4, 0, 0}, 300, moe::RoutingKind::skewed, 121,
                    name(moe::MoeSchedule::interleaved, tile) + sfx, mega_mix(tile, ctas, r));
      if (!ops::MegaMoeLayer::per_token_w4a8_built()) continue;
      const auto l = ops::MoeWeightLayout::int4_rs_lut;
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 4, 2, 0, 0}, 280, moe::RoutingKind::balanced, 122,
                  tok_label(l, moe::MoeSchedule::interleaved, moe::MegaTile::m256n128_tok) + sfx,
                  mega_mix(moe::MegaTile::m256n128_tok, ctas, r), rs_quant(l), {}, l, kPerToken, true);
    }
}

// P ranks (virtual on one GPU): remote dispatch and combine with the per-token kernel.
class MegaMoeW4A8TokRanks : public ::testing::TestWithParam<int> {};

TEST_P(MegaMoeW4A8TokRanks, MatchesTheHostReferenceOfTheLayer) {
  const int P = GetParam();
  XS_TEAM(team, P, 10.0);
  if (!ops::MegaMoeLayer::per_token_w4a8_built()) GTEST_SKIP() << "built without XSTAGE_MEGA_W4A8_TOK";
  for (auto tile : tok_tiles())
  for (auto l : {ops::MoeWeightLayout::int4_rs_lut, ops::MoeWeightLayout::mxfp4_rs})
    for (auto which : {moe::MoeSchedule::expert_wave, moe::MoeSchedule::interleaved}) {
      const auto f = mega(which, tile);
      const std::string n = tok_label(l, which, tile);
      const ops::MoeQuant q = rs_quant(l);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 8, 3, 0, 0}, 40, moe::RoutingKind::skewed, 101, n, f, q, {},
                  l, kPerToken, true);
      check_layer(*team, moe::ModelShape{"dit-like", 1408, 640, 8, 2, 0, 0}, 70, moe::RoutingKind::balanced, 102, n, f, q,
                  {}, l, kPerToken, true);
      check_layer(*team, moe::ModelShape{"small", 256, 384, 2 * P, 2, 0, 0}, 24, moe::RoutingKind::balanced, 103,
                  n + " empty ranks", f, q, route_to_first_half, l, kPerToken, true);
      // 136 tokens per rank all to expert 0: 272 rows at P = 2 and 544 at P = 4 (one / two blocks
      // with a fold where built with it), 1088 at P = 8.
      check_layer(*team, moe::ModelShape{"hot", 512, 256, 8, 1, 0, 0}, 136, moe::RoutingKind::balanced, 104,
                  n + " one expert", f, q, route_all_to_expert0, l, kPerToken, true);
    }
}

INSTANTIATE_TEST_SUITE_P(P, MegaMoeW4A8TokRanks, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& i) { return std::to_string(i.param); });

// A build without the register-operand kernel refuses its layouts before the call counts; a
// layout that does not match the weight format is refused either way. Per-token activations: a
// build without the per-token kernel refuses them naming its option; a build with it refuses a
// tile other than the per-token one, before the call counts (the next per-token call of the same
// layer runs and matches the reference).
TEST(MegaMoe, RegisterOperandLayoutsAreClearErrors) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  const moe::ModelShape shape{"small", 256, 256, 4, 2, 0, 0};
  const moe::Routing r = moe::make_routing(shape, 1, 8, {});
  const auto w = ops::make_moe_layer_weights(4, 256, 256, 1, ops::MoeQuant::w4a8_int4, true);
  const auto in = ops::make_moe_layer_inputs(r, 2);
  const RsWeights rs = prepack_rs(w, ops::MoeWeightLayout::int4_rs_lut);
  auto layer = std::make_shared<ops::MegaMoeLayer>(*team, ops::EpMoeConfig{256, 256, 4, 2, 8}, preset(), 7.0, 0,
                                                   tok_scratch());
  EP_T(cudaSetDevice(team->device(0)));
  ops::EpMoeRankInputs d = upload_rank(r, w, in, 0, 4, &rs, ops::MoeWeightLayout::int4_rs_lut);
  d.quant = ops::MoeQuant::w4a8_mxfp4;  // int4_rs_lut with MXFP4: refused whatever the build
  try {
    layer->forward(0, d, team->stream(0));
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("int4_rs_lut"), std::string::npos) << e.what();
  }
  d.quant = ops::MoeQuant::w4a8_int4;
  const bool tok_built = ops::MegaMoeLayer::per_token_w4a8_built();
  {
    const ops::EpMoeRankInputs dt =
        upload_rank(r, w, ops::make_moe_layer_inputs(r, 2, true), 0, 4, &rs, ops::MoeWeightLayout::int4_rs_lut, kPerToken);
    ops::MegaMoeOptions opt;
    // With the kernel: a 64 x 256 tile asked for per-token activations; without it any tile.
    if (tok_built) opt.tile = moe::MegaTile::m64n256;
    try {
      layer->forward(0, dt, team->stream(0), opt);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      const std::string want = tok_built ? "per-token tile" : "XSTAGE_MEGA_W4A8_TOK";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    free_rank(dt);
  }
  // The per-token kernel's scratch is the layer's (MegaMoeLayer's per_token_scratch): a layer built
  // without it refuses per-token calls before they count; without the kernel, asking for it is
  // refused at construction.
  if (tok_built) {
    ops::MegaMoeLayer plain(*team, ops::EpMoeConfig{256, 256, 4, 2, 8}, preset());
    const ops::EpMoeRankInputs dt =
        upload_rank(r, w, ops::make_moe_layer_inputs(r, 2, true), 0, 4, &rs, ops::MoeWeightLayout::int4_rs_lut, kPerToken);
    try {
      plain.forward(0, dt, team->stream(0));
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("per_token_scratch"), std::string::npos) << e.what();
    }
    free_rank(dt);
  } else {
    try {
      ops::MegaMoeLayer scratch(*team, ops::EpMoeConfig{256, 256, 4, 2, 8}, preset(), 7.0, 0, true);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("XSTAGE_MEGA_W4A8_TOK"), std::string::npos) << e.what();
    }
  }
  if (!ops::MegaMoeLayer::register_operand_w4a8_built()) {
    try {
      layer->forward(0, d, team->stream(0));
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("XSTAGE_MEGA_W4A8_RS"), std::string::npos) << e.what();
    }
  }
  free_rank(d);
  // Every call above was refused before it counted: a per-token call (the layer's own tile)
  // still runs on this layer.
  if (tok_built)
    check_layer(*team, shape, 8, moe::RoutingKind::balanced, 5, "int4 lut tok after refused calls",
                [layer](Team&, const ops::EpMoeConfig&) -> LayerForward {
                  return [layer](int i, const ops::EpMoeRankInputs& dd, cudaStream_t s) {
                    ops::MegaMoeOptions o;
                    o.tile = moe::MegaTile::m256n128_tok;
                    layer->forward(i, dd, s, o);
                  };
                },
                ops::MoeQuant::w4a8_int4, {}, ops::MoeWeightLayout::int4_rs_lut, kPerToken, true);
}

// W4A8 runs the 64 x 256 tile only: asking for 128 x 256 is refused before the call counts, so
// the next call of the same layer still runs (and matches the reference).
TEST(MegaMoe, W4A8WithThe128RowTileIsAClearError) {
  XS_REQUIRE_GPUS(1);
  auto team = gpu_team(1, 10);
  const moe::ModelShape shape{"small", 256, 384, 8, 3, 0, 0};
  auto layer = std::make_shared<ops::MegaMoeLayer>(*team, ops::EpMoeConfig{256, 384, 8, 3, 40}, preset());
  EXPECT_EQ(layer->resolved_tile(moe::MegaTile::automatic, ops::MoeQuant::w4a8_int4), moe::MegaTile::m64n256);
  EXPECT_THROW(layer->resolved_tile(moe::MegaTile::m128n256, ops::MoeQuant::w4a8_mxfp4), InvalidArgument);
  // Per-token activations run their own tiles whatever the build (the kernel's presence is the
  // call's check): automatic resolves to moe::choose_tok_tile's pick (this layer: 15 mean rows, but
  // 8 experts x one Linear-2 tile for the GPU's CTAs: m256n128_tok; with 3 CTAs the wide one where
  // the build has it), each per-token tile to itself (the wide one refused, naming its option,
  // where it is left out), the W8A8 tiles are refused; the per-token tiles with per-128
  // activations are refused too.
  const bool wide = ops::MegaMoeLayer::per_token_wide_built();
  ops::MegaMoeLayer three(*team, ops::EpMoeConfig{256, 384, 8, 3, 40}, preset(), 7.0, 3);
  for (auto q : {ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4}) {
    EXPECT_EQ(layer->resolved_tile(moe::MegaTile::automatic, q, ops::MoeActScales::per_token),
              moe::choose_tok_tile(40 * 3, 8, 8, 256, layer->ctas(0), wide));
    EXPECT_EQ(three.resolved_tile(moe::MegaTile::automatic, q, ops::MoeActScales::per_token),
              wide ? moe::MegaTile::m128n256_tok : moe::MegaTile::m256n128_tok);
    EXPECT_EQ(layer->resolved_tile(moe::MegaTile::m256n128_tok, q, ops::MoeActScales::per_token),
              moe::MegaTile::m256n128_tok);
    if (wide) {
      EXPECT_EQ(layer->resolved_tile(moe::MegaTile::m128n256_tok, q, ops::MoeActScales::per_token),
                moe::MegaTile::m128n256_tok);
    } else {
      try {
        layer->resolved_tile(moe::MegaTile::m128n256_tok, q, ops::MoeActScales::per_token);
        ADD_FAILURE() << "no error";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("XSTAGE_MEGA_TOK_WIDE"), std::string::npos) << e.what();
      }
    }
    EXPECT_THROW(layer->resolved_tile(moe::MegaTile::m64n256, q, ops::MoeActScales::per_token), InvalidArgument);
    EXPECT_THROW(layer->resolved_tile(moe::MegaTile::m128n256, q, ops::MoeActScales::per_token), InvalidArgument);
    EXPECT_THROW(layer->resolved_tile(moe::MegaTile::m256n128_tok, q), InvalidArgument);
    EXPECT_THROW(layer->resolved_tile(moe::MegaTile::m128n256_tok, q), InvalidArgument);
  }
  EXPECT_THROW(layer->resolved_tile(moe::MegaTile::m128n256_tok, ops::MoeQuant::w8a8), InvalidArgument);
  // Per-token activations with W8A8 weights: no tile runs them.
  EXPECT_THROW(layer->resolved_tile(moe::MegaTile::automatic, ops::MoeQuant::w8a8, ops::MoeActScales::per_token),
               InvalidArgument);
  EXPECT_EQ(std::string(moe::mega_tile_name(moe::MegaTile::m256n128_tok)), "m256n128_tok");
  // The automatic order with W4A8 weights is interleaved, whatever the W8A8 pick.
  EXPECT_EQ(layer->resolved_schedule(moe::MoeSchedule::automatic, ops::MoeQuant::w4a8_int4), moe::MoeSchedule::interleaved);
  EXPECT_EQ(layer->order_choice(ops::MoeQuant::w4a8_mxfp4).schedule, moe::MoeSchedule::interleaved);
  EXPECT_EQ(layer->resolved_schedule(moe::MoeSchedule::automatic), layer->order_choice().schedule);
  const moe::Routing r = moe::make_routing(shape, 1, 40, {});
  const auto w = ops::make_moe_layer_weights(8, 256, 384, 3, ops::MoeQuant::w4a8_int4);
  const auto in = ops::make_moe_layer_inputs(r, 4);
  const ops::EpMoeRankInputs d = upload_rank(r, w, in, 0, 8);
  ops::MegaMoeOptions opt;
  opt.tile = moe::MegaTile::m128n256;
  EXPECT_THROW(layer->forward(0, d, team->stream(0), opt), InvalidArgument);
  free_rank(d);
  check_layer(*team, shape, 40, moe::RoutingKind::balanced, 3, "int4 after a refused call",
              [layer](Team&, const ops::EpMoeConfig&) -> LayerForward {
                return [layer](int i, const ops::EpMoeRankInputs& dd, cudaStream_t s) {
                  ops::MegaMoeOptions o;
                  o.tile = moe::MegaTile::automatic;
                  layer->forward(i, dd, s, o);
                };
              },
              ops::MoeQuant::w4a8_int4);
}

#endif
