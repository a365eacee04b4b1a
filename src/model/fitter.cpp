// Burst-Gap calibration (see fitter.hpp for the procedure and docs/model.md for why).
#include "xstage/fitter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "model/stats.hpp"
#include "xstage/error.hpp"

namespace xstage::model {
namespace {

struct Line {
  double a = 0, b = 0;  // y = a + b x
};

// Least squares of the relative error: minimises sum(((a + b x - y) / y)^2). Spans range
// from ~0.1 us to tens of us; plain least squares would let the largest bursts dominate.
Line fit_relative_line(const std::vector<double>& x, const std::vector<double>& y, bool* clamped) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / (y[i] * y[i]);
    sw += w, sx += w * x[i], sy += w * y[i], sxx += w * x[i] * x[i], sxy += w * x[i] * y[i];
  }
  Line l;
  const double det = sw * sxx - sx * sx;
  l.b = (sw * sxy - sx * sy) / det;
  l.a = (sy - l.b * sx) / sw;
  *clamped = false;
  if (l.a < 0) {  // a negative fixed time is unphysical: refit through the origin
    l.a = 0;
    l.b = sxy / sxx;
    *clamped = true;
  }
  return l;
}

// Cold (first) burst of the base model: the stage starts empty, so it is the isolated span.
double isolated_us(const Params& p, const ProbePoint& pt) {
  const double r = p.r_gbps * kBytesPerUsPerGbps;
  return std::max(p.t0_us(pt.burst_bytes),
                  (static_cast<double>(pt.total_bytes()) - p.q_bytes(pt.producers)) / r);
}

// Steady span of the base model at the point's own gap. Large-gap points are normally
// isolated, but if the gap is shorter than V/R - T0 the drain term binds; using the full
// formula keeps such points from biasing Q.
double steady_us(const Params& p, const ProbePoint& pt) {
  return predict(p, pt.producers, pt.burst_bytes, pt.gap_us).issue_us;
}

// Steady span without the fill term: what the point would show if Q were unlimited.
double unfilled_us(const Params& p, const ProbePoint& pt) {
  const double drain = static_cast<double>(pt.total_bytes()) / (p.r_gbps * kBytesPerUsPerGbps);
  return std::max(p.t0_us(pt.burst_bytes), drain - pt.gap_us);
}

// 1-D search for Q of one K: minimises the squared relative error of the steady span
// max(T0, V/R - G, (V - Q)/R) over that K's large-gap points. The objective is only
// piecewise smooth, so a dense grid finds the basin and a golden-section search polishes it.
double search_q(const std::vector<const ProbePoint*>& pts, Params p, int k) {
  double vmax = 0;
  for (const auto* pt : pts) vmax = std::max(vmax, static_cast<double>(pt->total_bytes()));
  auto cost = [&](double q) {
    p.q_bytes_by_k = {{k, q}};
    double c = 0;
    for (const auto* pt : pts) {
      const double e = (steady_us(p, *pt) - pt->steady_issue_us) / pt->steady_issue_us;
      c += e * e;
    }
    return c;
  };
  constexpr int kGrid = 4000;
  const double step = vmax / kGrid;
  double best_q = 0, best_c = cost(0);
  for (int i = 1; i <= kGrid; ++i) {
    const double c = cost(i * step);
    if (c < best_c) best_c = c, best_q = i * step;
  }
  double lo = std::max(0.0, best_q - step), hi = best_q + step;
  const double g = (std::sqrt(5.0) - 1) / 2;
  for (int it = 0; it < 100; ++it) {
    const double m1 = hi - g * (hi - lo), m2 = lo + g * (hi - lo);
    if (cost(m1) <= cost(m2)) hi = m2;
    else lo = m1;
  }
  const double q = 0.5 * (lo + hi);
  return cost(q) <= best_c ? q : best_q;
}

std::string list_bytes(const std::set<long long>& s) {
  std::string out;
  for (long long b : s) out += (out.empty() ? "" : ", ") + std::to_string(b);
  return out;
}

}  // namespace

