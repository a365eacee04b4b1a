// Online softmax state of one consumer thread, and the score mask.
//
// A consumer warp group owns 64 query rows; wgmma leaves each thread 2 of those rows
// (rows r and r+8 of its warp's 16) and, per row, 2 adjacent columns out of every 8. The
// four threads of a quad (lanes 4i..4i+3) share rows, so row reductions are a thread-local
// pass plus two xor-shuffles.
//
// Scores stay unscaled in registers; the softmax scale is folded into the exponent:
//   p = exp2(s * scale*log2(e) - m * scale*log2(e)),  m = running row max of raw scores.
// Masked scores are -inf. A row whose every score so far is masked has m = -inf; the
// Check_inf paths turn that into p = 0 (never -inf - -inf = NaN). The row sum is kept per
// thread and reduced across the quad only once, when the tile is finished.
#pragma once
#include <cmath>

#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

#ifndef XSTAGE_ATTN_ROW_REDUCE_WAYS
#define XSTAGE_ATTN_ROW_REDUCE_WAYS 2
#endif

namespace xstage::kernels::attention {

using namespace cute;

// SM90 accumulator layout ((2, 2, V), MMA_M, MMA_N) -> (rows = (2, MMA_M), cols = (2, V, MMA_N)).
template <class Layout>
CUTE_HOST_DEVICE auto acc_rowcol_layout(Layout acc) {
  static_assert(decltype(rank(acc))::value == 3);
  static_assert(decltype(rank<0>(acc))::value == 3);
  static_assert(decltype(size<0, 0>(acc))::value == 2);
  static_assert(decltype(size<0, 1>(acc))::value == 2);
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)), make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));
}

// Accumulator of S = Q K^T ((2, 2, N/8), MMA_M, MMA_N) reread as the register A operand of
// the next GEMM (O += P V, K-mode = the N of S): ((2, 2, 2), MMA_M, (N/16, MMA_N)). Two
// neighbouring 8-column groups of the accumulator form one 16-wide k-block of the operand,
// which is exactly the register order wgmma expects for A.
template <class Layout>
CUTE_HOST_DEVICE auto acc_to_operand_a_layout(Layout acc) {
  static_assert(decltype(rank(acc))::value == 3);
  static_assert(decltype(rank<0>(acc))::value == 3);
  static_assert(decltype(size<0, 2>(acc))::value % 2 == 0);
  auto l = logical_divide(get<0>(acc), Shape<Underscore, Underscore, _2>{});  // (2, 2, (2, N/16))
  return make_layout(make_layout(get<0>(l), get<1>(l), get<2, 0>(l)), get<1>(acc), make_layout(get<2, 1>(l), get<2>(acc)));
}

// fp32 fragment -> 16-bit fragment of the same layout (pairs, round to nearest even).
template <class To, class EngineIn, class LayoutIn, class EngineOut, class LayoutOut>
__device__ __forceinline__ void convert_fragment(Tensor<EngineIn, LayoutIn> const& in, Tensor<EngineOut, LayoutOut>& out) {
  static_assert(decltype(size(in))::value == decltype(size(out))::value);
  static_assert(decltype(size(in))::value % 2 == 0);
  cutlass::NumericArrayConverter<To, float, 2, cutlass::FloatRoundStyle::round_to_nearest> cvt;
  CUTE_UNROLL
  for (int i = 0; i < size(in); i += 2) {
    cutlass::Array<float, 2> f;
    f[0] = in(i);
    f[1] = in(i + 1);
    cutlass::Array<To, 2> h = cvt(f);
    out(i) = h[0];
    out(i + 1) = h[1];
  }
}

// 2^x on the SFU (MUFU.EX2); flushes denormal results to 0 and maps -inf to +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

// True if any row of this warp needs its accumulated O rescaled (a factor other than 1).
// Warp-uniform, so the skipped multiplies do not diverge.
template <int kRows>
__device__ __forceinline__ bool any_rescale(float const (&factor)[kRows]) {
  bool need = false;
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; ++mi) need |= factor[mi] != 1.f;
  return __any_sync(0xffffffffu, need);
}

