// Mega-MoE tile order from the Burst-Gap model (include/xstage/moe_schedule.hpp,
// docs/megamoe.md "Schedules").
//
// Both schedules see the same tiles; the order itself is decoded by moe_tile_order.hpp, the
// header the kernel uses too. A wave = the experts whose Linear-1 tiles begin in the same
// round of K CTAs. expert-wave runs a wave's Linear-1 tiles,
// then its Linear-2 tiles; the K CTAs then finish Linear-2 tiles together and inject combine
// stores at K * bytes / t_L2. interleaved runs Linear-1 tiles of wave w + 1 between the
// Linear-2 tiles of wave w: with a share f of Linear-2 tiles in the stream, K CTAs inject
// K * f * bytes / (f t_L2 + (1 - f) t_L1), and the model says the X-Stage keeps up while
// that is at most R_agg. So f is the natural share of Linear-2 work, capped by that bound;
// a Linear-2 tile is placed at least K Linear-1 tiles after the last Linear-1 tile it reads,
// so with K CTAs taking tiles in order its inputs were started a full round earlier.
#include "xstage/moe_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <vector>

#include "xstage/error.hpp"
#include "xstage/mega_tile.hpp"
#include "xstage/moe_tile_order.hpp"

namespace xstage::moe {
MoeSchedulePlan plan_moe_schedule(const model::Params& p, const MoeScheduleInput& in, MoeSchedule which) {
  auto bad = [](const std::string& m) { throw InvalidArgument("moe schedule: " + m); };
  if (in.rows_per_expert.empty()) bad("no local experts");
  for (int r : in.rows_per_expert)
    if (r < 0) bad(fmt::format("rows per expert must be >= 0, got {}", r));
  if (in.block_m < 1 || in.l1_n < 1 || in.l2_n < 1) bad("tile sizes must be >= 1");
  if (in.hidden <= 0 || in.hidden % 128 != 0) bad(fmt::format("hidden {} must be a positive multiple of 128", in.hidden));
  if (in.intermediate <= 0 || in.intermediate % in.l1_n != 0)
    bad(fmt::format("intermediate {} must be a positive multiple of l1_n {}", in.intermediate, in.l1_n));
  if (in.ctas < 1) bad(fmt::format("ctas must be >= 1, got {}", in.ctas));
  if (in.world < 1) bad(fmt::format("world must be >= 1, got {}", in.world));
  if (!(in.tile_tflops > 0) || !std::isfinite(in.tile_tflops)) bad("tile_tflops must be a positive number");
  if (in.remote_fraction > 1) bad("remote_fraction must be <= 1");
  if (which != MoeSchedule::expert_wave && which != MoeSchedule::interleaved)
    bad("the planner takes expert-wave or interleaved (resolve automatic with choose_order)");

  MoeSchedulePlan out;
  const int l1_n_blocks = in.intermediate / in.l1_n, l2_n_blocks = (in.hidden + in.l2_n - 1) / in.l2_n;
  // Tile times from FLOPs: Linear-1 reads gate and up (2 * l1_n weight rows) over K = hidden.
  out.l1_tile_us = 2.0 * in.block_m * (2.0 * in.l1_n) * in.hidden / (in.tile_tflops * 1e6);
  out.l2_tile_us = 2.0 * in.block_m * in.l2_n * double(in.intermediate) / (in.tile_tflops * 1e6);
  const double remote = in.remote_fraction >= 0 ? in.remote_fraction : double(in.world - 1) / in.world;
  out.l2_remote_bytes = double(in.block_m) * in.l2_n * 2.0 * remote;  // bf16 rows
  const double r_agg = p.r_agg_gbps * model::kBytesPerUsPerGbps;       // bytes per us

  // Blocks and waves (moe_tile_order.hpp): expert e's m-blocks start at block_start[e]; its
  // wave is the round of `ctas` Linear-1 tiles it begins in.
  const int experts = static_cast<int>(in.rows_per_expert.size());
  std::vector<int> block_start(experts + 1, 0), wave_first(experts), wave_last(experts);
  for (int e = 0; e < experts; ++e) block_start[e + 1] = block_start[e] + (in.rows_per_expert[e] + in.block_m - 1) / in.block_m;
  for (int e = 0; e < experts; ++e)
    wave_bounds(block_start.data(), experts, l1_n_blocks, in.ctas, e, &wave_first[e], &wave_last[e]);
  {
    int last_first = -1;
    for (int e = 0; e < experts; ++e)
      if (wave_last[e] > wave_first[e] && wave_first[e] != last_first) {
        ++out.waves;
        last_first = wave_first[e];
      }
  }
  out.l1_tiles = block_start[experts] * l1_n_blocks;
  out.l2_tiles = block_start[experts] * l2_n_blocks;

  out.wave_store_gbps = in.ctas * out.l2_remote_bytes / out.l2_tile_us / model::kBytesPerUsPerGbps;
  out.wave_drain_bound = out.wave_store_gbps > p.r_agg_gbps;

  // Mixed stream: the natural share of Linear-2 tiles, capped so that K CTAs inject at most R_agg.
  const double natural = out.l1_tiles + out.l2_tiles > 0 ? double(out.l2_tiles) / (out.l1_tiles + out.l2_tiles) : 0;
  const double kb = in.ctas * out.l2_remote_bytes;
  const double excess = kb - r_agg * (out.l2_tile_us - out.l1_tile_us);
  const double f_cap = excess > 0 ? r_agg * out.l1_tile_us / excess : 1.0;
  out.l2_share = std::min(natural, f_cap);
  out.rule = f_cap >= natural ? "natural share: the mixed stream stays under R_agg"
                              : "capped: more Linear-2 tiles per round would inject faster than R_agg";
  out.l1_per_l2 = out.l2_share > 0 ? std::max(1, static_cast<int>(std::lround((1 - out.l2_share) / out.l2_share))) : 0;
  out.lead_tiles = in.ctas;
  out.tail_l2_tiles = out.l2_tile_us > out.l1_tile_us ? in.ctas : 0;
  const double f = out.l2_share;
  out.interleaved_store_gbps =
      f > 0 ? in.ctas * f * out.l2_remote_bytes / (f * out.l2_tile_us + (1 - f) * out.l1_tile_us) / model::kBytesPerUsPerGbps
            : 0;

  // Predicted combine-store span of one Linear-2 tile (per CTA, K CTAs in step): under waves a
  // CTA's bursts are one Linear-2 tile apart; interleaved, l1_per_l2 Linear-1 tiles more.
  const long long burst = static_cast<long long>(std::llround(out.l2_remote_bytes / 16.0)) * 16;
  if (burst > 0) {
    out.predicted_wave_span_us = model::predict(p, in.ctas, burst, out.l2_tile_us).issue_us;
    const double gap = out.l2_tile_us + out.l1_per_l2 * out.l1_tile_us;
    out.predicted_interleaved_span_us = model::predict(p, in.ctas, burst, gap).issue_us;
  }

  // The tile list: the same decoder the kernel runs (moe_tile_order.hpp).
  TileOrder order;
  order.kind = which == MoeSchedule::expert_wave ? OrderKind::expert_wave : OrderKind::interleaved;
  order.experts = experts;
  order.block_start = block_start.data();
  order.wave_first = wave_first.data();
  order.wave_last = wave_last.data();
  order.n1 = l1_n_blocks;
  order.n2 = l2_n_blocks;
  order.l1_per_l2 = std::max(1, out.l1_per_l2);
  order.lead = out.lead_tiles;
  set_tail_tiles(order, out.tail_l2_tiles);
  out.tiles.reserve(order.total());
  for (int p = 0; p < order.total(); ++p) {
    const OrderedTile t = tile_at(order, p);
    const int e = expert_of_block(order, t.block);
    out.tiles.push_back({static_cast<TileKind>(t.kind), e, t.block - block_start[e], t.n_block});
  }
  return out;
}

void to_json(nlohmann::json& j, const MoeSchedulePlan& p) {
  j = nlohmann::json{{"waves", p.waves},
                     {"l1_tiles", p.l1_tiles},
                     {"l2_tiles", p.l2_tiles},
                     {"l1_tile_us", p.l1_tile_us},
                     {"l2_tile_us", p.l2_tile_us},
                     {"l2_remote_bytes", p.l2_remote_bytes},
                     {"wave_store_gbps", p.wave_store_gbps},
                     {"wave_drain_bound", p.wave_drain_bound},
                     {"l2_share", p.l2_share},
                     {"l1_per_l2", p.l1_per_l2},
                     {"lead_tiles", p.lead_tiles},
                     {"tail_l2_tiles", p.tail_l2_tiles},
                     {"interleaved_store_gbps", p.interleaved_store_gbps},
                     {"rule", p.rule},
                     {"predicted_wave_span_us", p.predicted_wave_span_us},
                     {"predicted_interleaved_span_us", p.predicted_interleaved_span_us}};
}

const char* schedule_name(MoeSchedule s) {
  switch (s) {
    case MoeSchedule::expert_wave: return "expert-wave";
    case MoeSchedule::interleaved: return "interleaved";
    case MoeSchedule::automatic: return "automatic";
  }
  return "unknown";
}

namespace {

// choose_order with the share counted from the rows (modelled_share < 0) or the modelled one;
// il_plan: the interleaved plan of `in` (then `plan` is the expert-wave one) for the end term.
MoeOrderChoice choose_order_with(const MoeSchedulePlan& plan, const MoeScheduleInput& in, double l2_bytes,
                                 double expert_weight_bytes, double modelled_share,
                                 const MoeSchedulePlan* il_plan = nullptr) {
  if (!(l2_bytes > 0) || !(expert_weight_bytes > 0) || in.ctas < 1 || in.l2_n < 1 || in.block_m < 1)
    throw InvalidArgument("moe order: L2 bytes, expert weight bytes, ctas, l2_n and block_m must be positive");
  MoeOrderChoice c;
  int busy = 0;
  long long blocks = 0, shared_blocks = 0;  // shared: blocks of experts with >= 2 blocks
  for (int r : in.rows_per_expert) {
    busy += r > 0;
    const long long b = r > 0 ? mega_blocks(r, in.block_m) : 0;
    blocks += b;
    if (b >= 2) shared_blocks += b;
  }
  const double l1_per_expert = busy > 0 ? double(plan.l1_tiles) / busy : 0;
  c.experts_per_wave = l1_per_expert > 0 ? std::max(1.0, in.ctas / l1_per_expert) : 0;
  c.wave_weight_bytes = c.experts_per_wave * expert_weight_bytes;
  c.locality_bound = c.wave_weight_bytes > l2_bytes;
  // Every block reads its expert's W1 + W2 once; only the reads of experts with several blocks
  // can hit L2 through the order (docs/megamoe.md "Order choice").
  c.reuse_expected = modelled_share >= 0;
  c.reuse_share = c.reuse_expected ? modelled_share : blocks > 0 ? double(shared_blocks) / blocks : 0;
  c.weight_reuse = c.reuse_share >= kOrderMinReuseShare;
  c.drain_bound = plan.wave_drain_bound;
  const double work = plan.l1_tiles * plan.l1_tile_us + plan.l2_tiles * plan.l2_tile_us;  // all CTAs' tile time
  const int n2 = (in.hidden + in.l2_n - 1) / in.l2_n;
  c.stall_share = work > 0 ? plan.waves * n2 * 0.5 * plan.l1_tile_us / work : 0;
  if (il_plan != nullptr) {
    const double d = list_end_idle_share(plan, in.ctas) - list_end_idle_share(*il_plan, in.ctas);
    c.end_idle_share = d > 1e-9 ? d : 0.0;  // equal ends (rounding aside): no term
  }
  const double mib = 1024.0 * 1024.0;
  const std::string reuse =
      fmt::format("{}{:.1f} % of the {}-row blocks{} share their expert's weight tiles with another block",
                  c.reuse_expected ? "an expected " : "", 100 * c.reuse_share, in.block_m,
                  c.reuse_expected ? " (balanced random routing)" : "");
  if (c.locality_bound && c.weight_reuse) {
    c.schedule = MoeSchedule::expert_wave;
    c.why = fmt::format("a wave's weights ({:.0f} experts, {:.0f} MiB of W1 + W2) exceed L2 ({:.0f} MiB) and {}: "
                        "interleaving would keep two waves' weights in flight{}",
                        c.experts_per_wave, c.wave_weight_bytes / mib, l2_bytes / mib, reuse,
                        c.drain_bound ? " (the waves are drain-bound too; locality wins)" : "");
  } else if (c.drain_bound) {
    c.schedule = MoeSchedule::interleaved;
    c.why = fmt::format("expert waves would inject combine stores at {:.0f} GB/s, above R_agg: interleaving spreads them",
                        plan.wave_store_gbps);
  } else if (!c.weight_reuse) {
    c.schedule = MoeSchedule::interleaved;
    c.why = fmt::format("only {} (< {:.0f} %): most weight tiles are read once whatever the order, so there is no L2 "
                        "locality to lose{}; interleaving's lead hides the Linear-2 input waits",
                        reuse, 100 * kOrderMinReuseShare,
                        c.locality_bound ? fmt::format(" although a wave's weights ({:.0f} MiB) exceed L2", c.wave_weight_bytes / mib)
                                         : std::string());
  } else if (c.stall_share + c.end_idle_share > kOrderStallShare) {
    c.schedule = MoeSchedule::interleaved;
    c.why = fmt::format("expert waves would leave Linear-2 tiles waiting on their inputs for ~{:.1f} % of the tile time{}",
                        100 * c.stall_share,
                        c.end_idle_share > 0
                            ? fmt::format(" and CTAs idle at the list's end for ~{:.1f} % more than interleaved",
                                          100 * c.end_idle_share)
                            : std::string());
  } else {
    c.schedule = MoeSchedule::expert_wave;
    const std::string drain = plan.l2_remote_bytes > 0
                                  ? fmt::format("the waves' combine stores ({:.0f} GB/s) stay under R_agg", plan.wave_store_gbps)
                                  : std::string("no remote combine stores");
    c.why = fmt::format("{} and ~{:.1f} % input stalls at wave ends{}: expert-wave keeps a wave's tiles of one kind together",
                        drain, 100 * c.stall_share,
                        c.end_idle_share > 0 ? fmt::format(", ~{:.1f} % more idle at the list's end", 100 * c.end_idle_share)
                                             : std::string());
  }
  return c;
}

// Both orders' plans of `in`, and the rule with the end term.
MoeOrderChoice choose_order_planned(const model::Params& p, const MoeScheduleInput& in, double l2_bytes,
                                    double expert_weight_bytes, double modelled_share) {
  const MoeSchedulePlan ew = plan_moe_schedule(p, in, MoeSchedule::expert_wave);
  const MoeSchedulePlan il = plan_moe_schedule(p, in, MoeSchedule::interleaved);
  return choose_order_with(ew, in, l2_bytes, expert_weight_bytes, modelled_share, &il);
}

// W1 + W2 of one expert in W8A8 (fp8: 2 I x H + H x I bytes), the weights the order rule assumes.
double w8a8_expert_weight_bytes(const MoeScheduleInput& in) { return 3.0 * double(in.hidden) * double(in.intermediate); }

}  // namespace

MoeOrderChoice choose_order(const MoeSchedulePlan& plan, const MoeScheduleInput& in, double l2_bytes,
                            double expert_weight_bytes) {
  return choose_order_with(plan, in, l2_bytes, expert_weight_bytes, -1.0);
}

MoeOrderChoice choose_order(const MoeSchedulePlan& plan, const MoeScheduleInput& in, double l2_bytes,
                            double expert_weight_bytes, double reuse_share) {
  if (!(reuse_share >= 0 && reuse_share <= 1))
    throw InvalidArgument(fmt::format("moe order: reuse share {} must be in [0, 1]", reuse_share));
  return choose_order_with(plan, in, l2_bytes, expert_weight_bytes, reuse_share);
}

MoeOrderChoice choose_layer_order(const model::Params& p, MoeScheduleInput in, int block_m, double l2_bytes) {
  in.block_m = block_m;
  return choose_order_planned(p, in, l2_bytes, w8a8_expert_weight_bytes(in), -1.0);
}

double list_end_idle_share(const MoeSchedulePlan& plan, int ctas) {
  if (ctas < 1) throw InvalidArgument(fmt::format("moe order: ctas must be >= 1, got {}", ctas));
  if (plan.tiles.empty()) return 0;
  // Each CTA's next free time; the earliest takes the next tile of the list.
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int i = 0; i < ctas; ++i) free_at.push(0.0);
  double work = 0, end = 0;
  for (const ScheduledTile& t : plan.tiles) {
    const double us = t.kind == TileKind::linear1 ? plan.l1_tile_us : plan.l2_tile_us;
    const double done = free_at.top() + us;
    free_at.pop();
    free_at.push(done);
    work += us;
    end = std::max(end, done);
  }
  return end > 0 ? 1.0 - work / (double(ctas) * end) : 0.0;
}

