// Burst-Gap calibration (see fitter.hpp for the procedure and docs/model.md for why).
#include "xstage/fitter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "model/search.hpp"
#include "model/stats.hpp"
#include "xstage/error.hpp"

namespace xstage::model {
namespace {

using Points = std::vector<const ProbePoint*>;

double volume(const ProbePoint& p) { return static_cast<double>(p.total_bytes()); }
double bytes_per_us(double gbps) { return gbps * kBytesPerUsPerGbps; }
double sq(double x) { return x * x; }

template <class T>
std::string join(const std::vector<T>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + fmt::format("{}", x);
  return out;
}

// R(K) and delta(K) from the zero-gap points of each K; R_agg from all of them.
void fit_zero_gap(const Points& zero, const FitOptions& opts, FitResult& res) {
  std::map<int, Points> by_k;
  for (const auto* p : zero) by_k[p->producers].push_back(p);
  Params& prm = res.params;
  std::vector<int> clamped, unmeasured;
  for (const auto& [k, list] : by_k) {
    RFit f;
    f.producers = k;
    f.points = static_cast<int>(list.size());
    std::vector<double> rates, turn;
    std::set<long long> bs;
    bool any_gap = false;
    for (const auto* p : list) {
      rates.push_back(volume(*p) / p->period_us / kBytesPerUsPerGbps);
      turn.push_back(p->gap_measured_us - p->gap_us);
      any_gap |= p->gap_measured_us > 0;
      bs.insert(p->burst_bytes);
    }
    f.splits = static_cast<int>(bs.size());
    f.r_gbps = detail::median(rates);
    f.min_gbps = *std::min_element(rates.begin(), rates.end());
    f.max_gbps = *std::max_element(rates.begin(), rates.end());
    f.spread_rel = (f.max_gbps - f.min_gbps) / f.r_gbps;
    f.delta_us = detail::median(turn);
    if (!any_gap) unmeasured.push_back(k);
    if (f.delta_us < 0) clamped.push_back(k), f.delta_us = 0;
    prm.r_table.push_back({k, f.r_gbps});
    prm.delta_table.push_back({k, f.delta_us});
    res.r_fits.push_back(f);
  }
  res.r_points = static_cast<int>(zero.size());
  if (!unmeasured.empty())
    res.notes.push_back(fmt::format("delta: no measured gap (gap_measured_us) at zero gap for K = {}; delta = 0 there",
                                    join(unmeasured)));
  if (!clamped.empty())
    res.notes.push_back(fmt::format("delta: measured gaps shorter than requested for K = {}; clamped to 0",
                                    join(clamped)));

  std::vector<double> agg;
  for (const auto* p : zero)
    if (p->aggregate_gbps > 0) agg.push_back(p->aggregate_gbps);
  if (agg.empty())
    throw Error(fmt::format(
        "fit: cannot determine R_agg: none of the {} zero-gap points (gap_us <= {}, bursts >= {}) has "
        "aggregate_gbps > 0; R_agg needs the whole-launch rate of back-to-back bursts",
        zero.size(), opts.zero_gap_max_us, opts.zero_gap_min_bursts));
  prm.r_agg_gbps = detail::median(agg);
  res.r_agg_points = static_cast<int>(agg.size());
  res.r_agg_min_gbps = *std::min_element(agg.begin(), agg.end());
  res.r_agg_max_gbps = *std::max_element(agg.begin(), agg.end());
}

// A large-gap point with the terms that do not depend on T0 or Q.
struct Iso {
  const ProbePoint* p;
  double v, drain;  // V, D = V/R(K) - G - delta(K)
};

// T0(B): median span of the below-knee points at each B.
std::vector<T0Fit> t0_table(const std::vector<const Iso*>& below) {
  std::map<long long, std::vector<double>> by_b;
  for (const auto* i : below) by_b[i->p->burst_bytes].push_back(i->p->steady_issue_us);
  std::vector<T0Fit> out;
  for (const auto& [b, spans] : by_b)
    out.push_back({b, detail::median(spans), static_cast<int>(spans.size()),
                   *std::min_element(spans.begin(), spans.end()), *std::max_element(spans.begin(), spans.end())});
  return out;
}

// Q(K) from the K's large-gap points: a 1-D search of the steady formula's squared relative
// error when some point is above the knee, else the lower bound max(V - R_agg T0(B)).
QFit fit_q(int k, const std::vector<const Iso*>& list, const Params& prm, double margin) {
  const double r_agg = bytes_per_us(prm.r_agg_gbps);
  QFit f;
  f.producers = k;
  f.points = static_cast<int>(list.size());
  std::vector<double> t0(list.size());
  double vmax = 0, bound = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    t0[i] = prm.t0_us(list[i]->p->burst_bytes);
    vmax = std::max(vmax, list[i]->v);
    bound = std::max(bound, list[i]->v - r_agg * t0[i]);
    if (list[i]->p->steady_issue_us > (1 + margin) * std::max(t0[i], list[i]->drain)) ++f.above_knee;
  }
  auto cost = [&](double q) {
    double c = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const double span = list[i]->p->steady_issue_us;
      c += sq((std::max({t0[i], list[i]->drain, (list[i]->v - q) / r_agg}) - span) / span);
    }
    return c;
  };
  f.lower_bound = f.above_knee == 0;
  f.q_bytes = f.lower_bound ? bound : detail::minimize_capacity(cost, vmax);
  f.rms_rel_err = std::sqrt(cost(f.q_bytes) / static_cast<double>(list.size()));
  return f;
}

