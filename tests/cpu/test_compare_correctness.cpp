// The correctness gate of every compare/acceptance script (python/compare_*.py, rules in
// docs/checkers.md). Each script gets a clean synthetic input, which must pass (exit 0), then
// the same input doctored in one way at a time, which must fail with exit status 1 and a
// `CORRECTNESS FAIL` line naming the doctored cell and the reason:
//   wrong output       the cell's correctness record says passed: false
//   over tolerance     passed: true, but rel_err above the rel_tol the record carries
//   non-finite (cell)  the cell's own nonfinite count is not 0
//   non-finite (rec)   the record's nonfinite count is not 0
//   mismatch count     a mismatch field (Ulysses: mismatch_vs_serial) is not 0
//   failed variant     an "errors" object names a variant that failed (Ulysses: a timeout)
//   not checked        checked: false / rows_checked 0
//   missing record     no correctness object (waived only by --allow-missing-correctness,
//                      which warns; a failed record is never waived)
//   failed baseline    the other file's (the PyTorch baseline's, the W8A8 reference's, the
//                      other A/B set's) cell failed its own check; for the PyTorch files also
//                      a failed file-level check ("checks": [{"pass": false}]).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "python_tool_util.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using xstage::test::passing_correctness;
using xstage::test::quote;
using xstage::test::slurp;

json doc(const char* schema, json results) {
  return {{"schema", schema}, {"device", "test"}, {"commit", "abc"}, {"results", std::move(results)}};
}

// One script: its clean input files, the command line over their paths, which file holds the
// doctored cell ("ours") and which the baseline (-1: none), and how reports name both cells.
struct Script {
  const char* name;
  std::function<std::vector<json>()> files;
  std::function<std::string(const std::vector<fs::path>&)> args;
  int ours;
  int base;
  std::string ours_label;
  std::string base_label;
  bool file_checks;  // the baseline file may carry "checks"
};

json attention_row(const char* backend, double tflops) {
  return {{"backend", backend}, {"batch", 1},        {"seqlen", 4096},     {"heads", 12},
          {"head_dim", 64},     {"dtype", "bf16"},   {"causal", false},    {"tflops", tflops},
          {"median_us", 10.0},  {"nonfinite", 0},    {"correctness", passing_correctness()}};
}

json gemm_row(const char* op, const char* weights, double tflops) {
  return {{"model", "M"},        {"op", op},         {"tokens_per_expert", 1024}, {"weights", weights},
          {"experts", 8},        {"n", 4096},        {"k", 4096},                 {"tflops", tflops},
          {"median_us", 1.0},    {"scaling", "blockwise"}, {"instantiation", std::string(weights) + "_k"},
          {"nonfinite", 0},      {"correctness", passing_correctness()}};
}

json moe_row(const char* variant, double us) {
  json r = {{"model", "DSv4-Flash"}, {"weights", "w8a8"}, {"routing", "balanced"}, {"tokens_per_rank", 2048},
            {"median_us", us},       {"nonfinite", 0},    {"correctness", passing_correctness()}};
  if (variant != nullptr) r["variant"] = variant;
  return r;
}

json ulysses_row() {
  json t = {{"median", 100.0}, {"p10", 99.0}, {"p90", 101.0}};
  return {{"seq_len", 1024},
          {"heads", 24},
          {"head_dim", 128},
          {"times_us", {{"attention", t}, {"serial", t}, {"fused", t}, {"fused_shaped", t}}},
          {"mismatch_vs_serial", {{"serial", 0}, {"fused", 0}, {"fused_shaped", 0}}},
          {"correctness", passing_correctness()}};
}

