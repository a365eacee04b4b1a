// python/compare_moe_plan.py: does the planner pick the fastest forced tile? On synthetic bench
// JSONs it must compare the planned kernel's rate from the forced runs (not the planned run's own
// figure), count a tie as a hit and a slower planned kernel as a miss with its ratio, leave out a
// cell whose planned kernel was never forced, take the best of repeated forced runs, and refuse
// an unreadable file or another schema with exit 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "python_tool_util.hpp"

namespace {

namespace fs = std::filesystem;
using xstage::test::quote;
using xstage::test::slurp;

nlohmann::json row(const std::string& model, int tokens, const std::string& inst, double tflops) {
  return {{"model", model}, {"op", "l1_swiglu"}, {"tokens_per_expert", tokens}, {"weights", "w8a8"},
          {"instantiation", inst}, {"tflops", tflops}, {"median_us", 1.0},
          {"correctness", xstage::test::passing_correctness()}};
}

nlohmann::json bench(nlohmann::json results) {
  return {{"schema", "xstage.bench.moe_gemm.v1"}, {"device", "test"}, {"results", std::move(results)}};
}

}  // namespace

TEST(CompareMoePlan, PlannedAgainstForcedKernels) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xs_cmpplan_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // Planned run: its own rates are deliberately wrong (the tool must use the forced runs').
  const auto planned = bench({row("A", 128, "wide", 1.0), row("B", 128, "narrow", 1.0), row("C", 128, "wide", 1.0),
                              row("D", 128, "other", 1.0)});
  const auto wide = bench({row("A", 128, "wide", 800.0), row("B", 128, "wide", 700.0), row("C", 128, "wide", 600.0),
                           row("D", 128, "wide", 500.0)});
  const auto narrow = bench({row("A", 128, "narrow", 700.0), row("B", 128, "narrow", 690.0),
                             row("C", 128, "narrow", 610.0), row("D", 128, "narrow", 400.0)});
  const auto narrow2 = bench({row("B", 128, "narrow", 705.0)});  // a second sample: the best counts
  const fs::path fp = dir / "p.json", fw = dir / "w.json", fn = dir / "n.json", fn2 = dir / "n2.json",
                 out = dir / "out.txt";
  std::ofstream(fp) << planned.dump();
  std::ofstream(fw) << wide.dump();
  std::ofstream(fn) << narrow.dump();
  std::ofstream(fn2) << narrow2.dump();
  const std::string args =
      "--planned " + quote(fp) + " --forced " + quote(fw) + " " + quote(fn) + " " + quote(fn2);
  ASSERT_EQ(xstage::test::run_python_tool("compare_moe_plan.py", args, out), 0) << slurp(out);
  const std::string text = slurp(out);
  // A: wide planned and fastest; B: narrow 705 (second sample) beats wide 700; C: wide 600 vs
  // narrow 610 -> 0.984; D: "other" never forced -> left out.
  EXPECT_NE(text.find("# planned the fastest forced kernel in 2 of 3 cells; misses: C l1_swiglu 128 0.984"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# 1 cells left out"), std::string::npos) << text;
  EXPECT_NE(text.find("(planned kernel not forced)"), std::string::npos) << text;

  // Another schema, or a missing file: exit 2.
  std::ofstream(dir / "bad.json") << nlohmann::json{{"schema", "other"}, {"results", nlohmann::json::array()}}.dump();
  EXPECT_EQ(xstage::test::run_python_tool("compare_moe_plan.py",
                                          "--planned " + quote(dir / "bad.json") + " --forced " + quote(fw), out),
            2);
  EXPECT_EQ(xstage::test::run_python_tool("compare_moe_plan.py",
                                          "--planned " + quote(dir / "missing.json") + " --forced " + quote(fw), out),
            2);
  fs::remove_all(dir);
}
