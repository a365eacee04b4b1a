// Instantiation fp16, head dim 128, non-causal, the 64-row key-groups tile (rows64_tile_config(128),
// tile policy rows64), in its own translation unit so it compiles in parallel.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_fp16_d128_noncausal_rows64(const AttentionParams& p, cudaStream_t stream) {
#if XSTAGE_ATTN_INTRA_WG_OVERLAP
  return launch_attention<KeyGroupsKernel<cutlass::half_t, 128, false>>(p, stream);
#else
  (void)p, (void)stream;
  return cudaErrorNotSupported;  // the overlapped step only (launch.hpp kKeyGroupsBuilt)
#endif
}
KernelInfo attention_fwd_fp16_d128_rows64_info() { return KeyGroupsKernel<cutlass::half_t, 128, false>::info(); }

}  // namespace xstage::kernels::attention