std::vector<Script> scripts() {
  auto two = [](const std::vector<fs::path>& p) { return quote(p[0]) + " " + quote(p[1]); };
  return {
      {"compare_attention.py",
       [] {
         return std::vector<json>{doc("xstage.bench.attention.v1", {attention_row("xstage", 500)}),
                                  doc("xstage.bench.attention.v1", {attention_row("torch-cudnn", 400)})};
       },
       two, 0, 1, "xstage B=1 S=4096 H=12 d=64 bf16 causal=False",
       "torch torch-cudnn B=1 S=4096 H=12 d=64 bf16 causal=False", false},
      {"compare_moe_gemm.py",
       [] {
         return std::vector<json>{doc("xstage.bench.moe_gemm.v1", {gemm_row("l1_bf16", "w8a8", 990)}),
                                  doc("xstage.bench.moe_gemm.v1", {gemm_row("l1", "w8a8", 1000)})};
       },
       two, 0, 1, "xstage M l1_bf16 1024 w8a8 w8a8_k", "baseline M l1 1024 tokens/expert", false},
      {"compare_moe_w4a8.py",
       [] {
         return std::vector<json>{doc("xstage.bench.moe_gemm.v1", {gemm_row("l2_bf16", "w8a8", 1000),
                                                                  gemm_row("l2_bf16", "w4a8_int4_lut_rs_tok", 900)})};
       },
       [](const std::vector<fs::path>& p) { return quote(p[0]); }, 0, 0,
       "xstage M l2_bf16 1024 w4a8_int4_lut_rs_tok", "xstage M l2_bf16 1024 w8a8", false},
      {"compare_ulysses.py",
       [] {
         json torch = doc("xstage.bench.ulysses_torch.v1",
                          {{{"seq_len", 1024}, {"heads", 24}, {"head_dim", 128}, {"sdpa_nccl_us", 300.0},
                            {"correctness", passing_correctness()}}});
         torch["checks"] = {{{"seq_len", 1024}, {"heads", 24}, {"head_dim", 128}, {"rel_err", 0.002},
                             {"max_abs_err", 0.001}, {"limit", 0.01}, {"pass", true}}};
         return std::vector<json>{doc("xstage.bench.ulysses.v1", {ulysses_row()}), torch};
       },
       two, 0, 1, "xstage S=1024 24x128", "torch S=1024 24x128", true},
      {"compare_moe.py",
       [] {
         json torch = doc("xstage.bench.moe_torch.v1", {moe_row(nullptr, 300.0)});
         torch["checks"] = {{{"model", "DiT-MoE-G"}, {"rel_err", 0.006}, {"limit", 0.03}, {"pass", true}}};
         return std::vector<json>{
             doc("xstage.bench.moe.v1", {moe_row("expert-wave", 125.0), moe_row("interleaved", 100.0)}), torch};
       },
       two, 0, 1, "xstage DSv4-Flash w8a8 balanced 2048 interleaved", "torch DSv4-Flash w8a8 balanced 2048", true},
      {"compare_moe_layer.py",
       [] {
         json torch = doc("xstage.bench.moe_torch.v1", {moe_row(nullptr, 300.0)});
         torch["checks"] = {{{"model", "DiT-MoE-G"}, {"rel_err", 0.006}, {"limit", 0.03}, {"pass", true}}};
         return std::vector<json>{doc("xstage.bench.moe_layer.v1", {moe_row(nullptr, 100.0)}), torch};
       },
       two, 0, 1, "xstage DSv4-Flash w8a8 balanced 2048", "torch DSv4-Flash w8a8 balanced 2048", true},
      {"compare_moe_plan.py",
       [] {
         return std::vector<json>{doc("xstage.bench.moe_gemm.v1", {gemm_row("l1_swiglu", "w8a8", 1.0)}),
                                  doc("xstage.bench.moe_gemm.v1", {gemm_row("l1_swiglu", "w8a8", 900)})};
       },
       [](const std::vector<fs::path>& p) { return "--planned " + quote(p[0]) + " --forced " + quote(p[1]); }, 0, 1,
       "M l1_swiglu 1024 w8a8 w8a8_k", "M l1_swiglu 1024 w8a8 w8a8_k", false},
      {"compare_moe_ab.py",
       [] {
         return std::vector<json>{doc("xstage.bench.moe_gemm.v1", {gemm_row("l1_bf16", "w8a8", 900)}),
                                  doc("xstage.bench.moe_gemm.v1", {gemm_row("l1_bf16", "w8a8", 950)})};
       },
       [](const std::vector<fs::path>& p) { return "--base " + quote(p[1]) + " --new " + quote(p[0]); }, 0, 1,
       "M l1_bf16 1024 w8a8 w8a8_k", "M l1_bf16 1024 w8a8 w8a8_k", false},
      // The same script on `xstage bench moe` sets (the expert-parallel layer's A/B).
      {"compare_moe_ab.py",
       [] {
         return std::vector<json>{doc("xstage.bench.moe.v1", {moe_row("expert-wave", 100.0)}),
                                  doc("xstage.bench.moe.v1", {moe_row("expert-wave", 110.0)})};
       },
       [](const std::vector<fs::path>& p) { return "--base " + quote(p[1]) + " --new " + quote(p[0]); }, 0, 1,
       "DSv4-Flash w8a8 balanced 2048 expert-wave", "DSv4-Flash w8a8 balanced 2048 expert-wave", false},
  };
}

// A doctoring: what it does to the inputs, and what the report must say.
struct Kind {
  const char* name;
  std::function<void(std::vector<json>&, const Script&)> apply;
  std::function<std::string(const Script&)> expect;  // a fragment of the CORRECTNESS FAIL line
  bool needs_base;
  bool needs_file_checks;
};

json& ours_cell(std::vector<json>& f, const Script& s) { return f[s.ours]["results"].back(); }
json& base_cell(std::vector<json>& f, const Script& s) { return f[s.base]["results"][0]; }