// kWays: independent partial max / sum chains per row in update_max and exponentiate (1: one
// chain; docs/attention.md §Softmax instruction budget).
template <int kRows, int kWays = XSTAGE_ATTN_ROW_REDUCE_WAYS>
struct OnlineSoftmax {
  float row_max[kRows];
  float row_sum[kRows];
  float scale_log2;

  __device__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {}

  // Updates the running max with this block's scores. Returns, per row, the factor by which
  // everything accumulated so far (row sum, O) must be multiplied: exp2((m_old - m_new)*c).
  // kLazyMax: keep the reference max unless this block's max exceeds it by more than
  // kLazyMaxLog2 (in exp2 units), so the factor is usually exactly 1 and O needs no rescale.
  static constexpr float kLazyMaxLog2 = 8.f;

  template <bool kFirst, bool kCheckInf, bool kLazyMax = false, class Frg>
  __device__ __forceinline__ void update_max(Frg const& acc_s, float (&rescale)[kRows]) {
    Tensor s = make_tensor(acc_s.data(), acc_rowcol_layout(acc_s.layout()));
    static_assert(decltype(size<0>(s))::value == kRows);
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) move_max<kFirst, kCheckInf, kLazyMax>(mi, quad_max(thread_max(s, mi)), rescale);
  }

  // This thread's max of row mi of the scores (rows x cols view): kWays independent chains,
  // joined at the end (the same max, a shorter dependency chain).
  template <class Rows>
  __device__ __forceinline__ static float thread_max(Rows const& s, int mi) {
    constexpr int kCols = decltype(size<1>(s))::value;
    static_assert(kCols % kWays == 0);
    float part[kWays];
    CUTE_UNROLL
    for (int w = 0; w < kWays; ++w) part[w] = s(mi, w);
    CUTE_UNROLL
    for (int ni = kWays; ni < kCols; ++ni) part[ni % kWays] = fmaxf(part[ni % kWays], s(mi, ni));
    float m = part[0];
    CUTE_UNROLL
    for (int w = 1; w < kWays; ++w) m = fmaxf(m, part[w]);
    return m;
  }

  // Row mi's new reference from its block max m (quad-reduced), the factor for what was
  // accumulated against the old one, and the row sum rescaled by it.
  template <bool kFirst, bool kCheckInf, bool kLazyMax>
  __device__ __forceinline__ void move_max(int mi, float m, float (&rescale)[kRows]) {
    if constexpr (kFirst) {
      row_max[mi] = m;
      rescale[mi] = 1.f;
    } else {
      // Lazy: a NaN difference (both -inf: nothing seen yet) keeps the old max.
      const float m_new = !kLazyMax ? fmaxf(row_max[mi], m)
                                    : ((m - row_max[mi]) * scale_log2 > kLazyMaxLog2 ? m : row_max[mi]);
      // m_new == -inf only if every score of this row so far is masked: nothing to rescale.
      const float m_ref = (kCheckInf && m_new == -INFINITY) ? 0.f : m_new;
      rescale[mi] = fast_exp2((row_max[mi] - m_ref) * scale_log2);
      row_max[mi] = m_new;
      row_sum[mi] *= rescale[mi];
    }
  }

  // Scores -> unnormalised probabilities in place; adds them to the (thread-local) row sums.
  template <bool kFirst, bool kCheckInf, class Frg>
  __device__ __forceinline__ void exponentiate(Frg& acc_s) {
    Tensor s = make_tensor(acc_s.data(), acc_rowcol_layout(acc_s.layout()));
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const float max_scaled = (kCheckInf && row_max[mi] == -INFINITY) ? 0.f : row_max[mi] * scale_log2;
      const float sum = exp_row(s, s, mi, max_scaled);
      row_sum[mi] = kFirst ? sum : row_sum[mi] + sum;
    }
  }

  // Row mi: p = exp2(s * c - max_scaled) (p may be s itself); returns this thread's sum of the
  // row's p, added in kWays partial chains.
  template <class RowsIn, class RowsOut>
  __device__ __forceinline__ float exp_row(RowsIn const& s, RowsOut& p, int mi, float max_scaled) const {
    float part[kWays];
    CUTE_UNROLL
    for (int w = 0; w < kWays; ++w) part[w] = 0.f;
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(s); ++ni) {
      p(mi, ni) = fast_exp2(s(mi, ni) * scale_log2 - max_scaled);
      part[ni % kWays] += p(mi, ni);
    }
    float sum = part[0];
    CUTE_UNROLL
    for (int w = 1; w < kWays; ++w) sum += part[w];
    return sum;
  }

  // An unmasked lazy step without the row max (AttentionTraits::kSkipMax): p = exp2(s*c -
  // ref*c) into acc_p, and the block's row sums. If every thread of the warp finds both sums
  // <= 2^kLazyMaxLog2, no probability exceeds it (each is at most its row's sum), the lazy
  // reference may stay, and the sums are added: the row max was not needed. Else (a score
  // beyond the reference, an inf or a NaN) nothing is changed and the call returns false
  // (warp-uniform): the caller takes the full path on s. Against the full path this differs
  // only where a block's max lands within rounding of the 2^8 bound (the full path tests
  // (m - ref)*c, this one the probabilities); both keep every probability bounded.
  template <class FrgS, class FrgP>
  __device__ __forceinline__ bool exponentiate_at_reference(FrgS const& acc_s, FrgP& acc_p) {
    Tensor s = make_tensor(acc_s.data(), acc_rowcol_layout(acc_s.layout()));
    Tensor p = make_tensor(acc_p.data(), acc_rowcol_layout(acc_p.layout()));
    constexpr float kBound = 256.f;  // 2^kLazyMaxLog2
    static_assert(kLazyMaxLog2 == 8.f);
    float block_sum[kRows];
    bool ok = true;
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      block_sum[mi] = exp_row(s, p, mi, row_max[mi] * scale_log2);
      ok &= block_sum[mi] <= kBound;  // false for inf and NaN
    }
    if (!__all_sync(0xffffffffu, ok)) return false;
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) row_sum[mi] += block_sum[mi];
    return true;
  }

  // End of a tile: reduces the row sums over the quad. Returns the factor that normalises O
  // (1/sum, 0 for an empty row) and leaves the natural-log LSE of each row in lse.
  __device__ __forceinline__ void finalize(float (&normalize)[kRows], float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const float sum = quad_sum(row_sum[mi]);
      const bool empty = !(sum > 0.f);  // also catches NaN
      normalize[mi] = empty ? 0.f : 1.f / sum;
      lse[mi] = empty ? -INFINITY : row_max[mi] * (scale_log2 * 0.69314718055994530942f) + __logf(sum);
    }
  }

  template <class Frg>
  __device__ __forceinline__ void rescale_o(Frg& acc_o, float const (&factor)[kRows]) {
    Tensor o = make_tensor(acc_o.data(), acc_rowcol_layout(acc_o.layout()));
    static_assert(decltype(size<0>(o))::value == kRows);
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(o); ++ni) o(mi, ni) *= factor[mi];
    }
  }
};

// Masks the scores of key block n_block for query tile m_block: keys at or beyond kv_len,
// and (causal) keys after the query's limit: query i sees keys j <= i + causal_key_offset
// (0: top-left, torch's is_causal; kv_len - q_len: bottom-right). coords = this thread's (row, col) inside the (block_m x block_n) tile, an
// identity tensor partitioned exactly like the accumulator.
template <bool kCausal, int kBlockM, int kBlockN, class Frg, class Coords>
__device__ __forceinline__ void mask_scores(Frg& acc_s, Coords const& coords, int m_block, int n_block, int kv_len,
                                            int causal_key_offset) {
  static_assert(decltype(size(acc_s))::value == decltype(size(coords))::value);
  const int row0 = m_block * kBlockM;
  const int col0 = n_block * kBlockN;
  CUTE_UNROLL
  for (int i = 0; i < size(acc_s); ++i) {
    const int row = row0 + get<0>(coords(i));
    const int col = col0 + get<1>(coords(i));
    bool masked = col >= kv_len;
    if constexpr (kCausal) masked = masked || col > row + causal_key_offset;
    if (masked) acc_s(i) = -INFINITY;
  }
}

}  // namespace xstage::kernels::attention
