// Instantiation bf16, head dim 128, causal, split tile (split_tile_config(128) with the causal mask:
// its tiles cut along the keys by the host's plan, the causal key split; build option
// XSTAGE_ATTN_CAUSAL_SPLIT) and its launcher.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_bf16_d128_causal_split(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<SplitKernel<cutlass::bfloat16_t, 128, true>>(p, stream);
}
KernelInfo attention_fwd_bf16_d128_causal_split_info() { return SplitKernel<cutlass::bfloat16_t, 128, true>::info(); }

}  // namespace xstage::kernels::attention
