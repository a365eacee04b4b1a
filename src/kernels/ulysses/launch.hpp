// Host-side entry points of the Ulysses kernels (no device code here). The attention
// launchers run the shipped attention mainloop with one of the Ulysses epilogues; the others
// are the comm-sm tile copier and the serial path's permute.
// All assume the host operator (src/ops/ulysses_op.cpp) validated the arguments; they return
// the first CUDA error and never throw.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <nccl.h>

#include "kernels/attention/params.hpp"
#include "kernels/ulysses/args.hpp"

namespace xstage::kernels::ulysses {

enum class EpilogueKind : int {
  fused = 0,         // RemoteDestination, each slice stored right after its tile
  fused_shaped = 1,  // RemoteDestination, stores spread over the next tile's mainloop
  flagged_local = 2, // comm-sm: local scratch + per-slice flags
};

// p: the attention problem of this rank (Q/K/V [B, S, H/P, D], q_len = kv_len = S,
// heads = H/P, non-causal; p.o is the local scratch for flagged_local, unused otherwise).
// long_kv: the 128 x 192 long-key tile (d = 128; fused and flagged_local only), else the
// staged tile (attention::tile_config); cudaErrorInvalidValue for a combination not built.
cudaError_t attention_bf16_d128(EpilogueKind kind, const attention::AttentionParams& p, const UlyssesArgs& u,
                                bool long_kv, cudaStream_t s);
cudaError_t attention_bf16_d64(EpilogueKind kind, const attention::AttentionParams& p, const UlyssesArgs& u,
                               bool long_kv, cudaStream_t s);
cudaError_t attention_fp16_d128(EpilogueKind kind, const attention::AttentionParams& p, const UlyssesArgs& u,
                                bool long_kv, cudaStream_t s);
cudaError_t attention_fp16_d64(EpilogueKind kind, const attention::AttentionParams& p, const UlyssesArgs& u,
                               bool long_kv, cudaStream_t s);

// comm-sm: `ctas` CTAs copy every finished slice of `local` ([B, S, H/P, D], 16-bit) to its
// owner as soon as its flag shows u.epoch, then publish the rows; CTA 0 also announces ready
// and, at the end, waits until this rank's shard is complete.
cudaError_t launch_tile_copier(const UlyssesArgs& u, const void* local, int q_len, int ctas, cudaStream_t s);

// serial: recv [B, P, S/P, H/P, D] (what ncclAlltoAll delivers per batch) -> out [B, S/P, H, D].
cudaError_t launch_permute_received(const void* recv, void* out, int batch, int world, int rows_per_rank,
                                    int heads_local, int head_dim, cudaStream_t s);

}  // namespace xstage::kernels::ulysses
