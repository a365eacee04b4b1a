// Instantiations bf16, head dim 64, causal and non-causal, the 64-row key-groups tile (rows64_tile_config(64),
// tile policy rows64), in its own translation unit so it compiles in parallel.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_bf16_d64_causal_rows64(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<KeyGroupsKernel<cutlass::bfloat16_t, 64, true>>(p, stream);
}
cudaError_t attention_fwd_bf16_d64_noncausal_rows64(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<KeyGroupsKernel<cutlass::bfloat16_t, 64, false>>(p, stream);
}
KernelInfo attention_fwd_bf16_d64_rows64_info() { return KeyGroupsKernel<cutlass::bfloat16_t, 64, true>::info(); }

}  // namespace xstage::kernels::attention
