// Instantiation bf16, head dim 128, non-causal, long key sets (long_kv_tile_config(): 128 x 192
// tile, registers -> global epilogue) and its launcher.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_bf16_d128_noncausal_longkv(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<LongKvKernel<cutlass::bfloat16_t>>(p, stream);
}
KernelInfo attention_fwd_bf16_d128_longkv_info() { return LongKvKernel<cutlass::bfloat16_t>::info(); }

}  // namespace xstage::kernels::attention
