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

// One ambiguous choice of a token row: an (token, expert) row's other per-token scales, or one
// of its h elements' other e4m3 codes (ops::HCodeAlternatives); each alternative's difference
// from the reference's own row, `cols` values each (fp32: a few per row are kept for every
// checked row; the search sums in fp64). At most one per choice is taken.
struct ScaleAlternatives {
  std::vector<std::vector<float>> deltas;
  bool code = false;  // an h element's codes (else an expert row's scales)
};

struct ClosestRef {
  std::vector<double> ref;     // the reference row the check uses
  bool used_alternate = false;
  std::vector<size_t> choice;  // per choice: 0 the primary, else 1 + the delta taken
};

// The reference row (ref + at most one delta per choice) with the smallest L2 distance to got:
// every combination while there are at most kMaxCombinations, else one coordinate pass per
// choice in turn, repeated until none changes (at most 8 passes; each step O(cols)).
inline constexpr size_t kMaxCombinations = 1024;
ClosestRef closest_reference(const double* ref, const std::vector<ScaleAlternatives>& alts, const float* got,
                             size_t cols);

}  // namespace xstage::cli
