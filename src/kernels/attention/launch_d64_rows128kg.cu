// Instantiations bf16 and fp16, head dim 64, non-causal, the 128-row key-group tile
// (rows128_key_groups_tile_config, tile policy rows128_kg), in their own translation unit.
#include "kernels/attention/kernel.cuh"

namespace xstage::kernels::attention {

cudaError_t attention_fwd_bf16_d64_noncausal_rows128kg(const AttentionParams& p, cudaStream_t stream) {
#if XSTAGE_ATTN_INTRA_WG_OVERLAP
  return launch_attention<KeyGroups128Kernel<cutlass::bfloat16_t>>(p, stream);
#else
  (void)p, (void)stream;
  return cudaErrorNotSupported;  // the overlapped step only (launch.hpp kKeyGroupsBuilt)
#endif
}
cudaError_t attention_fwd_fp16_d64_noncausal_rows128kg(const AttentionParams& p, cudaStream_t stream) {
#if XSTAGE_ATTN_INTRA_WG_OVERLAP
  return launch_attention<KeyGroups128Kernel<cutlass::half_t>>(p, stream);
#else
  (void)p, (void)stream;
  return cudaErrorNotSupported;  // the overlapped step only (launch.hpp kKeyGroupsBuilt)
#endif
}
KernelInfo attention_fwd_bf16_d64_rows128kg_info() { return KeyGroups128Kernel<cutlass::bfloat16_t>::info(); }
KernelInfo attention_fwd_fp16_d64_rows128kg_info() { return KeyGroups128Kernel<cutlass::half_t>::info(); }

}  // namespace xstage::kernels::attention
