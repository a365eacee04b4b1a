// 1-D minimisation for the capacity fits (Q, Q_cold). Their objectives are sums of
// max(...) terms: piecewise smooth, flat where no point depends on the capacity, and with
// kinks where a point crosses its knee, so a dense grid finds the basin and a golden-section
// search polishes it.
#pragma once
#include <cmath>

namespace xstage::detail {

// Minimiser of cost over [0, hi]. Among equal grid costs the smallest argument wins, so an
// objective that is flat above some capacity returns the start of the flat part (the
// smallest capacity consistent with the data).
template <class CostF>
double minimize_capacity(CostF cost, double hi, int grid = 4000) {
  if (!(hi > 0)) return 0;
  const double step = hi / grid;
  double best_x = 0, best_c = cost(0.0);
  for (int i = 1; i <= grid; ++i) {
    const double c = cost(i * step);
    if (c < best_c) best_c = c, best_x = i * step;
  }
  double lo = best_x > step ? best_x - step : 0.0, up = best_x + step;
  const double g = (std::sqrt(5.0) - 1) / 2;
  for (int it = 0; it < 100; ++it) {
    const double m1 = up - g * (up - lo), m2 = lo + g * (up - lo);
    if (cost(m1) <= cost(m2)) up = m2;
    else lo = m1;
  }
  const double x = 0.5 * (lo + up);
  return cost(x) < best_c ? x : best_x;
}

}  // namespace xstage::detail
