// Fitter and validation on synthetic probe data (simulator + 2% noise) with known
// parameters, the label filters, and an error for each parameter that lacks data.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "xstage/error.hpp"
#include "xstage/fitter.hpp"
#include "xstage/model.hpp"
#include "xstage/simulator.hpp"
#include "xstage/validation.hpp"

namespace xm = xstage::model;
using xstage::ProbePoint;

namespace {

// The "true" X-Stage the synthetic probe measures (H200-like orders of magnitude).
xm::Params truth() {
  xm::Params p;
  p.t0_fixed_us = 0.12;
  p.issue_gbps_per_producer = 80;
  p.r_gbps = 380;
  p.q_bytes_by_k = {{33, 1.5 * xm::kMiB}, {66, 2.75 * xm::kMiB}, {132, 5.0 * xm::kMiB}};
  p.cold = {0.8, 0.3};
  return p;
}

ProbePoint config(int k, long long b, double g, const std::string& role, int bursts = 100) {
  ProbePoint c;
  c.producers = k;
  c.threads = 512;
  c.burst_bytes = b;
  c.gap_us = g;
  c.bursts = bursts;
  c.role = role;
  return c;
}

// A sweep shaped like the probe's: K x B x G, fit and held-out points on different grids.
std::vector<ProbePoint> fit_configs() {
  std::vector<ProbePoint> v;
  for (int k : {33, 66, 132})
    for (long long b = 1024; b <= 131072; b *= 2)
      for (double g : {0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0}) v.push_back(config(k, b, g, "fit"));
  return v;
}

std::vector<ProbePoint> validate_configs() {
  std::vector<ProbePoint> v;
  for (int k : {48, 100, 132})
    for (long long b : {3072LL, 12288LL, 24576LL, 49152LL, 98304LL})
      for (double g : {0.0, 0.7, 3.0, 7.0, 40.0}) v.push_back(config(k, b, g, "validate"));
  return v;
}

std::vector<ProbePoint> synthetic(uint64_t seed, double noise = 0.02) {
  auto cfg = fit_configs();
  const auto val = validate_configs();
  cfg.insert(cfg.end(), val.begin(), val.end());
  return xm::synthesize(truth(), cfg, noise, seed);
}

template <class F>
std::string fit_error(F&& f) {
  try {
    f();
  } catch (const xstage::Error& e) {
    return e.what();
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

}  // namespace

// Tolerances: R within 3%, T0(B) within 10% at every measured B, Q(K) within 15%.
TEST(Fitter, RecoversKnownParamsFromNoisySyntheticData) {
  const auto t = truth();
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    const auto pts = synthetic(seed);
    const xm::FitResult fr = xm::fit(pts);
    const auto& p = fr.params;
    SCOPED_TRACE("seed " + std::to_string(seed) + "\n" + xm::format_fit(fr));
    EXPECT_LT(rel(p.r_gbps, t.r_gbps), 0.03);
    for (long long b = 1024; b <= 131072; b *= 2) EXPECT_LT(rel(p.t0_us(b), t.t0_us(b)), 0.10) << "B=" << b;
    ASSERT_EQ(fr.q_fits.size(), 3u);
    for (const auto& [k, q] : t.q_bytes_by_k) EXPECT_LT(rel(p.q_bytes(k), q), 0.15) << "K=" << k;
    // Cold extension: recovers the affine correction roughly (its residuals carry the
    // simulator's t0_fixed offset and the noise of spans up to ~30 us).
    EXPECT_NEAR(p.cold.c0_us, t.cold.c0_us, 0.25);
    EXPECT_NEAR(p.cold.c1_us_per_mib, t.cold.c1_us_per_mib, 0.1);
    EXPECT_LT(fr.cold_rms_ext_us, fr.cold_rms_base_us);
    // Every fit point passes the default filters; diagnostics are filled in.
    EXPECT_EQ(fr.usable_points, static_cast<int>(fit_configs().size()));
    EXPECT_GT(fr.r_points, 10);
    EXPECT_GT(fr.t0_points, 8);
    EXPECT_FALSE(fr.r_splits.empty());
    EXPECT_LT(fr.r_spread_rel, 0.10);  // splits of one V agree up to the noise
    EXPECT_LT(fr.t0_rms_rel_err, 0.05);
  }
}

TEST(Fitter, NoiseFreeDataIsFittedClosely) {
  const xm::FitResult fr = xm::fit(synthetic(9, 0.0));
  const auto t = truth();
  EXPECT_LT(rel(fr.params.r_gbps, t.r_gbps), 0.005);
  for (long long b = 1024; b <= 131072; b *= 2) EXPECT_LT(rel(fr.params.t0_us(b), t.t0_us(b)), 0.01);
  // The fitted Q is the closed form's effective capacity: the simulator's Q minus the bytes
  // that drain during the start overhead (R * t0_fixed, docs/model.md).
  for (const auto& [k, q] : t.q_bytes_by_k)
    EXPECT_NEAR(fr.params.q_bytes(k), q - t.r_gbps * 1e3 * t.t0_fixed_us, 0.01 * q) << "K=" << k;
  EXPECT_NEAR(fr.r_spread_rel, 0.0, 1e-6);
}

TEST(Fitter, OnlyPointsWithTheRequestedLabelsCalibrate) {
  auto pts = synthetic(11);
  const xm::FitResult clean = xm::fit(pts);
  // Add wildly different points under every other label: they must not change the fit.
  const size_t n = pts.size();
  for (size_t i = 0; i < n; i += 3) {
    for (const char* which : {"dest", "store", "addr", "gap_kind", "warmup_bytes", "pre_wait_us"}) {
      ProbePoint q = pts[i];
      q.steady_issue_us *= 7;
      q.period_us *= 7;
      q.cold_issue_us *= 7;
      if (std::string(which) == "dest") q.dest = "local";
      if (std::string(which) == "store") q.store = "bulk";
      if (std::string(which) == "addr") q.addr = "rewrite";
      if (std::string(which) == "gap_kind") q.gap_kind = "work";
      if (std::string(which) == "warmup_bytes") q.warmup_bytes = 65536;  // cold-burst study runs
      if (std::string(which) == "pre_wait_us") q.pre_wait_us = 100;
      pts.push_back(q);
    }
  }
  const xm::FitResult mixed = xm::fit(pts);
  EXPECT_DOUBLE_EQ(mixed.params.r_gbps, clean.params.r_gbps);
  EXPECT_DOUBLE_EQ(mixed.params.t0_fixed_us, clean.params.t0_fixed_us);
  EXPECT_EQ(mixed.params.q_bytes_by_k, clean.params.q_bytes_by_k);
  EXPECT_EQ(mixed.usable_points, clean.usable_points);

  // The filters are options: fitting the "local" copies instead sees only them.
  xm::FitOptions local;
  local.dest = "local";
  const xm::FitResult lf = xm::fit(pts, local);
  EXPECT_LT(lf.usable_points, clean.usable_points);
  EXPECT_GT(lf.usable_points, 0);
}

TEST(Fitter, ProbeRunOverloadRecordsTheDevice) {
  xstage::ProbeRun run;
  run.device = "2x NVIDIA H200";
  run.date = "2025-01-01T00:00:00Z";
  run.commit = "abc123";
  run.sm_count = 132;
  run.points = synthetic(3);
  const xm::FitResult fr = xm::fit(run);
  EXPECT_EQ(fr.params.sm_count, 132);
  EXPECT_TRUE(contains(fr.params.source, "2x NVIDIA H200"));
  EXPECT_TRUE(contains(fr.params.source, "abc123"));
  const nlohmann::json j = fr;
  EXPECT_EQ(j.at("params").at("schema"), "xstage.params.v1");
  EXPECT_EQ(j.at("q").size(), 3u);
  EXPECT_TRUE(j.at("r").contains("spread_rel"));
  EXPECT_NO_THROW(xm::check_params(j.at("params").get<xm::Params>()));
}

TEST(Fitter, SaysWhichParameterLacksData) {
  const auto all = synthetic(5);
  auto keep = [&](auto pred) {
    std::vector<ProbePoint> v;
    for (const auto& p : all)
      if (pred(p)) v.push_back(p);
    return v;
  };
  // Nothing with the default labels.
  auto local = all;
  for (auto& p : local) p.dest = "local";
  std::string e = fit_error([&] { xm::fit(local); });
  EXPECT_TRUE(contains(e, "no usable points")) << e;
  EXPECT_TRUE(contains(e, "dest=peer")) << e;

  // No large gaps: T0 (and Q) cannot be calibrated.
  e = fit_error([&] { xm::fit(keep([](const ProbePoint& p) { return p.gap_us < 10; })); });
  EXPECT_TRUE(contains(e, "cannot determine T0")) << e;
  EXPECT_TRUE(contains(e, "large-gap")) << e;

  // Large gaps at one B only.
  e = fit_error([&] { xm::fit(keep([](const ProbePoint& p) { return p.gap_us < 10 || p.burst_bytes == 4096; })); });
  EXPECT_TRUE(contains(e, "cannot determine T0")) << e;
  EXPECT_TRUE(contains(e, "same B = 4096")) << e;

  // No back-to-back bursts: R.
  e = fit_error([&] { xm::fit(keep([](const ProbePoint& p) { return p.gap_us > 0; })); });
  EXPECT_TRUE(contains(e, "cannot determine R")) << e;
  EXPECT_TRUE(contains(e, "drain-bound")) << e;

  // Only small bursts: never above the knee, so Q is undetermined.
  e = fit_error([&] { xm::fit(keep([](const ProbePoint& p) { return p.burst_bytes <= 16384; })); });
  EXPECT_TRUE(contains(e, "cannot determine Q")) << e;
  EXPECT_TRUE(contains(e, "above the knee")) << e;

  // One K without an above-knee point is skipped with a note, not an error.
  const auto fr = xm::fit(keep([](const ProbePoint& p) { return p.producers != 33 || p.burst_bytes <= 16384; }));
  ASSERT_EQ(fr.q_fits.size(), 2u);
  bool noted = false;
  for (const auto& n : fr.notes) noted |= contains(n, "K=33 not determined");
  EXPECT_TRUE(noted);
}

TEST(Validation, SyntheticHeldOutPointsArePredictedWell) {
  const auto pts = synthetic(21);
  const xm::FitResult fr = xm::fit(pts);
  const xm::ValidationReport v = xm::validate(fr.params, pts);
  SCOPED_TRACE(xm::format_validation(v));
  EXPECT_EQ(v.points, static_cast<int>(validate_configs().size()));
  EXPECT_EQ(v.steady_issue.n, v.points);
  // 2% noise plus the simulator's t0_fixed offset near the knee.
  EXPECT_LT(v.steady_issue.median_rel, 0.04);
  EXPECT_LT(v.steady_issue.p90_rel, 0.10);
  EXPECT_LT(v.period.median_rel, 0.04);
  EXPECT_LT(v.period.p90_rel, 0.08);
  // The base model ignores the cold-path penalty (0.8 us + 0.3 us/MiB): large error;
  // the extension removes most of it.
  EXPECT_GT(v.cold_base.median_rel, 0.25);
  EXPECT_LT(v.cold_ext.median_rel, 0.06);
  EXPECT_LT(v.cold_ext.p90_rel, v.cold_base.p90_rel);

  const nlohmann::json j = v;
  EXPECT_EQ(j.at("points"), v.points);
  EXPECT_DOUBLE_EQ(j.at("base").at("cold_issue").at("median_rel_err").get<double>(), v.cold_base.median_rel);
  EXPECT_DOUBLE_EQ(j.at("extended").at("cold_issue").at("median_rel_err").get<double>(), v.cold_ext.median_rel);
  EXPECT_DOUBLE_EQ(j.at("extended").at("steady_issue").at("p90_rel_err").get<double>(),
                   j.at("base").at("steady_issue").at("p90_rel_err").get<double>());
  EXPECT_EQ(j.at("details").size(), static_cast<size_t>(v.points));
}

TEST(Validation, MedianAndP90AreComputedAsDocumented) {
  // Exact params; each held-out point measures pred / (1 + e) so its relative error is e.
  const xm::Params p = truth();
  const double errs[] = {0.0, 0.1, 0.2, 0.3, 0.4};
  std::vector<ProbePoint> pts;
  for (int i = 0; i < 5; ++i) {
    ProbePoint q = config(132, 4096 * (i + 1), 2.0 * i, "validate");
    const auto pr = xm::predict(p, q.producers, q.burst_bytes, q.gap_us);
    q.steady_issue_us = pr.issue_us / (1 + errs[i]);
    q.period_us = pr.period_us / (1 + errs[4 - i]);
    q.cold_issue_us = pr.cold_issue_ext_us;  // the extension is exact here
    pts.push_back(q);
  }
  ProbePoint not_measured = config(132, 8192, 1.0, "validate");  // zeros: skipped per quantity
  pts.push_back(not_measured);
  ProbePoint fit_point = pts[0];
  fit_point.role = "fit";
  fit_point.steady_issue_us *= 3;
  pts.push_back(fit_point);  // not held out: ignored

  const auto v = xm::validate(p, pts);
  EXPECT_EQ(v.points, 6);
  EXPECT_EQ(v.steady_issue.n, 5);
  EXPECT_NEAR(v.steady_issue.median_rel, 0.2, 1e-12);
  EXPECT_NEAR(v.steady_issue.p90_rel, 0.36, 1e-12);  // 0.3 + 0.6 * (0.4 - 0.3)
  EXPECT_NEAR(v.period.median_rel, 0.2, 1e-12);
  EXPECT_NEAR(v.cold_ext.median_rel, 0.0, 1e-12);
  EXPECT_GT(v.cold_base.median_rel, 0.0);
  const std::string table = xm::format_validation(v);
  EXPECT_TRUE(contains(table, "steady_issue")) << table;
  EXPECT_TRUE(contains(table, "20.00%")) << table;
  EXPECT_TRUE(contains(table, "36.00%")) << table;
  EXPECT_TRUE(contains(table, "0.00%")) << table;

  const auto none = xm::validate(p, {fit_point});
  EXPECT_EQ(none.points, 0);
  EXPECT_TRUE(contains(xm::format_validation(none), "no held-out points"));
}