// Below the knee (a clean T0 measurement): neither the drain nor the fill term comes within
// the margin of T0. Where Q is only a lower bound the fill term is unknown; the measured
// span decides instead.
bool is_below(const Iso& i, const Params& prm, const QFit& q, double margin) {
  const double t0 = prm.t0_us(i.p->burst_bytes);
  if (i.drain > (1 - margin) * t0) return false;
  if (q.lower_bound) return i.p->steady_issue_us <= (1 + margin) * t0;
  return (i.v - q.q_bytes) / bytes_per_us(prm.r_agg_gbps) <= (1 - margin) * t0;
}

// Q_cold(K): 1-D search of the squared relative error of max(T0, (V - Q_cold)/R_agg)
// against the cold spans of all the K's fitting points.
void fit_q_cold(const Points& usable, FitResult& res) {
  Params& prm = res.params;
  const double r_agg = bytes_per_us(prm.r_agg_gbps);
  std::map<int, Points> by_k;
  for (const auto* p : usable)
    if (p->cold_issue_us > 0) by_k[p->producers].push_back(p);
  std::vector<int> bounds;
  for (const auto& [k, list] : by_k) {
    QColdFit f;
    f.producers = k;
    f.points = static_cast<int>(list.size());
    res.cold_points += f.points;
    double vmax = 0;
    for (const auto* p : list) vmax = std::max(vmax, volume(*p));
    auto err = [&](double q) {
      double c = 0;
      for (const auto* p : list)
        c += sq((std::max(prm.t0_us(p->burst_bytes), (volume(*p) - q) / r_agg) - p->cold_issue_us) / p->cold_issue_us);
      return c;
    };
    f.q_bytes = detail::minimize_capacity(err, vmax);
    for (const auto* p : list) f.overflowing += (volume(*p) - f.q_bytes) / r_agg > prm.t0_us(p->burst_bytes);
    if (f.overflowing == 0) bounds.push_back(k);
    f.rms_rel_err_ext = std::sqrt(err(f.q_bytes) / f.points);
    f.rms_rel_err_base = std::sqrt(err(prm.q_bytes(k)) / f.points);
    prm.q_cold_table.push_back({k, f.q_bytes});
    res.q_cold_fits.push_back(f);
  }
  if (by_k.empty()) {
    for (const auto& q : prm.q_table) prm.q_cold_table.push_back({q.producers, q.q_bytes});
    res.notes.push_back("Q_cold: no point has cold_issue_us > 0; Q_cold = Q (the extended cold model is the base)");
  }
  if (!bounds.empty())
    res.notes.push_back(fmt::format(
        "Q_cold(K) is a lower bound for K = {}: no cold burst of that K overflowed the cold capacity", join(bounds)));
}

}  // namespace

