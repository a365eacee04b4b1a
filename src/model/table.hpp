// Piecewise-linear lookup in a small table of entries (the model's T0(B), R(K), ... tables).
// The tables hold a handful of entries, so a linear scan for the neighbours is cheaper than
// keeping them sorted, and it lets a hand-written params file list them in any order.
#pragma once
#include <algorithm>
#include <vector>

#include "xstage/error.hpp"

namespace xstage::detail {

// How a lookup beyond the largest key behaves.
enum class Above { kClamp, kExtend };

struct Neighbours {
  int lo = -1, hi = -1;  // entry indices at or below / at or above x (-1: none)
  double weight = 0;     // of hi when both exist: y = (1 - w) y_lo + w y_hi
};

template <class E, class KeyF>
Neighbours neighbours(const std::vector<E>& t, double x, KeyF key) {
  Neighbours n;
  for (int i = 0; i < static_cast<int>(t.size()); ++i) {
    const double k = key(t[i]);
    if (k <= x && (n.lo < 0 || k > key(t[n.lo]))) n.lo = i;
    if (k >= x && (n.hi < 0 || k < key(t[n.hi]))) n.hi = i;
  }
  if (n.lo >= 0 && n.hi >= 0 && key(t[n.hi]) > key(t[n.lo]))
    n.weight = (x - key(t[n.lo])) / (key(t[n.hi]) - key(t[n.lo]));
  return n;
}

// y(x) through the entries (key(e), val(e)); below the smallest key: the smallest entry's
// value; above the largest: clamped, or the last segment continued with a slope >= 0.
template <class E, class KeyF, class ValF>
double interpolate(const std::vector<E>& t, double x, KeyF key, ValF val, Above above, const char* name) {
  if (t.empty()) throw Error(std::string("params: the ") + name + " table is empty");
  const Neighbours n = neighbours(t, x, key);
  if (n.lo < 0) return val(t[n.hi]);
  if (n.hi >= 0) return (1 - n.weight) * val(t[n.lo]) + n.weight * val(t[n.hi]);
  if (above == Above::kClamp || t.size() < 2) return val(t[n.lo]);
  // Beyond the table: the second-largest key gives the last segment.
  int prev = -1;
  for (int i = 0; i < static_cast<int>(t.size()); ++i)
    if (key(t[i]) < key(t[n.lo]) && (prev < 0 || key(t[i]) > key(t[prev]))) prev = i;
  if (prev < 0) return val(t[n.lo]);
  const double slope = (val(t[n.lo]) - val(t[prev])) / (key(t[n.lo]) - key(t[prev]));
  return val(t[n.lo]) + std::max(0.0, slope) * (x - key(t[n.lo]));
}

}  // namespace xstage::detail
