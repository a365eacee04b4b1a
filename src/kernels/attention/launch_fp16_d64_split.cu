// Instantiation fp16, head dim 64, non-causal, split tile (split_tile_config(64): the 128-row
// tile's mainloop with the registers -> global epilogue, so tiles can split along the keys) and its launcher.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_fp16_d64_noncausal_split(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<SplitKernel<cutlass::half_t, 64>>(p, stream);
}
KernelInfo attention_fwd_fp16_d64_split_info() { return SplitKernel<cutlass::half_t, 64>::info(); }

}  // namespace xstage::kernels::attention
