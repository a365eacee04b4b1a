// python/compare_moe_gemm.py: xstage's grouped GEMM against cuBLASLt, the table behind issue 7's
// W8A8 acceptance line. On synthetic bench JSONs with known rates it must print three-digit
// ratios, count only W8A8 cells at >= --min-tokens against --target (a ratio equal to the target
// passes; 0.948 does not), count a cell without a baseline as a miss, keep other weight formats
// out of the count, name the best W8A8 rate, and refuse a file of another schema with exit 2.
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

int run_tool(const std::string& args, const fs::path& out) {
  return xstage::test::run_python_tool("compare_moe_gemm.py", args, out);
}

nlohmann::json ours(const std::string& model, const std::string& op, int tokens, const std::string& weights,
                    double tflops) {
  return {{"model", model}, {"op", op},     {"tokens_per_expert", tokens}, {"weights", weights},
          {"experts", 8},   {"n", 4096},    {"k", 4096},                   {"tflops", tflops},
          {"median_us", 1.0}, {"instantiation", "kernel"}, {"nonfinite", 0},
          {"correctness", xstage::test::passing_correctness()}};
}
nlohmann::json theirs(const std::string& model, const std::string& linear, int tokens, double tflops) {
  return {{"model", model}, {"op", linear}, {"tokens_per_expert", tokens}, {"tflops", tflops},
          {"median_us", 1.0}, {"scaling", "blockwise"}, {"nonfinite", 0},
          {"correctness", xstage::test::passing_correctness()}};
}

}  // namespace

TEST(CompareMoeGemm, ThreeDigitRatiosAndAcceptanceCount) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xs_cmpgemm_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json a = {{"schema", "xstage.bench.moe_gemm.v1"}, {"device", "test"}, {"commit", "abc"}};
  nlohmann::json b = {{"schema", "xstage.bench.moe_gemm.v1"}, {"tool", "torch"}, {"device", "test"}};
  a["results"] = {
      ours("M", "l1_bf16", 1024, "w8a8", 950.0),             // 0.950: exactly the target, passes
      ours("M", "l1_swiglu", 1024, "w8a8", 948.0),           // 0.948: a miss
      ours("M", "l2_bf16", 8192, "w8a8", 1200.0),            // 1.091, the best rate
      ours("M", "l1_swiglu", 8192, "w8a8", 1100.0),          // 1.100
      ours("N", "l1_swiglu", 8192, "w8a8", 990.0),           // no baseline: a miss
      ours("M", "l1_bf16", 8192, "w4a8_int4_rs", 700.0),     // not W8A8: not counted
      ours("M", "l1_bf16", 128, "w8a8", 10.0),               // below --min-tokens: not counted
  };
  b["results"] = {theirs("M", "l1", 1024, 1000.0), theirs("M", "l2", 8192, 1100.0), theirs("M", "l1", 8192, 1000.0),
                  theirs("M", "l1", 128, 100.0)};
  const fs::path fa = dir / "ours.json", fb = dir / "torch.json", out = dir / "out.txt", js = dir / "table.json";
  std::ofstream(fa) << a.dump();
  std::ofstream(fb) << b.dump();
  ASSERT_EQ(run_tool(quote(fa) + " " + quote(fb) + " --json " + quote(js), out), 0) << slurp(out);
  const std::string text = slurp(out);
  EXPECT_NE(text.find(" 0.948"), std::string::npos) << text;
  EXPECT_NE(text.find("# w8a8 bf16 1024 tokens/expert: 1/1 cells at >= 0.95x cuBLASLt (lowest 0.950)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# w8a8 swiglu 1024 tokens/expert: 0/1 cells"), std::string::npos) << text;
  EXPECT_NE(text.find("# w8a8 swiglu 8192 tokens/expert: 1/2 cells at >= 0.95x cuBLASLt (lowest 1.100)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# w8a8: 3/5 cells with >= 1024 tokens/expert at >= 0.95x cuBLASLt; best 1200.0 TFLOP/s (M l2_bf16 8192)"),
            std::string::npos)
      << text;
  const nlohmann::json t = nlohmann::json::parse(slurp(js));
  EXPECT_EQ(t["acceptance"]["cells"], 5);
  EXPECT_EQ(t["acceptance"]["passed"], 3);
  EXPECT_DOUBLE_EQ(t["acceptance"]["best_tflops"].get<double>(), 1200.0);

  // A stricter target and a lower token floor change the counts the way the flags say.
  ASSERT_EQ(run_tool(quote(fa) + " " + quote(fb) + " --target 1.05 --min-tokens 128", out), 0) << slurp(out);
  EXPECT_NE(slurp(out).find("# w8a8: 2/6 cells with >= 128 tokens/expert at >= 1.05x cuBLASLt"), std::string::npos)
      << slurp(out);

  // Another schema, or no file: exit 2 with a message naming the file.
  std::ofstream(dir / "other.json") << R"({"schema": "xstage.bench.moe.v1", "results": []})";
  EXPECT_EQ(run_tool(quote(dir / "other.json") + " " + quote(fb), out), 2);
  EXPECT_NE(slurp(out).find("is not xstage.bench.moe_gemm.v1"), std::string::npos) << slurp(out);
  EXPECT_EQ(run_tool(quote(dir / "missing.json") + " " + quote(fb), out), 2);
  fs::remove_all(dir);
}