std::vector<Kind> kinds() {
  return {
      {"wrong output (passed: false)",
       [](auto& f, const Script& s) { ours_cell(f, s)["correctness"]["passed"] = false; },
       [](const Script& s) { return s.ours_label + ": correctness: check failed (passed: false)"; }, false, false},
      {"error over its tolerance",
       [](auto& f, const Script& s) { ours_cell(f, s)["correctness"]["rel_err"] = 0.5; },
       [](const Script& s) { return s.ours_label + ": correctness: rel_err 0.5 over its tolerance rel_tol 0.02"; },
       false, false},
      {"non-finite output (cell)", [](auto& f, const Script& s) { ours_cell(f, s)["nonfinite"] = 123456; },
       [](const Script& s) { return s.ours_label + ": nonfinite = 123456"; }, false, false},
      {"non-finite output (record)",
       [](auto& f, const Script& s) { ours_cell(f, s)["correctness"]["nonfinite"] = 7; },
       [](const Script& s) { return s.ours_label + ": correctness: 7 non-finite outputs"; }, false, false},
      {"NaN error (null)",
       [](auto& f, const Script& s) { ours_cell(f, s)["correctness"]["max_abs_err"] = nullptr; },
       [](const Script& s) { return s.ours_label + ": correctness: max_abs_err is None"; }, false, false},
      {"mismatch count",
       [](auto& f, const Script& s) { ours_cell(f, s)["mismatch_vs_serial"] = {{"serial", 0}, {"fused", 999999}}; },
       [](const Script& s) { return s.ours_label + ": mismatch_vs_serial[fused] = 999999"; }, false, false},
      {"not checked",
       [](auto& f, const Script& s) {
         ours_cell(f, s)["correctness"]["checked"] = false;
         ours_cell(f, s)["correctness"]["rows_checked"] = 0;
       },
       [](const Script& s) { return s.ours_label + ": correctness: not checked (checked: false)"; }, false, false},
      {"failed variant (errors)",
       [](auto& f, const Script& s) { ours_cell(f, s)["errors"] = {{"fused", "device timeout"}}; },
       [](const Script& s) { return s.ours_label + ": fused failed: device timeout"; }, false, false},
      {"missing record", [](auto& f, const Script& s) { ours_cell(f, s).erase("correctness"); },
       [](const Script& s) { return s.ours_label + ": no correctness record"; }, false, false},
      {"failed baseline check",
       [](auto& f, const Script& s) { base_cell(f, s)["correctness"]["passed"] = false; },
       [](const Script& s) { return s.base_label + ": correctness: check failed (passed: false)"; }, true, false},
      {"missing baseline record", [](auto& f, const Script& s) { base_cell(f, s).erase("correctness"); },
       [](const Script& s) { return s.base_label + ": no correctness record"; }, true, false},
      {"failed baseline file check",
       [](auto& f, const Script& s) { f[s.base]["checks"][0]["pass"] = false; },
       [](const Script&) { return std::string("file: check "); }, true, true},
      {"baseline file check over its limit",
       [](auto& f, const Script& s) { f[s.base]["checks"][0]["rel_err"] = 0.9; },
       [](const Script&) { return std::string("rel_err 0.9 over its tolerance limit"); }, true, true},
  };
}

class CompareCorrectness : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
    dir_ = fs::temp_directory_path() / ("xs_cmpcorr_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Writes `files`, runs the script with `extra` flags; the exit status, output in out_.
  int run(const Script& s, const std::vector<json>& files, const std::string& extra = "") {
    std::vector<fs::path> paths;
    for (size_t i = 0; i < files.size(); ++i) {
      paths.push_back(dir_ / (std::to_string(i) + ".json"));
      std::ofstream(paths.back()) << files[i].dump();
    }
    return xstage::test::run_python_tool(s.name, s.args(paths) + extra, out_);
  }
  fs::path dir_, out_ = fs::temp_directory_path() / ("xs_cmpcorr_out_" + std::to_string(::getpid()) + ".txt");
};

}  // namespace

TEST_F(CompareCorrectness, CleanInputPasses) {
  for (const Script& s : scripts()) {
    EXPECT_EQ(run(s, s.files()), 0) << s.name << ":\n" << slurp(out_);
    const std::string text = slurp(out_);
    EXPECT_EQ(text.find("CORRECTNESS FAIL"), std::string::npos) << s.name << ":\n" << text;
    EXPECT_NE(text.find("# correctness: "), std::string::npos) << s.name << ":\n" << text;
    EXPECT_NE(text.find("cells checked, all pass"), std::string::npos) << s.name << ":\n" << text;
  }
}