double expected_reuse_share(long long routed_tokens, int experts, int top_k, int block_m) {
  if (routed_tokens < 1 || experts < 1 || top_k < 1 || top_k > experts || block_m < 1)
    throw InvalidArgument(fmt::format("moe order: expected reuse share needs tokens >= 1, experts >= 1, "
                                      "1 <= top_k <= experts and block_m >= 1 (got {}, {}, {}, {})",
                                      routed_tokens, experts, top_k, block_m));
  const long long n = routed_tokens;
  auto blocks = [block_m](long long r) { return (r + block_m - 1) / block_m; };
  if (top_k == experts) return blocks(n) >= 2 ? 1.0 : 0.0;  // every expert gets every token
  // rows of one expert ~ Binomial(n, q): P(r) = C(n, r) q^r (1 - q)^(n - r), in log space.
  const double q = double(top_k) / experts;
  // log(x!) by lgamma_r: lgamma writes the global signgam (a data race when layers are
  // constructed on several threads).
  auto log_fact = [](double x) {
    int sign;
    return ::lgamma_r(x + 1, &sign);
  };
  const double log_q = std::log(q), log_1q = std::log1p(-q), log_n = log_fact(double(n));
  double all = 0, shared = 0;  // expected blocks of one expert; of those with >= 2 blocks
  for (long long r = 1; r <= n; ++r) {
    const double lp = log_n - log_fact(double(r)) - log_fact(double(n - r)) + double(r) * log_q +
                      double(n - r) * log_1q;
    if (lp < -700) continue;  // < 1e-304: nothing to add
    const double b = double(blocks(r)) * std::exp(lp);
    all += b;
    if (blocks(r) >= 2) shared += b;
  }
  return all > 0 ? std::min(1.0, shared / all) : 0.0;
}

