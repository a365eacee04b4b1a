// Burst-Gap closed form: table lookups, hand-computed numbers in each regime, BRIEF's
// equations where they apply, monotonicity, the recovery gap, params v2 I/O and input
// validation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <unistd.h>

#include "xstage/error.hpp"
#include "xstage/model.hpp"

namespace xm = xstage::model;

namespace {

// Round numbers so every expectation below can be checked by hand:
//   T0: (1000 B, 0.2 us), (10000, 0.3), (100000, 1.2); beyond 100000 the slope 1e-5 us/B.
//   R(K): (16, 500 GB/s), (64, 400);  R_agg = 400 GB/s;  delta(K): (16, 0.1 us), (64, 0.3).
//   Q(K): (16, 1e6 B), (64, 2e6 B, lower bound);  Q_cold(K): (16, 2e5 B), (64, 5e5 B).
xm::Params hand_params() {
  xm::Params p;
  p.t0_table = {{1000, 0.2}, {10000, 0.3}, {100000, 1.2}};
  p.r_table = {{16, 500}, {64, 400}};
  p.r_agg_gbps = 400;
  p.delta_table = {{16, 0.1}, {64, 0.3}};
  p.q_table = {{16, 1e6, false}, {64, 2e6, true}};
  p.q_cold_table = {{16, 2e5}, {64, 5e5}};
  p.sm_count = 132;
  p.source = "hand-made";
  return p;
}

// One R for every K, R_agg = R, no turnaround: the setting of BRIEF's equations.
xm::Params brief_params() {
  xm::Params p = hand_params();
  p.r_table = {{16, 400}};
  p.delta_table = {{16, 0.0}};
  p.q_table = {{16, 1e6, false}, {64, 2e6, false}};
  return p;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("xstage_test_model_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const xstage::Error& e) {
    return e.what();
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

constexpr double kEps = 1e-9;

}  // namespace

TEST(ModelParams, T0IsATableExtendedAboveAndConstantBelow) {
  auto p = hand_params();
  EXPECT_NEAR(p.t0_us(16), 0.2, kEps);     // below the table: the smallest entry
  EXPECT_NEAR(p.t0_us(1000), 0.2, kEps);
  EXPECT_NEAR(p.t0_us(5500), 0.25, kEps);  // half way between 1000 and 10000
  EXPECT_NEAR(p.t0_us(10000), 0.3, kEps);
  EXPECT_NEAR(p.t0_us(55000), 0.75, kEps);
  EXPECT_NEAR(p.t0_us(200000), 2.2, kEps);  // 1.2 + 1e-5 * 100000
  p.t0_table = {{100000, 1.2}, {1000, 0.2}, {10000, 0.3}};  // order does not matter
  EXPECT_NEAR(p.t0_us(200000), 2.2, kEps);
  p.t0_table = {{1000, 0.2}, {10000, 0.5}, {100000, 0.4}};  // falling last segment: not continued down
  EXPECT_NEAR(p.t0_us(200000), 0.4, kEps);
  p.t0_table = {{4096, 0.3}};  // one entry: constant
  EXPECT_NEAR(p.t0_us(1 << 20), 0.3, kEps);
  p.t0_table.clear();
  EXPECT_TRUE(contains(error_of([&] { p.t0_us(16); }), "T0 table is empty"));
}

TEST(ModelParams, KTablesInterpolateAndClamp) {
  const auto p = hand_params();
  EXPECT_NEAR(p.r_gbps(16), 500, kEps);
  EXPECT_NEAR(p.r_gbps(40), 450, kEps);
  EXPECT_NEAR(p.r_gbps(1), 500, kEps);    // clamped below
  EXPECT_NEAR(p.r_gbps(132), 400, kEps);  // clamped above
  EXPECT_NEAR(p.delta_us(40), 0.2, kEps);
  EXPECT_NEAR(p.delta_us(200), 0.3, kEps);
  EXPECT_NEAR(p.q_bytes(32), 1e6 + 1e6 / 3.0, 1e-6);  // 16/48 of the way
  EXPECT_NEAR(p.q_bytes(1), 1e6, 1e-6);
  EXPECT_NEAR(p.q_cold_bytes(40), 3.5e5, 1e-6);
  EXPECT_NEAR(p.q_cold_bytes(100), 5e5, 1e-6);
  // A lookup that uses a lower-bound entry is a lower bound.
  EXPECT_FALSE(p.q_lower_bound(1));
  EXPECT_FALSE(p.q_lower_bound(16));
  EXPECT_TRUE(p.q_lower_bound(17));
  EXPECT_TRUE(p.q_lower_bound(64));
  EXPECT_TRUE(p.q_lower_bound(132));
}

TEST(ModelPredict, IssueBoundRegime) {
  // K=16, B=20000: V=320000 B, T0=0.4, V/R(16)=0.64, delta=0.1; G=1: D=-0.46, F<0.
  const auto pr = xm::predict(hand_params(), 16, 20000, 1.0);
  EXPECT_EQ(pr.volume_bytes, 320000);
  EXPECT_NEAR(pr.t0_us, 0.4, kEps);
  EXPECT_NEAR(pr.drain_term_us, -0.46, kEps);
  EXPECT_NEAR(pr.fill_term_us, (320000 - 1e6) / 4e5, kEps);
  EXPECT_NEAR(pr.issue_us, 0.4, kEps);
  EXPECT_NEAR(pr.period_us, 1.4, kEps);  // no turnaround without backpressure
  EXPECT_NEAR(pr.backpressure_us, 0.0, kEps);
  EXPECT_NEAR(pr.recovery_gap_us, 0.14, kEps);  // V/R - delta - T0
  EXPECT_TRUE(pr.backpressure_free);
  EXPECT_EQ(pr.regime, xm::Regime::kIssueBound);
  EXPECT_NEAR(pr.cold_issue_us, 0.4, kEps);  // (V - Q_cold)/R_agg = 0.3 < T0
  EXPECT_NEAR(pr.cold_issue_base_us, 0.4, kEps);
  EXPECT_FALSE(pr.q_lower_bound);
}

TEST(ModelPredict, DrainBoundRegime) {
  // K=64, B=20000: V=1.28e6, T0=0.4, V/R(64)=3.2, delta=0.3; G=1: D = 3.2 - 1 - 0.3 = 1.9.
  const auto pr = xm::predict(hand_params(), 64, 20000, 1.0);
  EXPECT_NEAR(pr.drain_term_us, 1.9, kEps);
  EXPECT_NEAR(pr.issue_us, 1.9, kEps);
  EXPECT_NEAR(pr.period_us, 3.2, kEps);  // T_iss + G + delta = V/R(K)
  EXPECT_NEAR(pr.backpressure_us, 1.5, kEps);
  EXPECT_NEAR(pr.recovery_gap_us, 2.5, kEps);  // 3.2 - 0.3 - 0.4
  EXPECT_FALSE(pr.backpressure_free);
  EXPECT_EQ(pr.regime, xm::Regime::kDrainBound);
  EXPECT_NEAR(pr.cold_issue_base_us, 0.4, kEps);  // warm isolated: fits the stage
  EXPECT_NEAR(pr.cold_issue_us, 1.95, kEps);      // (1.28e6 - 5e5) / 4e5: overflows the cold capacity
  EXPECT_TRUE(pr.q_lower_bound);
  EXPECT_NEAR(pr.r_gbps, 400, kEps);
  EXPECT_NEAR(pr.delta_us, 0.3, kEps);
}

TEST(ModelPredict, FillBoundRegime) {
  // K=16, B=200000: V=3.2e6, T0=2.2 (extended), V/R(16)=6.4, delta=0.1, F=(3.2e6-1e6)/4e5=5.5.
  const auto p = hand_params();
  const auto pr = xm::predict(p, 16, 200000, 10.0);
  EXPECT_NEAR(pr.issue_us, 5.5, kEps);
  EXPECT_NEAR(pr.period_us, 15.5, kEps);  // no turnaround: the drain term does not bind
  EXPECT_NEAR(pr.backpressure_us, 3.3, kEps);
  EXPECT_NEAR(pr.recovery_gap_us, 0.8, kEps);  // 6.4 - 0.1 - 5.5
  EXPECT_FALSE(pr.backpressure_free);
  EXPECT_EQ(pr.regime, xm::Regime::kFillBound);
  EXPECT_NEAR(pr.cold_issue_base_us, 5.5, kEps);
  EXPECT_NEAR(pr.cold_issue_us, 7.5, kEps);  // (3.2e6 - 2e5) / 4e5
  // Shorter gaps: the previous burst still drains.
  const auto tight = xm::predict(p, 16, 200000, 0.5);
  EXPECT_NEAR(tight.issue_us, 5.8, kEps);
  EXPECT_NEAR(tight.period_us, 6.4, kEps);
  EXPECT_EQ(tight.regime, xm::Regime::kDrainBound);
  const auto zero = xm::predict(p, 16, 200000, 0.0);
  EXPECT_NEAR(zero.issue_us, 6.3, kEps);
  EXPECT_NEAR(zero.period_us, 6.4, kEps);
  // At G* the drain and fill terms tie: the burst is at its isolated span, no turnaround.
  const auto at_g = xm::predict(p, 16, 200000, pr.recovery_gap_us);
  EXPECT_NEAR(at_g.issue_us, 5.5, kEps);
  EXPECT_EQ(at_g.regime, xm::Regime::kFillBound);
  EXPECT_NEAR(at_g.period_us, 6.3, kEps);
}

// With one R for all K, R_agg = R and no turnaround, and where no burst overfills the stage
// ([V - R T0]+ <= Q), the model is BRIEF's: T_iss = max(T0, V/R - G), period =
// max(T0 + G, V/R), cost [V/R - G - T0]+, G* = [V/R - T0]+, free iff V/(T0 + G) <= R.
TEST(ModelPredict, MatchesBriefEquationsWithOneRateAndNoTurnaround) {
  const auto p = brief_params();
  int checked = 0;
  for (int k : {1, 8, 16, 32, 64, 100})
    for (long long b : {16LL, 1024LL, 4096LL, 16384LL, 65536LL})
      for (double g : {0.0, 0.05, 0.3, 1.0, 4.0, 50.0}) {
        const auto pr = xm::predict(p, k, b, g);
        const double v = static_cast<double>(k) * b, r = 4e5, t0 = p.t0_us(b);
        if (std::max(0.0, v - r * t0) > p.q_bytes(k)) continue;
        ++checked;
        EXPECT_NEAR(pr.issue_us, std::max(t0, v / r - g), kEps);
        EXPECT_NEAR(pr.period_us, std::max(t0 + g, v / r), kEps);
        EXPECT_NEAR(pr.backpressure_us, std::max(0.0, v / r - g - t0), kEps);
        EXPECT_NEAR(pr.recovery_gap_us, std::max(0.0, v / r - t0), kEps);
        EXPECT_EQ(pr.backpressure_free, v / (t0 + g) <= r * (1 + 1e-12));
        EXPECT_NEAR(pr.cold_issue_base_us, t0, kEps);
      }
  EXPECT_GT(checked, 100);
  // Isolated bursts follow BRIEF's max(T0, (V - Q)/R) for any volume.
  for (long long b : {1024LL, 65536LL, 131072LL, 262144LL, 1048576LL}) {
    const auto pr = xm::predict(p, 16, b, 1e6);
    EXPECT_NEAR(pr.issue_us, std::max(p.t0_us(b), (16.0 * b - 1e6) / 4e5), kEps) << "B=" << b;
    EXPECT_NEAR(pr.issue_us, pr.cold_issue_base_us, kEps);
  }
}

TEST(ModelPredict, BoundsAndMonotonicity) {
  const auto p = hand_params();
  for (int k : {4, 16, 40, 64, 132}) {
    for (long long b : {1024LL, 16384LL, 131072LL}) {
      double prev_issue = std::numeric_limits<double>::infinity();
      for (double g = 0; g <= 40; g += 0.25) {
        const auto pr = xm::predict(p, k, b, g);
        const double v = static_cast<double>(k) * b;
        EXPECT_LE(pr.issue_us, prev_issue + kEps);  // more gap never costs issue time
        EXPECT_GE(pr.issue_us, pr.t0_us - kEps);
        EXPECT_GE(pr.period_us, pr.t0_us + g - kEps);
        // The period reaches V/R(K) while the drain term binds; beyond G* it may be up to
        // delta(K) shorter (the turnaround is paid only under backpressure).
        EXPECT_GE(pr.period_us, v / (pr.r_gbps * 1e3) - pr.delta_us - kEps);
        EXPECT_EQ(pr.backpressure_free, std::fabs(pr.issue_us - pr.t0_us) < kEps);
        EXPECT_GE(pr.cold_issue_us, pr.t0_us - kEps);
        prev_issue = pr.issue_us;
      }
    }
    for (double g : {0.0, 1.0, 10.0}) {
      double prev = 0;
      for (long long b = 16; b <= (1 << 20); b *= 2) {
        const auto pr = xm::predict(p, k, b, g);
        EXPECT_GE(pr.issue_us, prev - kEps);
        EXPECT_GE(pr.backpressure_us, -kEps);
        prev = pr.issue_us;
      }
    }
  }
}

TEST(ModelPredict, RecoveryGapMakesTheNextBurstFree) {
  const auto p = hand_params();
  // None of these overfills the warm stage ([V - R_agg T0]+ <= Q).
  const std::pair<int, long long> cases[] = {{16, 20000}, {16, 40000}, {16, 60000}, {40, 20000}, {40, 40000}, {64, 20000}};
  for (const auto& [k, b] : cases) {
    const auto at0 = xm::predict(p, k, b, 0.0);
    ASSERT_GT(at0.recovery_gap_us, 0) << k << "x" << b;
    ASSERT_LE(at0.fill_term_us, at0.t0_us) << k << "x" << b;
    const auto free = xm::predict(p, k, b, at0.recovery_gap_us);
    EXPECT_TRUE(free.backpressure_free) << k << "x" << b;
    EXPECT_NEAR(free.issue_us, free.t0_us, kEps);
    const auto short_gap = xm::predict(p, k, b, 0.9 * at0.recovery_gap_us);
    EXPECT_FALSE(short_gap.backpressure_free);
    EXPECT_GT(short_gap.issue_us, short_gap.t0_us + 1e-6);
  }
  // An overfilling burst is never free; G* is where it reaches its isolated span.
  const auto big = xm::predict(p, 64, 60000, 0.0);
  ASSERT_GT(big.fill_term_us, big.t0_us);
  const auto at_g = xm::predict(p, 64, 60000, big.recovery_gap_us);
  EXPECT_NEAR(at_g.issue_us, big.cold_issue_base_us, kEps);
  EXPECT_FALSE(at_g.backpressure_free);
  EXPECT_GT(xm::predict(p, 64, 60000, 0.9 * big.recovery_gap_us).issue_us, big.cold_issue_base_us + 1e-6);
}

TEST(ModelPredict, JsonRoundTrip) {
  const auto pr = xm::predict(hand_params(), 64, 20000, 1.0);
  const nlohmann::json j = pr;
  EXPECT_EQ(j.at("regime"), "drain_bound");
  EXPECT_EQ(j.at("volume_bytes"), 1280000);
  EXPECT_EQ(j.at("q_lower_bound"), true);
  const auto back = j.get<xm::Prediction>();
  EXPECT_EQ(back.issue_us, pr.issue_us);
  EXPECT_EQ(back.period_us, pr.period_us);
  EXPECT_EQ(back.backpressure_us, pr.backpressure_us);
  EXPECT_EQ(back.recovery_gap_us, pr.recovery_gap_us);
  EXPECT_EQ(back.cold_issue_us, pr.cold_issue_us);
  EXPECT_EQ(back.cold_issue_base_us, pr.cold_issue_base_us);
  EXPECT_EQ(back.backpressure_free, pr.backpressure_free);
  EXPECT_EQ(back.drain_term_us, pr.drain_term_us);
  EXPECT_EQ(back.fill_term_us, pr.fill_term_us);
  EXPECT_EQ(back.delta_us, pr.delta_us);
  EXPECT_EQ(back.q_lower_bound, pr.q_lower_bound);
  EXPECT_EQ(back.regime, pr.regime);
  nlohmann::json broken = j;
  broken.erase("period_us");
  EXPECT_TRUE(contains(error_of([&] { broken.get<xm::Prediction>(); }), "missing field \"period_us\""));
}

TEST(ModelValidateInputs, RejectsEachBadInputWithOneLine) {
  EXPECT_NO_THROW(xm::validate_inputs(132, 16384, 0.0, 132));
  EXPECT_NO_THROW(xm::validate_inputs(500, 16, 1.5, 0));  // SM count unknown: no upper bound
  auto msg = [](int k, long long b, double g, int maxk) {
    try {
      xm::validate_inputs(k, b, g, maxk);
    } catch (const xstage::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("<no InvalidArgument>");
  };
  EXPECT_TRUE(contains(msg(0, 16, 0, 0), "producers (K) must be at least 1, got 0"));
  EXPECT_TRUE(contains(msg(-3, 16, 0, 0), "got -3"));
  EXPECT_TRUE(contains(msg(133, 16, 0, 132), "exceeds the 132 SMs"));
  EXPECT_TRUE(contains(msg(1, 0, 0, 0), "burst bytes (B) must be positive"));
  EXPECT_TRUE(contains(msg(1, -32, 0, 0), "must be positive"));
  EXPECT_TRUE(contains(msg(1, 100, 0, 0), "not a multiple of 16"));
  EXPECT_TRUE(contains(msg(1, 16, -1, 0), "gap (G) must be >= 0"));
  EXPECT_TRUE(contains(msg(1, 16, std::nan(""), 0), "NaN"));
  EXPECT_TRUE(contains(msg(1, 16, std::numeric_limits<double>::infinity(), 0), "finite"));
  for (const auto& m : {msg(0, 16, 0, 0), msg(1, 100, 0, 0), msg(1, 16, -1, 0)})
    EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(ModelParamsCheck, RejectsEachOutOfRangeValue) {
  struct Case {
    std::string name, expect;
    void (*edit)(xm::Params&);
  };
  const Case cases[] = {
      {"empty t0", "the t0 table must have at least one entry", [](xm::Params& p) { p.t0_table.clear(); }},
      {"empty r", "the r table must have at least one entry", [](xm::Params& p) { p.r_table.clear(); }},
      {"empty delta", "the delta table must have", [](xm::Params& p) { p.delta_table.clear(); }},
      {"empty q", "the q table must have", [](xm::Params& p) { p.q_table.clear(); }},
      {"empty q_cold", "the q_cold table must have", [](xm::Params& p) { p.q_cold_table.clear(); }},
      {"B < 1", "t0 table: burst_bytes must be >= 1, got 0", [](xm::Params& p) { p.t0_table[0].burst_bytes = 0; }},
      {"duplicate B", "t0 table: burst_bytes=10000 is listed twice",
       [](xm::Params& p) { p.t0_table[0].burst_bytes = 10000; }},
      {"negative T0", "t0_us for burst_bytes=1000 must be finite and >= 0", [](xm::Params& p) { p.t0_table[0].t0_us = -1; }},
      {"NaN T0", "must be finite", [](xm::Params& p) { p.t0_table[1].t0_us = std::nan(""); }},
      {"K < 1", "r table: producers must be >= 1, got 0", [](xm::Params& p) { p.r_table[0].producers = 0; }},
      {"duplicate K", "q table: producers=64 is listed twice", [](xm::Params& p) { p.q_table[0].producers = 64; }},
      {"zero R", "r_gbps for producers=16 must be finite and > 0", [](xm::Params& p) { p.r_table[0].r_gbps = 0; }},
      {"infinite R", "must be finite", [](xm::Params& p) {
         p.r_table[1].r_gbps = std::numeric_limits<double>::infinity();
       }},
      {"negative delta", "delta_us for producers=64 must be finite and >= 0",
       [](xm::Params& p) { p.delta_table[1].delta_us = -0.1; }},
      {"negative Q", "q table: q_bytes for producers=16", [](xm::Params& p) { p.q_table[0].q_bytes = -1; }},
      {"negative Q_cold", "q_cold table: q_bytes", [](xm::Params& p) { p.q_cold_table[0].q_bytes = -1; }},
      {"zero R_agg", "r_agg_gbps must be finite and > 0", [](xm::Params& p) { p.r_agg_gbps = 0; }},
      {"negative sm_count", "sm_count must be >= 0", [](xm::Params& p) { p.sm_count = -1; }},
  };
  EXPECT_NO_THROW(xm::check_params(hand_params()));
  for (const auto& c : cases) {
    auto p = hand_params();
    c.edit(p);
    const std::string e = error_of([&] { xm::check_params(p); });
    EXPECT_TRUE(contains(e, "params: ")) << c.name << ": " << e;
    EXPECT_TRUE(contains(e, c.expect)) << c.name << ": expected \"" << c.expect << "\" in: " << e;
  }
  // Zero is a valid table value (no turnaround, no capacity).
  auto z = hand_params();
  z.delta_table[0].delta_us = 0;
  z.q_cold_table[0].q_bytes = 0;
  EXPECT_NO_THROW(xm::check_params(z));
}

TEST(ModelParamsJson, RoundTripAndFile) {
  const auto p = hand_params();
  const nlohmann::json j = p;
  EXPECT_EQ(j.at("schema"), "xstage.params.v2");
  EXPECT_EQ(j.at("q").at(1).at("lower_bound"), true);
  const auto q = j.get<xm::Params>();
  EXPECT_EQ(q.t0_table, p.t0_table);
  EXPECT_EQ(q.r_table, p.r_table);
  EXPECT_EQ(q.r_agg_gbps, p.r_agg_gbps);
  EXPECT_EQ(q.delta_table, p.delta_table);
  EXPECT_EQ(q.q_table, p.q_table);
  EXPECT_EQ(q.q_cold_table, p.q_cold_table);
  EXPECT_EQ(q.sm_count, 132);
  EXPECT_EQ(q.source, "hand-made");

  const auto path = temp_path("params.json");
  xm::save_params(p, path);
  const auto r = xm::load_params(path);
  EXPECT_EQ(r.q_table, p.q_table);
  EXPECT_NEAR(xm::predict(r, 16, 200000, 10).issue_us, 5.5, kEps);
  std::filesystem::remove(path);

  const std::string text = xm::format_params(p);
  EXPECT_TRUE(contains(text, ">=1.907")) << text;  // Q(64) = 2e6 B, a lower bound
  EXPECT_TRUE(contains(text, "R_agg = 400.0 GB/s")) << text;
}

namespace {
// A valid v2 file with its tables out of order and without the optional fields.
const char* kUnsorted = R"({"schema":"xstage.params.v2",
  "t0":[{"burst_bytes":10000,"t0_us":0.3},{"burst_bytes":1000,"t0_us":0.2}],
  "r":[{"producers":64,"r_gbps":400},{"producers":16,"r_gbps":500}], "r_agg_gbps":400,
  "delta":[{"producers":16,"delta_us":0.1}],
  "q":[{"producers":64,"q_bytes":2e6},{"producers":16,"q_bytes":1e6,"lower_bound":true}],
  "q_cold":[{"producers":16,"q_bytes":2e5}]})";
}  // namespace

TEST(ModelParamsJson, LoadSortsTablesAndDefaultsOptionalFields) {
  const auto path = temp_path("unsorted.json");
  write_file(path, kUnsorted);
  const auto p = xm::load_params(path);
  ASSERT_EQ(p.t0_table.size(), 2u);
  EXPECT_EQ(p.t0_table[0].burst_bytes, 1000);
  EXPECT_EQ(p.r_table[0].producers, 16);
  EXPECT_EQ(p.q_table[0].producers, 16);
  EXPECT_TRUE(p.q_table[0].lower_bound);
  EXPECT_FALSE(p.q_table[1].lower_bound);  // lower_bound defaults to false
  EXPECT_EQ(p.sm_count, 0);
  EXPECT_EQ(p.source, "");
  std::filesystem::remove(path);
}

TEST(ModelParamsJson, LoadErrorsNameTheFileAndTheProblem) {
  const auto path = temp_path("bad.json");
  EXPECT_TRUE(contains(error_of([&] { xm::load_params(path + ".missing"); }), path + ".missing: cannot open"));
  EXPECT_TRUE(contains(error_of([&] { xm::load_params(std::filesystem::temp_directory_path().string()); }),
                       "is a directory"));
  auto edit = [](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(kUnsorted);
    f(j);
    return j.dump();
  };
  struct Case {
    std::string text, expect;
  };
  const Case cases[] = {
      {"{not json", "not valid JSON"},
      {R"({"schema":"xstage.params.v1","t0_fixed_us":0.2,"issue_gbps_per_producer":100,"r_gbps":400,
          "q_bytes_by_k":[{"producers":16,"q_bytes":1e6}]})",
       "schema \"xstage.params.v1\" is the old model"},
      {edit([](nlohmann::json& j) { j["schema"] = "xstage.probe.v1"; }),
       "schema is \"xstage.probe.v1\", expected \"xstage.params.v2\""},
      {edit([](nlohmann::json& j) { j.erase("schema"); }), "missing field \"schema\""},
      {edit([](nlohmann::json& j) { j.erase("t0"); }), "missing field \"t0\""},
      {edit([](nlohmann::json& j) { j.erase("r_agg_gbps"); }), "missing field \"r_agg_gbps\""},
      {edit([](nlohmann::json& j) { j["q_cold"] = 3; }), "field \"q_cold\": expected an array"},
      {edit([](nlohmann::json& j) { j["r_agg_gbps"] = "fast"; }), "field \"r_agg_gbps\": expected a number, got string"},
      {edit([](nlohmann::json& j) { j["r"][1].erase("r_gbps"); }), "r[1]: missing field \"r_gbps\""},
      {edit([](nlohmann::json& j) { j["q"][0]["lower_bound"] = 1; }), "q[0]: field \"lower_bound\": expected true/false"},
      {edit([](nlohmann::json& j) { j["r"][0]["r_gbps"] = 0; }), "r_gbps for producers=64 must be finite and > 0"},
      {edit([](nlohmann::json& j) { j["delta"] = nlohmann::json::array(); }), "the delta table must have at least one"},
      {edit([](nlohmann::json& j) { j["q"][0]["producers"] = 16; }), "q table: producers=16 is listed twice"},
      {edit([](nlohmann::json& j) { j["t0"][0]["burst_bytes"] = 0; }), "burst_bytes must be >= 1"},
  };
  for (const auto& c : cases) {
    write_file(path, c.text);
    const std::string e = error_of([&] { xm::load_params(path); });
    EXPECT_TRUE(contains(e, path + ": ")) << e;
    EXPECT_TRUE(contains(e, c.expect)) << "expected \"" << c.expect << "\" in: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  std::filesystem::remove(path);
}
