// python/compare_moe.py: pairs the unfused / expert-wave / interleaved schedules of
// `xstage bench moe` per configuration, computes il/ew and the torch ratios, summarises them,
// writes xstage.compare.moe.v1, and refuses unreadable or wrong-schema files (exit 2).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "python_tool_util.hpp"

namespace {

namespace fs = std::filesystem;
using xstage::test::quote;
using xstage::test::slurp;

// Whitespace-separated fields of the first output line whose fields start with `prefix`.
std::vector<std::string> find_row(const std::string& text, const std::vector<std::string>& prefix) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string w;
    while (ls >> w) f.push_back(w);
    if (f.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), f.begin())) return f;
  }
  return {};
}

nlohmann::json spans(double remote, double local, double predicted) {
  return {{"remote", {{"median_us", remote}, {"p90_us", remote * 1.1}, {"count", 8}}},
          {"local", {{"median_us", local}, {"p90_us", local * 1.1}, {"count", 8}}},
          {"predicted_us", predicted},
          {"sm_ghz", 1.98}};
}

nlohmann::json xrow(const char* model, const char* routing, int tokens, const char* variant, double us) {
  return {{"model", model},        {"weights", "w8a8"},        {"routing", routing},
          {"tokens_per_rank", tokens}, {"variant", variant},    {"median_us", us},
          {"p10_us", us * 0.9},    {"p90_us", us * 1.1},       {"rank_median_us", {us, us * 0.95}},
          {"rows_received", {100, 120}}, {"correctness", xstage::test::passing_correctness()}};
}

nlohmann::json trow(const char* model, const char* weights, const char* routing, int tokens, double us) {
  return {{"model", model},  {"weights", weights}, {"routing", routing}, {"tokens_per_rank", tokens},
          {"median_us", us}, {"skipped", false}, {"correctness", xstage::test::passing_correctness()}};
}

// Four configurations: three with both fused schedules (il/ew 1.25, 0.90, 1.50), one with only
// `unfused` (its interleaved row is skipped). Torch: the same four plus one w4a8 configuration
// (torch-only) and one skipped w4a8 row (ignored).
nlohmann::json xstage_doc() {
  nlohmann::json ew = xrow("DSv4-Flash", "balanced", 2048, "expert-wave", 125.0);
  ew["spans"] = spans(30.0, 10.0, 12.0);
  nlohmann::json il = xrow("DSv4-Flash", "balanced", 2048, "interleaved", 100.0);
  il["spans"] = spans(20.0, 10.0, 12.0);
  nlohmann::json skipped = xrow("Hy3", "balanced", 512, "interleaved", 1.0);
  skipped["skipped"] = true;
  return {{"schema", "xstage.bench.moe.v1"},
          {"world", 2},
          {"commit", "abc"},
          {"date", "2026-12-01T00:00:00Z"},
          {"config", {{"iters", 20}}},
          {"results",
           {xrow("Hy3", "balanced", 512, "unfused", 40.0), skipped,
            xrow("DSv4-Flash", "skewed", 2048, "interleaved", 100.0),
            xrow("DSv4-Flash", "skewed", 2048, "expert-wave", 90.0),
            xrow("DSv4-Flash", "balanced", 8192, "expert-wave", 300.0),
            xrow("DSv4-Flash", "balanced", 8192, "interleaved", 200.0),
            xrow("DSv4-Flash", "balanced", 2048, "unfused", 200.0), ew, il}}};
}

nlohmann::json torch_doc() {
  nlohmann::json skipped = trow("DSv4-Flash", "w4a8", "skewed", 2048, 1.0);
  skipped["skipped"] = true;
  return {{"schema", "xstage.bench.moe_torch.v1"},
          {"world", 2},
          {"commit", "t123"},
          {"torch", "2.11.0"},
          {"gemm_path", "grouped_rowwise"},
          {"results",
           {trow("DSv4-Flash", "w8a8", "balanced", 2048, 250.0), trow("DSv4-Flash", "w8a8", "skewed", 2048, 80.0),
            trow("DSv4-Flash", "w8a8", "balanced", 8192, 240.0), trow("Hy3", "w8a8", "balanced", 512, 50.0),
            trow("DSv4-Flash", "w4a8", "balanced", 2048, 300.0), skipped}}};
}

class CompareMoe : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
    dir_ = fs::temp_directory_path() /
           ("xstage_cmp_moe_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::ofstream(dir_ / "x.json") << xstage_doc().dump();
    std::ofstream(dir_ / "t.json") << torch_doc().dump();
    out_ = dir_ / "out.txt";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Runs the script with `args` (already quoted), output (stdout + stderr) into out_.
  int compare(const std::string& args) { return xstage::test::run_python_tool("compare_moe.py", args, out_); }
  fs::path dir_, out_;
};

}  // namespace

