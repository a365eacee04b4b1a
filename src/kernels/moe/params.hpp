// Parameters of one grouped-GEMM launch over the experts of an MoE layer (host and device).
//
//   out[rows of expert e] = epilogue( A[rows of e] * B[e]^T )      for every expert e
//
// A holds the tokens sorted by expert: expert e owns rows [offsets[e], offsets[e] + counts[e])
// of A (and of the output); counts and offsets live in device memory. All matrices are
// row-major with the reduction dimension K contiguous. W8A8 quantisation:
//   A        fp8 e4m3 [m_total, k]
//   a_scales fp32 [k/128, m_total]        one scale per token per 128 channels (token contiguous)
//   B        fp8 e4m3 [experts, n, k]
//   b_scales fp32 [experts, n/128, k/128]  one scale per 128 x 128 weight block
// so that A_real[r, c] = A[r, c] * a_scales[c/128, r] and B_real[e, j, c] = B[e, j, c] *
// b_scales[e, j/128, c/128]; accumulation is fp32.
#pragma once
#include <cstdint>

namespace xstage::kernels::moe {

struct MoeGemmParams {
  const void* a = nullptr;
  const float* a_scales = nullptr;
  const void* b = nullptr;
  const float* b_scales = nullptr;
  const int* counts = nullptr;   // [experts] tokens of expert e
  const int* offsets = nullptr;  // [experts] first row of expert e
  int experts = 0;
  int m_total = 0;  // rows of A (and of the output)
  int n = 0;        // rows of each expert's weight (2 * intermediate for a fused gate/up Linear-1)
  int k = 0;        // reduction size

  // Epilogue operands.
  void* out = nullptr;               // bf16 [m_total, n], or fp8 [m_total, n/2] for SwiGLU
  int64_t out_ld = 0;                // elements between output rows
  float* out_scales = nullptr;       // SwiGLU: fp32 [n/2/128, m_total]
  const float* row_weights = nullptr;  // SwiGLU: fp32 [m_total] router weight of each row

  int num_ctas = 0;  // persistent grid; 0: one CTA per SM
  // Consumer schedule (mainloop.cuh): bit 0 = issue block kb+1 before promoting block kb
  // (two per-block accumulators), bit 1 = the consumer warp groups take turns issuing.
  int schedule = 3;
};

}  // namespace xstage::kernels::moe
