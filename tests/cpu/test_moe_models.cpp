// The one MoE model-shape table, bench/moe-models.json (issue 34): the list the C++ code embeds
// at build time equals the file in the source tree (so a build that missed an edit fails here),
// python/xsbench/moe_models.py prints the same table, `xstage bench moe-gemm` runs that list in
// its order from any working directory, and the parser refuses malformed tables.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "python_tool_util.hpp"
#include "xstage/error.hpp"
#include "xstage/moe_routing.hpp"

namespace {

namespace fs = std::filesystem;
using xstage::moe::ModelShape;

const fs::path kTablePath = fs::path(XSTAGE_SOURCE_DIR) / "bench" / "moe-models.json";

// A shape's fields in the file's order, one line: "DiT-MoE-G 1408 5632 16 2 2 2816".
std::string line_of(const ModelShape& m) {
  std::ostringstream s;
  s << m.name << ' ' << m.hidden << ' ' << m.intermediate << ' ' << m.experts << ' ' << m.top_k << ' ' << m.shared
    << ' ' << m.shared_intermediate;
  return s.str();
}

// A file row read by key, independently of the library's parser.
std::string line_of(const nlohmann::json& row) {
  std::ostringstream s;
  s << row.at("name").get<std::string>();
  for (const char* k : {"hidden", "intermediate", "experts", "top_k", "shared", "shared_intermediate"})
    s << ' ' << row.at(k).get<int>();
  return s.str();
}

fs::path temp_file(const char* tag) {
  return fs::temp_directory_path() / ("xs_moe_models_" + std::string(tag) + "_" + std::to_string(::getpid()) + ".txt");
}

// The message of the Error that parsing `text` throws ("" if it parses).
std::string parse_error(const std::string& text) {
  try {
    xstage::moe::parse_model_shapes(text, "test.json");
  } catch (const xstage::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(MoeModels, EmbeddedListEqualsTheFileOnDisk) {
  const std::string text = xstage::test::slurp(kTablePath);
  ASSERT_FALSE(text.empty()) << "cannot read " << kTablePath;
  const nlohmann::json rows = nlohmann::json::parse(text).at("models");
  const auto& shapes = xstage::moe::model_shapes();
  ASSERT_EQ(shapes.size(), rows.size()) << "rebuild after editing " << kTablePath;
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(line_of(shapes[i]), line_of(rows[i])) << "row " << i;
  // The CLI's help and errors ("default: all seven", "none of the seven models") count them.
  EXPECT_EQ(shapes.size(), 7u) << "update the CLI messages that say 'seven'";
}

TEST(MoeModels, PythonHelperPrintsTheSameTable) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not available";
  std::string want = "# name hidden intermediate experts top_k shared shared_intermediate\n";
  for (const auto& m : xstage::moe::model_shapes()) want += line_of(m) + "\n";
  const fs::path out = temp_file("py");
  ASSERT_EQ(xstage::test::run_python_tool("xsbench/moe_models.py", "", out), 0) << xstage::test::slurp(out);
  EXPECT_EQ(xstage::test::slurp(out), want);
  fs::remove(out);
}

#ifdef XSTAGE_HAVE_MOE
// The bench's --plan lists its cells model by model: one l2_bf16 cell per model at one token
// count shows the models and their order. Run from / so nothing can come from the source tree.
TEST(MoeModels, BenchMoeGemmRunsTheListInOrderFromAnyDirectory) {
  const fs::path out = temp_file("plan");
  const std::string cmd = "cd / && " + xstage::test::quote(XSTAGE_BIN) +
                          " bench moe-gemm --plan --num-ctas 132 --ops l2_bf16 --tokens 16";
  ASSERT_EQ(xstage::test::run(cmd, out), 0) << xstage::test::slurp(out);
  std::vector<std::string> planned;
  std::istringstream lines(xstage::test::slurp(out));
  for (std::string l; std::getline(lines, l);) {
    if (l.empty() || l[0] == '#') continue;
    std::istringstream fields(l);
    std::string name;
    fields >> name;
    planned.push_back(name);
  }
  std::vector<std::string> want;
  for (const auto& m : xstage::moe::model_shapes()) want.push_back(m.name);
  EXPECT_EQ(planned, want) << xstage::test::slurp(out);
  fs::remove(out);
}
#endif

TEST(MoeModels, ParserRefusesMalformedTables) {
  const std::string ok = R"({"name": "m", "hidden": 256, "intermediate": 128, "experts": 8, "top_k": 2, )"
                         R"("shared": 0, "shared_intermediate": 0})";
  auto table = [](const std::string& row) { return R"({"about": "t", "models": [)" + row + "]}"; };
  auto row_with = [&](const std::string& from, const std::string& to) {
    std::string r = ok;
    r.replace(r.find(from), from.size(), to);
    return table(r);
  };
  ASSERT_EQ(parse_error(table(ok)), "");
  EXPECT_EQ(xstage::moe::parse_model_shapes(table(ok), "t").at(0).experts, 8);
  struct Case {
    std::string text;
    const char* says;
  };
  for (const Case& c : {Case{"{\"models\": [", "test.json"},
                        Case{"[]", "not a JSON object"},
                        Case{R"({"models": []})", "non-empty \"models\""},
                        Case{R"({"modles": []})", "unknown key 'modles'"},
                        Case{row_with(R"("top_k": 2, )", ""), "missing field 'top_k'"},
                        Case{row_with(R"("top_k")", R"("topk")"), "unknown field 'topk'"},
                        Case{row_with("256", "256.0"), "'hidden' must be a non-negative integer"},
                        Case{row_with("256", "\"256\""), "'hidden' must be a non-negative integer"},
                        Case{row_with("128", "-128"), "'intermediate' must be a non-negative integer"},
                        Case{row_with("256", "4294967296"), "'hidden' must be a non-negative integer"},
                        Case{row_with(R"("m")", R"("")"), "'name' must be a non-empty string"},
                        Case{row_with(R"("experts": 8)", R"("experts": 0)"), "must be >= 1"},
                        Case{row_with(R"("top_k": 2)", R"("top_k": 9)"), "top_k 9 exceeds the 8 experts"},
                        Case{row_with(R"("shared": 0)", R"("shared": 1)"), "shared_intermediate must be 0 exactly"},
                        Case{table(ok + ", " + ok), "model 'm' appears twice"}}) {
    const std::string e = parse_error(c.text);
    EXPECT_NE(e.find(c.says), std::string::npos) << c.text << "\n -> " << (e.empty() ? "parsed" : e);
    EXPECT_NE(e.find("test.json"), std::string::npos) << "names the origin: " << e;
  }
}
