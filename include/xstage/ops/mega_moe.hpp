// Mega-MoE: the whole expert-parallel MoE layer in one persistent kernel per rank and call
// (issue 8; docs/megamoe.md). Same inputs, outputs and math as the unfused EpMoeLayer
// (ep_moe.hpp) — routing counts exchanged on device, push dispatch, Linear-1 + SwiGLU x router
// weight (fp8 h), Linear-2 with each output row stored straight into its token owner's combine
// buffer, top-k sum on the owner — with the tile order chosen by a flag:
//   expert_wave  a wave's Linear-1 tiles, then its Linear-2 tiles (concentrated combine bursts);
//   interleaved  Linear-2 tiles spread between Linear-1 tiles, the mix from the Burst-Gap model.
// Every cross-GPU wait is bounded; a rank that never calls makes the others' call end with a
// timeout in the team's DeviceStatus (Team::check_device_status turns it into an error).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "xstage/mega_tile.hpp"
#include "xstage/model.hpp"
#include "xstage/moe_schedule.hpp"
#include "xstage/ops/ep_moe.hpp"
#include "xstage/team.hpp"

namespace xstage::ops {

struct MegaMoeOptions {
  // interleaved, expert_wave, or automatic (the layer's order_choice(): the model's pick,
  // moe::choose_balanced_layer_order; docs/megamoe.md "Order choice").
  moe::MoeSchedule schedule = moe::MoeSchedule::interleaved;
  // Timing control: every combine row is stored into this rank's own buffer instead of its
  // owner's (local stores only); the layer's output is then meaningless.
  bool control_local = false;
  bool record_spans = false;  // keep each Linear-2 piece's combine-store span and the tile trace (last_spans)
  // Tile claiming: true = each CTA takes the next list position from a per-call counter (in
  // time order; the default); false = the static split c, c + K, ... (for comparison).
  bool dynamic_claim = true;
  // Interleaved only, for studies: Linear-1 tiles between a block's last input and its first
  // Linear-2 tile (< 0: the plan's lead_tiles, one round of CTAs).
  int lead_tiles = -1;
  // Interleaved only: how many Linear-2 tiles to keep for the end of the list, after every
  // Linear-1 tile (the last blocks' Linear-2 tiles, whole blocks). < 0: automatic, the default:
  // one per CTA where the plan's Linear-2 tile is longer than its Linear-1 tile
  // (MoeSchedulePlan::tail_l2_tiles), else none; 0: none (the plain interleaved list); N > 0: N
  // (docs/megamoe.md §Tile claiming, "The end of the list").
  int tail_l2_tiles = -1;
  // Interleaved only, for studies: Linear-1 tiles between consecutive Linear-2 tiles (the list's
  // mix, moe_tile_order.hpp's r). <= 0: the plan's (MoeSchedulePlan::l1_per_l2, the Burst-Gap model's).
  int l1_per_l2 = -1;
  // The kernel's tile configuration (xstage/mega_tile.hpp; docs/megamoe.md "Tile
  // configurations"): 64 x 256 for both GEMMs, 128 x 256 (the grouped GEMM's 128-row tiles;
  // 128-row m-blocks, 2 counts per Linear-1 tile), or automatic (the default: 128 x 256 once the
  // layer's mean routed rows per expert reach 32, moe::choose_mega_tile; per-token activations:
  // m256n128_tok, their only tile).
  moe::MegaTile tile = moe::MegaTile::automatic;
};

// Where the tiles' time went in one recorded call (record_spans), over all CTAs of the rank;
// per tile kind (Linear-1, Linear-2) means in microseconds.
struct MegaMoeTileKind {
  long long tiles = 0;
  double mainloop_us = 0;    // consumer: from taking the tile to its accumulators (includes waiting for TMA data)
  double epilogue_us = 0;    // consumer: the epilogue (h + counter, or combine stores; 128 x 256
                             // Linear-2: staging the tile for the store warps)
  double store_tail_us = 0;  // the store tail: copy-out, fences, group barrier, counter release (part of
                             // the epilogue, except 128 x 256 Linear-2: the store warps' copy-out)
  // Linear-1 only: from the gate group's mainloop end to the up group's values being handed
  // over, and to the fp8 rows being staged (before the store tail).
  double handover_us = 0, staged_us = 0;
  double input_wait_us = 0;  // producer: waiting for the tile's inputs (rows arrived / Linear-1 counter)
  // Measurement build XSTAGE_MEGA_PRODUCER_TRACE, register-operand kernels only (else 0): means over
  // the tiles that follow another on their CTA, of the gap before the tile (the previous tile's
  // end to this one's start), the part of it the consumers waited for the producer's hand-over
  // (its push after the previous tile's end), the producer's claim to push (claim + input gate),
  // how late its claim began after the previous tile's end, and push to its last K-block load issued.
  long long producer_tiles = 0;
  double gap_before_us = 0, waited_push_us = 0, claim_to_push_us = 0, claim_late_us = 0, loads_us = 0;
};
// One recorded call's CTA time split into consecutive phases (means over the CTAs that ran at
// least one tile, microseconds); per CTA they add up to its start-to-end time.
struct MegaMoePhases {
  double prologue_us = 0;  // CTA start to its first tile: routing histogram, count exchange, push dispatch
  double l1_us = 0;        // Linear-1 tiles (mainloop + epilogue), summed per CTA
  double l2_us = 0;        // Linear-2 tiles (mainloop + epilogue; the combine stores are in the epilogue)
  double gaps_us = 0;      // first tile to last tile end outside tiles: tile queue and input waits
  double combine_us = 0;   // last tile end to the reduce: publish, wait for every combine piece
  double reduce_us = 0;    // the top-k sums of this rank's tokens, to the CTA's end
  int ctas = 0;            // CTAs averaged (those with a tile and all clocks)
};
struct MegaMoeTileStats {
  MegaMoeTileKind l1, l2;
  MegaMoePhases phases;
  double first_tile_us = 0;   // median over CTAs: CTA start to its first tile (prologue)
  double busy_share = 0;      // sum over CTAs of tile time / sum of CTA time (start to end incl. reduce)
  double last_tile_end_us_min = 0, last_tile_end_us_max = 0;  // over CTAs, from the earliest CTA start
};

// Sender-visible combine-store spans of one call (record_spans), per Linear-2 warp-group piece
// (64 rows x 128 columns), in microseconds from SM cycles and the clock measured in the call.
struct MegaMoeSpans {
  std::vector<double> us;
  double sm_ghz = 0;   // median over CTAs of cycles / ns across the call
  double kernel_us = 0;  // longest CTA, first clock read to last
  MegaMoeTileStats tiles;
};

class MegaMoeLayer {
 public:
  // Collective (symmetric buffers). `model` gives the interleaved mix (its R_agg); tile_tflops
  // is one CTA's FP8 throughput used for tile times (the schedule's inputs).
  // ctas: persistent CTAs per rank (0: one per SM; fewer is for tests: more tiles per CTA).
  // per_token_scratch: the layer will take per-token W4A8 calls (EpMoeRankInputs::act =
  // per_token): it then holds that kernel's scratch, a bf16 copy of h [cap, I] and per-token
  // maxima [cap] per rank, allocated here (never during calls: an allocation while another
  // virtual rank's kernel waits on this one could serialise them). InvalidArgument in a build
  // without the per-token kernel (per_token_w4a8_built()).
  MegaMoeLayer(Team& team, const EpMoeConfig& cfg, const model::Params& model, double tile_tflops = 7.0,
               int ctas = 0, bool per_token_scratch = false);
  ~MegaMoeLayer();
  MegaMoeLayer(const MegaMoeLayer&) = delete;
  MegaMoeLayer& operator=(const MegaMoeLayer&) = delete;

