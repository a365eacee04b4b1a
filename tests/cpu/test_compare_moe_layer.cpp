// python/compare_moe_layer.py: pairs configurations of the xstage and torch MoE-layer benches,
// computes torch / xstage, and refuses files of the wrong schema.
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
using xstage::test::run_python_tool;
using xstage::test::slurp;

nlohmann::json row(const char* model, const char* routing, int tokens, double us) {
  return {{"model", model},     {"weights", "w8a8"}, {"routing", routing},
          {"tokens_per_rank", tokens}, {"median_us", us},  {"correctness", xstage::test::passing_correctness()}};
}

}  // namespace

TEST(CompareMoeLayer, PairsConfigurationsAndReportsTorchOverXstage) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xstage_cmp_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json xs = {{"schema", "xstage.bench.moe_layer.v1"},
                       {"results", {row("Hy3", "balanced", 2048, 100.0), row("Hy3", "skewed", 2048, 400.0),
                                    row("Hy3", "balanced", 8192, 50.0)}}};
  nlohmann::json th = {{"schema", "xstage.bench.moe_torch.v1"},
                       {"results", {row("Hy3", "balanced", 2048, 300.0), row("Hy3", "skewed", 2048, 200.0)}}};
  std::ofstream(dir / "x.json") << xs.dump();
  std::ofstream(dir / "t.json") << th.dump();
  const fs::path out = dir / "out.txt";
  ASSERT_EQ(run_python_tool("compare_moe_layer.py", quote(dir / "x.json") + " " + quote(dir / "t.json"), out), 0)
      << slurp(out);
  const std::string text = slurp(out);
  EXPECT_NE(text.find("3.00"), std::string::npos) << text;   // 300 / 100
  EXPECT_NE(text.find("0.50"), std::string::npos) << text;   // 200 / 400
  EXPECT_NE(text.find("2 configurations: torch/xstage geomean 1.22"), std::string::npos) << text;  // sqrt(1.5)
  EXPECT_NE(text.find("xstage faster in 1"), std::string::npos) << text;
  EXPECT_NE(text.find("1 configurations in one file only"), std::string::npos) << text;
  // Files swapped: wrong schemas, exit 2.
  EXPECT_EQ(run_python_tool("compare_moe_layer.py", quote(dir / "t.json") + " " + quote(dir / "x.json"), out), 2)
      << slurp(out);
  fs::remove_all(dir);
}