TEST_F(CompareCorrectness, EveryDoctoredKindFailsAndNamesTheCell) {
  int cases = 0;
  for (const Script& s : scripts())
    for (const Kind& k : kinds()) {
      if ((k.needs_base && s.base < 0) || (k.needs_file_checks && !s.file_checks)) continue;
      std::vector<json> files = s.files();
      k.apply(files, s);
      ++cases;
      EXPECT_EQ(run(s, files), 1) << s.name << ", " << k.name << ":\n" << slurp(out_);
      const std::string text = slurp(out_);
      EXPECT_NE(text.find("CORRECTNESS FAIL"), std::string::npos) << s.name << ", " << k.name << ":\n" << text;
      EXPECT_NE(text.find(k.expect(s)), std::string::npos)
          << s.name << ", " << k.name << ": expected '" << k.expect(s) << "' in:\n" << text;
      EXPECT_NE(text.find("# correctness: FAIL"), std::string::npos) << s.name << ", " << k.name << ":\n" << text;
      EXPECT_EQ(text.find("Traceback"), std::string::npos) << s.name << ", " << k.name << ":\n" << text;
    }
  EXPECT_GE(cases, 80);
}

TEST_F(CompareCorrectness, AllowMissingWaivesOnlyMissingRecordsAndWarns) {
  for (const Script& s : scripts()) {
    std::vector<json> files = s.files();
    for (auto& f : files)
      for (auto& r : f["results"]) r.erase("correctness");
    EXPECT_EQ(run(s, files, " --allow-missing-correctness"), 0) << s.name << ":\n" << slurp(out_);
    EXPECT_NE(slurp(out_).find("WARNING: --allow-missing-correctness"), std::string::npos) << s.name << slurp(out_);
    EXPECT_NE(slurp(out_).find("WITHOUT a record"), std::string::npos) << s.name << slurp(out_);
    // A failed record, a non-finite count or a mismatch is never waived.
    std::vector<json> bad = s.files();
    ours_cell(bad, s)["correctness"]["passed"] = false;
    EXPECT_EQ(run(s, bad, " --allow-missing-correctness"), 1) << s.name << ":\n" << slurp(out_);
    std::vector<json> nf = files;
    ours_cell(nf, s)["nonfinite"] = 1;
    EXPECT_EQ(run(s, nf, " --allow-missing-correctness"), 1) << s.name << ":\n" << slurp(out_);
  }
}

TEST_F(CompareCorrectness, FailedCellIsMarkedAndNotCountedAsAMeetingTarget) {
  // compare_moe_gemm: a cell at 1.05 x cuBLASLt whose output is wrong is no pass.
  const Script s = scripts()[1];
  std::vector<json> files = s.files();
  ours_cell(files, s)["correctness"]["passed"] = false;
  ASSERT_EQ(run(s, files), 1) << slurp(out_);
  EXPECT_NE(slurp(out_).find("FAILED(correctness)"), std::string::npos) << slurp(out_);
  EXPECT_NE(slurp(out_).find("# w8a8: 0/1 cells"), std::string::npos) << slurp(out_);
  // compare_ulysses: the failed point fails acceptance check (0), with or without --strict.
  const Script u = scripts()[3];
  std::vector<json> uf = u.files();
  ours_cell(uf, u)["mismatch_vs_serial"]["fused"] = 3;
  ASSERT_EQ(run(u, uf), 1) << slurp(out_);
  EXPECT_NE(slurp(out_).find("FAIL (0) every point passes its correctness check"), std::string::npos) << slurp(out_);
  EXPECT_NE(slurp(out_).find("violates: S=1024 24x128: xstage correctness failed"), std::string::npos)
      << slurp(out_);
}

TEST_F(CompareCorrectness, ScriptsAndHelpersImportWithoutTorch) {
  // The compare scripts and the shared helpers run in CI, where there is no PyTorch: importing
  // them must not import torch (the torch benches import it only inside main()).
  const std::string py = std::string(XSTAGE_SOURCE_DIR) + "/python";
  const std::string script =
      "import sys; sys.path.insert(0, '" + py + "'); "
      "import compare_attention, compare_moe, compare_moe_ab, compare_moe_gemm, compare_moe_layer, "
      "compare_moe_plan, compare_moe_w4a8, compare_ulysses, bench_attention_torch, bench_moe_gemm_torch, "
      "bench_ulysses_torch; "
      "import xsbench.results, xsbench.correctness, xsbench.checker, xsbench.tables, xsbench.keys, "
      "xsbench.timing, xsbench.verify, xsbench.plots; "
      "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]; "
      "print('torch modules:', bad); sys.exit(1 if bad else 0)";
  std::ofstream(dir_ / "imports.py") << script << "\n";
  EXPECT_EQ(xstage::test::run("python3 " + quote(dir_ / "imports.py"), out_), 0) << slurp(out_);
}
