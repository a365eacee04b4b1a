// Ulysses sequence-parallel attention with the post-attention All-to-All (docs/ulysses.md).
//
// Per rank r of P: input Q, K, V [B, S, H/P, D] (the full sequence, this rank's heads: the
// state after the pre-attention All-to-All), dense, bf16 or fp16, D in {64, 128}, non-causal
// (DiT). Output [B, S/P, H, D] (this rank's sequence shard, all heads) in a symmetric window:
// what the post-attention All-to-All produces. S must be divisible by P (uneven shards are
// rejected with an error that says so) and H by P.
//
// Variants (same attention mainloop):
//   serial       attention into a local buffer, ncclAlltoAll, permute into the output
//   comm_sm      attention (on SMs - C CTAs) writes locally and flags each 64-row slice;
//                C copier CTAs send finished slices to their owners
//   fused        each warp group stores its finished slice straight into the owner's output
//   fused_shaped as fused, but a slice's stores are spread over the next tile's mainloop
//                steps in chunks sized by the Burst-Gap model (model::plan_ulysses)
// Completion: each receiver waits (bounded: TeamOptions::wait_timeout_s) until every rank
// delivered its rows; a rank that never delivers turns into an xstage::Error on the others.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xstage/model.hpp"
#include "xstage/ops/attention.hpp"
#include "xstage/team.hpp"
#include "xstage/ulysses_plan.hpp"

namespace xstage::ops {

enum class UlyssesVariant : int { serial = 0, comm_sm = 1, fused = 2, fused_shaped = 3 };
const char* variant_name(UlyssesVariant v);        // "serial", "comm-sm", "fused", "fused-shaped"
UlyssesVariant parse_variant(const std::string& s);  // throws InvalidArgument listing the names

struct UlyssesConfig {
  AttentionDType dtype = AttentionDType::bf16;
  int batch = 1;
  int seq_len = 0;  // S, the full sequence
  int heads = 0;    // H, all heads
  int head_dim = 128;
  float softmax_scale = 0.f;  // 0: 1/sqrt(head_dim)
};

// Throws InvalidArgument naming the first problem: world < 2 or > 8, sizes, head dim,
// H or S not divisible by P, a per-rank problem the attention kernel cannot take.
void validate_ulysses(const UlyssesConfig& c, int world);

struct UlyssesOptions {
  model::Params model;      // fitted Burst-Gap parameters (e.g. presets/h200-nvlink.json)
  int comm_ctas = 0;        // comm_sm copier CTAs; 0: from the plan
  int chunk_vecs = 0;       // fused_shaped stores per thread per step; 0: from the plan
  bool record_spans = false;  // fused variants record each slice's store-issue cycles
  // The attention tile of every variant: staged (the 128-key tile with the staged epilogue), or
  // long_kv (d = 128: the 128 x 192 long-key tile storing O from registers to each row's owner;
  // fused, comm-sm and serial; fused-shaped is refused; docs/ulysses.md "Long-key tile").
  AttentionTilePolicy tile = AttentionTilePolicy::staged;
};

// One recorded slice (64 rows of one head) of the last fused call.
struct SliceSpan {
  uint64_t cycles = 0;  // SM cycles its warp group spent issuing the slice's stores
  int dest_rank = 0;    // owner of the slice's first row
  int rows = 0;
};

class UlyssesAttention {
 public:
  // Collective: every rank of the team constructs it (local mode: once for all ranks).
  UlyssesAttention(Team& team, const UlyssesConfig& cfg, const UlyssesOptions& opts);
  ~UlyssesAttention();
  UlyssesAttention(const UlyssesAttention&) = delete;
  UlyssesAttention& operator=(const UlyssesAttention&) = delete;

  const UlyssesConfig& config() const;
  void* output(int i) const;  // local index i: [B, S/P, H, D]
  size_t output_bytes() const;
  size_t input_elems() const;  // elements of one of Q, K, V per rank: B * S * H/P * D

  // Runs one call on local rank i (its GPU current, e.g. inside Team::run), asynchronously on
  // `stream`. Every rank must make the same calls in the same order. Errors of device waits
  // surface at the next Team::check_device_status(i).
  void forward(int i, const void* q, const void* k, const void* v, UlyssesVariant variant, cudaStream_t stream);

  // The attention of the call alone (this rank's heads, full sequence, into a local
  // buffer): the baseline the fused variants are compared with.
  void attention_only(int i, const void* q, const void* k, const void* v, cudaStream_t stream);

  // The shaping plan of local rank i. The first use times the attention (synchronously on
  // `stream`) to measure the step time the model needs.
  const model::UlyssesPlan& plan(int i, const void* q, const void* k, const void* v, cudaStream_t stream);

  // Turns span records on or off for later calls (they add clock reads, and a warp-group
  // barrier per fused-shaped chunk: keep them out of timed runs).
  void set_record_spans(bool on);
  // Store spans of the last fused / fused_shaped call made with span records (synchronous).
  std::vector<SliceSpan> read_spans(int i);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage::ops