bool FitOptions::matches(const ProbePoint& p) const {
  return p.role == role && p.dest == dest && p.store == store && p.addr == addr && p.gap_kind == gap_kind &&
         p.warmup_bytes == 0 && p.pre_wait_us == 0;  // warm-up runs study the cold burst only
}

std::string FitOptions::describe() const {
  return fmt::format("role={} dest={} store={} addr={} gap_kind={}, no warm-up", role, dest, store, addr,
                     gap_kind);
}

FitResult fit(const std::vector<ProbePoint>& pts, const FitOptions& opts) {
  FitResult res;
  std::vector<const ProbePoint*> usable;
  for (const auto& p : pts)
    if (opts.matches(p)) usable.push_back(&p);
  res.usable_points = static_cast<int>(usable.size());
  if (usable.empty())
    throw Error(fmt::format("fit: no usable points: none of the {} points has {}", pts.size(), opts.describe()));

  // Isolated (large-gap) points: per (K, B) those at the largest gap >= isolated_min_gap_us.
  std::map<std::pair<int, long long>, double> largest_gap;
  for (const auto* p : usable)
    if (p->gap_us >= opts.isolated_min_gap_us && p->steady_issue_us > 0) {
      auto& g = largest_gap[{p->producers, p->burst_bytes}];
      g = std::max(g, p->gap_us);
    }
  std::vector<const ProbePoint*> iso;
  for (const auto* p : usable) {
    const auto it = largest_gap.find({p->producers, p->burst_bytes});
    if (it != largest_gap.end() && p->steady_issue_us > 0 && p->gap_us == it->second) iso.push_back(p);
  }
  std::vector<const ProbePoint*> zero;
  for (const auto* p : usable)
    if (p->gap_us <= opts.zero_gap_max_us && p->period_us > 0) zero.push_back(p);

  const auto need_t0 = [&](const std::string& why) {
    return Error(fmt::format(
        "fit: cannot determine T0: {}; T0 needs large-gap points (gap_us >= {} us, steady_issue_us > 0) "
        "below the knee at two or more burst sizes B",
        why, opts.isolated_min_gap_us));
  };
  if (iso.empty()) throw need_t0("there are no large-gap points");

  // Initial T0 line: below the knee T0 depends on B only, so the smallest span over K at
  // each B is a robust first estimate; use the smaller half of the B range (the large B
  // may already be above the knee for every K).
  std::map<long long, double> min_span;
  for (const auto* p : iso) {
    auto it = min_span.find(p->burst_bytes);
    if (it == min_span.end() || p->steady_issue_us < it->second) min_span[p->burst_bytes] = p->steady_issue_us;
  }
  if (min_span.size() < 2)
    throw need_t0(fmt::format("all large-gap points have the same B = {}", min_span.begin()->first));

  Params& prm = res.params;
  bool clamped = false;
  {
    std::vector<double> x, y;
    const size_t take = std::max<size_t>(2, (min_span.size() + 1) / 2);
    for (const auto& [b, s] : min_span) {
      if (x.size() == take) break;
      x.push_back(static_cast<double>(b));
      y.push_back(s);
    }
    const Line l = fit_relative_line(x, y, &clamped);
    if (!(l.b > 0)) throw need_t0("the smallest large-gap spans do not grow with B");
    prm.t0_fixed_us = l.a;
    prm.issue_gbps_per_producer = 1.0 / (l.b * kBytesPerUsPerGbps);
  }

  std::vector<const ProbePoint*> below, prev_below;
  bool have_model = false, converged = false;
  for (int it = 0; it < opts.max_iterations; ++it) {
    // 1. Below-knee set: from measured spans first, then from the fitted model (issue-bound
    //    with margin: neither the fill nor the drain term comes close to T0).
    below.clear();
    for (const auto* p : iso) {
      const double t0 = prm.t0_us(p->burst_bytes);
      bool is_below;
      if (have_model) {
        const Prediction pr = predict(prm, p->producers, p->burst_bytes, p->gap_us);
        const double fill = (static_cast<double>(pr.volume_bytes) - pr.q_bytes) / (prm.r_gbps * kBytesPerUsPerGbps);
        is_below = std::max(fill, pr.drain_us - p->gap_us) <= (1 - opts.knee_margin) * t0;
      } else {
        is_below = p->steady_issue_us <= (1 + opts.knee_margin) * t0;
      }
      if (is_below) below.push_back(p);
    }
    if (have_model && below == prev_below) {
      converged = true;
      break;
    }
    prev_below = below;
    res.notes.clear();
    res.iterations = it + 1;

    // 2. T0 line on the below-knee points.
    std::set<long long> bs;
    std::vector<double> x, y;
    for (const auto* p : below) {
      bs.insert(p->burst_bytes);
      x.push_back(static_cast<double>(p->burst_bytes));
      y.push_back(p->steady_issue_us);
    }
    if (bs.size() < 2)
      throw need_t0(fmt::format("only {} burst size(s) below the knee (B = {})", bs.size(), list_bytes(bs)));
    const Line l = fit_relative_line(x, y, &clamped);
    if (!(l.b > 0))
      throw need_t0(fmt::format("the below-knee spans do not grow with B (slope {:.3g} us/B)", l.b));
    prm.t0_fixed_us = l.a;
    prm.issue_gbps_per_producer = 1.0 / (l.b * kBytesPerUsPerGbps);
    if (clamped) res.notes.push_back("T0: the fitted fixed time was negative; refitted with t0_fixed_us = 0");
    res.t0_points = static_cast<int>(below.size());

    // 3. R: median V/period over the drain-bound zero-gap points.
    std::vector<double> rates;
    std::map<long long, std::vector<std::pair<int, double>>> by_volume;
    for (const auto* p : zero) {
      if (p->period_us < opts.r_min_period_over_t0 * prm.t0_us(p->burst_bytes)) continue;
      const double gbps = static_cast<double>(p->total_bytes()) / p->period_us / kBytesPerUsPerGbps;
      rates.push_back(gbps);
      by_volume[p->total_bytes()].emplace_back(p->producers, gbps);
    }
    if (rates.empty())
      throw Error(fmt::format(
          "fit: cannot determine R: none of the {} zero-gap points (gap_us <= {}) is drain-bound "
          "(period >= {} x T0(B)); R needs back-to-back bursts whose volume V = K*B is large "
          "enough that V/R clearly exceeds T0",
          zero.size(), opts.zero_gap_max_us, opts.r_min_period_over_t0));
    prm.r_gbps = detail::median(rates);
    res.r_points = static_cast<int>(rates.size());
    res.r_min_gbps = *std::min_element(rates.begin(), rates.end());
    res.r_max_gbps = *std::max_element(rates.begin(), rates.end());
    res.r_splits.clear();
    res.r_spread_rel = 0;
    for (const auto& [v, list] : by_volume) {
      std::set<int> ks;
      std::vector<double> g;
      for (const auto& [k, gbps] : list) ks.insert(k), g.push_back(gbps);
      if (ks.size() < 2) continue;
      RSplitGroup grp;
      grp.volume_bytes = v;
      grp.points = static_cast<int>(g.size());
      grp.splits = static_cast<int>(ks.size());
      grp.min_gbps = *std::min_element(g.begin(), g.end());
      grp.max_gbps = *std::max_element(g.begin(), g.end());
      grp.spread_rel = (grp.max_gbps - grp.min_gbps) / detail::median(g);
      res.r_spread_rel = std::max(res.r_spread_rel, grp.spread_rel);
      res.r_splits.push_back(grp);
    }
    if (res.r_splits.empty())
      res.notes.push_back("R: no volume V was measured drain-bound with two or more K*B splits; spread not available");

    // 4. Q per K from the knee.
    std::map<int, std::vector<const ProbePoint*>> by_k;
    for (const auto* p : iso) by_k[p->producers].push_back(p);
    std::vector<std::pair<int, double>> table;
    res.q_fits.clear();
    for (const auto& [k, list] : by_k) {
      QFit qf;
      qf.producers = k;
      qf.points = static_cast<int>(list.size());
      for (const auto* p : list)
        if (p->steady_issue_us > (1 + opts.knee_margin) * unfilled_us(prm, *p)) ++qf.above_knee;
      if (qf.above_knee == 0) {
        res.notes.push_back(fmt::format(
            "Q: K={} not determined: none of its {} large-gap points is above the knee "
            "(span > {:.2f} x max(T0, V/R - G)); Q(K) is interpolated from the other K",
            k, qf.points, 1 + opts.knee_margin));
        continue;
      }
      qf.q_bytes = search_q(list, prm, k);
      Params one = prm;
      one.q_bytes_by_k = {{k, qf.q_bytes}};
      double ss = 0;
      for (const auto* p : list) {
        const double e = (steady_us(one, *p) - p->steady_issue_us) / p->steady_issue_us;
        ss += e * e;
      }
      qf.rms_rel_err = std::sqrt(ss / static_cast<double>(list.size()));
      table.emplace_back(k, qf.q_bytes);
      res.q_fits.push_back(qf);
    }
    if (table.empty())
      throw Error(fmt::format(
          "fit: cannot determine Q: no large-gap point of any K is above the knee (span > {:.2f} x max(T0, V/R - G)); "
          "Q needs isolated bursts (gap_us >= {} us) whose volume V exceeds the X-Stage capacity, "
          "i.e. V > Q + R*T0",
          1 + opts.knee_margin, opts.isolated_min_gap_us));
    prm.q_bytes_by_k = table;
    have_model = true;
  }
  if (!converged) {
    res.notes.push_back("the below-knee set did not settle within max_iterations; last fit kept");
  }

  // 5. Cold extension: affine least squares of (cold measured - isolated prediction) in V.
  std::vector<double> cx, cr;
  for (const auto* p : usable)
    if (p->cold_issue_us > 0) {
      cx.push_back(static_cast<double>(p->total_bytes()) / kMiB);
      cr.push_back(p->cold_issue_us - isolated_us(prm, *p));
    }
  res.cold_points = static_cast<int>(cx.size());
  if (cx.empty()) {
    res.notes.push_back("cold extension: no point has cold_issue_us > 0; left at zero");
  } else {
    const double n = static_cast<double>(cx.size());
    double mx = 0, mr = 0;
    for (size_t i = 0; i < cx.size(); ++i) mx += cx[i] / n, mr += cr[i] / n;
    double sxx = 0, sxr = 0;
    for (size_t i = 0; i < cx.size(); ++i) sxx += (cx[i] - mx) * (cx[i] - mx), sxr += (cx[i] - mx) * (cr[i] - mr);
    const bool has_slope = sxx > 1e-12 * std::max(1.0, mx * mx) * n;
    prm.cold.c1_us_per_mib = has_slope ? sxr / sxx : 0.0;
    prm.cold.c0_us = mr - prm.cold.c1_us_per_mib * mx;
    if (!has_slope) res.notes.push_back("cold extension: all cold points have one volume; slope c1 set to 0");
    double sb = 0, se = 0;
    for (size_t i = 0; i < cx.size(); ++i) {
      const double e = cr[i] - prm.cold.c0_us - prm.cold.c1_us_per_mib * cx[i];
      sb += cr[i] * cr[i], se += e * e;
    }
    res.cold_rms_base_us = std::sqrt(sb / n);
    res.cold_rms_ext_us = std::sqrt(se / n);
  }

  double ss = 0;
  for (const auto* p : below) {
    const double e = (prm.t0_us(p->burst_bytes) - p->steady_issue_us) / p->steady_issue_us;
    ss += e * e;
  }
  res.t0_rms_rel_err = below.empty() ? 0 : std::sqrt(ss / static_cast<double>(below.size()));
  check_params(prm);
  return res;
}

