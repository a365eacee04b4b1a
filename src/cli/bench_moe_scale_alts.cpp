// src/cli/bench_moe_scale_alts.hpp
#include "cli/bench_moe_scale_alts.hpp"

namespace xstage::cli {

namespace {

// ||got - ref - sum of the chosen deltas||^2; choice[a] = 0 (the primary) or 1 + delta index.
double distance(const double* ref, const std::vector<ScaleAlternatives>& alts, const std::vector<size_t>& choice,
                const float* got, size_t cols) {
  double d = 0;
  for (size_t c = 0; c < cols; ++c) {
    double r = ref[c];
    for (size_t a = 0; a < alts.size(); ++a)
      if (choice[a] > 0) r += alts[a].deltas[choice[a] - 1][c];
    const double e = double(got[c]) - r;
    d += e * e;
  }
  return d;
}

}  // namespace

ClosestRef closest_reference(const double* ref, const std::vector<ScaleAlternatives>& alts, const float* got,
                             size_t cols) {
  std::vector<size_t> best(alts.size(), 0);
  double best_d = distance(ref, alts, best, got, cols);
  size_t combos = 1;
  for (const auto& a : alts) combos = combos > kMaxCombinations ? combos : combos * (1 + a.deltas.size());
  if (combos <= kMaxCombinations) {
    std::vector<size_t> choice(alts.size(), 0);
    for (size_t n = 1; n < combos; ++n) {  // mixed-radix count over the choices
      for (size_t a = 0; a < alts.size(); ++a) {
        if (++choice[a] <= alts[a].deltas.size()) break;
        choice[a] = 0;
      }
      const double d = distance(ref, alts, choice, got, cols);
      if (d < best_d) best_d = d, best = choice;
    }
  } else {
    // Residual got - (ref + chosen deltas), kept up to date: a step costs O(cols), not O(cols x choices).
    std::vector<double> res(cols);
    for (size_t c = 0; c < cols; ++c) res[c] = double(got[c]) - ref[c];
    for (int pass = 0; pass < 8; ++pass) {
      bool changed = false;
      for (size_t a = 0; a < alts.size(); ++a) {
        // Undo this choice's delta, then take the option with the smallest ||res - delta||^2;
        // the current one unless another is strictly closer (no endless flipping on ties).
        if (best[a] > 0)
          for (size_t c = 0; c < cols; ++c) res[c] += alts[a].deltas[best[a] - 1][c];
        auto dist = [&](size_t o) {
          double d = 0;
          for (size_t c = 0; c < cols; ++c) {
            const double e = o > 0 ? res[c] - alts[a].deltas[o - 1][c] : res[c];
            d += e * e;
          }
          return d;
        };
        size_t pick = best[a];
        double pick_d = dist(pick);
        for (size_t o = 0; o <= alts[a].deltas.size(); ++o) {
          const double d = o == best[a] ? pick_d : dist(o);
          if (d < pick_d) pick_d = d, pick = o;
        }
        if (pick != best[a]) best[a] = pick, changed = true;
        if (best[a] > 0)
          for (size_t c = 0; c < cols; ++c) res[c] -= alts[a].deltas[best[a] - 1][c];
      }
      if (!changed) break;
    }
  }
  ClosestRef out;
  out.choice = best;
  out.ref.assign(ref, ref + cols);
  for (size_t a = 0; a < alts.size(); ++a)
    if (best[a] > 0) {
      out.used_alternate = true;
      for (size_t c = 0; c < cols; ++c) out.ref[c] += alts[a].deltas[best[a] - 1][c];
    }
  return out;
}

}  // namespace xstage::cli
