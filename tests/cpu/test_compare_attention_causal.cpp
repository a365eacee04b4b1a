// python/compare_attention_causal.py (the table of scripts/attention-causal-ab) on synthetic
// bench JSON: the two causal orders and cuDNN side by side, issue 38's acceptance per point, and
// the correctness gate (a failed cell of either file: exit 1 and a CORRECTNESS FAIL line).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "python_tool_util.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using xstage::test::passing_correctness;
using xstage::test::quote;
using xstage::test::slurp;

json cell(const char* backend, int s, int d, double tflops, const char* order = nullptr, int group = 0,
          const char* ran = nullptr) {
  json r = {{"backend", backend}, {"batch", 1},    {"seqlen", s},       {"heads", 24}, {"head_dim", d},
            {"dtype", "bf16"},     {"causal", true}, {"tflops", tflops}, {"nonfinite", 0},
            {"correctness", passing_correctness()}};
  if (order) r["causal_order"] = order;
  if (group) r["causal_group"] = group;
  if (ran) r["causal_order_run"] = ran;
  return r;
}

json doc(json results) {
  return {{"schema", "xstage.bench.attention.v1"}, {"device", "test"}, {"commit", "abc"}, {"results", results}};
}

struct Files {
  fs::path dir = fs::temp_directory_path() / ("xs_causal_ab_" + std::to_string(::getpid()));
  Files() { fs::create_directories(dir); }
  ~Files() { fs::remove_all(dir); }
  fs::path write(const char* name, const json& j) {
    const fs::path p = dir / name;
    std::ofstream(p) << j.dump();
    return p;
  }
};

// d = 128 at S = 16384: head-major 500, longest-first 610, grouped (11 pairs) 620, auto (ran
// claimed, 1 pair) 630, cuDNN 590 (accepted); d = 64 at S = 8192: 400 / 450 / 490 / 490 (auto ran
// grouped) against 480 (longest-first not accepted, grouped and auto accepted).
json ours() {
  return doc({cell("xstage", 16384, 128, 500, "head-major"), cell("xstage", 16384, 128, 610, "longest-first"),
              cell("xstage", 8192, 64, 400, "head-major"), cell("xstage", 8192, 64, 450, "longest-first"),
              cell("xstage", 16384, 128, 620, "grouped", 11), cell("xstage", 8192, 64, 490, "grouped", 24),
              cell("xstage", 16384, 128, 630, "auto", 1, "claimed"), cell("xstage", 8192, 64, 490, "auto", 24, "grouped")});
}
json theirs() { return doc({cell("torch-cudnn", 16384, 128, 590), cell("torch-cudnn", 8192, 64, 480)}); }

}  // namespace

TEST(CompareAttentionCausal, TableAndAcceptance) {
  Files f;
  const fs::path out = f.dir / "out.txt", js = f.dir / "ab.json";
  const int rc = xstage::test::run_python_tool(
      "compare_attention_causal.py",
      quote(f.write("xs.json", ours())) + " " + quote(f.write("t.json", theirs())) + " --json " + quote(js) +
          " --accept-order longest-first",
      out);
  const std::string text = slurp(out);
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("acceptance (longest-first) met at 1 of 2 points"), std::string::npos) << text;
  EXPECT_NE(text.find(" NO"), std::string::npos) << text;
  const json j = json::parse(slurp(js));
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["head_dim"], 64);  // d, then heads, then S
  EXPECT_EQ(j["rows"][0]["accept"], false);
  EXPECT_EQ(j["rows"][1]["accept"], true);
  EXPECT_NEAR(j["rows"][1]["longest_first_over_head_major"].get<double>(), 610.0 / 500.0, 1e-9);
  EXPECT_NEAR(j["rows"][1]["grouped_over_head_major"].get<double>(), 620.0 / 500.0, 1e-9);
  EXPECT_EQ(j["rows"][1]["grouped_heads_per_group"], 11);
  EXPECT_NE(text.find("620.0 G11"), std::string::npos) << text;
  EXPECT_NE(text.find("630.0 clm G1"), std::string::npos) << text;  // auto: the order it ran and its group
  EXPECT_EQ(j["rows"][1]["auto_ran"], "claimed");
  EXPECT_NEAR(j["rows"][1]["auto_tflops"].get<double>(), 630.0, 1e-9);
  EXPECT_EQ(j["acceptance"]["order"], "longest-first");
}