FitResult fit(const ProbeRun& run, const FitOptions& opts) {
  FitResult r = fit(run.points, opts);
  r.params.sm_count = run.sm_count;
  std::string src = run.device.empty() ? "unknown device" : run.device;
  if (!run.date.empty()) src += "; probed " + run.date;
  if (!run.commit.empty()) src += "; commit " + run.commit;
  src += "; fitted on " + opts.describe();
  r.params.source = src;
  return r;
}

void to_json(nlohmann::json& j, const FitResult& r) {
  nlohmann::json splits = nlohmann::json::array();
  for (const auto& g : r.r_splits)
    splits.push_back({{"volume_bytes", g.volume_bytes}, {"points", g.points}, {"splits", g.splits},
                      {"min_gbps", g.min_gbps}, {"max_gbps", g.max_gbps}, {"spread_rel", g.spread_rel}});
  nlohmann::json q = nlohmann::json::array();
  for (const auto& f : r.q_fits)
    q.push_back({{"producers", f.producers}, {"q_bytes", f.q_bytes}, {"points", f.points},
                 {"above_knee", f.above_knee}, {"rms_rel_err", f.rms_rel_err}});
  j = nlohmann::json{
      {"params", r.params},
      {"usable_points", r.usable_points},
      {"iterations", r.iterations},
      {"r", {{"points", r.r_points}, {"gbps", r.params.r_gbps}, {"min_gbps", r.r_min_gbps},
             {"max_gbps", r.r_max_gbps}, {"spread_rel", r.r_spread_rel}, {"splits", splits}}},
      {"t0", {{"points", r.t0_points}, {"rms_rel_err", r.t0_rms_rel_err}}},
      {"q", q},
      {"cold", {{"points", r.cold_points}, {"rms_base_us", r.cold_rms_base_us}, {"rms_ext_us", r.cold_rms_ext_us}}},
      {"notes", r.notes}};
}

