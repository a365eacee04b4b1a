// Test support for the MoE grouped-GEMM kernels (defined in moe_reference.cu): random fp8 /
// fp32 inputs generated on the device and a naive fp32 reference of the same quantised math
// (fp8 values decoded exactly, the per-token and per-block scales applied per 128-K block).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cli/bench_check.hpp"

namespace xstage::gputest {

// Per-row tolerances of the grouped GEMM tests (RowChecker, src/cli/bench_check.hpp), applied to
// every expert row in addition to the global relative L2 (one wrong row fails, however long the
// output): a row passes when ||got - ref|| <= rel_tol ||ref|| and max |got - ref| <= max_abs_rel
// * max |ref row| + abs_floor, all values finite.
// bf16 outputs against the fp32 reference: the benches' bf16 rule (bf16 rounding is 2^-9).
inline constexpr cli::RowTolerance kMoeBf16RowTolerance{1e-2, 2e-2, 1e-6};
// SwiGLU fp8 outputs (dequantised with the kernel's own output scale) against the exact h =
// silu(gate) * up * w: fp8 e4m3 rounding is at most 1/16 of a value (half a step), ~0.03 of a
// row's L2 norm at worst over 128-channel rows; a scale off by the tests' 2e-3 bound adds 2e-3.
// The row is not compared with the reference requantised with its own scale: a scale 1e-3 away
// moves codes that sit near a rounding midpoint by one step, up to ~0.05 of a short row's norm.
inline constexpr cli::RowTolerance kMoeSwigluRowTolerance{0.06, 0.1, 1e-6};

// n fp8 e4m3 codes of values uniform in [-amplitude, amplitude) (rounded, saturating), a
// deterministic function of (seed, index).
void fill_fp8_random(uint8_t* p, size_t n, uint64_t seed, float amplitude, cudaStream_t s);
// n floats uniform in [lo, hi).
void fill_float_random(float* p, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s);
// n bytes / floats set to a NaN pattern (0xFF bytes: fp8 e4m3 NaN, bf16 NaN, fp32 NaN).
void poison(void* p, size_t bytes, cudaStream_t s);

// c[r, j] = sum_kb a_scales[kb, r] * b_scales[e, j/128, kb] * sum_{c in kb} A[r, c] B[e, j, c]
// for the rows [offsets[e], offsets[e] + counts[e]) of every expert e (host counts/offsets);
// other rows of c are left alone. a, b: device fp8; c: device fp32 [m_total, n].
void reference_grouped_gemm(const uint8_t* a, const float* a_scales, const uint8_t* b, const float* b_scales,
                            const std::vector<int>& counts, const std::vector<int>& offsets, int m_total, int n,
                            int k, float* c, cudaStream_t s);

// W4A8 reference, one expert: c[row0 + r, j] = sum_kb a_scales[kb, row0 + r] * sum_{c in kb}
// A[row0 + r, c] * w[j, c] for r < rows, with w the dequantised fp32 weights [n, k] (device).
void reference_expert_gemm_f32w(const uint8_t* a, const float* a_scales, const float* w, int row0, int rows,
                                int m_total, int n, int k, float* c, cudaStream_t s);

}  // namespace xstage::gputest
