// Ulysses store shaping from the Burst-Gap model (docs/ulysses.md, "Shaping").
//
// A finished slice of every warp group of every CTA enters the X-Stage at about the same
// time (the CTAs run in lockstep waves): V = K * W * slice_bytes * (P-1)/P remote bytes. The
// model says such a burst is absorbed at the issue rate as long as it fits the stage - and
// the smallest stage is the cold one, Q_cold(K), which on H200 is what the first tens of MB of
// a launch see (docs/model.md) - and it drains at R_agg. So fused-shaped splits a slice into
// the fewest chunks that each fit Q_cold(K), and spaces them so that a chunk has drained
// (chunk / R_agg) before the next one starts, within the next tile's steps. When one slice
// already fits, it goes as one chunk at the next tile's first step. If the slices of a tile
// arrive faster than R_agg drains them (drain-bound), no chunking avoids backpressure; the
// plan says so and spreads the slice evenly over the tile.
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
  const int steps = std::max(1, in.steps_per_tile);  // hook calls a slice can be spread over
  out.slice_remote_bytes = double(in.ctas) * in.consumer_wgs * in.slice_bytes * remote_fraction;
  out.stage_budget_bytes = p.q_cold_bytes(in.ctas);
  const double tile_us = steps * in.step_us;
  out.drain_bound = out.slice_remote_bytes > p.r_agg_gbps * kBytesPerUsPerGbps * tile_us;
  int chunks = static_cast<int>(std::ceil(out.slice_remote_bytes / std::max(out.stage_budget_bytes, 1.0)));
  chunks = std::clamp(chunks, 1, vecs_per_slice);
  out.chunk_rule = chunks == 1 ? "stage: a whole slice fits Q_cold(K)" : "stage: chunks of at most Q_cold(K)";
  if (out.drain_bound) {
    chunks = std::min(vecs_per_slice, steps);
    out.chunk_rule = "drain-bound: slices arrive faster than R_agg drains; spread evenly";
  }
  out.chunk_vecs = (vecs_per_slice + chunks - 1) / chunks;
  out.chunks_per_slice = (vecs_per_slice + out.chunk_vecs - 1) / out.chunk_vecs;
  out.chunk_remote_bytes = out.slice_remote_bytes * out.chunk_vecs / vecs_per_slice;
  out.drain_us_per_chunk = out.chunk_remote_bytes / (p.r_agg_gbps * kBytesPerUsPerGbps);
  // Spacing: a chunk drains before the next starts, and all chunks fit in the tile's steps.
  // The kernel spaces chunks by a power of two (a shift, so its per-step test has no
  // division): the drain spacing rounded up, unless that no longer fits the tile, then down.
  const int every_drain = static_cast<int>(std::ceil(out.drain_us_per_chunk / in.step_us));
  const int every_fit = std::max(1, steps / out.chunks_per_slice);
  auto pow2_at_least = [](int v) { int p = 1; while (p < v) p *= 2; return p; };
  auto pow2_at_most = [](int v) { int p = 1; while (2 * p <= v) p *= 2; return p; };
  int every = std::max(1, every_drain);
  every = pow2_at_least(every) <= every_fit ? pow2_at_least(every) : pow2_at_most(std::min(every, every_fit));
  out.chunk_every = out.chunks_per_slice == 1 ? 1 : every;

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
  const Prediction fused = predict(p, in.ctas, in.slice_bytes, tile_us);
  out.predicted_fused_span_us = fused.issue_us;
  out.predicted_fused_cold_span_us = fused.cold_issue_us;
  const long long chunk_bytes = static_cast<long long>(out.chunk_vecs) * in.wg_bytes_per_vec;
  // A slice that leaves as one chunk repeats once per tile, like fused; several chunks of a
  // slice follow each other chunk_every steps apart (the tightest spacing they see).
  const double shaped_gap_us = out.chunks_per_slice == 1 ? tile_us : out.chunk_every * in.step_us;
  const Prediction shaped = predict(p, in.ctas, chunk_bytes, shaped_gap_us);
  out.predicted_shaped_span_us = shaped.issue_us * out.chunks_per_slice;
  return out;
}

void to_json(nlohmann::json& j, const UlyssesPlan& p) {
  j = nlohmann::json{{"chunk_vecs", p.chunk_vecs},
                     {"chunks_per_slice", p.chunks_per_slice},
                     {"chunk_every", p.chunk_every},
                     {"slice_remote_bytes", p.slice_remote_bytes},
                     {"chunk_remote_bytes", p.chunk_remote_bytes},
                     {"stage_budget_bytes", p.stage_budget_bytes},
                     {"drain_us_per_chunk", p.drain_us_per_chunk},
                     {"drain_bound", p.drain_bound},
                     {"chunk_rule", p.chunk_rule},
                     {"comm_ctas", p.comm_ctas},
                     {"comm_needed_gbps", p.comm_needed_gbps},
                     {"predicted_fused_span_us", p.predicted_fused_span_us},
                     {"predicted_fused_cold_span_us", p.predicted_fused_cold_span_us},
                     {"predicted_shaped_span_us", p.predicted_shaped_span_us}};
}

}  // namespace xstage::model
