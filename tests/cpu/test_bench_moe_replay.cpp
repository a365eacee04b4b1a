// The layer bench's per-token check replayed on rows the GPU wrote (tests/data/moe-rows-*.json,
// dumped by `xstage bench moe --dump-rows`; each file names its command, commit and device): the
// host reference rebuilt from the bench's inputs (bench_moe_inputs.hpp, RsWeightPool), then the
// closest combination of the rows' ambiguous h codes (docs/megamoe.md §Per-token activations in
// the fused kernel, "Checking it"). These rows failed the 2 % row bound against the plain
// reference (a file may keep a passing row as a control), by one or two code steps of large |h|
// elements; with their ambiguous codes they sit far inside it. The same rows with one 128-column
// piece missing still fail: the codes do not rescue a wrong row.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_moe_inputs.hpp"
#include "cli/bench_moe_rs_weights.hpp"
#include "cli/bench_moe_scale_alts.hpp"
#include "xstage/moe_routing.hpp"
#include "xstage/ops/moe_layer_ref.hpp"

namespace cli = xstage::cli;
namespace ops = xstage::ops;

namespace {

struct Replayed {
  std::vector<double> ref;                    // the plain reference row
  std::vector<cli::ScaleAlternatives> alts;  // the scale and code choices the bench offers
};

double rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0, n = 0;
  for (size_t c = 0; c < got.size(); ++c) {
    e += (got[c] - ref[c]) * (got[c] - ref[c]);
    n += ref[c] * ref[c];
  }
  return std::sqrt(e / n);
}

// One dumped token row's reference as moe_layer_check_ref builds it (the file's world size and
// --x-offset; the rows' token ids are per rank).
Replayed replay(const nlohmann::json& doc, const nlohmann::json& row, const cli::RsWeightPool& pool,
                const std::vector<uint8_t>& pat) {
  const std::string model = doc["model"];
  const xstage::moe::ModelShape* shape = nullptr;
  for (const auto& s : xstage::moe::model_shapes())
    if (s.name == model) shape = &s;
  if (shape == nullptr) throw std::runtime_error("unknown model " + model);
  const int H = shape->hidden, I = shape->intermediate;
  const bool fused = doc["h_recipe"] == "fused";
  // The bench's local expert: expert id mod experts per rank (every rank uploads the same bytes).
  const int epr = shape->experts / doc.value("world", 1);
  std::vector<uint8_t> x(H);
  cli::bench_x_row(pat, doc.value("x_offset", cli::kBenchXOffset), row["token"].get<size_t>(), H, x.data());
  const std::vector<float> xs(H / 128, cli::kXScale);
  const std::vector<int> experts = row["experts"];
  const std::vector<float> rw = row["router_weights"];
  Replayed out;
  out.ref.assign(H, 0.0);
  for (size_t j = 0; j < experts.size(); ++j) {
    const ops::MoeExpertReference ref(pool.expert(H, I, experts[j] % epr, true, fused), 0);
    std::vector<float> y(H);
    std::vector<std::vector<float>> scales;
    std::vector<ops::HCodeAlternatives> codes;
    ref.row(rw[j], x.data(), xs.data(), y.data(), fused ? &scales : nullptr, ops::kPerTokenHSlack, &codes);
    for (int c = 0; c < H; ++c) out.ref[c] += y[c];
    if (!scales.empty()) {
      cli::ScaleAlternatives sa;
      for (const auto& a : scales) {
        sa.deltas.emplace_back(H);
        for (int c = 0; c < H; ++c) sa.deltas.back()[c] = static_cast<float>(double(a[c]) - double(y[c]));
      }
      out.alts.push_back(std::move(sa));
    }
    for (auto& ca : codes) {
      cli::ScaleAlternatives sa;
      sa.deltas = std::move(ca.deltas);
      sa.code = true;
      out.alts.push_back(std::move(sa));
    }
  }
  return out;
}

void replay_file(const std::string& name) {
  const std::string path = std::string(XSTAGE_SOURCE_DIR) + "/tests/data/" + name;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json doc = nlohmann::json::parse(in);
  const std::string w = doc["weights"];
  const cli::RsWeightPool pool(w.find("mxfp4") != std::string::npos ? ops::MoeWeightLayout::mxfp4_rs
                                                                    : ops::MoeWeightLayout::int4_rs_lut);
  const std::vector<uint8_t> pat = cli::bench_pattern();
  ASSERT_FALSE(doc["rows"].empty());
  for (const auto& row : doc["rows"]) {
    const std::vector<float> got = row["got"];
    const Replayed r = replay(doc, row, pool, pat);
    ASSERT_EQ(got.size(), r.ref.size());
    const double plain = rel_err(got, r.ref);
    // The bench's own figure for this row, so the rebuilt reference is the one it checked against.
    EXPECT_NEAR(plain, row["rel_err_without_alternates"].get<double>(), 1e-5) << name << " token " << row["token"];
    // Rows over the bound on the GPU (and any control row the file keeps) pass with their codes.
    const cli::ClosestRef cr = cli::closest_reference(r.ref.data(), r.alts, got.data(), got.size());
    EXPECT_LT(rel_err(got, cr.ref), 0.01) << name << " token " << row["token"] << ": its ambiguous codes";
    // A wrong row — one 128-column piece of a Linear-2 tile never stored (zeros) — stays far
    // outside the bound whatever the codes.
    std::vector<float> wrong = got;
    for (size_t c = 256; c < 384; ++c) wrong[c] = 0.f;
    const cli::ClosestRef cw = cli::closest_reference(r.ref.data(), r.alts, wrong.data(), wrong.size());
    EXPECT_GT(rel_err(wrong, cw.ref), 0.05) << name << " token " << row["token"] << ": a corrupted row";
  }
}

}  // namespace

TEST(BenchMoeReplay, FusedPerTokenRowsPassWithTheirAmbiguousCodes) {
  replay_file("moe-rows-dit-moe-g-2048-int4-fused.json");
}

TEST(BenchMoeReplay, UnfusedPerTokenRowsPassWithTheirAmbiguousCodes) {
  replay_file("moe-rows-dsv4-flash-8192-mxfp4-unfused.json");
}
#endif  // XSTAGE_HAVE_MOE
