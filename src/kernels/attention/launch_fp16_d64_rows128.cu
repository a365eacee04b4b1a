// Instantiations fp16, head dim 64, the 128-row tile (rows128_d64_tile_config(), tile policy
// rows128), causal and non-causal, in their own translation unit so they compile in parallel.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_fp16_d64_causal_rows128(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<Rows128Kernel<cutlass::half_t, true>>(p, stream);
}
cudaError_t attention_fwd_fp16_d64_noncausal_rows128(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<Rows128Kernel<cutlass::half_t, false>>(p, stream);
}
KernelInfo attention_fwd_fp16_d64_rows128_info() { return Rows128Kernel<cutlass::half_t, false>::info(); }

}  // namespace xstage::kernels::attention
