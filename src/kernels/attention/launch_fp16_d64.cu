// Instantiations fp16, head dim 64 (causal, non-causal, non-causal with partial tiles) and their
// launchers. Each dtype x head-dim pair lives in its own translation unit so they compile in
// parallel.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_fp16_d64_causal(const AttentionParams& p, cudaStream_t stream) {
  return launch_staged_causal<cutlass::half_t, 64>(p, stream);
}
cudaError_t attention_fwd_fp16_d64_noncausal(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<ShippedKernel<cutlass::half_t, 64, false>>(p, stream);
}
cudaError_t attention_fwd_fp16_d64_noncausal_partial(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<PartialTilesKernel<cutlass::half_t>>(p, stream);
}
KernelInfo attention_fwd_fp16_d64_info() { return ShippedKernel<cutlass::half_t, 64, false>::info(); }

}  // namespace xstage::kernels::attention
