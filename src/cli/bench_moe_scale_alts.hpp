// The checked rows of `xstage bench moe` under the per-token scales the fused per-token kernel may
// legitimately take (ops::kPerTokenHSlack, docs/megamoe.md §Per-token activations in the fused
// kernel, "Checking it"): a token's reference row is the sum of its top-k expert rows, and an
// expert row whose scale is ambiguous has one or more alternates. The row is checked against the
// combination closest to what the kernel wrote; kept apart from the bench so the CPU tests reach it
// (tests/cpu/test_bench_moe_scale_alts.cpp).
#pragma once
#include <cstddef>
#include <vector>

namespace xstage::cli {

// One ambiguous (token, expert) row: each alternate's difference from the reference's own row
// (alternate - primary, both bf16-rounded, as fp64), `cols` values each.
struct ScaleAlternatives {
  std::vector<std::vector<double>> deltas;
};

struct ClosestRef {
  std::vector<double> ref;  // the reference row the check uses
  bool used_alternate = false;
};

// The reference row (ref + at most one delta per ambiguous expert row) with the smallest L2
// distance to got: every combination while there are at most kMaxCombinations, else one
// coordinate pass per expert row in turn, repeated until none changes (at most 4 passes).
inline constexpr size_t kMaxCombinations = 1024;
ClosestRef closest_reference(const double* ref, const std::vector<ScaleAlternatives>& alts, const float* got,
                             size_t cols);

}  // namespace xstage::cli