TEST(CompareAttentionCausal, AcceptanceOfAnotherOrder) {
  Files f;
  const fs::path out = f.dir / "out.txt";
  const std::string files = quote(f.write("xs.json", ours())) + " " + quote(f.write("t.json", theirs()));
  int rc = xstage::test::run_python_tool("compare_attention_causal.py", files, out);  // the default: auto
  std::string text = slurp(out);
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("acceptance (auto) met at 2 of 2 points"), std::string::npos) << text;
  // A file from before the auto order (no auto rows): the default judges grouped.
  json old = doc({cell("xstage", 16384, 128, 620, "grouped", 11), cell("xstage", 8192, 64, 490, "grouped", 24)});
  rc = xstage::test::run_python_tool("compare_attention_causal.py",
                                     quote(f.write("old.json", old)) + " " + quote(f.write("t1.json", theirs())), out);
  text = slurp(out);
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("acceptance (grouped) met at 2 of 2 points"), std::string::npos) << text;
  // An order that did not run: a one-line error, exit 2.
  json only_hm = doc({cell("xstage", 16384, 128, 500, "head-major")});
  rc = xstage::test::run_python_tool(
      "compare_attention_causal.py",
      quote(f.write("hm.json", only_hm)) + " " + quote(f.write("t2.json", theirs())) + " --accept-order grouped", out);
  text = slurp(out);
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("no 'grouped' rows"), std::string::npos) << text;
}

TEST(CompareAttentionCausal, FailedCellsFailTheTable) {
  for (bool ours_fail : {true, false}) {
    Files f;
    json a = ours(), b = theirs();
    if (ours_fail)
      a["results"][1]["correctness"]["passed"] = false;
    else
      b["results"][0]["nonfinite"] = 3;
    const fs::path out = f.dir / "out.txt";
    const int rc = xstage::test::run_python_tool(
        "compare_attention_causal.py", quote(f.write("xs.json", a)) + " " + quote(f.write("t.json", b)), out);
    const std::string text = slurp(out);
    EXPECT_EQ(rc, 1) << text;
    EXPECT_NE(text.find("CORRECTNESS FAIL"), std::string::npos) << text;
  }
}

// FlashAttention-4 rows in the torch file: a column and the accepted order over it; a failed
// fa4 cell fails the table like a cuDNN one.
TEST(CompareAttentionCausal, FlashAttention4Column) {
  Files f;
  json t = theirs();
  t["results"].push_back(cell("fa4", 16384, 128, 640));
  t["results"].push_back(cell("fa4", 8192, 64, 470));
  t["fa4"] = {{"available", true}, {"version", "4.0.0b40"}};
  const fs::path out = f.dir / "out.txt", js = f.dir / "ab.json";
  int rc = xstage::test::run_python_tool(
      "compare_attention_causal.py",
      quote(f.write("xs.json", ours())) + " " + quote(f.write("t.json", t)) + " --json " + quote(js), out);
  std::string text = slurp(out);
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("FlashAttention-4 4.0.0b40"), std::string::npos) << text;
  EXPECT_NE(text.find("auto/FA4"), std::string::npos) << text;
  const json j = json::parse(slurp(js));
  EXPECT_EQ(j["rows"][1]["fa4_tflops"], 640.0);
  EXPECT_NE(text.find("640.0      0.98"), std::string::npos) << text;  // auto 630 / FA4 640
  t["results"][2]["correctness"]["passed"] = false;
  rc = xstage::test::run_python_tool(
      "compare_attention_causal.py", quote(f.write("xs2.json", ours())) + " " + quote(f.write("t2.json", t)), out);
  text = slurp(out);
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("CORRECTNESS FAIL"), std::string::npos) << text;
}
