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

  // T0(B) = 0.2 + B/1e5 us, R = 4e5 B/us, Q(16)=1e6, Q(64)=2e6, cold +0.5 us +0.25 us/MiB.
  std::string write_params(int sm_count = 132) const {
    xm::Params p;
    p.t0_fixed_us = 0.2;
    p.issue_gbps_per_producer = 100;
    p.r_gbps = 400;
    p.q_bytes_by_k = {{16, 1e6}, {64, 2e6}};
    p.cold = {0.5, 0.25};
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
  EXPECT_NEAR(j.at("recovery_gap_us").get<double>(), 2.5, 1e-9);
  EXPECT_NEAR(j.at("cold_issue_base_us").get<double>(), 5.5, 1e-9);
  EXPECT_NEAR(j.at("cold_issue_us").get<double>(), 5.5 + 0.5 + 0.25 * 3.2e6 / xm::kMiB, 1e-9);  // extended
  EXPECT_FALSE(j.at("backpressure_free").get<bool>());
  EXPECT_EQ(j.at("regime"), "fill_bound");
  EXPECT_EQ(j.at("volume_bytes"), 3200000);
  EXPECT_EQ(j.at("params").at("r_gbps"), 400.0);
  EXPECT_EQ(j.at("params").at("source"), "test_cli_model");
  EXPECT_EQ(j.at("params_file"), params);

  // Issue-bound burst (short flags).
  r = cli("predict --params '" + params + "' -k 16 -b 10000 -g 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j.at("issue_us").get<double>(), 0.3, 1e-9);
  EXPECT_NEAR(j.at("period_us").get<double>(), 1.3, 1e-9);
  EXPECT_NEAR(j.at("backpressure_us").get<double>(), 0.0, 1e-9);
  EXPECT_NEAR(j.at("recovery_gap_us").get<double>(), 0.1, 1e-9);
  EXPECT_TRUE(j.at("backpressure_free").get<bool>());
}

TEST_F(CliModel, PredictHumanTable) {
  const CliRun r = cli("predict --params '" + write_params() + "' -k 64 -b 20000 -g 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "steady issue span")) << r.out;
  EXPECT_TRUE(contains(r.out, "2.200 us")) << r.out;  // V/R - G
  EXPECT_TRUE(contains(r.out, "drain_bound")) << r.out;
  EXPECT_TRUE(contains(r.out, "recovery gap")) << r.out;
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
}

TEST_F(CliModel, PredictWithoutParamsUsesThePresetOrSaysItIsMissing) {
  const fs::path preset = fs::path(XSTAGE_SOURCE_DIR) / "presets" / "h200-nvlink.json";
  const CliRun r = cli("predict -k 132 -b 16384 -g 10 --json");
  if (fs::exists(preset)) {
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(nlohmann::json::parse(r.out).contains("issue_us"));
  } else {
    EXPECT_NE(r.code, 0);
    EXPECT_TRUE(contains(r.err, "preset is missing")) << r.err;
    EXPECT_TRUE(contains(r.err, "--params")) << r.err;
  }
}

TEST_F(CliModel, FitOnSyntheticDataWritesParamsAndValidation) {
  xm::Params truth;
  truth.t0_fixed_us = 0.12;
  truth.issue_gbps_per_producer = 80;
  truth.r_gbps = 380;
  truth.q_bytes_by_k = {{33, 1.5 * xm::kMiB}, {132, 5.0 * xm::kMiB}};
  truth.cold = {0.8, 0.3};
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
  EXPECT_NEAR(j.at("params").at("r_gbps").get<double>(), 380, 0.03 * 380);
  EXPECT_EQ(j.at("params").at("sm_count"), 132);
  EXPECT_EQ(j.at("validation").at("points"), 4);
  EXPECT_LT(j.at("validation").at("base").at("steady_issue").at("median_rel_err").get<double>(), 0.1);
  EXPECT_TRUE(j.at("fit").contains("q"));
  const xm::Params fitted = xm::load_params(out);
  EXPECT_NEAR(fitted.r_gbps, j.at("params").at("r_gbps").get<double>(), 1e-9);

  // The written params drive predict.
  r = cli("predict --params '" + out + "' -k 132 -b 16384 -g 0 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NEAR(nlohmann::json::parse(r.out).at("period_us").get<double>(), 132 * 16384 / 380e3, 0.05 * 5.7);

  // Human output: parameters and the validation table.
  r = cli("fit '" + data + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "Burst-Gap parameters")) << r.out;
  EXPECT_TRUE(contains(r.out, "Validation on 4 held-out points")) << r.out;
  EXPECT_TRUE(contains(r.out, "cold_issue")) << r.out;
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
  const std::string script =
      "import json, sys; sys.path.insert(0, '" + std::string(XSTAGE_SOURCE_DIR) + "/python'); "
      "import plot_probe as pp; p = json.load(open('" + params + "')); "
      "print(json.dumps([pp.predict(p, k, b, g) for k, b, g in "
      "[(16, 10000, 1.0), (64, 20000, 1.0), (16, 200000, 10.0), (40, 65536, 0.0), (100, 4096, 3.0)]]))";
  const fs::path py = dir_ / "check.py";
  std::ofstream(py) << script << "\n";
  const fs::path out = dir_ / "py.txt";
  ASSERT_EQ(std::system(("python3 '" + py.string() + "' >'" + out.string() + "' 2>&1").c_str()), 0) << slurp(out);
  const nlohmann::json j = nlohmann::json::parse(slurp(out));
  const xm::Params p = xm::load_params(params);
  const int ks[] = {16, 64, 16, 40, 100};
  const long long bs[] = {10000, 20000, 200000, 65536, 4096};
  const double gs[] = {1.0, 1.0, 10.0, 0.0, 3.0};
  ASSERT_EQ(j.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const auto pr = xm::predict(p, ks[i], bs[i], gs[i]);
    EXPECT_NEAR(j[i].at("issue").get<double>(), pr.issue_us, 1e-9) << i;
    EXPECT_NEAR(j[i].at("isolated").get<double>(), pr.cold_issue_us, 1e-9) << i;
    EXPECT_NEAR(j[i].at("cold_ext").get<double>(), pr.cold_issue_ext_us, 1e-9) << i;
  }
}