TEST_F(CompareMoe, PairsSchedulesAndComputesRatios) {
  ASSERT_EQ(compare(quote(dir_ / "x.json") + " " + quote(dir_ / "t.json")), 0) << slurp(out_);
  const std::string text = slurp(out_);
  EXPECT_NE(text.find("commit abc"), std::string::npos) << text;
  EXPECT_NE(text.find("commit t123"), std::string::npos) << text;
  // unfused, expert-wave, interleaved, torch, il/ew, torch/ew, torch/il, then the spans
  // (remote ew / il, local ew / il, predicted ew / il).
  EXPECT_EQ(find_row(text, {"DSv4-Flash", "w8a8", "balanced", "2048"}),
            (std::vector<std::string>{"DSv4-Flash", "w8a8", "balanced", "2048", "200.0", "125.0", "100.0", "250.0",
                                      "1.25", "2.00", "2.50", "30.0", "20.0", "10.0", "10.0", "12.0", "12.0"}))
      << text;
  EXPECT_EQ(find_row(text, {"DSv4-Flash", "w8a8", "skewed", "2048"}),
            (std::vector<std::string>{"DSv4-Flash", "w8a8", "skewed", "2048", "-", "90.0", "100.0", "80.0", "0.90",
                                      "0.89", "0.80", "-", "-", "-", "-", "-", "-"}))
      << text;
  EXPECT_EQ(find_row(text, {"DSv4-Flash", "w8a8", "balanced", "8192"}),
            (std::vector<std::string>{"DSv4-Flash", "w8a8", "balanced", "8192", "-", "300.0", "200.0", "240.0", "1.50",
                                      "0.80", "1.20", "-", "-", "-", "-", "-", "-"}))
      << text;
  // Skipped interleaved row: missing, not compared.
  EXPECT_EQ(find_row(text, {"Hy3", "w8a8", "balanced", "512"}),
            (std::vector<std::string>{"Hy3", "w8a8", "balanced", "512", "40.0", "-", "-", "50.0", "-", "-", "-", "-",
                                      "-", "-", "-", "-", "-"}))
      << text;
  // Sorted by (model, weights, routing, tokens); the torch-only w4a8 configuration has no row.
  const auto pos = [&](const std::string& s) { return text.find(s); };
  EXPECT_LT(pos("balanced   2048"), pos("balanced   8192")) << text;
  EXPECT_LT(pos("balanced   8192"), pos("skewed   2048")) << text;
  EXPECT_LT(pos("skewed   2048"), pos(" Hy3 ")) << text;
  EXPECT_TRUE(find_row(text, {"DSv4-Flash", "w4a8"}).empty()) << text;
  // il/ew over 1.25, 0.90, 1.50: geomean 1.6875^(1/3) = 1.19.
  EXPECT_NE(text.find("over 3 configurations: geomean 1.19, median 1.25, max 1.50, worst 0.90"), std::string::npos)
      << text;
  // torch/ew 2.00, 0.89, 0.80 (geomean 1.12); torch/il 2.50, 0.80, 1.20 (geomean 2.4^(1/3) = 1.34).
  EXPECT_NE(text.find("expert-wave faster in 1/3, interleaved faster in 2/3; geomean torch/ew 1.12, torch/il 1.34"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("torch-only configurations: 1 "), std::string::npos) << text;  // skipped w4a8 row not counted
  EXPECT_EQ(text.find("Traceback"), std::string::npos) << text;
}

TEST_F(CompareMoe, WritesJsonRowsAndSummary) {
  const fs::path js = dir_ / "cmp.json";
  ASSERT_EQ(compare(quote(dir_ / "x.json") + " " + quote(dir_ / "t.json") + " --json " + quote(js)), 0)
      << slurp(out_);
  nlohmann::json d;
  ASSERT_NO_THROW(d = nlohmann::json::parse(slurp(js))) << slurp(js);
  EXPECT_EQ(d.value("schema", ""), "xstage.compare.moe.v1");
  ASSERT_TRUE(d.contains("rows") && d["rows"].is_array());
  ASSERT_EQ(d["rows"].size(), 4u) << d.dump(1);
  const auto& r0 = d["rows"][0];
  EXPECT_EQ(r0.value("model", ""), "DSv4-Flash");
  EXPECT_EQ(r0.value("routing", ""), "balanced");
  EXPECT_EQ(r0.value("tokens_per_rank", 0), 2048);
  EXPECT_NEAR(r0.value("il_over_ew", 0.0), 1.25, 1e-9);
  EXPECT_NEAR(r0.value("torch_over_il", 0.0), 2.5, 1e-9);
  EXPECT_NEAR(r0.value("remote_span_ew_us", 0.0), 30.0, 1e-9);
  EXPECT_NEAR(r0.value("predicted_span_il_us", 0.0), 12.0, 1e-9);
  const auto& hy3 = d["rows"][3];
  EXPECT_EQ(hy3.value("model", ""), "Hy3");
  EXPECT_TRUE(hy3["interleaved_us"].is_null()) << hy3.dump();
  EXPECT_TRUE(hy3["il_over_ew"].is_null()) << hy3.dump();
  ASSERT_TRUE(d.contains("summary")) << d.dump(1);
  const auto& s = d["summary"]["il_over_ew"];
  EXPECT_EQ(s.value("count", 0), 3);
  EXPECT_NEAR(s.value("geomean", 0.0), std::cbrt(1.25 * 0.9 * 1.5), 1e-9);
  EXPECT_NEAR(s.value("median", 0.0), 1.25, 1e-9);
  EXPECT_NEAR(s.value("max", 0.0), 1.5, 1e-9);
  EXPECT_NEAR(s.value("worst", 0.0), 0.9, 1e-9);
  const auto& t = d["summary"]["torch"];
  EXPECT_EQ(t.value("compared_ew", 0), 3);
  EXPECT_EQ(t.value("ew_faster", -1), 1);
  EXPECT_EQ(t.value("compared_il", 0), 3);
  EXPECT_EQ(t.value("il_faster", -1), 2);
  EXPECT_NEAR(t.value("geomean_torch_over_il", 0.0), std::cbrt(2.4), 1e-9);
  EXPECT_NEAR(t.value("geomean_torch_over_ew", 0.0), std::cbrt(2.0 * (80.0 / 90.0) * 0.8), 1e-9);
  EXPECT_EQ(d["summary"].value("torch_only", -1), 1);
}

TEST_F(CompareMoe, TorchFileIsOptional) {
  ASSERT_EQ(compare(quote(dir_ / "x.json")), 0) << slurp(out_);
  const std::string text = slurp(out_);
  const auto row = find_row(text, {"DSv4-Flash", "w8a8", "balanced", "2048"});
  ASSERT_EQ(row.size(), 17u) << text;
  EXPECT_EQ(row[7], "-") << text;   // torch
  EXPECT_EQ(row[8], "1.25") << text;  // il/ew
  EXPECT_EQ(row[9], "-") << text;   // torch/ew
  EXPECT_NE(text.find("over 3 configurations: geomean 1.19"), std::string::npos) << text;
  EXPECT_EQ(text.find("faster in"), std::string::npos) << text;
  EXPECT_EQ(text.find("torch-only"), std::string::npos) << text;
}

TEST_F(CompareMoe, RejectsBadInputWithExit2) {
  const fs::path missing = dir_ / "missing.json";
  EXPECT_EQ(compare(quote(dir_ / "t.json")), 2) << slurp(out_);  // torch file as the xstage file
  EXPECT_NE(slurp(out_).find("xstage.bench.moe.v1"), std::string::npos) << slurp(out_);
  EXPECT_EQ(compare(quote(dir_ / "x.json") + " " + quote(dir_ / "x.json")), 2) << slurp(out_);  // wrong torch schema
  EXPECT_EQ(compare(quote(missing)), 2) << slurp(out_);
  EXPECT_NE(slurp(out_).find("cannot read"), std::string::npos) << slurp(out_);
  EXPECT_EQ(compare(quote(dir_ / "x.json") + " " + quote(missing)), 2) << slurp(out_);
  std::ofstream(dir_ / "bad.json") << "{\"schema\": \"xstage.bench.moe.v1\", ";
  EXPECT_EQ(compare(quote(dir_ / "bad.json")), 2) << slurp(out_);
  std::ofstream(dir_ / "list.json") << "[1, 2]";
  EXPECT_EQ(compare(quote(dir_ / "list.json")), 2) << slurp(out_);
  EXPECT_EQ(compare(""), 2) << slurp(out_);
  EXPECT_NE(slurp(out_).find("usage"), std::string::npos) << slurp(out_);
  EXPECT_EQ(slurp(out_).find("Traceback"), std::string::npos) << slurp(out_);
}

TEST_F(CompareMoe, ToleratesMissingOptionalFields) {
  // Bare rows: no median_us, partial spans, non-numeric times, a row without tokens_per_rank,
  // no world / commit / date / config.
  nlohmann::json xs = {
      {"schema", "xstage.bench.moe.v1"},
      {"results",
       {{{"model", "M"}, {"routing", "balanced"}, {"tokens_per_rank", 64}, {"variant", "expert-wave"}},
        {{"model", "M"},
         {"weights", "w8a8"},
         {"routing", "balanced"},
         {"tokens_per_rank", 64},
         {"variant", "interleaved"},
         {"median_us", "fast"},
         {"spans", {{"remote", {{"count", 0}}}, {"local", nullptr}}}},
        {{"model", "M"}, {"routing", "skewed"}, {"variant", "unfused"}, {"median_us", 3.0}},
        {{"model", "M"}, {"weights", "w8a8"}, {"routing", "skewed"}, {"tokens_per_rank", 64},
         {"variant", "expert-wave"}, {"median_us", 0.0}, {"spans", 5}}}}};
  nlohmann::json th = {{"schema", "xstage.bench.moe_torch.v1"}, {"results", {{{"model", "M"}}}}};
  std::ofstream(dir_ / "x2.json") << xs.dump();
  std::ofstream(dir_ / "t2.json") << th.dump();
  const fs::path js = dir_ / "cmp2.json";
  // No row carries a correctness record: a failure, unless waived (with a loud warning).
  EXPECT_EQ(compare(quote(dir_ / "x2.json") + " " + quote(dir_ / "t2.json")), 1) << slurp(out_);
  EXPECT_NE(slurp(out_).find("CORRECTNESS FAIL xstage M w8a8 balanced 64 expert-wave: no correctness record"),
            std::string::npos)
      << slurp(out_);
  ASSERT_EQ(compare(quote(dir_ / "x2.json") + " " + quote(dir_ / "t2.json") + " --json " + quote(js) +
                    " --allow-missing-correctness"),
            0)
      << slurp(out_);
  const std::string text = slurp(out_);
  EXPECT_NE(text.find("WARNING: --allow-missing-correctness"), std::string::npos) << text;
  EXPECT_EQ(text.find("Traceback"), std::string::npos) << text;
  EXPECT_NE(text.find("no configuration has both"), std::string::npos) << text;
  nlohmann::json d;
  ASSERT_NO_THROW(d = nlohmann::json::parse(slurp(js))) << slurp(js);  // strict JSON: no NaN
  EXPECT_EQ(d["rows"].size(), 2u) << d.dump(1);
  EXPECT_EQ(d["summary"]["il_over_ew"].value("count", -1), 0);
}

TEST_F(CompareMoe, PngIsWrittenOrExplained) {
  const fs::path png = dir_ / "cmp.png";
  ASSERT_EQ(compare(quote(dir_ / "x.json") + " " + quote(dir_ / "t.json") + " --png " + quote(png)), 0)
      << slurp(out_);
  const std::string text = slurp(out_);
  EXPECT_EQ(text.find("Traceback"), std::string::npos) << text;
  if (text.find("matplotlib unavailable") == std::string::npos) {
    ASSERT_TRUE(fs::exists(png)) << text;
    EXPECT_GT(fs::file_size(png), 1000u);
  }
}

// Issue 37's comparison: the better fused order against the unfused layer per configuration.
// (100; ew 90, il 120): 1.11, meets; (100; ew 110, il 105): 0.95; (100; ew 100 only): 1.00, meets;
// (100; ew 50) whose interleaved cell failed its check: 2.00, compared but never counted.
TEST_F(CompareMoe, CountsWhereTheBetterFusedOrderMeetsTheUnfusedLayer) {
  nlohmann::json bad_il = xrow("D", "balanced", 512, "interleaved", 60.0);
  bad_il["correctness"] = xstage::test::passing_correctness();
  bad_il["correctness"]["passed"] = false;
  bad_il["correctness"]["rel_err"] = 0.5;
  nlohmann::json xs = {{"schema", "xstage.bench.moe.v1"},
                       {"world", 1},
                       {"results",
                        {xrow("A", "balanced", 512, "unfused", 100.0), xrow("A", "balanced", 512, "expert-wave", 90.0),
                         xrow("A", "balanced", 512, "interleaved", 120.0), xrow("B", "balanced", 512, "unfused", 100.0),
                         xrow("B", "balanced", 512, "expert-wave", 110.0), xrow("B", "balanced", 512, "interleaved", 105.0),
                         xrow("C", "balanced", 512, "unfused", 100.0), xrow("C", "balanced", 512, "expert-wave", 100.0),
                         xrow("D", "balanced", 512, "unfused", 100.0), xrow("D", "balanced", 512, "expert-wave", 50.0),
                         bad_il}}};
  std::ofstream(dir_ / "f.json") << xs.dump();
  const fs::path js = dir_ / "f-out.json";
  EXPECT_EQ(compare(quote(dir_ / "f.json") + " --json " + quote(js)), 1) << slurp(out_);  // D failed a check
  const std::string text = slurp(out_);
  EXPECT_NE(text.find("# fused (the better order) >= unfused in 2/4 configurations"), std::string::npos) << text;
  EXPECT_NE(text.find("worst 0.95 (B w8a8 balanced 512)"), std::string::npos) << text;
  nlohmann::json d;
  ASSERT_NO_THROW(d = nlohmann::json::parse(slurp(js))) << slurp(js);
  const auto& f = d["summary"]["fused_vs_unfused"];
  EXPECT_EQ(f.value("compared", 0), 4);
  EXPECT_EQ(f.value("fused_at_least_unfused", -1), 2);
  EXPECT_NEAR(f.value("geomean_unfused_over_fused", 0.0), std::pow((100.0 / 90) * (100.0 / 105) * 1.0 * (100.0 / 50), 0.25),
              1e-9);
  EXPECT_NEAR(d["rows"][1].value("unfused_over_fused", 0.0), 100.0 / 105, 1e-9);
}

// W4A8 formats against torch's `w4a8` row (the same layer on FP8 pre-converted weights): both
// formats of a configuration take it, it is no longer torch-only, and the better fused order
// against torch is counted per configuration (a failed check never counts).
TEST_F(CompareMoe, W4A8FormatsAreComparedWithTorchsW4A8Row) {
  auto w = [](nlohmann::json r, const char* weights) {
    r["weights"] = weights;
    return r;
  };
  nlohmann::json bad = w(xrow("M", "balanced", 512, "interleaved", 50.0), "w4a8-mxfp4");
  bad["correctness"]["passed"] = false;
  bad["correctness"]["rel_err"] = 0.5;
  nlohmann::json xs = {{"schema", "xstage.bench.moe.v1"},
                       {"world", 1},
                       {"results",
                        {xrow("M", "balanced", 512, "unfused", 100.0), xrow("M", "balanced", 512, "expert-wave", 80.0),
                         w(xrow("M", "balanced", 512, "unfused", 150.0), "w4a8-int4"),
                         w(xrow("M", "balanced", 512, "expert-wave", 140.0), "w4a8-int4"),
                         w(xrow("M", "balanced", 512, "unfused", 150.0), "w4a8-mxfp4"),
                         w(xrow("M", "balanced", 512, "expert-wave", 160.0), "w4a8-mxfp4"), bad}}};
  nlohmann::json th = {{"schema", "xstage.bench.moe_torch.v1"},
                       {"world", 1},
                       {"results",
                        {trow("M", "w8a8", "balanced", 512, 200.0), trow("M", "w4a8", "balanced", 512, 145.0)}}};
  std::ofstream(dir_ / "w.json") << xs.dump();
  std::ofstream(dir_ / "wt.json") << th.dump();
  const fs::path js = dir_ / "w-out.json";
  EXPECT_EQ(compare(quote(dir_ / "w.json") + " " + quote(dir_ / "wt.json") + " --json " + quote(js)), 1)
      << slurp(out_);  // the mxfp4 interleaved cell failed its check
  const std::string text = slurp(out_);
  // w8a8 80 < 200, int4 140 < 145, mxfp4 50 < 145 but failed: 2 of 3.
  EXPECT_NE(text.find("the better fused order faster in 2/3 configurations"), std::string::npos) << text;
  EXPECT_NE(text.find("torch-only configurations: 0"), std::string::npos) << text;
  EXPECT_NE(text.find("per weights: w4a8-int4 1/1, w4a8-mxfp4 0/1, w8a8 1/1"), std::string::npos) << text;
  nlohmann::json d;
  ASSERT_NO_THROW(d = nlohmann::json::parse(slurp(js))) << slurp(js);
  int seen = 0;
  for (const auto& r : d["rows"])
    if (r.value("weights", "").rfind("w4a8-", 0) == 0) {
      EXPECT_NEAR(r.value("torch_us", 0.0), 145.0, 1e-9) << r.dump();
      ++seen;
    }
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(d["summary"]["torch"].value("best_faster", -1), 2);
  EXPECT_EQ(d["summary"]["torch"].value("compared_best", -1), 3);
}
