// Ulysses store shaping from the Burst-Gap model (docs/ulysses.md, "Shaping").
//
// fused-shaped issues chunk_vecs 16-byte stores per thread at every mainloop step. All K CTAs
// run their steps at about the same pace, each with `consumer_wgs` warp groups taking turns,
// so one step period puts V_step = K * wgs * chunk_vecs * wg_bytes_per_vec * (P-1)/P remote
// bytes into the X-Stage. The chunk is the largest for which
//   V_step <= R_agg * step_us   (the previous step's chunk drained before the next arrives:
//                                no standing queue, no backpressure build-up), and
//   V_step <= Q_cold(K)         (a chunk fits the stage even when it is cold, as it is for
//                                the first tens of MB of a launch on H200: docs/model.md),
// but at least one vector, and large enough that a slice leaves within the next tile's steps.
#include "xstage/ulysses_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "xstage/error.hpp"

namespace xstage::model {

UlyssesPlan plan_ulysses(const Params& p, const UlyssesPlanInput& in) {
  auto bad = [](const std::string& m) { throw InvalidArgument("ulysses plan: " + m); };
  if (in.world < 2) bad(fmt::format("world must be >= 2, got {}", in.world));
  if (in.ctas < 1) bad(fmt::format("ctas must be >= 1, got {}", in.ctas));
  if (in.consumer_wgs < 1) bad(fmt::format("consumer_wgs must be >= 1, got {}", in.consumer_wgs));
  if (in.wg_bytes_per_vec <= 0) bad("wg_bytes_per_vec must be > 0");
  if (in.slice_bytes <= 0 || in.slice_bytes % in.wg_bytes_per_vec != 0)
    bad(fmt::format("slice_bytes {} must be a positive multiple of {}", in.slice_bytes, in.wg_bytes_per_vec));
  if (in.steps_per_tile < 0) bad("steps_per_tile must be >= 0");
  if (!(in.step_us > 0) || !std::isfinite(in.step_us)) bad("step_us must be a positive number");
  if (!(in.attention_us > 0) || !std::isfinite(in.attention_us)) bad("attention_us must be a positive number");
  if (in.remote_bytes < 0) bad("remote_bytes must be >= 0");

  UlyssesPlan out;
  const int vecs_per_slice = static_cast<int>(in.slice_bytes / in.wg_bytes_per_vec);
  const double remote_fraction = double(in.world - 1) / in.world;
  const double per_vec_step = double(in.ctas) * in.consumer_wgs * in.wg_bytes_per_vec * remote_fraction;
  out.drain_budget_bytes = p.r_agg_gbps * kBytesPerUsPerGbps * in.step_us;
  out.stage_budget_bytes = p.q_cold_bytes(in.ctas);
  const double budget = std::min(out.drain_budget_bytes, out.stage_budget_bytes);
  int chunk = static_cast<int>(std::floor(budget / per_vec_step));
  out.chunk_rule = out.drain_budget_bytes <= out.stage_budget_bytes ? "drain: R_agg * step" : "stage: Q_cold(K)";
  if (chunk < 1) {
    chunk = 1;
    out.chunk_rule = "minimum: one vector per step (the budget is smaller)";
  }
  // A slice must leave during the next tile's steps; otherwise the rest goes as one burst.
  if (in.steps_per_tile > 0) {
    const int need = (vecs_per_slice + in.steps_per_tile - 1) / in.steps_per_tile;
    if (chunk < need) {
      chunk = need;
      out.chunk_rule = "tile: a slice must leave within the next tile's steps";
    }
  }
  chunk = std::min(chunk, vecs_per_slice);
  out.chunk_vecs = chunk;
  out.chunks_per_slice = (vecs_per_slice + chunk - 1) / chunk;
  out.step_remote_bytes = per_vec_step * chunk;

  // comm-sm: enough copier CTAs that their drain rate (the per-producer rate R(K)/K at the
  // smallest measured K, scaled) is twice the average rate the attention produces remote
  // bytes at (bursts come at wave ends).
  out.comm_needed_gbps = in.remote_bytes / (in.attention_us * kBytesPerUsPerGbps);
  const int k0 = p.r_table.empty() ? 1 : std::max(1, p.r_table.front().producers);
  const double per_cta_gbps = p.r_gbps(k0) / k0;
  int comm = static_cast<int>(std::ceil(2.0 * out.comm_needed_gbps / per_cta_gbps));
  const int max_comm = std::max(2, in.sm_count > 0 ? in.sm_count / 8 : 16);
  out.comm_ctas = std::clamp(comm, 2, max_comm);

  // Predicted spans of a remote slice (K producers, one slice per producer per burst).
  const double tile_us = std::max(1, in.steps_per_tile) * in.step_us;
  const Prediction fused = predict(p, in.ctas, in.slice_bytes, tile_us);
  out.predicted_fused_span_us = fused.issue_us;
  out.predicted_fused_cold_span_us = fused.cold_issue_us;
  const long long chunk_bytes = static_cast<long long>(chunk) * in.wg_bytes_per_vec;
  const Prediction shaped = predict(p, in.ctas, chunk_bytes, in.step_us);
  out.predicted_shaped_span_us = shaped.issue_us * out.chunks_per_slice;
  return out;
}

void to_json(nlohmann::json& j, const UlyssesPlan& p) {
  j = nlohmann::json{{"chunk_vecs", p.chunk_vecs},
                     {"chunks_per_slice", p.chunks_per_slice},
                     {"step_remote_bytes", p.step_remote_bytes},
                     {"drain_budget_bytes", p.drain_budget_bytes},
                     {"stage_budget_bytes", p.stage_budget_bytes},
                     {"chunk_rule", p.chunk_rule},
                     {"comm_ctas", p.comm_ctas},
                     {"comm_needed_gbps", p.comm_needed_gbps},
                     {"predicted_fused_span_us", p.predicted_fused_span_us},
                     {"predicted_fused_cold_span_us", p.predicted_fused_cold_span_us},
                     {"predicted_shaped_span_us", p.predicted_shaped_span_us}};
}

}  // namespace xstage::model
