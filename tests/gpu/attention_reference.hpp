// Test support for the attention kernels (defined in attention_reference.cu): random
// inputs generated on the device, a naive fp32 reference kernel, and the comparison of an
// output against it, including the check that nothing outside the output was written.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "xstage/ops/attention.hpp"

namespace xstage::gputest {

// n 16-bit values of `dtype`, uniform in [-amplitude, amplitude), a deterministic function of
// (seed, index): every case gets its own fresh inputs.
void fill_random_16bit(void* p, size_t n, ops::AttentionDType dtype, uint64_t seed, float amplitude,
                       cudaStream_t s);

// Converts n 16-bit values to float (to feed the host reference on small shapes).
void to_float(const void* p, size_t n, ops::AttentionDType dtype, float* out, cudaStream_t s);

// Naive reference: one thread per (batch, head, query row), fp32 math on the same 16-bit
// inputs, the kernel's semantics (scale, top-left causal mask). o_ref: dense float
// [B, Sq, H, D]; lse_ref: dense float [B, H, Sq].
void reference_attention(const ops::AttentionArgs& a, float* o_ref, float* lse_ref, cudaStream_t s);

struct OutputCheck {
  double err_sq = 0;                 // sum (out - ref)^2 over valid elements
  double ref_sq = 0;                 // sum ref^2
  unsigned long long nan_valid = 0;  // non-finite values among the valid elements
  unsigned long long touched = 0;    // elements of rows >= q_len that lost their poison
  double rel() const;
};

// O under test: a.o with a.o_strides, inside an allocation of [B, s_alloc, H, D] (dense, so
// rows q_len..s_alloc-1 of every (batch, head) are padding that must keep the 0xFFFF
// poison). Compared with the dense float reference.
OutputCheck check_output(const ops::AttentionArgs& a, int s_alloc, const float* o_ref, cudaStream_t s);

struct LseCheck {
  double max_abs_err = 0;            // max |lse - ref| / max(1, |ref|)
  unsigned long long nan_valid = 0;  // non-finite LSE values (every row here has keys)
};
// lse: dense [B, H, Sq] under test; lse_ref: the reference.
LseCheck check_lse(const ops::AttentionArgs& a, const float* lse, const float* lse_ref, cudaStream_t s);

}  // namespace xstage::gputest
