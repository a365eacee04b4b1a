// Instantiation bf16, head dim 128, causal, long key sets (long_kv_tile_config(): 128 x 192 tile,
// registers -> global epilogue, whole tiles) and its launcher. docs/attention.md §Causal long-key tile.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_bf16_d128_causal_longkv(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<LongKvKernel<cutlass::bfloat16_t, true>>(p, stream);
}
KernelInfo attention_fwd_bf16_d128_causal_longkv_info() { return LongKvKernel<cutlass::bfloat16_t, true>::info(); }

}  // namespace xstage::kernels::attention
