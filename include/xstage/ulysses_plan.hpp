// How the Ulysses operator shapes its stores, derived from the fitted Burst-Gap model
// (docs/ulysses.md, "Shaping"). Plain host code (no CUDA): CPU-tested, and used by the
// operator with the measured step time of the attention kernel it runs.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "xstage/model.hpp"

namespace xstage::model {

struct UlyssesPlanInput {
  int world = 0;                  // P ranks
  int ctas = 0;                   // persistent attention CTAs: the producers K
  int consumer_wgs = 0;           // 64-row slices per tile, each stored by its own warp group
  long long slice_bytes = 0;      // bytes of one slice (64 rows x head_dim x element size)
  long long wg_bytes_per_vec = 0; // bytes a warp group stores per 16-byte store per thread (128 x 16)
  int steps_per_tile = 0;         // mainloop steps of a tile at which stores may be issued (>= 0)
  double step_us = 0;             // measured duration of one such step (> 0)
  double attention_us = 0;        // measured attention-alone time of the call (> 0)
  long long remote_bytes = 0;     // bytes this rank sends to other ranks per call
  int sm_count = 0;               // SMs of the device (bounds the comm-sm CTAs)
};

struct UlyssesPlan {
  // fused-shaped
  int chunk_vecs = 0;              // 16-byte stores per thread in one chunk
  int chunks_per_slice = 0;        // chunks a slice leaves in
  int chunk_every = 0;             // mainloop steps from one chunk to the next (a power of two)
  double slice_remote_bytes = 0;   // remote bytes of one slice of every warp group of every CTA
  double chunk_remote_bytes = 0;   // the same for one chunk: one burst into the X-Stage
  double stage_budget_bytes = 0;   // Q_cold(K): what the stage absorbs without backpressure
  double drain_us_per_chunk = 0;   // chunk_remote_bytes / R_agg
  bool drain_bound = false;        // slices arrive faster than R_agg drains: shaping cannot help
  std::string chunk_rule;          // which bound set the chunking
  // comm-sm
  int comm_ctas = 0;               // dedicated copier CTAs (SMs)
  double comm_needed_gbps = 0;     // remote bytes / attention time
  // Model predictions of one slice's sender-visible store span (issue time), remote slices:
  double predicted_fused_span_us = 0;        // the slice as one burst, warm X-Stage
  double predicted_fused_cold_span_us = 0;   // same, first burst after launch (Q_cold)
  double predicted_shaped_span_us = 0;       // chunks_per_slice chunk bursts, warm
};

// Throws xstage::InvalidArgument on inputs out of range (world < 2, ctas or wgs < 1,
// non-positive bytes or times, slice not a multiple of the per-vector bytes).
UlyssesPlan plan_ulysses(const Params& p, const UlyssesPlanInput& in);

void to_json(nlohmann::json& j, const UlyssesPlan& p);

}  // namespace xstage::model
