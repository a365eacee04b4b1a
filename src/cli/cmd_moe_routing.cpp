// `xstage moe-routing`: the reproducible top-k routing of one Mega-MoE configuration
// (include/xstage/moe_routing.hpp), as JSON for the PyTorch baseline (python/bench_moe_torch.py)
// and as a summary table for people.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/model_source.hpp"
#include "xstage/error.hpp"
#include "xstage/mega_tile.hpp"
#include "xstage/moe_routing.hpp"
#include "xstage/moe_schedule.hpp"

namespace xstage::cli {
namespace {

struct RoutingArgs {
  std::string model;
  int tokens = 0;
  int ranks = 2;
  std::string routing = "balanced";
  double zipf_s = 1.0;
  uint64_t seed = 2026;
  std::string out;
  bool list = false;
  bool plan = false;
  int ctas = 132;
  double tile_tflops = 7.0;
  double l2_mib = 60.0;  // H200 (results/info-h200x2.json: l2_bytes 62914560)
  std::string params;
};

void print_models() {
  std::cout << fmt::format("{:<20} {:>6} {:>12} {:>7} {:>5} {:>6}\n", "model", "hidden", "intermediate", "experts",
                           "top-k", "shared");
  for (const auto& m : moe::model_shapes())
    std::cout << fmt::format("{:<20} {:>6} {:>12} {:>7} {:>5} {:>6}\n", m.name, m.hidden, m.intermediate, m.experts,
                             m.top_k, m.shared);
}

void run_routing(const RoutingArgs& a) {
  if (a.list) return print_models();
  if (a.model.empty()) throw InvalidArgument("moe-routing: --model is required (or --list)");
  moe::RoutingConfig cfg;
  cfg.kind = moe::parse_routing(a.routing);
  cfg.zipf_s = a.zipf_s;
  cfg.seed = a.seed;
  const moe::Routing r = moe::make_routing(moe::find_model(a.model), a.ranks, a.tokens, cfg);
  const moe::RoutingStats s = moe::routing_stats(r);
  if (!a.out.empty()) {
    std::ofstream f(a.out);
    if (!f) throw Error(fmt::format("moe-routing: cannot write '{}'", a.out));
    f << moe::to_json(r).dump() << "\n";
    if (!f) throw Error(fmt::format("moe-routing: writing '{}' failed", a.out));
  }
  std::cout << fmt::format(
      "{} ({} experts, top-{}), {} ranks x {} tokens, {} routing{}: hottest expert {:.2f}x the mean rows, "
      "busiest rank {:.2f}x, {} experts unused\n",
      r.shape.name, r.shape.experts, r.shape.top_k, r.ranks, r.tokens_per_rank, a.routing,
      cfg.kind == moe::RoutingKind::skewed ? fmt::format(" (zipf s = {})", cfg.zipf_s) : "", s.max_expert_over_mean,
      s.max_rank_over_mean, s.empty_experts);
  for (int src = 0; src < r.ranks; ++src) {
    std::string line = fmt::format("  rank {} sends rows:", src);
    for (int dst = 0; dst < r.ranks; ++dst) line += fmt::format(" {}", s.rows[src][dst]);
    std::cout << line << "\n";
  }
  if (!a.plan) return;
  // The per-token tails the plan counts: after at least one full block, a last block of 1..32 rows,
  // which still runs every Linear-1 and Linear-2 tile of its expert (docs/megamoe.md Next steps 4):
  // exactly the blocks the tails fold removes (moe::mega_blocks with a fold of 32).
  constexpr int kTailRows = 32;
  // The Mega-MoE tile schedules each rank would run (moe_schedule.hpp), with the model's view.
  std::string used;
  const model::Params params = load_model_params(a.params, &used);
  std::cout << fmt::format("  schedules (K = {} CTAs, {} TFLOP/s per CTA, model {}):\n", a.ctas, a.tile_tflops, used);
  for (int rank = 0; rank < r.ranks; ++rank) {
    moe::MoeScheduleInput in;
    for (int e = 0; e < r.experts_per_rank; ++e)
      in.rows_per_expert.push_back(static_cast<int>(s.expert_rows[rank * r.experts_per_rank + e]));
    in.hidden = r.shape.hidden;
    in.intermediate = r.shape.intermediate;
    in.ctas = a.ctas;
    in.world = r.ranks;
    in.tile_tflops = a.tile_tflops;
    const auto p = moe::plan_moe_schedule(params, in, moe::MoeSchedule::interleaved);
    // The order the layer's automatic schedule would take (its automatic tile's blocks, as MegaMoeLayer).
    const moe::MegaTile tile =
        moe::choose_mega_tile(static_cast<long long>(r.tokens_per_rank) * r.ranks * r.shape.top_k, r.shape.experts);
    const moe::MoeOrderChoice oc =
        moe::choose_layer_order(params, in, moe::mega_tile_shape(tile).block_m, a.l2_mib * 1024.0 * 1024.0);
    std::cout << fmt::format(
        "  rank {}: {} waves, {} L1 + {} L2 tiles ({:.2f} / {:.2f} us); waves inject {:.0f} GB/s ({}), "
        "interleaved 1 L2 per {} L1 -> {:.0f} GB/s ({}), ending in {} L2 tiles kept for the end ({}); "
        "R_agg {:.0f} GB/s; predicted span per L2 tile {:.2f} us waves, {:.2f} us interleaved\n",
        rank, p.waves, p.l1_tiles, p.l2_tiles, p.l1_tile_us, p.l2_tile_us, p.wave_store_gbps,
        p.wave_drain_bound ? "drain-bound" : "absorbed", p.l1_per_l2, p.interleaved_store_gbps, p.rule,
        p.tail_l2_tiles, p.tail_l2_tiles > 0 ? "L2 tiles the longer: one per CTA" : "L2 tiles the shorter: none",
        params.r_agg_gbps, p.predicted_wave_span_us, p.predicted_interleaved_span_us);
    std::cout << fmt::format("  rank {}: the model's order (routed rows): {} ({})\n", rank,
                             moe::schedule_name(oc.schedule), oc.why);
    const int block_m = moe::mega_tile_shape(tile).block_m;
    int blocks = 0, half = 0;
    for (int rows : in.rows_per_expert) {
      blocks += moe::mega_blocks(rows, block_m);
      half += moe::mega_half_block(rows, block_m);
    }
    std::cout << fmt::format("  rank {}: automatic W8A8 tile {} ({} blocks{})\n", rank, moe::mega_tile_name(tile), blocks,
                             block_m == 128 ? fmt::format(", {} of them half blocks of <= 64 rows ({:.1f} %)", half,
                                                          blocks > 0 ? 100.0 * half / blocks : 0.0)
                                            : std::string());
    // The per-token W4A8 tile (as the layer picks it with the wide tile built, the default) and
    // its blocks that are small tails (docs/megamoe.md Next steps 4, "The blocks' tails").
    const moe::MegaTile tok = moe::choose_tok_tile(static_cast<long long>(r.tokens_per_rank) * r.ranks * r.shape.top_k,
                                                   r.shape.experts, r.experts_per_rank, r.shape.hidden, a.ctas, true);
    const int tok_m = moe::mega_tile_shape(tok).block_m;
    int tok_blocks = 0, tails = 0, tail_rows = 0;
    for (int rows : in.rows_per_expert) {
      const int plain = moe::mega_blocks(rows, tok_m);
      const int t = plain - moe::mega_blocks(rows, tok_m, kTailRows);
      tok_blocks += plain;
      tails += t;
      tail_rows += t * (rows % tok_m);
    }
    std::cout << fmt::format(
        "  rank {}: per-token W4A8 tile {} ({} blocks, {} of them tails of <= {} rows after a full block ({:.1f} %, "
        "{} rows){})\n",
        rank, moe::mega_tile_name(tok), tok_blocks, tails, kTailRows, tok_blocks > 0 ? 100.0 * tails / tok_blocks : 0.0,
        tail_rows,
        tok == moe::MegaTile::m256n128_tok
            ? fmt::format("; {} blocks in a build with the tails fold, XSTAGE_MEGA_TOK_FOLD={}", tok_blocks - tails,
                          kTailRows)
            : std::string());
  }
  // The layer's own pick (MegaMoeLayer::order_choice(), bench `model-order`, schedule automatic):
  // no routing at construction, so a balanced load with the reuse share expected under balanced
  // random routing; one order for every rank.
  moe::MoeLayerConfig lc;
  lc.hidden = r.shape.hidden;
  lc.intermediate = r.shape.intermediate;
  lc.experts = r.shape.experts;
  lc.top_k = r.shape.top_k;
  lc.tokens = r.tokens_per_rank;
  lc.world = r.ranks;
  lc.ctas = a.ctas;
  lc.tile_tflops = a.tile_tflops;
  const moe::MoeOrderChoice lo = moe::choose_balanced_layer_order(params, lc, a.l2_mib * 1024.0 * 1024.0);
  std::cout << fmt::format("  layer: the model's order (expected rows, balanced routing): {} ({})\n",
                           moe::schedule_name(lo.schedule), lo.why);
  const moe::MoeOrderChoice l4 = moe::w4a8_layer_order(lo);
  std::cout << fmt::format("  layer, W4A8 weights: {} ({})\n", moe::schedule_name(l4.schedule), l4.why);
}

}  // namespace

void add_moe_routing_command(CLI::App& app) {
  auto a = std::make_shared<RoutingArgs>();
  CLI::App* cmd = app.add_subcommand(
      "moe-routing",
      "Reproducible top-k routing of a Mega-MoE configuration (MOE.md): which experts each token of each rank\n"
      "goes to, with router weights. balanced: experts uniform at random; skewed: Zipf popularity\n"
      "p(e) ~ 1/rank(e)^s over a seeded permutation. Same (model, ranks, tokens, routing, s, seed), same routing.");
  cmd->add_option("--model,-m", a->model, "Model shape (see --list)");
  cmd->add_option("--tokens,-t", a->tokens, "Tokens per rank")->check(CLI::PositiveNumber);
  cmd->add_option("--ranks,-P", a->ranks, "Expert-parallel ranks (must divide the expert count)")->capture_default_str();
  cmd->add_option("--routing", a->routing, "balanced or skewed")->capture_default_str();
  cmd->add_option("--zipf", a->zipf_s, "Zipf exponent s of skewed routing")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed")->capture_default_str();
  cmd->add_option("--out,-o", a->out, "Write the routing as JSON (xstage.moe.routing.v1)");
  cmd->add_flag("--list", a->list, "List the model shapes and exit");
  cmd->add_flag("--plan", a->plan,
               "Also print each rank's Mega-MoE tile schedules (expert-wave / interleaved) with the model's order\n"
               "for its routed rows, the automatic W8A8 tile's blocks, the per-token W4A8 tile's blocks and small\n"
               "tails, and the order the layer itself picks (a balanced load's expected rows)");
  cmd->add_option("--ctas", a->ctas, "--plan: persistent CTAs per rank")->capture_default_str();
  cmd->add_option("--l2-mib", a->l2_mib, "--plan: the GPU's L2 in MiB (the order choice's locality check)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--tile-tflops", a->tile_tflops, "--plan: FP8 GEMM TFLOP/s of one CTA (tile times)")
      ->capture_default_str();
  cmd->add_option("--params", a->params, "--plan: Burst-Gap parameters (default: the shipped H200 preset)");
  cmd->callback([a] { run_routing(*a); });
}

}  // namespace xstage::cli
