// `xstage predict` and `xstage fit` run as a user would: the built binary (XSTAGE_BIN),
// its exit status, stdout JSON and stderr messages.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "xstage/model.hpp"
#include "xstage/probe_data.hpp"
#include "xstage/simulator.hpp"

namespace xm = xstage::model;

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("xstage_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliRun cli(const std::string& args) const {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = std::string("'") + XSTAGE_BIN + "' " + args + " >'" + out.string() + "' 2>'" +
                            err.string() + "'";
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // The hand-made params of test_model: T0 (1000, 0.2) (10000, 0.3) (100000, 1.2) us,
  // R(16)=500, R(64)=400, R_agg=400 GB/s, delta(16)=0.1, delta(64)=0.3 us, Q(16)=1e6,
  // Q(64)=2e6 B (lower bound), Q_cold(16)=2e5, Q_cold(64)=5e5 B.
  std::string write_params(int sm_count = 132) const {
    xm::Params p;
    p.t0_table = {{1000, 0.2}, {10000, 0.3}, {100000, 1.2}};
    p.r_table = {{16, 500}, {64, 400}};
    p.r_agg_gbps = 400;
    p.delta_table = {{16, 0.1}, {64, 0.3}};
    p.q_table = {{16, 1e6, false}, {64, 2e6, true}};
    p.q_cold_table = {{16, 2e5}, {64, 5e5}};
    p.sm_count = sm_count;
    p.source = "test_cli_model";
    const std::string path = (dir_ / "params.json").string();
    xm::save_params(p, path);
    return path;
  }

  fs::path dir_;
};

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace

TEST_F(CliModel, PredictJsonHasTheModelNumbers) {
  const std::string params = write_params();
  // Fill-bound burst (hand-computed in test_model): K=16, B=200000, G=10.
  CliRun r = cli("predict --params '" + params + "' --producers 16 --burst-bytes 200000 --gap-us 10 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j.at("issue_us").get<double>(), 5.5, 1e-9);
  EXPECT_NEAR(j.at("period_us").get<double>(), 15.5, 1e-9);
  EXPECT_NEAR(j.at("backpressure_us").get<double>(), 3.3, 1e-9);
  EXPECT_NEAR(j.at("recovery_gap_us").get<double>(), 0.8, 1e-9);
  EXPECT_NEAR(j.at("cold_issue_base_us").get<double>(), 5.5, 1e-9);
  EXPECT_NEAR(j.at("cold_issue_us").get<double>(), 7.5, 1e-9);  // extended: (V - Q_cold)/R_agg
  EXPECT_FALSE(j.at("backpressure_free").get<bool>());
  EXPECT_EQ(j.at("regime"), "fill_bound");
  EXPECT_EQ(j.at("volume_bytes"), 3200000);
  EXPECT_EQ(j.at("producers"), 16);
  EXPECT_EQ(j.at("burst_bytes"), 200000);
  EXPECT_EQ(j.at("gap_us"), 10.0);
  // The terms behind the numbers.
  EXPECT_NEAR(j.at("t0_us").get<double>(), 2.2, 1e-9);
  EXPECT_NEAR(j.at("drain_term_us").get<double>(), 6.4 - 10 - 0.1, 1e-9);
  EXPECT_NEAR(j.at("fill_term_us").get<double>(), 5.5, 1e-9);
  EXPECT_NEAR(j.at("r_gbps").get<double>(), 500, 1e-9);
  EXPECT_NEAR(j.at("r_agg_gbps").get<double>(), 400, 1e-9);
  EXPECT_NEAR(j.at("delta_us").get<double>(), 0.1, 1e-9);
  EXPECT_NEAR(j.at("q_bytes").get<double>(), 1e6, 1e-6);
  EXPECT_EQ(j.at("q_lower_bound"), false);
  EXPECT_NEAR(j.at("q_cold_bytes").get<double>(), 2e5, 1e-6);
  EXPECT_EQ(j.at("params").at("r_agg_gbps"), 400.0);
  EXPECT_EQ(j.at("params").at("schema"), "xstage.params.v2");
  EXPECT_EQ(j.at("params").at("source"), "test_cli_model");
  EXPECT_EQ(j.at("params_file"), params);

  // Issue-bound burst (short flags).
  r = cli("predict --params '" + params + "' -k 16 -b 20000 -g 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j.at("issue_us").get<double>(), 0.4, 1e-9);
  EXPECT_NEAR(j.at("period_us").get<double>(), 1.4, 1e-9);
  EXPECT_NEAR(j.at("backpressure_us").get<double>(), 0.0, 1e-9);
  EXPECT_NEAR(j.at("recovery_gap_us").get<double>(), 0.14, 1e-9);
  EXPECT_TRUE(j.at("backpressure_free").get<bool>());
  EXPECT_EQ(j.at("regime"), "issue_bound");

  // Drain-bound: the period includes the turnaround.
  r = cli("predict --params '" + params + "' -k 64 -b 20000 -g 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j.at("issue_us").get<double>(), 1.9, 1e-9);
  EXPECT_NEAR(j.at("period_us").get<double>(), 3.2, 1e-9);
  EXPECT_EQ(j.at("q_lower_bound"), true);
}

TEST_F(CliModel, PredictHumanTable) {
  const CliRun r = cli("predict --params '" + write_params() + "' -k 64 -b 20000 -g 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "steady issue span")) << r.out;
  EXPECT_TRUE(contains(r.out, "1.900 us")) << r.out;  // V/R(K) - G - delta(K)
  EXPECT_TRUE(contains(r.out, "drain_bound")) << r.out;
  EXPECT_TRUE(contains(r.out, "recovery gap")) << r.out;
  EXPECT_TRUE(contains(r.out, "Q >= 1.907 MiB")) << r.out;  // Q(64) is a lower bound
  EXPECT_FALSE(contains(r.out, "note:")) << r.out;         // ... that this burst does not reach
  // A burst whose fill term exceeds T0 on a lower-bound Q gets the caveat.
  const CliRun big = cli("predict --params '" + write_params() + "' -k 64 -b 60000 -g 10");
  ASSERT_EQ(big.code, 0) << big.err;
  EXPECT_TRUE(contains(big.out, "note: Q(K) is a lower bound")) << big.out;
}

TEST_F(CliModel, PredictRejectsBadInputWithExitCode2) {
  const std::string p = "--params '" + write_params() + "' ";
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {p + "--producers 0 --burst-bytes 1024 --gap-us 1", "producers (K) must be at least 1, got 0"},
      {p + "--producers -4 --burst-bytes 1024 --gap-us 1", "producers (K) must be at least 1, got -4"},
      {p + "--producers 133 --burst-bytes 1024 --gap-us 1", "exceeds the 132 SMs"},
      {p + "--producers 8 --burst-bytes 1000 --gap-us 1", "not a multiple of 16"},
      {p + "--producers 8 --burst-bytes 0 --gap-us 1", "burst bytes (B) must be positive"},
      {p + "--producers 8 --burst-bytes 1024 --gap-us -0.5", "gap (G) must be >= 0"},
      {p + "--producers 8 --burst-bytes 1024 --gap-us nan", "NaN"},
      {"--params '" + (dir_ / "missing.json").string() + "' -k 8 -b 1024 -g 1",
       (dir_ / "missing.json").string() + ": cannot open the params file"},
  };
  for (const auto& c : cases) {
    const CliRun r = cli("predict " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "xstage: error: ")) << r.err;
    EXPECT_TRUE(contains(r.err, c.expect)) << "expected \"" << c.expect << "\" in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  // A params file that is not JSON is also the user's input: exit 2.
  std::ofstream(dir_ / "garbage.json") << "not json";
  const CliRun g = cli("predict --params '" + (dir_ / "garbage.json").string() + "' -k 8 -b 1024 -g 1");
  EXPECT_EQ(g.code, 2);
  EXPECT_TRUE(contains(g.err, "not valid JSON")) << g.err;
  // So is a params file of the old model: it says to refit.
  std::ofstream(dir_ / "v1.json") << R"({"schema":"xstage.params.v1","t0_fixed_us":0.1,"issue_gbps_per_producer":80,
    "r_gbps":390,"q_bytes_by_k":[{"producers":132,"q_bytes":4e6}]})";
  const CliRun v1 = cli("predict --params '" + (dir_ / "v1.json").string() + "' -k 8 -b 1024 -g 1");
  EXPECT_EQ(v1.code, 2);
  EXPECT_TRUE(contains(v1.err, "xstage.params.v1")) << v1.err;
  EXPECT_TRUE(contains(v1.err, "xstage fit")) << v1.err;
}

TEST_F(CliModel, PredictWithoutParamsUsesTheShippedH200Preset) {
  const fs::path preset = fs::path(XSTAGE_SOURCE_DIR) / "presets" / "h200-nvlink.json";
  ASSERT_TRUE(fs::exists(preset)) << "the measured H200 preset must ship with the source";
  const CliRun r = cli("predict -k 132 -b 16384 -g 10 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* f : {"issue_us", "period_us", "backpressure_us", "recovery_gap_us", "cold_issue_us"})
    EXPECT_TRUE(j.contains(f)) << f;
  // The same answer as with the preset named explicitly.
  const CliRun e = cli("predict -k 132 -b 16384 -g 10 --json --params '" + preset.string() + "'");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(e.out)["issue_us"].get<double>(), j["issue_us"].get<double>());
}

TEST_F(CliModel, FitOnSyntheticDataWritesParamsAndValidation) {
  xm::Params truth;
  truth.t0_table = {{2048, 0.15}, {16384, 0.30}, {65536, 1.23}, {131072, 2.53}};
  truth.r_table = {{33, 650}, {132, 387}};
  truth.r_agg_gbps = 370;
  truth.delta_table = {{33, 0.19}, {132, 0.48}};
  truth.q_table = {{33, 1.5 * xm::kMiB}, {132, 5.0 * xm::kMiB}};
  truth.q_cold_table = {{33, 1.0 * xm::kMiB}, {132, 2.5 * xm::kMiB}};
  std::vector<xstage::ProbePoint> cfg;
  for (int k : {33, 132})
    for (long long b = 2048; b <= 131072; b *= 2)
      for (double g : {0.0, 1.0, 5.0, 50.0}) {
        xstage::ProbePoint c;
        c.producers = k;
        c.burst_bytes = b;
        c.gap_us = g;
        c.bursts = 100;
        c.role = (b == 8192 || b == 32768) && g == 1.0 ? "validate" : "fit";
        cfg.push_back(c);
      }
  xstage::ProbeRun run;
  run.device = "synthetic";
  run.sm_count = 132;
  run.points = xm::synthesize(truth, cfg, 0.02, 17);
  const std::string data = (dir_ / "probe.json").string();
  const std::string out = (dir_ / "fitted.json").string();
  xstage::save_probe_run(run, data);

  CliRun r = cli("fit '" + data + "' --out '" + out + "' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j.at("params").at("r_agg_gbps").get<double>(), 370, 0.03 * 370);
  EXPECT_EQ(j.at("params").at("schema"), "xstage.params.v2");
  EXPECT_EQ(j.at("params").at("sm_count"), 132);
  EXPECT_EQ(j.at("validation").at("points"), 4);
  EXPECT_LT(j.at("validation").at("base").at("steady_issue").at("median_rel_err").get<double>(), 0.1);
  EXPECT_TRUE(j.at("fit").contains("q"));
  EXPECT_TRUE(j.at("fit").contains("q_cold"));
  const xm::Params fitted = xm::load_params(out);
  EXPECT_NEAR(fitted.r_agg_gbps, j.at("params").at("r_agg_gbps").get<double>(), 1e-9);
  EXPECT_NEAR(fitted.r_gbps(132), 387, 0.03 * 387);

  // The written params drive predict: back to back, one burst per V/R(K).
  r = cli("predict --params '" + out + "' -k 132 -b 16384 -g 0 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NEAR(nlohmann::json::parse(r.out).at("period_us").get<double>(), 132 * 16384 / 387e3, 0.05 * 5.6);

  // Human output: parameter tables and the validation table.
  r = cli("fit '" + data + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"Burst-Gap parameters", "T0(B)", "R_agg =", "Q_cold(K)", "Validation on 4 held-out points",
                        "cold_issue"})
    EXPECT_TRUE(contains(r.out, s)) << s << "\n" << r.out;
}

TEST_F(CliModel, FitReportsBadOrInsufficientData) {
  const std::string missing = (dir_ / "nope.json").string();
  CliRun r = cli("fit '" + missing + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, missing + ": cannot open")) << r.err;

  xstage::ProbeRun run;  // valid file, but nothing to fit
  const std::string empty = (dir_ / "empty.json").string();
  xstage::save_probe_run(run, empty);
  r = cli("fit '" + empty + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "no usable points")) << r.err;
}

