// Burst-Gap closed form: hand-computed numbers in each regime, BRIEF's equations where they
// apply, monotonicity, the recovery gap, parameter I/O and input validation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <unistd.h>

#include "xstage/error.hpp"
#include "xstage/model.hpp"

namespace xm = xstage::model;

namespace {

// Round numbers so every expectation below can be checked by hand:
// T0(B) = 0.2 us + B / (1e5 B/us); R = 4e5 B/us; Q(16) = 1e6 B, Q(64) = 2e6 B.
xm::Params hand_params() {
  xm::Params p;
  p.t0_fixed_us = 0.2;
  p.issue_gbps_per_producer = 100;
  p.r_gbps = 400;
  p.q_bytes_by_k = {{16, 1e6}, {64, 2e6}};
  p.cold = {0.5, 0.25};
  p.sm_count = 132;
  p.source = "hand-made";
  return p;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("xstage_test_model_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

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

TEST(ModelParams, T0IsAffineInB) {
  const auto p = hand_params();
  EXPECT_NEAR(p.t0_us(0), 0.2, kEps);
  EXPECT_NEAR(p.t0_us(10000), 0.3, kEps);
  EXPECT_NEAR(p.t0_us(200000), 2.2, kEps);
}

TEST(ModelParams, QInterpolatesInKAndClamps) {
  auto p = hand_params();
  EXPECT_NEAR(p.q_bytes(16), 1e6, 1e-6);
  EXPECT_NEAR(p.q_bytes(64), 2e6, 1e-6);
  EXPECT_NEAR(p.q_bytes(32), 1e6 + 1e6 / 3.0, 1e-6);  // 16/48 of the way
  EXPECT_NEAR(p.q_bytes(40), 1.5e6, 1e-6);
  EXPECT_NEAR(p.q_bytes(1), 1e6, 1e-6);    // clamped below
  EXPECT_NEAR(p.q_bytes(132), 2e6, 1e-6);  // clamped above
  p.q_bytes_by_k = {{64, 2e6}, {16, 1e6}};  // order of the table does not matter
  EXPECT_NEAR(p.q_bytes(40), 1.5e6, 1e-6);
  p.q_bytes_by_k.clear();
  EXPECT_THROW(p.q_bytes(16), xstage::Error);
}

TEST(ModelPredict, IssueBoundRegime) {
  // K=16, B=10000: V=160000 B, T0=0.3 us, V/R=0.4 us, Q=1e6; G=1 us.
  const auto pr = xm::predict(hand_params(), 16, 10000, 1.0);
  EXPECT_EQ(pr.volume_bytes, 160000);
  EXPECT_NEAR(pr.t0_us, 0.3, kEps);
  EXPECT_NEAR(pr.drain_us, 0.4, kEps);
  EXPECT_NEAR(pr.issue_us, 0.3, kEps);
  EXPECT_NEAR(pr.period_us, 1.3, kEps);
  EXPECT_NEAR(pr.backpressure_us, 0.0, kEps);
  EXPECT_NEAR(pr.recovery_gap_us, 0.1, kEps);  // [V/R - T0]+
  EXPECT_TRUE(pr.backpressure_free);
  EXPECT_EQ(pr.regime, xm::Regime::kIssueBound);
  EXPECT_NEAR(pr.cold_issue_us, 0.3, kEps);
  // 0.3 + 0.5 + 0.25 * 160000 / 1048576
  EXPECT_NEAR(pr.cold_issue_ext_us, 0.8 + 0.25 * 160000.0 / 1048576.0, kEps);
}

TEST(ModelPredict, DrainBoundRegime) {
  // K=64, B=20000: V=1.28e6 B, T0=0.4, V/R=3.2, Q=2e6; G=1: span V/R-G=2.2, period V/R.
  const auto pr = xm::predict(hand_params(), 64, 20000, 1.0);
  EXPECT_NEAR(pr.issue_us, 2.2, kEps);
  EXPECT_NEAR(pr.period_us, 3.2, kEps);
  EXPECT_NEAR(pr.backpressure_us, 1.8, kEps);  // V/R - G - T0
  EXPECT_NEAR(pr.recovery_gap_us, 2.8, kEps);  // V/R - T0
  EXPECT_FALSE(pr.backpressure_free);
  EXPECT_EQ(pr.regime, xm::Regime::kDrainBound);
  EXPECT_NEAR(pr.cold_issue_us, 0.4, kEps);  // a first burst finds the stage empty
}

TEST(ModelPredict, FillBoundRegime) {
  // K=16, B=200000: V=3.2e6, T0=2.2, V/R=8, Q=1e6 -> (V-Q)/R = 5.5 us; G=10.
  const auto pr = xm::predict(hand_params(), 16, 200000, 10.0);
  EXPECT_NEAR(pr.issue_us, 5.5, kEps);
  EXPECT_NEAR(pr.period_us, 15.5, kEps);
  EXPECT_NEAR(pr.backpressure_us, 3.3, kEps);
  EXPECT_NEAR(pr.recovery_gap_us, 2.5, kEps);  // Q/R: the full stage drains
  EXPECT_FALSE(pr.backpressure_free);
  EXPECT_EQ(pr.regime, xm::Regime::kFillBound);
  EXPECT_NEAR(pr.cold_issue_us, 5.5, kEps);
  // Same burst with G=1: the previous burst still drains, V/R - G = 7 > 5.5.
  const auto tight = xm::predict(hand_params(), 16, 200000, 1.0);
  EXPECT_NEAR(tight.issue_us, 7.0, kEps);
  EXPECT_NEAR(tight.period_us, 8.0, kEps);
  EXPECT_EQ(tight.regime, xm::Regime::kDrainBound);
}

TEST(ModelPredict, ZeroGapPeriodIsDrainTime) {
  const auto pr = xm::predict(hand_params(), 64, 20000, 0.0);
  EXPECT_NEAR(pr.issue_us, 3.2, kEps);
  EXPECT_NEAR(pr.period_us, 3.2, kEps);
}

// Where the stage never overfills in one burst ([V - R T0]+ <= Q) the combined formula must
// reduce to BRIEF's: T_iss = max(T0, V/R - G), period = max(T0+G, V/R), cost [V/R-G-T0]+,
// G* = [V/R - T0]+, and "free" exactly when both of BRIEF's conditions hold.
TEST(ModelPredict, MatchesBriefEquationsWithoutOverfill) {
  const auto p = hand_params();
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
        EXPECT_NEAR(pr.cold_issue_us, t0, kEps);  // isolated: max(T0, (V-Q)/R) = T0 here
      }
  EXPECT_GT(checked, 100);
}

TEST(ModelPredict, IsolatedBurstFollowsBrief) {
  // Large gap: T_iss = max(T0, (V - Q)/R) for any volume.
  const auto p = hand_params();
  for (long long b : {1024LL, 65536LL, 131072LL, 262144LL, 1048576LL}) {
    const auto pr = xm::predict(p, 16, b, 1e6);
    const double v = 16.0 * b;
    EXPECT_NEAR(pr.issue_us, std::max(p.t0_us(b), (v - 1e6) / 4e5), kEps) << "B=" << b;
    EXPECT_NEAR(pr.issue_us, pr.cold_issue_us, kEps);
  }
}

TEST(ModelPredict, MonotoneInGapAndBurstSize) {
  const auto p = hand_params();
  for (int k : {4, 16, 48, 64}) {
    for (long long b : {1024LL, 16384LL, 131072LL}) {
      double prev_issue = std::numeric_limits<double>::infinity(), prev_period = -1;
      for (double g = 0; g <= 40; g += 0.25) {
        const auto pr = xm::predict(p, k, b, g);
        EXPECT_LE(pr.issue_us, prev_issue + kEps);    // more gap never costs issue time
        EXPECT_GE(pr.period_us, prev_period - kEps);  // but the period never shrinks
        EXPECT_GE(pr.issue_us, pr.t0_us - kEps);
        EXPECT_GE(pr.period_us, pr.drain_us - kEps);  // cannot beat the drain rate
        prev_issue = pr.issue_us;
        prev_period = pr.period_us;
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
  for (int k : {16, 64})
    for (long long b : {8192LL, 20000LL, 30000LL}) {  // none overfills: V - R T0 <= Q
      const auto at0 = xm::predict(p, k, b, 0.0);
      ASSERT_GT(at0.recovery_gap_us, 0) << k << "x" << b;
      const auto free = xm::predict(p, k, b, at0.recovery_gap_us);
      EXPECT_TRUE(free.backpressure_free) << k << "x" << b;
      EXPECT_NEAR(free.issue_us, free.t0_us, kEps);
      const auto short_gap = xm::predict(p, k, b, 0.9 * at0.recovery_gap_us);
      EXPECT_FALSE(short_gap.backpressure_free);
      EXPECT_GT(short_gap.issue_us, short_gap.t0_us + 1e-6);
    }
  // Overfilling burst: no gap makes it free, but G* is where it reaches its isolated span.
  const auto big = xm::predict(p, 16, 200000, 0.0);
  const auto at_g = xm::predict(p, 16, 200000, big.recovery_gap_us);
  EXPECT_NEAR(at_g.issue_us, big.cold_issue_us, kEps);
  EXPECT_GT(xm::predict(p, 16, 200000, 0.9 * big.recovery_gap_us).issue_us, big.cold_issue_us + 1e-6);
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

TEST(ModelParamsJson, RoundTripAndFile) {
  const auto p = hand_params();
  const nlohmann::json j = p;
  EXPECT_EQ(j.at("schema"), "xstage.params.v1");
  const auto q = j.get<xm::Params>();
  EXPECT_EQ(q.t0_fixed_us, p.t0_fixed_us);
  EXPECT_EQ(q.issue_gbps_per_producer, p.issue_gbps_per_producer);
  EXPECT_EQ(q.r_gbps, p.r_gbps);
  EXPECT_EQ(q.q_bytes_by_k, p.q_bytes_by_k);
  EXPECT_EQ(q.cold.c0_us, 0.5);
  EXPECT_EQ(q.cold.c1_us_per_mib, 0.25);
  EXPECT_EQ(q.sm_count, 132);
  EXPECT_EQ(q.source, "hand-made");

  const auto path = temp_path("params.json");
  xm::save_params(p, path);
  const auto r = xm::load_params(path);
  EXPECT_EQ(r.q_bytes_by_k, p.q_bytes_by_k);
  EXPECT_NEAR(xm::predict(r, 16, 200000, 10).issue_us, 5.5, kEps);
  std::filesystem::remove(path);
}

TEST(ModelParamsJson, LoadSortsTheQTableAndDefaultsOptionalFields) {
  const auto path = temp_path("unsorted.json");
  write_file(path, R"({"schema":"xstage.params.v1","t0_fixed_us":0.2,"issue_gbps_per_producer":100,
    "r_gbps":400,"q_bytes_by_k":[{"producers":64,"q_bytes":2e6},{"producers":16,"q_bytes":1e6}]})");
  const auto p = xm::load_params(path);
  ASSERT_EQ(p.q_bytes_by_k.size(), 2u);
  EXPECT_EQ(p.q_bytes_by_k[0].first, 16);
  EXPECT_EQ(p.cold.c0_us, 0.0);
  EXPECT_EQ(p.sm_count, 0);
  std::filesystem::remove(path);
}

TEST(ModelParamsJson, LoadErrorsNameTheFileAndTheProblem) {
  const auto path = temp_path("bad.json");
  EXPECT_TRUE(contains(error_of([&] { xm::load_params(path + ".missing"); }), path + ".missing: cannot open"));
  EXPECT_TRUE(contains(error_of([&] { xm::load_params(std::filesystem::temp_directory_path().string()); }),
                       "is a directory"));
  const std::string good_tail =
      R"("t0_fixed_us":0.2,"issue_gbps_per_producer":100,"r_gbps":400,"q_bytes_by_k":[{"producers":16,"q_bytes":1e6}]})";
  struct Case {
    std::string text, expect;
  };
  const Case cases[] = {
      {"{not json", "not valid JSON"},
      {R"({"schema":"xstage.probe.v1",)" + good_tail, "schema is \"xstage.probe.v1\", expected \"xstage.params.v1\""},
      {R"({"t0_fixed_us":0.2})", "missing field \"schema\""},
      {R"({"schema":"xstage.params.v1","issue_gbps_per_producer":100,"r_gbps":400,"q_bytes_by_k":[]})",
       "missing field \"t0_fixed_us\""},
      {R"({"schema":"xstage.params.v1","t0_fixed_us":"fast","issue_gbps_per_producer":100,"r_gbps":400,"q_bytes_by_k":[]})",
       "field \"t0_fixed_us\": expected a number, got string"},
      {R"({"schema":"xstage.params.v1","t0_fixed_us":0.2,"issue_gbps_per_producer":100,"r_gbps":0,"q_bytes_by_k":[{"producers":16,"q_bytes":1e6}]})",
       "r_gbps must be > 0"},
      {R"({"schema":"xstage.params.v1","t0_fixed_us":0.2,"issue_gbps_per_producer":100,"r_gbps":400,"q_bytes_by_k":[]})",
       "q_bytes_by_k must list at least one"},
      {R"({"schema":"xstage.params.v1","t0_fixed_us":0.2,"issue_gbps_per_producer":100,"r_gbps":400,"q_bytes_by_k":[{"producers":16,"q_bytes":1e6},{"producers":16,"q_bytes":2e6}]})",
       "K=16 is listed twice"},
      {R"({"schema":"xstage.params.v1","t0_fixed_us":0.2,"issue_gbps_per_producer":100,"r_gbps":400,"q_bytes_by_k":[{"producers":0,"q_bytes":1e6}]})",
       "producers must be >= 1"},
      {R"({"schema":"xstage.params.v1","t0_fixed_us":0.2,"issue_gbps_per_producer":100,"r_gbps":400,"q_bytes_by_k":[{"producers":16}]})",
       "q_bytes_by_k[0]: missing field \"q_bytes\""},
  };
  for (const auto& c : cases) {
    write_file(path, c.text);
    const std::string e = error_of([&] { xm::load_params(path); });
    EXPECT_TRUE(contains(e, path + ": ")) << e;
    EXPECT_TRUE(contains(e, c.expect)) << "expected \"" << c.expect << "\" in: " << e;
  }
  std::filesystem::remove(path);
}
