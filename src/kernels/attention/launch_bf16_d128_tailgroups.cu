// Instantiation bf16, head dim 128, non-causal, the staged tile with key-group row halves in its
// last round (TailKeyGroupsKernel, tile policy tail_groups), in its own translation unit.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_bf16_d128_noncausal_tailgroups(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<TailKeyGroupsKernel<cutlass::bfloat16_t>>(p, stream);
}
KernelInfo attention_fwd_bf16_d128_tailgroups_info() { return TailKeyGroupsKernel<cutlass::bfloat16_t>::info(); }

}  // namespace xstage::kernels::attention
