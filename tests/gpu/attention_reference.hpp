// Test support for the attention kernels (defined in attention_reference.cu): random
// inputs generated on the device, a naive fp32 reference kernel, and the comparison of an
// output against it, including the check that nothing outside the output was written.
//
// The comparison judges every output row (one (batch, query, head) vector of head_dim values)
// on its own, with the benches' per-row rule (src/cli/bench_check.hpp, RowChecker; tolerance
// kAttentionRowTolerance, the same as `xstage bench attention`): one zeroed, negated or
// otherwise wrong row fails however long the output, in addition to the global relative L2.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cli/bench_check.hpp"
#include "xstage/ops/attention.hpp"

namespace xstage::gputest {

// Per output row: ||out - ref||_2 <= 1e-2 ||ref||_2 and max |out - ref| <= 2e-2 max |ref row|
// + 1e-6, every value finite (the benches' attention tolerance, docs/measurement.md "Output
// checks"). bf16 P and output rounding keep a correct kernel's rows at a few 1e-3; a zeroed,
// negated or garbage row is off by 1 or more.
inline constexpr cli::RowTolerance kAttentionRowTolerance{1e-2, 2e-2, 1e-6};

// n 16-bit values of `dtype`, uniform in [-amplitude, amplitude), a deterministic function of
// (seed, index): every case gets its own fresh inputs.
void fill_random_16bit(void* p, size_t n, ops::AttentionDType dtype, uint64_t seed, float amplitude,
                       cudaStream_t s);

// Converts n 16-bit values to float (to feed the host reference on small shapes).
void to_float(const void* p, size_t n, ops::AttentionDType dtype, float* out, cudaStream_t s);

// Naive reference: one thread per (batch, head, query row), fp32 math on the same 16-bit
// inputs, the kernel's semantics (scale, causal mask of either alignment). o_ref: dense float
// [B, Sq, H, D]; lse_ref: dense float [B, H, Sq].
void reference_attention(const ops::AttentionArgs& a, float* o_ref, float* lse_ref, cudaStream_t s);

struct OutputCheck {
  double err_sq = 0;                 // sum (out - ref)^2 over valid elements
  double ref_sq = 0;                 // sum ref^2
  unsigned long long nan_valid = 0;  // non-finite values among the valid elements
  unsigned long long touched = 0;    // elements of rows >= q_len that lost their poison
  // Per-row check of every (batch, query < q_len, head) row (kAttentionRowTolerance).
  long long rows_checked = 0;
  long long rows_failed = 0;
  int first_failed_b = -1, first_failed_s = -1, first_failed_h = -1;  // -1: none failed
  double worst_row_rel = 0;  // the largest per-row relative L2 error (NaN if a row was non-finite)
  double max_abs_err = 0;    // the largest element error of the finite rows
  double rel() const;
  bool rows_ok() const { return rows_checked > 0 && rows_failed == 0; }
};

// O under test: a.o with a.o_strides, inside an allocation of [B, s_alloc, H, D] (dense, so
// rows q_len..s_alloc-1 of every (batch, head) are padding that must keep the 0xFFFF
// poison). Compared with the dense float reference: the global sums on the device, and every
// row on the host (the output and the reference copied back) with RowChecker.
OutputCheck check_output(const ops::AttentionArgs& a, int s_alloc, const float* o_ref, cudaStream_t s);

struct LseCheck {
  double max_abs_err = 0;            // max |lse - ref| / max(1, |ref|)
  unsigned long long nan_valid = 0;  // non-finite LSE values (every row here has keys)
};
// lse: dense [B, H, Sq] under test; lse_ref: the reference.
LseCheck check_lse(const ops::AttentionArgs& a, const float* lse, const float* lse_ref, cudaStream_t s);

}  // namespace xstage::gputest