MoeOrderChoice choose_balanced_layer_order(const model::Params& p, const MoeLayerConfig& c, double l2_bytes) {
  if (c.world < 1 || c.experts < 1 || c.experts % c.world != 0 || c.tokens < 1 || c.top_k < 1)
    throw InvalidArgument(fmt::format("moe order: layer needs tokens, top_k >= 1 and world dividing experts "
                                      "(tokens {}, top_k {}, experts {}, world {})",
                                      c.tokens, c.top_k, c.experts, c.world));
  // As MegaMoeLayer plans the balanced load: every local expert at the mean rows.
  const long long routed_rows = static_cast<long long>(c.tokens) * c.world * c.top_k;
  const int epr = c.experts / c.world;
  MoeScheduleInput in;
  in.rows_per_expert.assign(epr, static_cast<int>(std::max(1LL, routed_rows / c.world / epr)));
  in.hidden = c.hidden;
  in.intermediate = c.intermediate;
  const MegaTileShape tile = mega_tile_shape(choose_mega_tile(routed_rows, c.experts));
  in.block_m = tile.block_m;
  in.l1_n = tile.l1_n;
  in.l2_n = tile.l2_n;
  in.ctas = c.ctas;
  in.world = c.world;
  in.tile_tflops = c.tile_tflops;
  const double share =
      expected_reuse_share(static_cast<long long>(c.tokens) * c.world, c.experts, c.top_k, tile.block_m);
  return choose_order_planned(p, in, l2_bytes, w8a8_expert_weight_bytes(in), share);
}

MoeOrderChoice w4a8_layer_order(const MoeOrderChoice& w8a8) {
  MoeOrderChoice c = w8a8;
  c.schedule = MoeSchedule::interleaved;
  c.why = "W4A8 weights: the tiles are bound by the 4-bit conversion, not by weight reads, so there is little L2 "
          "locality to gain; interleaving's lead hides the Linear-2 input waits";
  return c;
}

void to_json(nlohmann::json& j, const MoeOrderChoice& c) {
  j = nlohmann::json{{"schedule", schedule_name(c.schedule)}, {"why", c.why},
                     {"experts_per_wave", c.experts_per_wave}, {"wave_weight_bytes", c.wave_weight_bytes},
                     {"locality_bound", c.locality_bound}, {"reuse_share", c.reuse_share},
                     {"reuse_expected", c.reuse_expected}, {"weight_reuse", c.weight_reuse},
                     {"drain_bound", c.drain_bound}, {"stall_share", c.stall_share},
                     {"end_idle_share", c.end_idle_share}};
}

}  // namespace xstage::moe