FitResult fit(const std::vector<ProbePoint>& pts, const FitOptions& opts) {
  FitResult res;
  Params& prm = res.params;
  Points usable;
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
  Points iso_pts, zero;
  for (const auto* p : usable) {
    const auto it = largest_gap.find({p->producers, p->burst_bytes});
    if (it != largest_gap.end() && p->steady_issue_us > 0 && p->gap_us == it->second) iso_pts.push_back(p);
    if (p->gap_us <= opts.zero_gap_max_us && p->bursts >= opts.zero_gap_min_bursts && p->period_us > 0)
      zero.push_back(p);
  }

  const auto need_t0 = [&](const std::string& why) {
    return Error(fmt::format(
        "fit: cannot determine T0 and Q: {}; they need large-gap points (gap_us >= {} us, steady_issue_us > 0) "
        "below the knee at two or more burst sizes B",
        why, opts.isolated_min_gap_us));
  };
  if (iso_pts.empty()) throw need_t0("there are no large-gap points");
  std::map<long long, double> min_span;
  for (const auto* p : iso_pts) {
    auto it = min_span.find(p->burst_bytes);
    if (it == min_span.end() || p->steady_issue_us < it->second) min_span[p->burst_bytes] = p->steady_issue_us;
  }
  if (min_span.size() < 2)
    throw need_t0(fmt::format("all large-gap points have the same B = {}", min_span.begin()->first));
  if (zero.empty())
    throw Error(fmt::format(
        "fit: cannot determine R: no zero-gap point (gap_us <= {}, bursts >= {}, period_us > 0); R(K), delta(K) "
        "and R_agg need back-to-back bursts, long enough runs that the stage is full",
        opts.zero_gap_max_us, opts.zero_gap_min_bursts));

  fit_zero_gap(zero, opts, res);

  std::vector<Iso> iso;
  for (const auto* p : iso_pts)
    iso.push_back({p, volume(*p), volume(*p) / bytes_per_us(prm.r_gbps(p->producers)) - p->gap_us -
                                      prm.delta_us(p->producers)});
  std::map<int, std::vector<const Iso*>> iso_by_k;
  for (const auto& i : iso) iso_by_k[i.p->producers].push_back(&i);

  // First below-knee set: below the knee T0 does not depend on K, so the smallest span at
  // each B is a robust start. At the largest B every K may overflow; an issue span grows at
  // most in proportion to B, so the start is capped at that growth from the previous B.
  const double m = opts.knee_margin;
  std::vector<const Iso*> below;
  for (const auto& [b, s] : min_span) {
    double t0 = s;
    if (!prm.t0_table.empty()) {
      const auto& prev = prm.t0_table.back();
      t0 = std::min(t0, prev.t0_us * static_cast<double>(b) / static_cast<double>(prev.burst_bytes));
    }
    prm.t0_table.push_back({b, t0});
  }
  for (const auto& i : iso) {
    const double t0 = prm.t0_us(i.p->burst_bytes);
    if (i.p->steady_issue_us <= (1 + m) * t0 && i.drain <= (1 - m) * t0) below.push_back(&i);
  }

  bool converged = false;
  for (int it = 0; it < std::max(1, opts.max_iterations) && !converged; ++it) {
    res.iterations = it + 1;
    res.t0_fits = t0_table(below);
    if (res.t0_fits.size() < 2) {
      std::vector<long long> bs;
      for (const auto& f : res.t0_fits) bs.push_back(f.burst_bytes);
      throw need_t0(fmt::format("only {} burst size(s) below the knee (B = {})", bs.size(), join(bs)));
    }
    prm.t0_table.clear();
    for (const auto& f : res.t0_fits) prm.t0_table.push_back({f.burst_bytes, f.t0_us});

    res.q_fits.clear();
    prm.q_table.clear();
    for (const auto& [k, list] : iso_by_k) {
      res.q_fits.push_back(fit_q(k, list, prm, m));
      prm.q_table.push_back({k, res.q_fits.back().q_bytes, res.q_fits.back().lower_bound});
    }

    std::vector<const Iso*> next;
    size_t qi = 0;
    for (const auto& [k, list] : iso_by_k) {
      for (const auto* i : list)
        if (is_below(*i, prm, res.q_fits[qi], m)) next.push_back(i);
      ++qi;
    }
    std::sort(next.begin(), next.end());
    std::sort(below.begin(), below.end());
    converged = next == below;
    below = std::move(next);
  }
  if (!converged) res.notes.push_back("the below-knee set did not settle within max_iterations; last fit kept");

  std::vector<int> bounds;
  for (const auto& q : res.q_fits)
    if (q.lower_bound) bounds.push_back(q.producers);
  if (!bounds.empty())
    res.notes.push_back(fmt::format(
        "Q(K) is a lower bound for K = {}: no isolated burst overflowed the stage (Q >= max V - R_agg T0(B)); "
        "the fill term (V - Q)/R_agg is then an upper bound",
        join(bounds)));

  double ss = 0;
  for (const auto* i : below) ss += sq((prm.t0_us(i->p->burst_bytes) - i->p->steady_issue_us) / i->p->steady_issue_us);
  res.t0_points = static_cast<int>(below.size());
  res.t0_rms_rel_err = below.empty() ? 0 : std::sqrt(ss / static_cast<double>(below.size()));

  fit_q_cold(usable, res);
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
  nlohmann::json t0 = nlohmann::json::array(), rk = nlohmann::json::array(), q = nlohmann::json::array(),
                 qc = nlohmann::json::array();
  for (const auto& f : r.t0_fits)
    t0.push_back({{"burst_bytes", f.burst_bytes}, {"t0_us", f.t0_us}, {"points", f.points}, {"min_us", f.min_us},
                  {"max_us", f.max_us}});
  for (const auto& f : r.r_fits)
    rk.push_back({{"producers", f.producers}, {"r_gbps", f.r_gbps}, {"points", f.points}, {"splits", f.splits},
                  {"min_gbps", f.min_gbps}, {"max_gbps", f.max_gbps}, {"spread_rel", f.spread_rel},
                  {"delta_us", f.delta_us}});
  for (const auto& f : r.q_fits)
    q.push_back({{"producers", f.producers}, {"q_bytes", f.q_bytes}, {"lower_bound", f.lower_bound},
                 {"points", f.points}, {"above_knee", f.above_knee}, {"rms_rel_err", f.rms_rel_err}});
  for (const auto& f : r.q_cold_fits)
    qc.push_back({{"producers", f.producers}, {"q_bytes", f.q_bytes}, {"points", f.points},
                  {"overflowing", f.overflowing}, {"rms_rel_err_base", f.rms_rel_err_base},
                  {"rms_rel_err_ext", f.rms_rel_err_ext}});
  j = nlohmann::json{
      {"params", r.params},
      {"usable_points", r.usable_points},
      {"iterations", r.iterations},
      {"t0", {{"points", r.t0_points}, {"rms_rel_err", r.t0_rms_rel_err}, {"table", t0}}},
      {"r", {{"points", r.r_points}, {"table", rk}}},
      {"r_agg", {{"gbps", r.params.r_agg_gbps}, {"points", r.r_agg_points}, {"min_gbps", r.r_agg_min_gbps},
                 {"max_gbps", r.r_agg_max_gbps}}},
      {"q", q},
      {"q_cold", {{"points", r.cold_points}, {"table", qc}}},
      {"notes", r.notes}};
}