  // One call of local rank i on stream s (asynchronous); every rank calls it the same number of
  // times with the same schedule.
  void forward(int i, const EpMoeRankInputs& in, cudaStream_t s, const MegaMoeOptions& opt = {});

  // After the stream of a record_spans call finished: that call's spans on local rank i.
  MegaMoeSpans last_spans(int i) const;

  // The tile configuration a call with `requested`, weights `quant` and activation scales `act`
  // runs (automatic: this layer's choice by its mean routed rows per expert for W8A8; 64 x 256 for
  // W4A8 with per-128 activations; with per-token ones m128n256_tok below
  // moe::kMegaTokWideMaxMeanRows mean rows where the build has it, else m256n128_tok);
  // InvalidArgument for an unknown value, 128 x 256 with W4A8 weights, a per-token tile with
  // per-128 activations, m128n256_tok in a build without it, or another tile than the per-token
  // ones or W8A8 weights with per-token activations.
  moe::MegaTile resolved_tile(moe::MegaTile requested, MoeQuant quant = MoeQuant::w8a8,
                              MoeActScales act = MoeActScales::per_128) const;
  // The order a call with `requested` and weights `quant` runs (automatic:
  // order_choice(quant).schedule); InvalidArgument for an unknown value. order_choice: the
  // model's pick for this layer (balanced load, the automatic tile, this GPU's L2) and why; with
  // W4A8 weights always interleaved (docs/megamoe.md "Order choice": measured faster at every
  // W4A8 configuration).
  moe::MoeSchedule resolved_schedule(moe::MoeSchedule requested, MoeQuant quant = MoeQuant::w8a8) const;
  const moe::MoeOrderChoice& order_choice(MoeQuant quant = MoeQuant::w8a8) const;

  // Whether this build has the register-operand W4A8 kernel that runs weights in the int4_rs_lut /
  // mxfp4_rs layouts (EpMoeRankInputs::w_layout; CMake option XSTAGE_MEGA_W4A8_RS, on by default;
  // docs/megamoe.md "W4A8 on the register-operand GEMM"). Without it a
  // call with those layouts is an InvalidArgument.
  static bool register_operand_w4a8_built();
  // Whether this build has the per-token W4A8 kernel (EpMoeRankInputs::act = per_token, W1 in the
  // int4_rs_lut_glu / mxfp4_rs_glu form as the unfused layer takes it; CMake option
  // XSTAGE_MEGA_W4A8_TOK, on by default; docs/megamoe.md "Per-token activations in
  // the fused kernel"). Without it, or on a layer constructed without per_token_scratch, a
  // per-token call is an InvalidArgument (before the call counts).
  static bool per_token_w4a8_built();
  // Whether it also has the wide few-row per-token tile, moe::MegaTile::m128n256_tok (CMake option
  // XSTAGE_MEGA_TOK_WIDE, on by default, with the store warps; docs/megamoe.md "Wide per-token
  // tiles").
  static bool per_token_wide_built();

  // The interleaved mix and the model's view of both schedules, for a balanced load.
  const moe::MoeSchedulePlan& plan() const;
  int ctas(int i) const;
  // The Linear-2 tiles rank i's interleaved list keeps for its end under `opt`
  // (MegaMoeOptions::tail_l2_tiles resolved: automatic = the plan's choice with rank i's CTAs).
  int tail_l2_tiles(int i, const MegaMoeOptions& opt) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage::ops