std::string format_fit(const FitResult& r) {
  std::ostringstream s;
  const Params& p = r.params;
  s << fmt::format("Burst-Gap parameters ({} usable points, {} iteration(s))\n", r.usable_points, r.iterations);
  s << fmt::format("  T0(B)  = {:.4f} us + B / ({:.2f} GB/s per producer)   [{} below-knee points, rms rel err {:.2f}%]\n",
                   p.t0_fixed_us, p.issue_gbps_per_producer, r.t0_points, 100 * r.t0_rms_rel_err);
  s << fmt::format("  R      = {:.1f} GB/s   [median of {} drain-bound zero-gap points, range {:.1f}..{:.1f}]\n",
                   p.r_gbps, r.r_points, r.r_min_gbps, r.r_max_gbps);
  for (const auto& g : r.r_splits)
    s << fmt::format("           V = {:>10} B: {} K*B splits, {:.1f}..{:.1f} GB/s, spread {:.2f}%\n",
                     g.volume_bytes, g.splits, g.min_gbps, g.max_gbps, 100 * g.spread_rel);
  for (const auto& q : r.q_fits)
    s << fmt::format("  Q(K={:>3}) = {:8.3f} MiB   [{} large-gap points, {} above the knee, rms rel err {:.2f}%]\n",
                     q.producers, q.q_bytes / kMiB, q.points, q.above_knee, 100 * q.rms_rel_err);
  s << fmt::format("  cold extension: {:+.4f} us {:+.4f} us/MiB * V   [{} points, rms residual {:.3f} -> {:.3f} us]\n",
                   p.cold.c0_us, p.cold.c1_us_per_mib, r.cold_points, r.cold_rms_base_us, r.cold_rms_ext_us);
  if (p.sm_count > 0) s << fmt::format("  sm_count = {}\n", p.sm_count);
  if (!p.source.empty()) s << "  source: " << p.source << "\n";
  for (const auto& n : r.notes) s << "  note: " << n << "\n";
  return s.str();
}

}  // namespace xstage::model