std::string format_fit(const FitResult& r) {
  const Params& p = r.params;
  std::string s;
  auto pct = [](double x) { return fmt::format("{:.2f}%", 100 * x); };
  s += fmt::format("# Burst-Gap parameters ({} usable points, {} iteration(s))\n#\n", r.usable_points, r.iterations);

  s += "# T0(B): isolated warm bursts (largest gap per K and B), median over K of the below-knee spans\n";
  s += fmt::format("# {:>11} {:>10} {:>7} {:>10} {:>10}\n", "B (bytes)", "T0 (us)", "points", "min (us)", "max (us)");
  for (const auto& f : r.t0_fits)
    s += fmt::format("  {:>11} {:>10.4f} {:>7} {:>10.4f} {:>10.4f}\n", f.burst_bytes, f.t0_us, f.points, f.min_us,
                     f.max_us);
  s += fmt::format("#   {} below-knee points, rms relative error {}\n#\n", r.t0_points, pct(r.t0_rms_rel_err));

  s += "# R(K), delta(K): zero-gap bursts; R = median over the B splits of K*B/period, "
       "delta = median of measured - requested gap\n";
  s += fmt::format("# {:>5} {:>9} {:>7} {:>7} {:>9} {:>9} {:>8} {:>10}\n", "K", "R (GB/s)", "points", "splits",
                   "min", "max", "spread", "delta (us)");
  for (const auto& f : r.r_fits)
    s += fmt::format("  {:>5} {:>9.1f} {:>7} {:>7} {:>9.1f} {:>9.1f} {:>8} {:>10.3f}\n", f.producers, f.r_gbps,
                     f.points, f.splits, f.min_gbps, f.max_gbps, pct(f.spread_rel), f.delta_us);
  s += fmt::format("# R_agg = {:.1f} GB/s: median aggregate_gbps of {} zero-gap points (range {:.1f} .. {:.1f})\n#\n",
                   p.r_agg_gbps, r.r_agg_points, r.r_agg_min_gbps, r.r_agg_max_gbps);

  s += "# Q(K): warm capacity, from the knee of the large-gap spans (lower bound: no burst overflowed)\n";
  s += fmt::format("# {:>5} {:>10} {:>6} {:>7} {:>11} {:>9}\n", "K", "Q (MiB)", "bound", "points", "above_knee",
                   "rms err");
  for (const auto& f : r.q_fits)
    s += fmt::format("  {:>5} {:>10.3f} {:>6} {:>7} {:>11} {:>9}\n", f.producers, f.q_bytes / kMiB,
                     f.lower_bound ? "lower" : "fit", f.points, f.above_knee, pct(f.rms_rel_err));
  s += "#\n# Q_cold(K): capacity seen by the first burst after launch (extension); rms error of the cold span\n";
  s += fmt::format("# {:>5} {:>12} {:>7} {:>11} {:>10} {:>10}\n", "K", "Q_cold (MiB)", "points", "overflowing",
                   "rms base", "rms ext");
  for (const auto& f : r.q_cold_fits)
    s += fmt::format("  {:>5} {:>12.3f} {:>7} {:>11} {:>10} {:>10}\n", f.producers, f.q_bytes / kMiB, f.points,
                     f.overflowing, pct(f.rms_rel_err_base), pct(f.rms_rel_err_ext));
  s += "#\n";
  if (p.sm_count > 0) s += fmt::format("# sm_count = {}\n", p.sm_count);
  if (!p.source.empty()) s += "# source: " + p.source + "\n";
  for (const auto& n : r.notes) s += "# note: " + n + "\n";
  return s;
}

}  // namespace xstage::model