// --grouped: the like-for-like baseline (torch._scaled_grouped_mm on the same experts). Its
// column and ratio appear, its cells are gated (a failed check fails the run with exit 1), and
// a grouped cell on another expert count is refused with exit 2.
TEST(CompareMoeGemm, GroupedBaselineIsGatedAndLikeForLike) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xs_cmpgemm_g_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json a = {{"schema", "xstage.bench.moe_gemm.v1"}, {"device", "test"}, {"commit", "abc"}};
  nlohmann::json b = {{"schema", "xstage.bench.moe_gemm.v1"}, {"tool", "torch"}, {"device", "test"}};
  a["results"] = {ours("M", "l1_bf16", 1024, "w8a8", 900.0), ours("M", "l2_bf16", 1024, "w8a8", 600.0)};
  b["results"] = {theirs("M", "l1", 1024, 1000.0), theirs("M", "l2", 1024, 1000.0)};
  auto grouped_doc = [&](int experts, bool pass) {
    nlohmann::json g = {{"schema", "xstage.bench.moe_gemm.v1"}, {"tool", "torch._scaled_grouped_mm"}, {"device", "test"}};
    nlohmann::json g1 = theirs("M", "l1", 1024, 800.0), g2 = theirs("M", "l2", 1024, 750.0);
    g1["experts"] = experts;
    g2["experts"] = experts;
    if (!pass) {
      g2["correctness"]["passed"] = false;
      g2["correctness"]["rel_err"] = 0.5;
    }
    g["results"] = {g1, g2};
    return g;
  };
  const fs::path fa = dir / "ours.json", fb = dir / "torch.json", fg = dir / "grouped.json", out = dir / "out.txt",
                 js = dir / "table.json";
  std::ofstream(fa) << a.dump();
  std::ofstream(fb) << b.dump();
  std::ofstream(fg) << grouped_doc(8, true).dump();
  ASSERT_EQ(run_tool(quote(fa) + " " + quote(fb) + " --grouped " + quote(fg) + " --json " + quote(js), out), 0)
      << slurp(out);
  std::string text = slurp(out);
  EXPECT_NE(text.find("ratio_g"), std::string::npos) << text;
  EXPECT_NE(text.find("  1.125"), std::string::npos) << text;  // 900 / 800
  EXPECT_NE(text.find("  0.800"), std::string::npos) << text;  // 600 / 750
  EXPECT_NE(text.find("# w8a8 vs torch._scaled_grouped_mm (same experts and tokens): 1/2 cells >= 1.00x"),
            std::string::npos)
      << text;
  const nlohmann::json t = nlohmann::json::parse(slurp(js));
  EXPECT_EQ(t["acceptance"]["grouped"]["w8a8"]["at_or_above"], 1);
  EXPECT_NEAR(t["rows"][0]["ratio_grouped"].get<double>(), 1.125, 1e-9);

  std::ofstream(fg) << grouped_doc(8, false).dump();  // a grouped cell that failed its own check
  EXPECT_EQ(run_tool(quote(fa) + " " + quote(fb) + " --grouped " + quote(fg), out), 1) << slurp(out);
  EXPECT_NE(slurp(out).find("CORRECTNESS FAIL grouped M l2 1024"), std::string::npos) << slurp(out);

  std::ofstream(fg) << grouped_doc(4, true).dump();  // 4 experts against xstage's 8
  EXPECT_EQ(run_tool(quote(fa) + " " + quote(fb) + " --grouped " + quote(fg), out), 2) << slurp(out);
  EXPECT_NE(slurp(out).find("not like for like"), std::string::npos) << slurp(out);
  fs::remove_all(dir);
}
