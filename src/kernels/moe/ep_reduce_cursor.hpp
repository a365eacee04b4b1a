// Which (token, vector) pieces a warp of the wide top-k sum takes (ep_reduce.cuh): host and
// device, no CUDA types, so tests/cpu/test_ep_reduce.cpp walks the same code the kernel runs.
//
// Warp w of `warps` takes units w, w + warps, ...; unit u is token u / upr and the vectors
// [(u % upr) * 32 * kU, +32 * kU) of that token's rows (upr = units per row, kU = vectors per
// lane), lane l the vectors l, l + 32, ... of those. The cursor steps (token, piece) without a
// division per unit (a 64-bit division per 16-byte vector was most of the old loop's issue).
#pragma once

#if defined(__CUDACC__)
#define XS_REDUCE_HD __host__ __device__ __forceinline__
#else
#define XS_REDUCE_HD inline
#endif

namespace xstage::kernels::moe {

// Vectors per lane and unit for k rows: at least 12 loads in flight per thread, at most 6 vectors.
XS_REDUCE_HD constexpr int reduce_vectors_per_lane(int k) { return (12 + k - 1) / k < 6 ? (12 + k - 1) / k : 6; }

// Units per token row of `hidden` bf16 channels (8 per 16-byte vector).
XS_REDUCE_HD constexpr int reduce_units_per_row(int hidden, int vectors_per_lane) {
  return (hidden / 8 + 32 * vectors_per_lane - 1) / (32 * vectors_per_lane);
}

struct ReduceCursor {
  long long token;
  int piece;  // unit within the token's row
  long long dt;
  int dp, upr;
  XS_REDUCE_HD ReduceCursor(long long first_warp, long long warps, int units_per_row)
      : token(first_warp / units_per_row),
        piece(static_cast<int>(first_warp % units_per_row)),
        dt(warps / units_per_row),
        dp(static_cast<int>(warps % units_per_row)),
        upr(units_per_row) {}
  XS_REDUCE_HD void advance() {
    token += dt;
    piece += dp;
    if (piece >= upr) {
      piece -= upr;
      ++token;
    }
  }
};

}  // namespace xstage::kernels::moe