// python/plot_probe.py re-implements the model for its curves; it must agree with predict().
TEST_F(CliModel, PlotScriptModelMatchesTheCppModel) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const std::string params = write_params();
  // One case per regime and table region: issue-, drain- and fill-bound, T0 below / inside /
  // beyond its table, K clamped below / interpolated / clamped above, the turnaround band.
  const int ks[] = {16, 64, 16, 40, 100, 8, 64, 16};
  const long long bs[] = {20000, 20000, 200000, 65536, 4096, 512, 60000, 20000};
  const double gs[] = {1.0, 1.0, 10.0, 0.0, 3.0, 0.0, 2.0, 0.2};
  constexpr size_t kN = 8;
  std::string cases;
  for (size_t i = 0; i < kN; ++i)
    cases += (i ? ", " : "") + std::string("(") + std::to_string(ks[i]) + ", " + std::to_string(bs[i]) + ", " +
             std::to_string(gs[i]) + ")";
  const std::string script =
      "import json, sys; sys.path.insert(0, '" + std::string(XSTAGE_SOURCE_DIR) + "/python'); "
      "import plot_probe as pp; p = json.load(open('" + params + "')); "
      "print(json.dumps([pp.predict(p, k, b, g) for k, b, g in [" + cases + "]]))";
  const fs::path py = dir_ / "check.py";
  std::ofstream(py) << script << "\n";
  const fs::path out = dir_ / "py.txt";
  ASSERT_EQ(std::system(("python3 '" + py.string() + "' >'" + out.string() + "' 2>&1").c_str()), 0) << slurp(out);
  const nlohmann::json j = nlohmann::json::parse(slurp(out));
  const xm::Params p = xm::load_params(params);
  ASSERT_EQ(j.size(), kN);
  for (size_t i = 0; i < kN; ++i) {
    const auto pr = xm::predict(p, ks[i], bs[i], gs[i]);
    EXPECT_NEAR(j[i].at("issue").get<double>(), pr.issue_us, 1e-9) << i;
    EXPECT_NEAR(j[i].at("period").get<double>(), pr.period_us, 1e-9) << i;
    EXPECT_NEAR(j[i].at("cold_base").get<double>(), pr.cold_issue_base_us, 1e-9) << i;
    EXPECT_NEAR(j[i].at("cold").get<double>(), pr.cold_issue_us, 1e-9) << i;
    EXPECT_NEAR(j[i].at("recovery_gap").get<double>(), pr.recovery_gap_us, 1e-9) << i;
  }
}
