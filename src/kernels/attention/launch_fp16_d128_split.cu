// Instantiation fp16, head dim 128, non-causal, split tile (split_tile_config(128): the staged
// 128 x 128 mainloop with the registers -> global epilogue, so tiles can split along the keys) and its launcher.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_fp16_d128_noncausal_split(const AttentionParams& p, cudaStream_t stream) {
  return launch_attention<SplitKernel<cutlass::half_t, 128>>(p, stream);
}
KernelInfo attention_fwd_fp16_d128_split_info() { return SplitKernel<cutlass::half_t, 128>::info(); }

}  // namespace xstage::kernels::attention
