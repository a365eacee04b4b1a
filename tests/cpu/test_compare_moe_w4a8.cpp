// python/compare_moe_w4a8.py: the W4A8 / W8A8 table behind issue 7's acceptance line. On a
// synthetic `xstage bench moe-gemm` JSON with known rates it must print each format's ratio,
// count only cells at >= --min-tokens against --target (a ratio equal to the target passes),
// carry all four W4A8 formats (including the register-operand MXFP4 one) into its JSON, and
// refuse a file of another schema with exit status 2.
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
  return xstage::test::run_python_tool("compare_moe_w4a8.py", args, out);
}

nlohmann::json row(const std::string& op, int tokens, const std::string& weights, double tflops) {
  return {{"model", "M"},   {"op", op},          {"tokens_per_expert", tokens}, {"weights", weights},
          {"tflops", tflops}, {"instantiation", weights + "_kernel"}, {"nonfinite", 0},
          {"correctness", xstage::test::passing_correctness()}};
}

}  // namespace

TEST(CompareMoeW4a8, RatiosAcceptanceCountsAndSchema) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  const fs::path dir = fs::temp_directory_path() / ("xs_cmpw4_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json doc = {{"schema", "xstage.bench.moe_gemm.v1"}, {"device", "test"}, {"commit", "abc"}, {"date", "d"}};
  doc["results"] = nlohmann::json::array();
  // Cell 1: 1024 tokens, W8A8 1000; int4_rs 0.90 (passes), mxfp4_rs 0.85 (exactly the target:
  // passes), int4 0.50, mxfp4 0.80, int4_lut_rs 0.84 (fail).
  for (auto [w, t] : {std::pair{"w8a8", 1000.0}, {"w4a8_int4", 500.0}, {"w4a8_int4_rs", 900.0},
                      {"w4a8_int4_lut_rs", 840.0}, {"w4a8_mxfp4", 800.0}, {"w4a8_mxfp4_rs", 850.0}})
    doc["results"].push_back(row("l1_bf16", 1024, w, t));
  // Cell 2: 8192 tokens, mxfp4_rs 0.84 (fails), int4_rs 0.95, int4_lut_rs 0.86; no row-layout
  // formats (shown as -).
  for (auto [w, t] : {std::pair{"w8a8", 1000.0}, {"w4a8_int4_rs", 950.0}, {"w4a8_int4_lut_rs", 860.0},
                      {"w4a8_mxfp4_rs", 840.0}})
    doc["results"].push_back(row("l2_bf16", 8192, w, t));
  // Cell 3: 16 tokens (below --min-tokens): shown, never counted.
  for (auto [w, t] : {std::pair{"w8a8", 100.0}, {"w4a8_mxfp4_rs", 10.0}})
    doc["results"].push_back(row("l2_bf16", 16, w, t));
  const fs::path in = dir / "bench.json", out = dir / "out.txt", js = dir / "table.json";
  std::ofstream(in) << doc.dump();
  ASSERT_EQ(run_tool(quote(in) + " --json " + quote(js), out), 0) << slurp(out);
  const std::string text = slurp(out);
  EXPECT_NE(text.find("# w4a8_int4_rs: 2/2 cells with >= 1024 tokens/expert at >= 0.85x W8A8"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# w4a8_mxfp4_rs: 1/2 cells with >= 1024 tokens/expert at >= 0.85x W8A8"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# w4a8_int4_lut_rs: 1/2 cells with >= 1024 tokens/expert at >= 0.85x W8A8"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# w4a8_int4: 0/1 cells"), std::string::npos) << text;
  EXPECT_NE(text.find("# w4a8_mxfp4: 0/1 cells"), std::string::npos) << text;

  const nlohmann::json t = nlohmann::json::parse(slurp(js));
  EXPECT_EQ(t["schema"], "xstage.compare.moe_w4a8.v1");
  ASSERT_EQ(t["rows"].size(), 3u);
  EXPECT_DOUBLE_EQ(t["rows"][0]["w4a8_mxfp4_rs_ratio"].get<double>(), 0.85);
  EXPECT_DOUBLE_EQ(t["rows"][0]["w4a8_int4_ratio"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(t["rows"][1]["w4a8_int4_rs_ratio"].get<double>(), 0.95);
  EXPECT_FALSE(t["rows"][1].contains("w4a8_int4_ratio"));  // no row-layout INT4 in that cell
  EXPECT_DOUBLE_EQ(t["rows"][2]["w4a8_mxfp4_rs_ratio"].get<double>(), 0.1);
  EXPECT_EQ(t["acceptance"]["w4a8_mxfp4_rs"]["passed"], 1);
  EXPECT_EQ(t["acceptance"]["w4a8_mxfp4_rs"]["cells"], 2);
  EXPECT_EQ(t["acceptance"]["w4a8_int4_rs"]["passed"], 2);
  EXPECT_DOUBLE_EQ(t["rows"][1]["w4a8_int4_lut_rs_ratio"].get<double>(), 0.86);
  EXPECT_EQ(t["acceptance"]["w4a8_int4_lut_rs"]["passed"], 1);

  // A stricter target and a lower token floor change the counts the way the flags say.
  ASSERT_EQ(run_tool(quote(in) + " --target 0.9 --min-tokens 16", out), 0) << slurp(out);
  EXPECT_NE(slurp(out).find("# w4a8_mxfp4_rs: 0/3 cells with >= 16 tokens/expert at >= 0.90x W8A8"), std::string::npos)
      << slurp(out);

  // The per-token recipe: int4_rs_lut for bf16, the gate/up-interleaved layout for SwiGLU where
  // the run has it. Cell A (bf16): tok 0.90 passes, glu absent. Cell B (SwiGLU): tok 0.70 would
  // fail, glu 0.86 passes and is what counts. Cell C (SwiGLU, no glu): tok 0.84 fails.
  nlohmann::json rdoc = {{"schema", "xstage.bench.moe_gemm.v1"}, {"device", "t"}, {"commit", "c"}, {"date", "d"}};
  rdoc["results"] = nlohmann::json::array();
  for (auto [w, t] : {std::pair{"w8a8", 1000.0}, {"w4a8_int4_lut_rs_tok", 900.0}})
    rdoc["results"].push_back(row("l2_bf16", 1024, w, t));
  for (auto [w, t] : {std::pair{"w8a8", 1000.0}, {"w4a8_int4_lut_rs_tok", 700.0}, {"w4a8_int4_lut_rs_tok_glu", 860.0}})
    rdoc["results"].push_back(row("l1_swiglu", 1024, w, t));
  for (auto [w, t] : {std::pair{"w8a8", 1000.0}, {"w4a8_int4_lut_rs_tok", 840.0}})
    rdoc["results"].push_back(row("l1_swiglu", 8192, w, t));
  std::ofstream(dir / "recipe.json") << rdoc.dump();
  ASSERT_EQ(run_tool(quote(dir / "recipe.json") + " --json " + quote(js), out), 0) << slurp(out);
  const std::string rt = slurp(out);
  EXPECT_NE(rt.find("# w4a8_int4_lut_rs_tok: 1/3 cells"), std::string::npos) << rt;
  EXPECT_NE(rt.find("# w4a8_int4_lut_rs_tok_glu: 1/1 cells"), std::string::npos) << rt;
  EXPECT_NE(rt.find("SwiGLU where measured): 2/3 cells with >= 1024 tokens/expert at >= 0.85x W8A8"), std::string::npos)
      << rt;
  const nlohmann::json rj = nlohmann::json::parse(slurp(js));
  EXPECT_EQ(rj["acceptance"]["per_token_recipe"]["passed"], 2);
  EXPECT_EQ(rj["acceptance"]["per_token_recipe"]["cells"], 3);

  // The MXFP4 per-token recipe: mxfp4_rs_tok for bf16, mxfp4_rs_tok_glu for SwiGLU, and no fallback
  // (no per-token MXFP4 SwiGLU tile without the interleaved rows). Cell A (bf16) 0.90 passes; cell
  // B (SwiGLU) glu 0.80 fails; cell C (SwiGLU, only the bf16-layout format measured) is not counted.
  nlohmann::json mdoc = {{"schema", "xstage.bench.moe_gemm.v1"}, {"device", "t"}, {"commit", "c"}, {"date", "d"}};
  mdoc["results"] = nlohmann::json::array();
  for (auto [w, t] : {std::pair{"w8a8", 1000.0}, {"w4a8_mxfp4_rs_tok", 900.0}})
    mdoc["results"].push_back(row("l2_bf16", 1024, w, t));
  for (auto [w, t] : {std::pair{"w8a8", 1000.0}, {"w4a8_mxfp4_rs_tok_glu", 800.0}})
    mdoc["results"].push_back(row("l1_swiglu", 1024, w, t));
  for (auto [w, t] : {std::pair{"w8a8", 1000.0}, {"w4a8_mxfp4_rs_tok", 950.0}})
    mdoc["results"].push_back(row("l1_swiglu", 8192, w, t));
  std::ofstream(dir / "mx.json") << mdoc.dump();
  ASSERT_EQ(run_tool(quote(dir / "mx.json") + " --json " + quote(js), out), 0) << slurp(out);
  const std::string mt = slurp(out);
  EXPECT_NE(mt.find("# mxfp4_per_token_recipe (w4a8_mxfp4_rs_tok for bf16, w4a8_mxfp4_rs_tok_glu for SwiGLU): 1/2 "
                    "cells"),
            std::string::npos)
      << mt;
  EXPECT_EQ(mt.find("# per_token_recipe"), std::string::npos) << mt;  // no INT4 per-token format measured
  const nlohmann::json mj = nlohmann::json::parse(slurp(js));
  EXPECT_EQ(mj["acceptance"]["mxfp4_per_token_recipe"]["passed"], 1);
  EXPECT_EQ(mj["acceptance"]["mxfp4_per_token_recipe"]["cells"], 2);
  EXPECT_DOUBLE_EQ(mj["rows"][1]["w4a8_mxfp4_rs_tok_glu_ratio"].get<double>(), 0.8);

  // Another schema, or no file: exit 2 with a message naming the file.
  std::ofstream(dir / "other.json") << R"({"schema": "xstage.bench.moe.v1", "results": []})";
  EXPECT_EQ(run_tool(quote(dir / "other.json"), out), 2);
  EXPECT_NE(slurp(out).find("is not xstage.bench.moe_gemm.v1"), std::string::npos) << slurp(out);
  EXPECT_EQ(run_tool(quote(dir / "missing.json"), out), 2);
  fs::remove_all(dir);
}
