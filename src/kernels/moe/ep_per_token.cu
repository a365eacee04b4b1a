// The unfused layer's per-token activation step (ep_per_token.hpp): h requantised from per-128 to
// per-token scales between the two grouped GEMMs (docs/megamoe.md "Per-token activations in the
// unfused layer"). x's token scales travel with the dispatch (ep_launch_dispatch, token_scales).
#include "kernels/moe/ep_per_token.hpp"

#include <cuda_fp8.h>

namespace xstage::kernels::moe {
namespace {

// One warp per row: the row's scales, their maximum S, then 16 codes per lane and step.
__global__ void requant_per_token_kernel(uint8_t* __restrict__ h, const float* __restrict__ h_scales,
                                         float* __restrict__ tok_scales, const int* __restrict__ counts,
                                         const int* __restrict__ offsets, int experts, int cap, int intermediate) {
  const int rows = min(cap, offsets[experts - 1] + counts[experts - 1]);
  const int lane = threadIdx.x & 31;
  const int groups = intermediate / 128;
  const int warps = gridDim.x * (blockDim.x / 32);
  for (int row = blockIdx.x * (blockDim.x / 32) + static_cast<int>(threadIdx.x / 32); row < rows; row += warps) {
    float S = 0.f;
    for (int g = lane; g < groups; g += 32) S = fmaxf(S, h_scales[static_cast<long long>(g) * cap + row]);
    for (int o = 16; o > 0; o >>= 1) S = fmaxf(S, __shfl_xor_sync(0xffffffffu, S, o));
    if (lane == 0) tok_scales[row] = S;
    uint4* r = reinterpret_cast<uint4*>(h + static_cast<long long>(row) * intermediate);
    for (int c = lane; c < intermediate / 16; c += 32) {  // 16 codes of 128-channel group c / 8
      const float s = h_scales[static_cast<long long>(c / 8) * cap + row];
      if (s == S) continue;  // f = 1: the codes stay
      const float f = s / S;
      uint4 v = r[c];
      uint32_t* w = reinterpret_cast<uint32_t*>(&v);
      for (int j = 0; j < 4; ++j) {
        uint32_t out = 0;
        for (int b = 0; b < 4; b += 2) {
          const __half2_raw two = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[j] >> (8 * b)), __NV_E4M3);
          const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&two));
          const uint32_t q = __nv_cvt_float2_to_fp8x2(make_float2(x.x * f, x.y * f), __NV_SATFINITE, __NV_E4M3);
          out |= q << (8 * b);
        }
        w[j] = out;
      }
      r[c] = v;
    }
  }
}

}  // namespace

cudaError_t ep_launch_requant_per_token(uint8_t* h, const float* h_scales, float* tok_scales, const int* counts,
                                        const int* offsets, int experts, int cap, int intermediate, cudaStream_t s) {
  if (h == nullptr || h_scales == nullptr || tok_scales == nullptr || counts == nullptr || offsets == nullptr ||
      experts <= 0 || cap <= 0 || intermediate <= 0 || intermediate % 128 != 0)
    return cudaErrorInvalidValue;
  const int blocks = (cap + 7) / 8 < 2048 ? (cap + 7) / 8 : 2048;  // 8 rows (warps) per block
  requant_per_token_kernel<<<blocks, 256, 0, s>>>(h, h_scales, tok_scales, counts, offsets, experts, cap,
                                                  intermediate);
  return cudaGetLastError();
}

}  // namespace xstage::kernels::moe
