// The top-k sum of the expert-parallel MoE layer (the unfused layer's last kernel and the
// Mega-MoE kernel's last phase): out[t] = the token's k combined bf16 rows summed in fp32 in row
// order, rounded to bf16. docs/megamoe.md §Top-k sum.
//
// The sum reads T * k * H * 2 bytes once and writes a sixth to a tenth of that: it is a stream,
// and its speed is the bytes each SM keeps in flight. ep_reduce_tokens (one 16-byte vector of
// one token per thread and step, a 64-bit division per step) keeps at most 4 loads in flight per
// thread; measured, the phase moves about half of what HBM can (docs/megamoe.md §Top-k sum). The
// wide form (the default, docs/megamoe.md §Top-k sum; build option XSTAGE_MOE_REDUCE_WIDE) gives each warp units of
// 32 * kU vectors of one token (ep_reduce_cursor.hpp) and loads all k rows of them before summing
// (12-20 loads in flight per thread for k >= 2, no division in the loop). Both sum a token's rows
// in the same order: their results are bit for bit the same.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/moe/ep_args.hpp"
#include "kernels/moe/ep_device.cuh"
#include "kernels/moe/ep_reduce_cursor.hpp"

#ifndef XSTAGE_MOE_REDUCE_WIDE
#define XSTAGE_MOE_REDUCE_WIDE 1
#endif

namespace xstage::kernels::moe {

// The wide form's pieces: s[c] += channel c of the 8 bf16 values in w (fp32 adds, a token's rows
// in row order as the per-thread form sums them, so that both agree bit for bit).
__device__ __forceinline__ void add_bf16x8(float (&s)[8], const uint4& w) {
  const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = __bfloat1622float2(h2[q]);
    s[2 * q] += f.x;
    s[2 * q + 1] += f.y;
  }
}
// The 8 sums rounded to bf16 (nearest even).
__device__ __forceinline__ uint4 bf16x8_rn(const float (&s)[8]) {
  uint4 o;
  __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int q = 0; q < 4; ++q) o2[q] = __floats2bfloat162_rn(s[2 * q], s[2 * q + 1]);
  return o;
}

// out[t] = sum of the token's k combined rows (fp32, rounded to bf16), 8 channels per step;
// steps first, first + stride, ... of T * H / 8. The combine buffer was filled by peers: read
// through L2 after the combine counter's acquire.
__device__ __forceinline__ void ep_reduce_tokens(const EpMoeArgs& a, long long first, long long stride) {
  const uint16_t* comb = a.combine_at[a.rank];
  const int vec_per_row = a.hidden / 8;
  const long long n = static_cast<long long>(a.tokens) * vec_per_row;
  for (long long idx = first; idx < n; idx += stride) {
    const long long tkn = idx / vec_per_row;
    const int v = static_cast<int>(idx - tkn * vec_per_row);
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    // kU of the k rows' loads in flight before the sums (summed in row order, as before).
    constexpr int kU = 4;
    const uint4* rows = reinterpret_cast<const uint4*>(comb + tkn * a.top_k * a.hidden) + v;
    for (int j0 = 0; j0 < a.top_k; j0 += kU) {
      uint4 w[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (j0 + u < a.top_k) w[u] = __ldcg(rows + static_cast<size_t>(j0 + u) * (a.hidden / 8));
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (j0 + u >= a.top_k) break;
        // Inline rather than add_bf16x8: this form keeps its measured instruction schedule.
        const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&w[u]);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 f = __bfloat1622float2(h2[q]);
          s[2 * q] += f.x;
          s[2 * q + 1] += f.y;
        }
      }
    }
    uint4 outv;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&outv);
    for (int q = 0; q < 4; ++q) o2[q] = __floats2bfloat162_rn(s[2 * q], s[2 * q + 1]);
    reinterpret_cast<uint4*>(a.out + tkn * a.hidden)[v] = outv;
  }
}

template <int kK>
__device__ __forceinline__ void ep_reduce_tokens_wide(const EpMoeArgs& a, int lane, long long first_warp,
                                                      long long warps) {
  constexpr int kU = reduce_vectors_per_lane(kK);
  const int vpr = a.hidden / 8;  // 16-byte vectors per row
  const int upr = reduce_units_per_row(a.hidden, kU);
  const uint4* comb = reinterpret_cast<const uint4*>(a.combine_at[a.rank]);
  uint4* out = reinterpret_cast<uint4*>(a.out);
  ReduceCursor c(first_warp, warps, upr);
  for (; c.token < a.tokens; c.advance()) {
    const int v0 = c.piece * 32 * kU + lane;
    const uint4* rows = comb + static_cast<size_t>(c.token) * kK * vpr;
    uint4 w[kK][kU];
#pragma unroll
    for (int j = 0; j < kK; ++j)
#pragma unroll
      for (int q = 0; q < kU; ++q)
        if (v0 + 32 * q < vpr) w[j][q] = __ldcg(rows + static_cast<size_t>(j) * vpr + v0 + 32 * q);
#pragma unroll
    for (int q = 0; q < kU; ++q) {
      if (v0 + 32 * q >= vpr) break;
      float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < kK; ++j) add_bf16x8(s, w[j][q]);
      out[static_cast<size_t>(c.token) * vpr + v0 + 32 * q] = bf16x8_rn(s);
    }
  }
}

// The reduce of threads first, first + stride, ... (both multiples of 32 apart from the lane:
// whole warps call it). The wide form for k = 1..10, the per-thread form otherwise.
__device__ __forceinline__ void ep_reduce(const EpMoeArgs& a, long long first, long long stride) {
#if XSTAGE_MOE_REDUCE_WIDE
  const int lane = static_cast<int>(first & 31);
  const long long w0 = first >> 5, ws = stride >> 5;
  switch (a.top_k) {
    case 1: return ep_reduce_tokens_wide<1>(a, lane, w0, ws);
    case 2: return ep_reduce_tokens_wide<2>(a, lane, w0, ws);
    case 3: return ep_reduce_tokens_wide<3>(a, lane, w0, ws);
    case 4: return ep_reduce_tokens_wide<4>(a, lane, w0, ws);
    case 5: return ep_reduce_tokens_wide<5>(a, lane, w0, ws);
    case 6: return ep_reduce_tokens_wide<6>(a, lane, w0, ws);
    case 7: return ep_reduce_tokens_wide<7>(a, lane, w0, ws);
    case 8: return ep_reduce_tokens_wide<8>(a, lane, w0, ws);
    case 9: return ep_reduce_tokens_wide<9>(a, lane, w0, ws);
    case 10: return ep_reduce_tokens_wide<10>(a, lane, w0, ws);
    default: break;
  }
#endif
  ep_reduce_tokens(a, first, stride);
}

}  // namespace xstage::kernels::moe
