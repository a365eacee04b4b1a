// Tile order of one rank's Mega-MoE persistent kernel (issue 8; design in docs/megamoe.md):
// the expert-wave baseline and the X-Stage-aware interleaved schedule, derived from the
// fitted Burst-Gap model. Plain host code (no CUDA), CPU-tested; the kernel walks the list.
//
// Work of one rank: for each local expert e with n_e dispatched rows, m-blocks of block_m
// rows; Linear-1 tiles (m-block x l1_n channels of the SwiGLU output h) and Linear-2 tiles
// (m-block x l2_n channels of the hidden output, whose rows are stored to their tokens'
// owners: the combine stores). A Linear-2 tile of (e, m) needs every Linear-1 tile of (e, m).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xstage/model.hpp"

namespace xstage::moe {

enum class TileKind : int { linear1 = 1, linear2 = 2 };

struct ScheduledTile {
  TileKind kind;
  int expert;   // local expert index
  int m_block;  // rows [m_block * block_m, ...) of the expert's dispatched rows
  int n_block;  // output channel block
};

// automatic: the order choose_order picks for the layer (MegaMoeLayer resolves it); the planner
// itself takes the two concrete orders only.
enum class MoeSchedule { expert_wave, interleaved, automatic };

struct MoeScheduleInput {
  std::vector<int> rows_per_expert;  // dispatched rows of each local expert (>= 0)
  int hidden = 0;                    // multiple of 128; K-dim of Linear-1
  int intermediate = 0;              // multiple of l1_n
  int block_m = 64;
  int l1_n = 128;                    // h channels per Linear-1 tile (gate + up: 2 x l1_n weight rows)
  int l2_n = 256;                    // hidden channels per Linear-2 tile (the last one may be partial)
  int ctas = 0;                      // persistent CTAs (K producers of combine stores)
  int world = 2;                     // ranks P
  double remote_fraction = -1;       // share of combine rows owned by other ranks; < 0: (P-1)/P
  double tile_tflops = 0;            // one CTA's FP8 throughput, TFLOP/s (e.g. measured GEMM TFLOP/s / SMs)
};

struct MoeSchedulePlan {
  std::vector<ScheduledTile> tiles;  // the order the kernel's CTAs take tiles in
  int waves = 0;                     // expert waves (both schedules group experts the same way)
  int l1_tiles = 0, l2_tiles = 0;
  double l1_tile_us = 0, l2_tile_us = 0;  // predicted from FLOPs and tile_tflops
  double l2_remote_bytes = 0;             // remote combine bytes of one full Linear-2 tile
  // expert-wave: K CTAs finish Linear-2 tiles together; rate K * bytes / l2_tile_us.
  double wave_store_gbps = 0;
  bool wave_drain_bound = false;          // wave_store_gbps > R_agg: the X-Stage fills
  // interleaved: share f of Linear-2 tiles in the mixed stream, one Linear-2 tile after every
  // `l1_per_l2` Linear-1 tiles; f is capped so the mixed stream's store rate stays <= R_agg.
  double l2_share = 0;
  int l1_per_l2 = 0;
  int lead_tiles = 0;                     // a Linear-2 tile comes >= lead_tiles after its inputs' last tile
  // Linear-2 tiles kept for the end of the list, after every Linear-1 tile (the last blocks',
  // whole blocks): one per CTA where a Linear-2 tile is longer than a Linear-1 tile, so the call
  // ends in one round of them rather than in the last lead's few long ones; else 0
  // (docs/megamoe.md §Tile claiming, "The end of the list").
  int tail_l2_tiles = 0;
  double interleaved_store_gbps = 0;
  std::string rule;                       // which bound set the mix
  // Model predictions of one CTA's sender-visible combine-store span per Linear-2 tile.
  double predicted_wave_span_us = 0;
  double predicted_interleaved_span_us = 0;
};

// Throws InvalidArgument for empty or negative rows, sizes not multiples of the tile sizes,
// ctas < 1, world < 1, or a non-positive throughput.
MoeSchedulePlan plan_moe_schedule(const model::Params& p, const MoeScheduleInput& in, MoeSchedule which);

void to_json(nlohmann::json& j, const MoeSchedulePlan& p);  // without the tile list

// The order the model picks for one rank's work, and why (docs/megamoe.md "Order choice"):
//   * a wave's weights (W1 + W2 of the experts whose Linear-1 tiles start in one round of CTAs)
//     larger than L2 and weight reuse (reuse_share >= kOrderMinReuseShare): expert-wave
//     (interleaving keeps two waves' weights in flight);
//   * else interleaved where expert waves would be drain-bound (the plan's wave_drain_bound:
//     K CTAs' combine stores faster than R_agg);
//   * else interleaved without weight reuse (reuse_share < kOrderMinReuseShare: most m-blocks
//     are their expert's only block, so most weight tiles are read once whatever the order and
//     there is no locality to lose; interleaving's lead hides the Linear-2 input waits);
//   * else interleaved where Linear-2 tiles would wait on their inputs at wave ends, plus the
//     idle CTAs of the expert-wave list's end beyond the interleaved list's (end_idle_share), come
//     to more than kOrderStallShare of a CTA's tile time (estimate of the waits: the wave's last
//     block's n2 Linear-2 tiles each wait about half a Linear-1 tile; the end: list_end_idle_share
//     of both lists, given only to the overloads that plan both);
//   * else expert-wave (nothing to hide; a wave's tiles of one kind stay together).
// reuse_share: the share of the rank's m-blocks (of in.block_m rows) that belong to experts with
// >= 2 blocks. Every block reads all of its expert's W1 + W2 once, so this is the share of the
// weight reads whose tiles another block reads too: the only reads an order can turn into L2
// hits. kOrderMinReuseShare = 1/2: locality decides the order only where it can affect most of
// the layer's weight reads (and tiles).
// plan: plan_moe_schedule of `in` (either order: the fields used do not depend on it);
// l2_bytes: the GPU's L2; expert_weight_bytes: W1 + W2 of one expert. Throws InvalidArgument for
// non-positive sizes.
inline constexpr double kOrderStallShare = 0.05;
inline constexpr double kOrderMinReuseShare = 0.5;
struct MoeOrderChoice {
  MoeSchedule schedule = MoeSchedule::expert_wave;
  std::string why;
  double experts_per_wave = 0;
  double wave_weight_bytes = 0;
  bool locality_bound = false;  // wave_weight_bytes > l2_bytes
  double reuse_share = 0;       // m-blocks of experts with >= 2 blocks / all m-blocks (0 without blocks)
  bool reuse_expected = false;  // reuse_share modelled (expected_reuse_share), not counted from the rows
  bool weight_reuse = false;    // reuse_share >= kOrderMinReuseShare
  bool drain_bound = false;     // plan.wave_drain_bound
  double stall_share = 0;
  // Expert-wave's end idle minus interleaved's (list_end_idle_share), >= 0; 0 where the caller
  // planned only one order.
  double end_idle_share = 0;
};
// The idle share at the end of a tile list: CTAs take the plan's tiles in list order, each the
// next one as it frees (dynamic claiming), tiles of plan.l1_tile_us / plan.l2_tile_us, no input
// waits; 1 - work / (ctas x the last finish). An expert-wave list can end in a few long Linear-2
// tiles that most CTAs wait out; the interleaved list ends in about one per CTA
// (docs/megamoe.md "Order choice", "The end of the list"). 0 for an empty list; throws
// InvalidArgument for ctas < 1.
double list_end_idle_share(const MoeSchedulePlan& plan, int ctas);
MoeOrderChoice choose_order(const MoeSchedulePlan& plan, const MoeScheduleInput& in, double l2_bytes,
                            double expert_weight_bytes);
// The same rule with a modelled reuse share (expected_reuse_share; reuse_expected is set and the
// reason calls the share expected) instead of the one counted from in.rows_per_expert, which then
// only feed the wave size. Throws InvalidArgument as above and for a share outside [0, 1].
MoeOrderChoice choose_order(const MoeSchedulePlan& plan, const MoeScheduleInput& in, double l2_bytes,
                            double expert_weight_bytes, double reuse_share);
// The order for one rank's routed rows (`moe-routing --plan`): the rule on both plans of `in`
// (expert-wave for the measures, interleaved too for the end term) with blocks of `block_m` rows
// (the layer's automatic tile) and W8A8 weights (W1 + W2 = 3 H I bytes per expert).
MoeOrderChoice choose_layer_order(const model::Params& p, MoeScheduleInput in, int block_m, double l2_bytes);

// The expected reuse_share of one rank's work under balanced random routing: `routed_tokens`
// tokens (tokens per rank x ranks), each sent to top_k distinct experts of `experts` uniformly at
// random (moe::make_routing's balanced routing), so an expert's rows are Binomial(routed_tokens,
// top_k / experts). With b(r) = ceil(r / block_m) blocks for r rows:
//   sum_r P(r) b(r) [b(r) >= 2]  /  sum_r P(r) b(r)
// (expected blocks of experts with >= 2 blocks over expected blocks: the share of a rank with
// many experts). Exact: every r, each P(r) from lgamma in log space (terms below e^-700 skipped),
// O(routed_tokens). 0 when no expert can have two blocks. Throws InvalidArgument for
// routed_tokens < 1, experts < 1, top_k outside [1, experts], block_m < 1.
double expected_reuse_share(long long routed_tokens, int experts, int top_k, int block_m);

// What a Mega-MoE layer knows at construction (no routing yet): the shape, tokens per rank,
// ranks, persistent CTAs per rank and one CTA's FP8 TFLOP/s.
struct MoeLayerConfig {
  int hidden = 0, intermediate = 0, experts = 0, top_k = 0;
  int tokens = 0;  // per rank
  int world = 1;
  int ctas = 0;
  double tile_tflops = 0;
};
// The order a Mega-MoE layer's automatic schedule takes (MegaMoeLayer::order_choice(), bench
// `model-order`, `moe-routing --plan`'s layer line), for a balanced load: the automatic tile's
// block height (choose_mega_tile), the wave size from every local expert at the mean rows
// (tokens x top_k x world / experts, at least 1) as MegaMoeLayer plans them, and the reuse share
// expected under balanced random routing (expected_reuse_share), W8A8 weights. A skewed routing
// is not modelled: its routed rows (choose_layer_order) may pick the other order. Throws
// InvalidArgument for a config the planner or the share refuse (world not dividing experts).
MoeOrderChoice choose_balanced_layer_order(const model::Params& p, const MoeLayerConfig& c, double l2_bytes);
// The same layer with W4A8 weights (docs/megamoe.md "Order choice"): interleaved, whatever the
// W8A8 pick (w8a8), whose measures it keeps. The fused W4A8 tiles are bound by converting 4-bit
// weights in shared memory, not by weight reads, so expert-wave's L2 locality buys little while
// its wave-end Linear-2 input waits remain.
MoeOrderChoice w4a8_layer_order(const MoeOrderChoice& w8a8);
void to_json(nlohmann::json& j, const MoeOrderChoice& c);
const char* schedule_name(MoeSchedule s);  // "expert-wave", "interleaved", "automatic"

}  // namespace xstage::moe
