// Small order statistics shared by the simulator, fitter and validation.
#pragma once
#include <algorithm>
#include <vector>

namespace xstage::detail {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Quantile q in [0,1] with linear interpolation between order statistics (numpy's default),
// so p90 of a handful of points is well defined and reproducible by hand.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (pos - static_cast<double>(i)) * (v[i + 1] - v[i]);
}

}  // namespace xstage::detail
