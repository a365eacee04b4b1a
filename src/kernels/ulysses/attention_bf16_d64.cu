// Ulysses attention kernels, bf16, head dim 64: fused, fused-shaped and comm-sm epilogues.
#include "kernels/ulysses/attention_launch.cuh"

namespace xstage::kernels::ulysses {

cudaError_t attention_bf16_d64(EpilogueKind kind, const attention::AttentionParams& p, const UlyssesArgs& u,
                                bool long_kv, cudaStream_t s) {
  return launch_ulysses_attention<cutlass::bfloat16_t, 64>(kind, p, u, long_kv, s);
}

}  // namespace xstage::kernels::ulysses
