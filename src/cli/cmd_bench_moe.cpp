// `xstage bench moe` (alias `moe-layer`): the expert-parallel W8A8 MoE layer on --gpus GPUs over
// MOE.md configurations, in one run per configuration: the unfused layer (ops::EpMoeLayer) and
// the Mega-MoE kernel (ops::MegaMoeLayer) with both tile orders; optionally the per-piece
// combine-store spans of both orders next to a local-store control and the model's prediction.
// Routing as `xstage moe-routing`; compare with python/bench_moe_torch.py (same routing) through
// python/compare_moe.py. Weights and activations are random
// finite fp8 codes with constant scales (timing does not depend on the values).
//
// Output checks (cli/bench_check.hpp, docs/measurement.md "Output checks of the benches"): each
// variant's output is poisoned with NaN after its warm-up; after its timed calls (before the
// span calls) every rank's output [T, H] bf16 is scanned in full for non-finite values and
// --check-tokens seeded token rows per rank are compared with the host reference of the layer
// (ops::moe_expert_row, the rows of ops::moe_layer_reference, for each of the token's top-k
// experts, summed), computed once per configuration from the same bytes the bench uploaded (per-token
// weights: once per h recipe, the unfused layer's requantisation and, when a fused cell runs, the
// fused kernel's bf16 h with one scale per token). A row out of tolerance fails the cell (FAILED in
// the table and the JSON); the command exits 1 after the sweep. Which cells a build runs:
// cli/bench_moe_cells.hpp (a skipped cell is one stderr line).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_check.hpp"
#include "cli/bench_moe_inputs.hpp"
#include "cli/bench_moe_scale_alts.hpp"
#include "cli/bench_moe_cells.hpp"
#include "cli/bench_moe_rs_weights.hpp"
#include "cli/bench_util.hpp"
#include "cli/commands.hpp"
#include "cli/run_stamp.hpp"
#include "cli/team_flags.hpp"
#include "kernels/selftest/exchange.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/moe_routing.hpp"
#include "cli/model_source.hpp"
#include "xstage/ops/ep_moe.hpp"
#include "xstage/ops/mega_moe.hpp"
#include "xstage/ops/moe_layer_ref.hpp"
#include "xstage/team.hpp"

namespace xstage::cli {
namespace {

struct Flags {
  std::vector<std::string> models;
  std::vector<int> tokens{512, 2048, 8192};
  std::vector<std::string> routings{"balanced", "skewed"};
  std::vector<std::string> weights{"w8a8"};
  int gpus = 2;
  int virtual_ranks = 0;
  int warmup = 3;
  int iters = 20;
  double timeout_s = 10;
  std::vector<std::string> variants{"unfused", "expert-wave", "interleaved"};
  std::string mega_tile = "auto";  // tile of fused variants without a "+TILE" suffix
  bool spans = false;
  std::string params;
  double tile_tflops = 7.0;
  std::string json_out;
  std::string dump_rows;  // checked rows above half the row bound: got, ref, experts, weights
  size_t x_offset = kBenchXOffset;  // byte of the input pattern the activations start at (bench_moe_inputs.hpp)
  int check_tokens = 16;  // token rows per rank compared with the host reference
  uint64_t check_seed = 20261203u;
  uint64_t routing_seed = moe::RoutingConfig{}.seed;  // as xstage moe-routing --seed
  double per_token_slack = ops::kPerTokenHSlack;  // fused per-token rows: the scale slack (diagnostic)
};

// Per checked token row: relative L2 error <= 2e-2 (the layer GPU tests' tolerance,
// tests/gpu/moe_layer_case.hpp, there over the whole output) and largest element error <=
// 5e-2 x the row's largest reference value (two GEMMs, an fp8 requantisation of the SwiGLU
// output in between, bf16 outputs). The outputs of the bench's inputs are small (~1e-6), so the
// absolute floor is far below them.
constexpr RowTolerance kMoeLayerTolerance{2e-2, 5e-2, 1e-12};

// The bench's input values: bench_moe_inputs.hpp (random_fp8 below uploads them).

// One expert of the layer as the bench uploaded it: local expert `le` of any rank (every rank
// uploads the same bytes), as a one-expert ops::MoeLayerWeights.
ops::MoeLayerWeights bench_expert_weights(const std::vector<uint8_t>& pat, ops::MoeQuant quant, int H, int I, int le) {
  ops::MoeLayerWeights w;
  w.experts = 1;
  w.hidden = H;
  w.intermediate = I;
  w.quant = quant;
  const size_t m1 = size_t(2) * I * H, m2 = size_t(H) * I;
  const size_t div = quant == ops::MoeQuant::w8a8 ? 1 : 2;  // bytes per element: 1 or 1/2
  auto bytes = [&](size_t start, size_t n, std::vector<uint8_t>& out) {
    out.resize(n);
    for (size_t b = 0; b < n; ++b) out[b] = pat[(start + b) % pat.size()];
  };
  bytes(size_t(le) * m1 / div, m1 / div, w.w1);
  bytes(size_t(le) * m2 / div, m2 / div, w.w2);
  if (quant == ops::MoeQuant::w8a8) {
    w.w1_scales.assign(m1 / (128 * 128), kW8Scale);
    w.w2_scales.assign(m2 / (128 * 128), kW8Scale);
  } else if (quant == ops::MoeQuant::w4a8_int4) {
    w.w1_scales.assign(m1 / 128, kInt4Scale);
    w.w2_scales.assign(m2 / 128, kInt4Scale);
  } else {
    w.w1_e8m0.assign(m1 / 32, kMxE8m0);
    w.w2_e8m0.assign(m2 / 32, kMxE8m0);
  }
  return w;
}

// The checked token rows of every local rank and their reference [tokens, H] (fp64 sums of the
// bf16-rounded expert rows).
struct RankCheck {
  int rank = 0;
  std::vector<size_t> tokens;
  std::vector<double> ref;
  // per token: its expert rows' other scales and ambiguous h codes (ScaleAlternatives::code)
  std::vector<std::vector<ScaleAlternatives>> alts;
};

// rs: the register-operand weight pool the cell uploaded (null: the pattern's bytes); per_token:
// the per-token activation recipe, h_from_bf16: with h as the fused per-token kernel makes it
// (else the unfused layer's requantisation).
std::vector<RankCheck> moe_layer_check_ref(Team& team, const Flags& fl, const moe::Routing& r, ops::MoeQuant quant,
                                           const std::vector<uint8_t>& pat, const RsWeightPool* rs, bool per_token,
                                           bool h_from_bf16) {
  const int T = r.tokens_per_rank, H = r.shape.hidden, I = r.shape.intermediate, k = r.shape.top_k;
  const int epr = r.experts_per_rank;
  std::vector<RankCheck> out(team.local_count());
  // One task per (local rank, checked token, choice); grouped by local expert index (the
  // weights of expert e are those of local expert e % epr on every rank).
  struct Task {
    int i;
    size_t row;  // index into out[i].tokens
    int choice;
  };
  std::vector<Task> tasks;
  std::map<int, std::vector<size_t>> by_expert;
  for (int i = 0; i < team.local_count(); ++i) {
    RankCheck& rc = out[i];
    rc.rank = team.rank(i);
    rc.tokens = sample_rows(size_t(T), size_t(std::max(fl.check_tokens, 2)),
                            fl.check_seed ^ (uint64_t(T) << 16) ^ (uint64_t(H) << 36) ^ (uint64_t(rc.rank) << 56) ^
                                (uint64_t(r.shape.experts) << 4) ^ uint64_t(static_cast<int>(r.config.kind)),
                            {size_t(T / 2)});
    rc.ref.assign(rc.tokens.size() * H, 0.0);
    rc.alts.assign(rc.tokens.size(), {});
    for (size_t j = 0; j < rc.tokens.size(); ++j)
      for (int c = 0; c < k; ++c) {
        const int e = r.per_rank[rc.rank].experts[rc.tokens[j] * k + c];
        if (e < 0 || e >= r.shape.experts) throw Error(fmt::format("bench moe: routed expert {} out of range", e));
        by_expert[e % epr].push_back(tasks.size());
        tasks.push_back({i, j, c});
      }
  }
  std::vector<std::pair<int, std::vector<size_t>>> groups(by_expert.begin(), by_expert.end());
  std::vector<float> ys(tasks.size() * H);
  std::vector<std::vector<std::vector<float>>> alt_rows(tasks.size());  // the fused recipe's other scales
  std::vector<std::vector<ops::HCodeAlternatives>> code_alts(tasks.size());  // and its ambiguous h codes
  const std::vector<float> xs(H / 128, kXScale);
  // Few threads: each holds one expert's weights, dequantised once to fp64 for all its rows.
  parallel_for(groups.size(), [&](size_t g) {
    const int le = groups[g].first;
    const ops::MoeExpertReference ref(
        rs != nullptr ? rs->expert(H, I, le, per_token, h_from_bf16) : bench_expert_weights(pat, quant, H, I, le), 0);
    std::vector<uint8_t> x(H);
    for (size_t t : groups[g].second) {
      const Task& tk = tasks[t];
      const RankCheck& rc = out[tk.i];
      const size_t tok = rc.tokens[tk.row];
      bench_x_row(pat, fl.x_offset, tok, H, x.data());
      const float wgt = r.per_rank[rc.rank].weights[tok * k + tk.choice];
      ref.row(wgt, x.data(), xs.data(), ys.data() + t * H, h_from_bf16 ? &alt_rows[t] : nullptr, fl.per_token_slack,
              per_token ? &code_alts[t] : nullptr);
    }
  }, 16);
  for (size_t t = 0; t < tasks.size(); ++t) {
    double* o = out[tasks[t].i].ref.data() + tasks[t].row * H;
    for (int c = 0; c < H; ++c) o[c] += ys[t * H + c];
    for (ops::HCodeAlternatives& ca : code_alts[t]) {
      ScaleAlternatives sa;
      sa.deltas = std::move(ca.deltas);
      sa.code = true;
      out[tasks[t].i].alts[tasks[t].row].push_back(std::move(sa));
    }
    if (alt_rows[t].empty()) continue;
    ScaleAlternatives sa;
    for (const auto& a : alt_rows[t]) {
      sa.deltas.emplace_back(H);
      for (int c = 0; c < H; ++c) sa.deltas.back()[c] = static_cast<float>(double(a[c]) - double(ys[t * H + c]));
    }
    out[tasks[t].i].alts[tasks[t].row].push_back(std::move(sa));
  }
  return out;
}

// A rank's output after the timed calls: its non-finite count (full scan) and checked rows.
struct RankGot {
  unsigned long long nonfinite = 0;
  std::vector<float> rows;  // tokens x H
};

// --dump-rows: every checked row whose relative L2 error exceeds half the row bound, against the
// reference the check used or against the plain one (at most 16 per cell), with its routing and
// both value vectors, to locate an error inside a row. used_ref: per rank, the reference rows the
// check compared with (the closest combination of alternate scales and h codes applied);
// rel_err_primary: the error against the plain reference (check[i].ref).
void dump_rows(nlohmann::json& out, const std::string& model, const std::string& routing, const std::string& variant,
               const moe::Routing& r, const std::vector<RankCheck>& check,
               const std::vector<std::vector<double>>& used_ref, const std::vector<RankGot>& got, int tokens, int H) {
  const int k = r.shape.top_k;
  auto rel_err = [H](const float* g, const double* f) {
    double err = 0, ref = 0;
    for (int c = 0; c < H; ++c) {
      err += (g[c] - f[c]) * (g[c] - f[c]);
      ref += f[c] * f[c];
    }
    return std::sqrt(err / std::max(ref, 1e-300));
  };
  int n_dumped = 0;
  for (size_t i = 0; i < check.size(); ++i)
    for (size_t j = 0; j < check[i].tokens.size() && n_dumped < 16; ++j) {
      const float* g = got[i].rows.data() + j * H;
      const double* f = used_ref[i].data() + j * H;
      const double rel = rel_err(g, f), rel0 = rel_err(g, check[i].ref.data() + j * H);
      if (!(rel > 0.5 * kMoeLayerTolerance.rel_tol) && !(rel0 > kMoeLayerTolerance.rel_tol)) continue;
      const size_t tok = check[i].tokens[j];
      const auto& pr = r.per_rank[check[i].rank];
      out.push_back({{"model", model}, {"routing", routing}, {"variant", variant}, {"rank", check[i].rank},
                     {"token", tok}, {"row", size_t(check[i].rank) * tokens + tok}, {"rel_err", rel},
                     {"rel_err_primary", rel0},
                     {"experts", std::vector<int>(pr.experts.begin() + tok * k, pr.experts.begin() + (tok + 1) * k)},
                     {"weights", std::vector<float>(pr.weights.begin() + tok * k, pr.weights.begin() + (tok + 1) * k)},
                     {"got", std::vector<float>(g, g + H)}, {"ref", std::vector<double>(f, f + H)}});
      ++n_dumped;
    }
}

// Fused variants: an order, optionally with the static tile split instead of dynamic claiming,
// or (interleaved) another lead, in rounds of CTAs: "interleaved-lead0.25".
constexpr const char* kLeadPrefix = "interleaved-lead";
// The lead in rounds of a lead variant; < 0 for any other name (also for a malformed number).
double lead_rounds(const std::string& v) {
  if (v.rfind(kLeadPrefix, 0) != 0) return -1;
  const std::string num = v.substr(std::string(kLeadPrefix).size());
  try {
    size_t used = 0;
    const double r = std::stod(num, &used);
    return used == num.size() && r >= 0 && r <= 64 ? r : -1;
  } catch (const std::exception&) {
    return -1;
  }
}
// Interleaved with another mix: "interleaved-mixR", R Linear-1 tiles between Linear-2 tiles
// (MegaMoeOptions::l1_per_l2), R in [1, 1024]; < 0 for any other name.
constexpr const char* kMixPrefix = "interleaved-mix";
int mix_tiles(const std::string& v) {
  if (v.rfind(kMixPrefix, 0) != 0) return -1;
  const std::string num = v.substr(std::string(kMixPrefix).size());
  if (num.empty() || num.size() > 4 || num.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int r = std::stoi(num);
  return r >= 1 && r <= 1024 ? r : -1;
}
// A fused variant may name its tile configuration after a '+' ("interleaved+m128n256",
// xstage/mega_tile.hpp); without one it runs --mega-tile. Returns the variant without the suffix.
std::string variant_base(const std::string& v) { return v.substr(0, v.find('+')); }
bool variant_tile(const std::string& v, moe::MegaTile dflt, moe::MegaTile* tile) {
  const size_t plus = v.find('+');
  if (plus == std::string::npos) {
    *tile = dflt;
    return true;
  }
  return moe::parse_mega_tile(v.substr(plus + 1).c_str(), tile);
}
bool is_fused(const std::string& v) {
  const std::string b = variant_base(v);
  moe::MegaTile t;
  return (b == "expert-wave" || b == "interleaved" || b == "expert-wave-static" || b == "interleaved-static" ||
          b == "model-order" || b == "interleaved-no-tail" || b == "interleaved-tail" || lead_rounds(b) >= 0 ||
          mix_tiles(b) >= 0) &&
         variant_tile(v, moe::MegaTile::m64n256, &t);
}
const char* kVariantList =
    "unfused, expert-wave, interleaved, model-order, expert-wave-static, interleaved-static, "
    "interleaved-lead<rounds in [0, 64]>, interleaved-mix<tiles in [1, 1024]>, interleaved-tail, interleaved-no-tail; "
    "a fused one may end in +m64n256, +m128n256, +m256n128_tok or +m128n256_tok (its tile)";

nlohmann::json tile_kind_json(const ops::MegaMoeTileKind& k) {
  return {{"tiles", k.tiles}, {"mainloop_us", k.mainloop_us}, {"epilogue_us", k.epilogue_us}, {"store_tail_us", k.store_tail_us},
          {"handover_us", k.handover_us}, {"staged_us", k.staged_us},
          {"input_wait_us", k.input_wait_us},
          {"producer", {{"tiles", k.producer_tiles}, {"gap_before_us", k.gap_before_us},
                        {"waited_push_us", k.waited_push_us}, {"claim_to_push_us", k.claim_to_push_us},
                        {"claim_late_us", k.claim_late_us}, {"loads_us", k.loads_us}}}};
}

// l1/l2_tflops: the rank's expert work of that GEMM over the mean CTA's time in its tiles.
nlohmann::json phases_json(const ops::MegaMoePhases& p, double l1_tflops, double l2_tflops) {
  return {{"prologue_us", p.prologue_us}, {"l1_us", p.l1_us}, {"l2_us", p.l2_us}, {"gaps_us", p.gaps_us},
          {"combine_us", p.combine_us}, {"reduce_us", p.reduce_us}, {"ctas", p.ctas},
          {"l1_tflops", l1_tflops}, {"l2_tflops", l2_tflops}};
}

// Median and p90 of a span sample, as JSON.
nlohmann::json span_summary(std::vector<double> v) {
  if (v.empty()) return {{"count", 0}};
  return {{"median_us", quantile(v, 0.5)}, {"p90_us", quantile(v, 0.9)}, {"count", v.size()}};
}

// A device buffer of `bytes` filled with random finite e4m3 codes (|v| <= 2), by replicating
// a 16 MiB pattern device to device.
void* random_fp8(size_t bytes, const void* pattern, size_t pattern_bytes, cudaStream_t s) {
  void* d = nullptr;
  XS_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 16)), fmt::format("bench moe: allocating {} bytes", bytes));
  for (size_t off = 0; off < bytes; off += pattern_bytes)
    XS_CUDA(cudaMemcpyAsync(static_cast<char*>(d) + off, pattern, std::min(pattern_bytes, bytes - off),
                            cudaMemcpyDeviceToDevice, s),
            "bench moe: filling");
  return d;
}
uint8_t* const_bytes(size_t n, uint8_t v) {
  uint8_t* d = nullptr;
  XS_CUDA(cudaMalloc(&d, std::max<size_t>(n, 1)), "bench moe: scales");
  XS_CUDA(cudaMemset(d, v, n), "bench moe: scales");
  return d;
}
float* const_floats(size_t n, float v) {
  std::vector<float> h(n, v);
  float* d = nullptr;
  XS_CUDA(cudaMalloc(&d, sizeof(float) * std::max<size_t>(n, 1)), "bench moe: scales");
  XS_CUDA(cudaMemcpy(d, h.data(), sizeof(float) * n, cudaMemcpyHostToDevice), "bench moe: scales");
  return d;
}
template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  XS_CUDA(cudaMalloc(&d, sizeof(T) * std::max<size_t>(h.size(), 1)), "bench moe: routing");
  XS_CUDA(cudaMemcpy(d, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice), "bench moe: routing");
  return d;
}

void run(const Flags& fl) {
  if (fl.iters < 20) throw InvalidArgument(fmt::format("bench moe: --iters {} must be >= 20", fl.iters));
  if (fl.check_tokens < 2) throw InvalidArgument("bench moe: --check-tokens must be >= 2");
  for (const auto& v : fl.variants)
    if (v != "unfused" && !is_fused(v))
      throw InvalidArgument(fmt::format("bench moe: unknown variant '{}' ({})", v, kVariantList));
  if (fl.variants.empty()) throw InvalidArgument("bench moe: --variants is empty");
  moe::MegaTile default_tile;
  if (!moe::parse_mega_tile(fl.mega_tile.c_str(), &default_tile))
    throw InvalidArgument(fmt::format("bench moe: unknown --mega-tile '{}' (auto, m64n256, m128n256, m256n128_tok, "
                                      "m128n256_tok)",
                                      fl.mega_tile));
  if (fl.weights.empty()) throw InvalidArgument("bench moe: --weights is empty");
  std::vector<MoeBenchWeights> formats;
  for (const auto& w : fl.weights) formats.push_back(parse_moe_bench_weights(w));
  // One register-operand weight pool per layout (quantised and prepacked once, on the host).
  std::map<ops::MoeWeightLayout, std::unique_ptr<RsWeightPool>> pools;
  for (const MoeBenchWeights& wf : formats)
    if (wf.layout != ops::MoeWeightLayout::rows && !pools.count(wf.layout))
      pools[wf.layout] = std::make_unique<RsWeightPool>(wf.layout);
  auto rs_pool = [&](ops::MoeWeightLayout l) -> const RsWeightPool* {
    return l == ops::MoeWeightLayout::rows ? nullptr : pools.at(l).get();
  };
  std::string model_used;
  const model::Params model = load_model_params(fl.params, &model_used);
  std::vector<moe::ModelShape> shapes;
  if (fl.models.empty()) shapes = moe::model_shapes();
  for (const auto& m : fl.models) shapes.push_back(moe::find_model(m));
  std::vector<moe::RoutingKind> kinds;
  for (const auto& r : fl.routings) kinds.push_back(moe::parse_routing(r));
  for (int t : fl.tokens)
    if (t < 1) throw InvalidArgument(fmt::format("bench moe: tokens {} must be >= 1", t));
  check_virtual_flag("bench moe", fl.virtual_ranks);
  for (const auto& s : shapes)
    ops::validate_ep_moe({s.hidden, s.intermediate, s.experts, s.top_k, 1}, team_ranks(fl.gpus, fl.virtual_ranks));

  TeamOptions to;
  to.gpus = fl.gpus;
  to.min_gpus = fl.gpus;
  to.wait_timeout_s = fl.timeout_s;
  auto team = make_team(to, fl.virtual_ranks);
  const int n = team->local_count();
  const std::vector<uint8_t> pat = bench_pattern();
  const size_t pat_bytes = pat.size();
  std::vector<void*> pat_dev(n);
  team->run([&](int i) {
    XS_CUDA(cudaMalloc(&pat_dev[i], pat_bytes), "bench moe: pattern");
    XS_CUDA(cudaMemcpy(pat_dev[i], pat.data(), pat_bytes, cudaMemcpyHostToDevice), "bench moe: pattern");
  });

  print_team_banner(*team);
  std::printf("# xstage bench moe (expert-parallel layer) on %d %s, median of %d (max over ranks); model %s\n",
              team->world_size(), team->is_virtual() ? "virtual ranks of one GPU" : "GPUs", fl.iters,
              model_used.c_str());
  std::printf("# check: %d seeded token rows per rank vs the host layer reference (per row: rel L2 <= %g, max abs <= "
              "%g x max|ref|), full non-finite scan of the NaN-poisoned output after the timed calls; #wrong = rows out "
              "of tolerance\n",
              fl.check_tokens, kMoeLayerTolerance.rel_tol, kMoeLayerTolerance.max_abs_rel);
  std::printf("#%19s %10s %8s %7s %12s %10s %10s %10s %9s %6s %6s %9s %6s%s\n", "model", "weights", "routing", "tokens",
              "variant", "median_us", "p10_us", "p90_us", "max_rows", "#wrong", "nonfin", "rel_err", "check",
              fl.spans ? "  span_remote/local/pred_us" : "");
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json dumped = nlohmann::json::array();
  int cells = 0, cells_failed = 0;
  for (const auto& shape : shapes)
    for (auto kind : kinds)
      for (int tokens : fl.tokens)
        for (const MoeBenchWeights& wf : formats) {
          const std::string& wname = wf.name;
          const ops::MoeQuant quant = wf.quant;
          const RsWeightPool* rs = rs_pool(wf.layout);
          std::fprintf(stderr, "bench moe: %s %s %s T=%d ...\n", shape.name.c_str(), wname.c_str(),
                       std::string(moe::routing_name(kind)).c_str(), tokens);
          moe::RoutingConfig rc;
          rc.kind = kind;
          rc.seed = fl.routing_seed;
          const moe::Routing r = moe::make_routing(shape, team->world_size(), tokens, rc);
          const moe::RoutingStats st = moe::routing_stats(r);
          const ops::EpMoeConfig cfg{shape.hidden, shape.intermediate, shape.experts, shape.top_k, tokens};
          const int epr = shape.experts / team->world_size();
          const size_t H = shape.hidden, I = shape.intermediate;
          std::vector<ops::EpMoeRankInputs> in(n);
          team->run([&](int i) {
            cudaStream_t s = team->stream(i);
            const int rank = team->rank(i);
            auto& d = in[i];
            d.topk_experts = upload(r.per_rank[rank].experts);
            d.topk_weights = upload(r.per_rank[rank].weights);
            d.x = random_fp8(size_t(tokens) * H, static_cast<const char*>(pat_dev[i]) + fl.x_offset,
                             pat_bytes - fl.x_offset, s);
            // Per-token activations: one scale per token (the same constant).
            d.x_scales = const_floats(wf.per_token ? size_t(tokens) : (H / 128) * tokens, 1.f / 16);
            d.act = wf.act();
            d.quant = quant;
            if (rs) {
              d.w_layout = rs->layout();
              d.w1 = rs->upload_weights(epr, int(2 * I), int(H), s);
              d.w1_scales = rs->upload_scales(epr, int(2 * I), int(H), s);
              d.w2 = rs->upload_weights(epr, int(H), int(I), s);
              d.w2_scales = rs->upload_scales(epr, int(H), int(I), s);
            } else if (quant == ops::MoeQuant::w8a8) {
              d.w1 = random_fp8(size_t(epr) * 2 * I * H, pat_dev[i], pat_bytes, s);
              d.w1_scales = const_floats(size_t(epr) * (2 * I / 128) * (H / 128), 1.f / 256);
              d.w2 = random_fp8(size_t(epr) * H * I, pat_dev[i], pat_bytes, s);
              d.w2_scales = const_floats(size_t(epr) * (H / 128) * (I / 128), 1.f / 256);
            } else {
              // Packed 4-bit codes (every nibble is a valid INT4 / E2M1 value), constant scales.
              d.w1 = random_fp8(size_t(epr) * 2 * I * H / 2, pat_dev[i], pat_bytes, s);
              d.w2 = random_fp8(size_t(epr) * H * I / 2, pat_dev[i], pat_bytes, s);
              if (quant == ops::MoeQuant::w4a8_int4) {
                d.w1_scales = const_floats(size_t(epr) * (H / 128) * 2 * I, 1.f / 64);
                d.w2_scales = const_floats(size_t(epr) * (I / 128) * H, 1.f / 64);
              } else {
                d.w1_e8m0 = const_bytes(size_t(epr) * (H / 32) * 2 * I, 121);  // 2^-6
                d.w2_e8m0 = const_bytes(size_t(epr) * (I / 32) * H, 121);
              }
            }
            void* out = nullptr;
            XS_CUDA(cudaMalloc(&out, size_t(tokens) * H * 2), "bench moe: output");
            d.out = out;
            XS_CUDA(cudaStreamSynchronize(s), "bench moe: setup");
          });
          std::unique_ptr<ops::EpMoeLayer> unfused;
          std::unique_ptr<ops::MegaMoeLayer> mega;
          for (const auto& v : fl.variants) {
            if (v == "unfused" && !unfused) unfused = std::make_unique<ops::EpMoeLayer>(*team, cfg);
            // Per-token weights run fused only on a layer holding that kernel's scratch.
            if (is_fused(v) && !mega)
              mega = std::make_unique<ops::MegaMoeLayer>(*team, cfg, model, fl.tile_tflops, 0,
                                                         wf.per_token && ops::MegaMoeLayer::per_token_w4a8_built());
          }
          // The host reference of the checked rows, once per configuration and h recipe, when the
          // first cell that needs it runs: per-token weights check the fused kernel against h as it
          // makes it (bf16, one scale per token) and the unfused layer against its requantisation.
          struct CheckRef {
            bool ready = false;
            std::vector<RankCheck> rows;
            std::string error;
          };
          CheckRef check_requant, check_fused_tok;
          const bool rs_built = ops::MegaMoeLayer::register_operand_w4a8_built();
          const bool tok_built = ops::MegaMoeLayer::per_token_w4a8_built();
          const bool wide_built = ops::MegaMoeLayer::per_token_wide_built();
          for (const auto& v : fl.variants) {
            moe::MegaTile tile_asked = moe::MegaTile::automatic;
            variant_tile(v, default_tile, &tile_asked);
            const std::string skip =
                moe_bench_skip_reason(wf, is_fused(v), tile_asked, rs_built, tok_built, wide_built);
            if (!skip.empty()) {
              std::fprintf(stderr, "bench moe: %s skipped for %s weights (%s)\n", v.c_str(), wname.c_str(), skip.c_str());
              continue;
            }
            const bool fused_tok = wf.per_token && is_fused(v);
            CheckRef& cref = fused_tok ? check_fused_tok : check_requant;
            if (!cref.ready) {
              cref.ready = true;
              try {
                cref.rows = moe_layer_check_ref(*team, fl, r, quant, pat, rs, wf.per_token, fused_tok);
              } catch (const std::exception& e) {
                cref.error = std::string("host reference failed: ") + e.what();
              }
            }
            const std::vector<RankCheck>& check = cref.rows;
            const std::string& check_error = cref.error;
            ops::MegaMoeOptions opt;
            const std::string vb = variant_base(v);
            opt.schedule = vb == "model-order"                ? moe::MoeSchedule::automatic
                           : vb.rfind("expert-wave", 0) == 0 ? moe::MoeSchedule::expert_wave
                                                              : moe::MoeSchedule::interleaved;
            opt.dynamic_claim = vb.find("-static") == std::string::npos;
            if (lead_rounds(vb) >= 0) opt.lead_tiles = static_cast<int>(std::lround(lead_rounds(vb) * mega->ctas(0)));
            if (const int r = mix_tiles(vb); r >= 0) opt.l1_per_l2 = r;
            if (vb == "interleaved-no-tail") opt.tail_l2_tiles = 0;  // the plain interleaved list, for comparison
            opt.tile = tile_asked;
            // Rank i's options: interleaved-tail keeps one Linear-2 tile per CTA of the rank for the end.
            auto rank_opt = [&](int i, ops::MegaMoeOptions o) {
              if (vb == "interleaved-tail") o.tail_l2_tiles = mega->ctas(i);
              return o;
            };
            auto call = [&](int i, const ops::MegaMoeOptions& o) {
              if (v == "unfused") unfused->forward(i, in[i], team->stream(i));
              else mega->forward(i, in[i], team->stream(i), rank_opt(i, o));
            };
            std::vector<std::vector<double>> us(n), remote(n), local(n);
            std::vector<double> ghz(n, 0);
            std::vector<ops::MegaMoeTileStats> tiles(n);
            std::vector<ops::EpMoePhaseTimes> unfused_phases(n);
            std::vector<RankGot> got(n);
            team->run([&](int i) {
              cudaStream_t s = team->stream(i);
              const TeamDevice td = team->device_view(i);
              std::vector<cudaEvent_t> ev(2 * fl.iters);
              for (auto& e : ev) XS_CUDA(cudaEventCreate(&e), "events");
              for (int w = 0; w < fl.warmup; ++w) call(i, opt);
              // Poison the output (NaN) before the timed calls: what the last one leaves unwritten
              // stays NaN (before this rank's first timed barrier, so no peer is still in a call).
              XS_CUDA(cudaMemsetAsync(in[i].out, kPoisonByte, size_t(tokens) * H * 2, s), "bench moe: poisoning the output");
              for (int it = 0; it < fl.iters; ++it) {
                XS_CUDA(kernels::launch_team_barrier(td, team->next_epoch(i), s), "bench barrier");
                XS_CUDA(cudaEventRecord(ev[2 * it], s), "events");
                call(i, opt);
                XS_CUDA(cudaEventRecord(ev[2 * it + 1], s), "events");
              }
              XS_CUDA(cudaStreamSynchronize(s), fmt::format("bench moe {} {} T={}", v, shape.name, tokens));
              team->check_device_status(i);
              for (int it = 0; it < fl.iters; ++it) {
                float ms = 0;
                XS_CUDA(cudaEventElapsedTime(&ms, ev[2 * it], ev[2 * it + 1]), "events");
                us[i].push_back(ms * 1e3);
              }
              for (auto& e : ev) cudaEventDestroy(e);
              {
                // The last timed call's output, read before the span calls overwrite it.
                std::vector<uint16_t> host(size_t(tokens) * H);
                XS_CUDA(cudaMemcpy(host.data(), in[i].out, host.size() * 2, cudaMemcpyDeviceToHost),
                        "bench moe: reading the output");
                got[i].nonfinite = count_nonfinite_16(host.data(), host.size(), true);
                if (!check.empty()) {
                  const auto& toks = check[i].tokens;
                  got[i].rows.resize(toks.size() * H);
                  for (size_t j = 0; j < toks.size(); ++j)
                    for (size_t c = 0; c < H; ++c) got[i].rows[j * H + c] = bf16_bits_to_float(host[toks[j] * H + c]);
                }
              }
              if (fl.spans && is_fused(v)) {
                // One recorded call with remote combine stores, one with the local-store control.
                for (bool control : {false, true}) {
                  ops::MegaMoeOptions o = opt;
                  o.record_spans = true;
                  o.control_local = control;
                  XS_CUDA(kernels::launch_team_barrier(td, team->next_epoch(i), s), "bench barrier");
                  call(i, o);
                  XS_CUDA(cudaStreamSynchronize(s), "bench moe: span call");
                  team->check_device_status(i);
                  const ops::MegaMoeSpans sp = mega->last_spans(i);
                  (control ? local[i] : remote[i]) = sp.us;
                  if (!control) {
                    ghz[i] = sp.sm_ghz;
                    tiles[i] = sp.tiles;
                  }
                }
              } else if (fl.spans && v == "unfused") {
                // One call with its stage boundaries recorded (the phase breakdown).
                ops::EpMoePhaseEvents pe;
                for (auto& e : pe.at) XS_CUDA(cudaEventCreate(&e), "bench moe: phase events");
                XS_CUDA(kernels::launch_team_barrier(td, team->next_epoch(i), s), "bench barrier");
                unfused->forward(i, in[i], s, pe);
                XS_CUDA(cudaStreamSynchronize(s), "bench moe: phase call");
                team->check_device_status(i);
                unfused_phases[i] = ops::ep_moe_phase_times(pe);
                for (auto& e : pe.at) cudaEventDestroy(e);
              }
            });
            double med = 0, p10 = 0, p90 = 0;
            nlohmann::json rank_med = nlohmann::json::array();
            for (int i = 0; i < n; ++i) {
              med = std::max(med, quantile(us[i], 0.5));
              p10 = std::max(p10, quantile(us[i], 0.1));
              p90 = std::max(p90, quantile(us[i], 0.9));
              rank_med.push_back(quantile(us[i], 0.5));
            }
            const long long max_rows = *std::max_element(st.received.begin(), st.received.end());
            unsigned long long nonfinite = 0;
            for (int i = 0; i < n; ++i) nonfinite += got[i].nonfinite;
            CheckRecord rec;
            // Fused per-token rows with an ambiguous scale (bench_moe_scale_alts.hpp), and of them
            // those checked against an alternate.
            long long rows_ambiguous = 0, rows_alternate = 0;
            // ... and the rows' ambiguous h codes: choices offered, rows that took one, codes taken.
            long long code_choices = 0, rows_code = 0, codes_taken = 0;
            std::vector<std::vector<double>> used_ref(n);  // the reference rows each rank's check used
            if (!check_error.empty()) {
              rec = failed_check(check_error, kMoeLayerTolerance, "");
              rec.nonfinite = nonfinite;
            } else {
              RowChecker rc(kMoeLayerTolerance);
              for (int i = 0; i < n; ++i) {
                used_ref[i] = check[i].ref;
                for (size_t j = 0; j < check[i].tokens.size(); ++j) {
                  const float* g = got[i].rows.data() + j * H;
                  double* ref = used_ref[i].data() + j * H;
                  const auto& all = check[i].alts[j];
                  if (!all.empty()) {
                    long long scale_choices = 0, scale_taken = 0, code_taken = 0;
                    const ClosestRef cr = closest_reference(ref, all, g, H);
                    for (size_t a = 0; a < all.size(); ++a) {
                      (all[a].code ? code_choices : scale_choices) += 1;
                      if (cr.choice[a] > 0) ++(all[a].code ? code_taken : scale_taken);
                    }
                    rows_ambiguous += scale_choices > 0;
                    rows_alternate += scale_taken > 0;
                    rows_code += code_taken > 0;
                    codes_taken += code_taken;
                    std::copy(cr.ref.begin(), cr.ref.end(), ref);
                  }
                  rc.add_row(static_cast<long long>(size_t(check[i].rank) * tokens + check[i].tokens[j]), g, ref, H);
                }
              }
              const char* h_recipe = !wf.per_token ? ""
                                     : fused_tok   ? "; h in bf16, then one scale per token (the fused kernel's recipe)"
                                                   : "; h requantised to one scale per token (the unfused layer's recipe)";
              rec = rc.finish(nonfinite,
                              std::string("host layer reference (ops::moe_expert_row per top-k choice, fp64 sum of the "
                                          "bf16 rows) of the uploaded bytes; seeded token rows of every rank (row = rank "
                                          "* tokens + token)") +
                                  h_recipe);
            }
            if (!fl.dump_rows.empty() && check_error.empty())
              dump_rows(dumped, shape.name, std::string(moe::routing_name(kind)), v, r, check, used_ref, got, tokens, H);
            if (!rec.passed) ++cells_failed;
            ++cells;
            nlohmann::json row{{"model", shape.name}, {"weights", wname}, {"routing", std::string(moe::routing_name(kind))},
                               {"tokens_per_rank", tokens}, {"variant", v}, {"median_us", med}, {"p10_us", p10},
                               {"p90_us", p90}, {"rank_median_us", rank_med}, {"rows_received", st.received},
                               {"nonfinite", rec.nonfinite}, {"check", rec.verdict()}, {"correctness", rec.to_json()}};
            if (fused_tok && check_error.empty()) {
              row["correctness"]["rows_scale_ambiguous"] = rows_ambiguous;
              row["correctness"]["rows_alternate_scale"] = rows_alternate;
            }
            if (wf.per_token && check_error.empty()) {
              row["correctness"]["h_code_choices"] = code_choices;
              row["correctness"]["rows_h_code_alternate"] = rows_code;
              row["correctness"]["h_codes_taken"] = codes_taken;
            }
            std::string span_txt;
            // the order a fused variant ran (model-order: the layer's pick)
            const moe::MoeSchedule sched = is_fused(v) ? mega->resolved_schedule(opt.schedule, quant) : opt.schedule;
            if (is_fused(v)) {
              row["mega_tile"] = moe::mega_tile_name(mega->resolved_tile(opt.tile, quant, wf.act()));  // auto resolved
              nlohmann::json plan;
              to_json(plan, mega->plan());
              row["plan"] = plan;
              nlohmann::json choice;
              to_json(choice, mega->order_choice(quant));
              row["order_choice"] = choice;
              row["schedule"] = moe::schedule_name(sched);
              if (sched == moe::MoeSchedule::interleaved) {
                row["lead_tiles"] = opt.lead_tiles >= 0 ? opt.lead_tiles : mega->plan().lead_tiles;
                row["l1_per_l2"] = opt.l1_per_l2 > 0 ? opt.l1_per_l2 : std::max(1, mega->plan().l1_per_l2);
                row["tail_l2_tiles"] = mega->tail_l2_tiles(0, rank_opt(0, opt));  // rank 0's
              }
            }
            // Expert work of rank i: its received rows through both GEMMs (gate + up, then down).
            auto gemm_tflops = [&](int i, bool l1, double us) {
              const double flops = 2.0 * double(st.received[i]) * H * double(shape.intermediate) * (l1 ? 2.0 : 1.0);
              return us > 0 ? flops / (us * 1e-6) / 1e12 : 0.0;
            };
            if (fl.spans && v == "unfused") {
              nlohmann::json pj = nlohmann::json::array();
              for (int i = 0; i < n; ++i) {
                const ops::EpMoePhaseTimes& t = unfused_phases[i];
                pj.push_back({{"dispatch_us", t.dispatch_us}, {"l1_us", t.l1_us}, {"l2_us", t.l2_us},
                              {"combine_us", t.combine_us}, {"reduce_us", t.reduce_us},
                              {"l1_tflops", gemm_tflops(i, true, t.l1_us)}, {"l2_tflops", gemm_tflops(i, false, t.l2_us)}});
              }
              row["phases"] = pj;
              const ops::EpMoePhaseTimes& t0 = unfused_phases[0];
              span_txt = fmt::format("  [rank0 phases disp/L1/L2/comb/red {:.0f}/{:.0f}/{:.0f}/{:.0f}/{:.0f} us; "
                                     "grouped GEMM L1/L2 {:.0f}/{:.0f} TFLOP/s]",
                                     t0.dispatch_us, t0.l1_us, t0.l2_us, t0.combine_us, t0.reduce_us,
                                     gemm_tflops(0, true, t0.l1_us), gemm_tflops(0, false, t0.l2_us));
            }
            if (fl.spans && is_fused(v)) {
              std::vector<double> all_remote, all_local;
              for (int i = 0; i < n; ++i) {
                all_remote.insert(all_remote.end(), remote[i].begin(), remote[i].end());
                all_local.insert(all_local.end(), local[i].begin(), local[i].end());
              }
              const double pred = sched == moe::MoeSchedule::expert_wave ? mega->plan().predicted_wave_span_us
                                                                         : mega->plan().predicted_interleaved_span_us;
              row["spans"] = {{"remote", span_summary(all_remote)}, {"local", span_summary(all_local)},
                              {"predicted_us", pred}, {"sm_ghz", quantile(ghz, 0.5)}};
              nlohmann::json tj = nlohmann::json::array();
              for (int i = 0; i < n; ++i)
                tj.push_back({{"l1", tile_kind_json(tiles[i].l1)}, {"l2", tile_kind_json(tiles[i].l2)},
                              {"first_tile_us", tiles[i].first_tile_us}, {"busy_share", tiles[i].busy_share},
                              {"last_tile_end_us", {tiles[i].last_tile_end_us_min, tiles[i].last_tile_end_us_max}},
                              {"phases", phases_json(tiles[i].phases, gemm_tflops(i, true, tiles[i].phases.l1_us),
                                                     gemm_tflops(i, false, tiles[i].phases.l2_us))}});
              row["tiles"] = tj;
              const ops::MegaMoeTileStats& t0 = tiles[0];
              span_txt = fmt::format(
                  "  {:.2f}/{:.2f}/{:.2f}  [rank0 busy {:.2f}, first tile {:.0f} us, last tile end {:.0f}..{:.0f} us; "
                  "L1 ml/epi(handover,staged,tail)/wait {:.2f}/{:.2f}({:.2f},{:.2f},{:.2f})/{:.2f}, L2 ml/epi(tail)/wait "
                  "{:.2f}/{:.2f}({:.2f})/{:.2f} us; phases pro/L1/L2/gaps/comb/red "
                  "{:.0f}/{:.0f}/{:.0f}/{:.0f}/{:.0f}/{:.0f} us; L1/L2 tiles {:.0f}/{:.0f} TFLOP/s]",
                  all_remote.empty() ? 0.0 : quantile(all_remote, 0.5), all_local.empty() ? 0.0 : quantile(all_local, 0.5),
                  pred, t0.busy_share, t0.first_tile_us, t0.last_tile_end_us_min, t0.last_tile_end_us_max,
                  t0.l1.mainloop_us, t0.l1.epilogue_us, t0.l1.handover_us, t0.l1.staged_us, t0.l1.store_tail_us,
                  t0.l1.input_wait_us, t0.l2.mainloop_us,
                  t0.l2.epilogue_us, t0.l2.store_tail_us, t0.l2.input_wait_us, t0.phases.prologue_us,
                  t0.phases.l1_us, t0.phases.l2_us, t0.phases.gaps_us, t0.phases.combine_us, t0.phases.reduce_us,
                  gemm_tflops(0, true, t0.phases.l1_us), gemm_tflops(0, false, t0.phases.l2_us));
              if (t0.l1.producer_tiles + t0.l2.producer_tiles > 0)  // measurement build (XSTAGE_MEGA_PRODUCER_TRACE)
                span_txt += fmt::format(
                    " [producer L1/L2: gap {:.2f}/{:.2f}, waited for push {:.2f}/{:.2f}, claim to push {:.2f}/{:.2f}, "
                    "claim after prev end {:.2f}/{:.2f}, loads {:.2f}/{:.2f} us]",
                    t0.l1.gap_before_us, t0.l2.gap_before_us, t0.l1.waited_push_us, t0.l2.waited_push_us,
                    t0.l1.claim_to_push_us, t0.l2.claim_to_push_us, t0.l1.claim_late_us, t0.l2.claim_late_us,
                    t0.l1.loads_us, t0.l2.loads_us);
            }
            std::printf(" %19s %10s %8s %7d %12s %10.1f %10.1f %10.1f %9lld %6lld %6llu %9.2e %6s%s\n",
                        shape.name.c_str(), wname.c_str(), std::string(moe::routing_name(kind)).c_str(), tokens,
                        v.c_str(), med, p10, p90, max_rows, rec.rows_failed, rec.nonfinite, rec.rel_err, rec.verdict(),
                        span_txt.c_str());
            std::fflush(stdout);
            results.push_back(row);
          }
          unfused.reset();
          mega.reset();
          team->run([&](int i) {
            auto& d = in[i];
            for (const void* p : {static_cast<const void*>(d.topk_experts), static_cast<const void*>(d.topk_weights), d.x,
                                  static_cast<const void*>(d.x_scales), d.w1, static_cast<const void*>(d.w1_scales),
                                  d.w2, static_cast<const void*>(d.w2_scales), static_cast<const void*>(d.out),
                                  static_cast<const void*>(d.w1_e8m0), static_cast<const void*>(d.w2_e8m0)})
              if (p != nullptr) cudaFree(const_cast<void*>(p));
          });
        }
  team->run([&](int i) { cudaFree(pat_dev[i]); });
  std::printf("# correctness: %s\n",
              correctness_summary(static_cast<size_t>(cells_failed), static_cast<size_t>(cells)).c_str());
  nlohmann::json j;
  if (!fl.json_out.empty()) {
    j["schema"] = "xstage.bench.moe.v1";
    j["variants"] = {{"unfused", "counts, dispatch, layout, grouped GEMM L1 (SwiGLU fp8), L2 (bf16), combine, reduce: 7 kernels"},
                     {"expert-wave", "Mega-MoE persistent kernel, expert-wave tile order"},
                     {"interleaved", "Mega-MoE persistent kernel, interleaved tile order (mix from the Burst-Gap model; the list's end from the plan, row field tail_l2_tiles)"},
                     {"model-order", "Mega-MoE persistent kernel, the order the model picks for the layer (row fields schedule, order_choice)"},
                     {"expert-wave-static", "as expert-wave, CTA c taking list positions c, c + K, ... (no claiming)"},
                     {"interleaved-static", "as interleaved, CTA c taking list positions c, c + K, ... (no claiming)"},
                     {"interleaved-leadR", "as interleaved with a lead of R rounds of CTAs (R x K Linear-1 tiles) instead of the plan's 1"},
                     {"interleaved-mixR", "as interleaved with R Linear-1 tiles between Linear-2 tiles instead of the plan's mix (row field l1_per_l2)"},
                     {"interleaved-tail", "as interleaved with the last blocks' Linear-2 tiles (about one per CTA) after every Linear-1 tile, whatever the plan says"},
                     {"interleaved-no-tail", "as interleaved without Linear-2 tiles kept for the end of the list, whatever the plan says"},
                     {"VARIANT+TILE", "a fused variant with the tile configuration TILE (auto, m64n256, m128n256, m256n128_tok, m128n256_tok; row field mega_tile: the one that ran)"}};
    j["model_params"] = model_used;
    j["world"] = team->world_size();
    j["team"] = team_label(*team);
    j["commit"] = commit_id();
    j["date"] = now_iso();
    j["config"] = {{"warmup", fl.warmup}, {"iters", fl.iters}, {"tile_tflops", fl.tile_tflops}, {"mega_tile", fl.mega_tile},
                   {"timing", "team barrier, then CUDA events around one call per rank; median per rank, max over ranks"},
                   {"spans", "per Linear-2 warp-group piece (64 x 128 bf16; the per-token kernel: per 256 x 128 Linear-2 tile, both groups): SM cycles from before its first combine store to after its last store and the group's barrier, over the measured SM clock; local = same call with every combine row stored to this rank's own buffer"},
                   {"check_tokens", fl.check_tokens}, {"check_seed", fl.check_seed}, {"routing_seed", fl.routing_seed},
                   {"per_token_slack", fl.per_token_slack},
                   {"check", "output NaN-poisoned before the timed calls; the last timed call's output: full non-finite "
                             "scan and seeded token rows of every rank vs the host layer reference, per-row tolerances"}};
  }
  if (!fl.dump_rows.empty()) write_json_file(nlohmann::json{{"schema", "xstage.bench.moe.rows.v1"}, {"rows", dumped}},
                                              fl.dump_rows);
  finish_bench(j, std::move(results), cells_failed, cells, fl.json_out, "moe");
}

}  // namespace

void add_moe_bench_command(CLI::App& app) {
  auto fl = std::make_shared<Flags>();
  auto* cmd = bench_group(app)->add_subcommand(
      "moe",
      "Expert-parallel MoE layer on --gpus GPUs, per MOE.md model x routing x tokens per rank x weights, variants\n"
      "in one run: unfused (7 kernels: counts, dispatch, grouped GEMMs, combine, top-k sum) and the Mega-MoE\n"
      "persistent kernel with the expert-wave and interleaved tile orders. --spans adds each fused order's\n"
      "per-piece combine-store span, a local-store control and the Burst-Gap prediction, and the phase\n"
      "breakdown of every variant (docs/megamoe.md \"Phase breakdown\"). Routing as `xstage\n"
      "moe-routing`; compare with python/bench_moe_torch.py via python/compare_moe.py.");
  cmd->alias("moe-layer");
  cmd->add_option("--models", fl->models, "Model names (default: all seven)")->delimiter(',');
  cmd->add_option("--tokens,-t", fl->tokens, "Tokens per rank")->delimiter(',')->capture_default_str();
  cmd->add_option("--routings", fl->routings, "balanced, skewed")->delimiter(',')->capture_default_str();
  cmd->add_option("--routing-seed", fl->routing_seed,
                  "Seed of the routing, as `xstage moe-routing --seed` (e.g. one whose experts end in no small "
                  "block: docs/megamoe.md Next steps 4)")
      ->check(CLI::Validator(
          [](std::string& v) { return v.find('-') == std::string::npos ? std::string() : "must be >= 0"; }, ""))
      ->capture_default_str();
  cmd->add_option("--weights", fl->weights,
                  "w8a8, w4a8-int4, w4a8-mxfp4 (W4A8 fused: the 64 x 256 tile; an explicit +m128n256 cell is "
                  "skipped); w4a8-int4-lut-rs (INT4 two-level) and w4a8-mxfp4-rs: weights prepacked for the "
                  "register-operand kernels (fused: builds with XSTAGE_MEGA_W4A8_RS; unfused: INT4 only); "
                  "w4a8-int4-lut-rs-tok and w4a8-mxfp4-rs-tok: the same with per-token activations (unfused: the "
                  "per-token grouped GEMMs, h requantised per token; fused: the per-token kernel, builds with "
                  "XSTAGE_MEGA_W4A8_TOK, its per-token tiles only: m256n128_tok, or m128n256_tok with "
                  "XSTAGE_MEGA_TOK_WIDE; a cell with another tile is skipped)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--gpus", fl->gpus, "Ranks (GPUs); 1 runs the layer with every expert local")->capture_default_str();
  cmd->add_option("--virtual-ranks", fl->virtual_ranks,
                  "P ranks on one GPU, each on its own SM partition (1..8; 0: real GPUs). Tests the multi-rank\n"
                  "layer on one GPU; its timings are of HBM-local stores, labelled virtual, never multi-GPU figures")
      ->capture_default_str();
  cmd->add_option("--warmup", fl->warmup, "Untimed calls")->capture_default_str();
  cmd->add_option("--iters", fl->iters, "Timed calls (>= 20)")->capture_default_str();
  cmd->add_option("--timeout", fl->timeout_s, "Device wait bound in seconds")->capture_default_str();
  cmd->add_option("--variants", fl->variants,
                  "unfused, expert-wave, interleaved (dynamic tile claiming); expert-wave-static, interleaved-static "
                  "(static c, c + K, ... split); interleaved-leadR (lead of R rounds of CTAs, e.g. interleaved-lead0.25); "
                  "interleaved-mixR (R Linear-1 tiles between Linear-2 tiles instead of the plan's mix); "
                  "interleaved-tail / interleaved-no-tail (the list ends in about one Linear-2 tile per CTA / "
                  "in the plain order, instead of the plan's choice); "
                  "a fused variant may end in +TILE (e.g. interleaved+m128n256) to run that tile configuration")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--mega-tile", fl->mega_tile,
                  "Tile configuration of the fused variants without a +TILE suffix: auto (128 x 256 once the mean "
                  "routed rows per expert reach 32), m64n256 (64 x 256 for both GEMMs) or m128n256 (128 x 256; "
                  "docs/megamoe.md \"Tile configurations\"); per-token weights run fused with auto (m128n256_tok "
                  "below 96 mean rows per expert where each CTA gets a wide Linear-2 tile and the build has it, "
                  "else m256n128_tok) or a per-token tile")
      ->capture_default_str();
  cmd->add_flag("--spans", fl->spans,
                "Record the phase breakdown: fused variants (two extra calls each) combine-store spans, the per-tile "
                "trace and prologue / Linear-1 / Linear-2 / gaps / combine / reduce; the unfused layer (one extra call) "
                "dispatch / Linear-1 / Linear-2 / combine / reduce from events between its kernels; both with the "
                "GEMM phases' TFLOP/s");
  cmd->add_option("--params", fl->params, "Burst-Gap parameters for the interleaved mix (default: the shipped H200 preset)");
  cmd->add_option("--tile-tflops", fl->tile_tflops, "One CTA's FP8 TFLOP/s (the schedule's tile times)")->capture_default_str();
  cmd->add_option("--check-tokens", fl->check_tokens,
                  "Token rows per rank compared with the host layer reference (seeded; always the first, middle and "
                  "last token; costs about top_k x 3 x hidden x intermediate host operations per token)")
      ->capture_default_str();
  cmd->add_option("--check-seed", fl->check_seed, "Seed of the checked tokens")->capture_default_str();
  cmd->add_option("--per-token-slack", fl->per_token_slack,
                  "Per-token cells: how far (relative) the kernel's h may lie from the reference's when the check "
                  "names the ambiguous h codes and (fused) a token's alternate scales (docs/megamoe.md, "
                  "'Checking it'); a diagnostic, the default is the documented bound")
      ->check(CLI::Range(0.0, 1.0 / 64))
      ->capture_default_str();
  cmd->add_option("--json", fl->json_out, "Write results as JSON (xstage.bench.moe.v1)");
  cmd->add_option("--x-offset", fl->x_offset,
                  "Byte of the 16 MiB input pattern the activations start at (odd: no token's x equals a weight "
                  "row; 0: the layout where x of token t is row t of an expert's W1, a dominant sum-of-squares "
                  "channel)")
      ->check(CLI::Range(size_t(0), size_t(8) << 20))
      ->capture_default_str();
  cmd->add_option("--dump-rows", fl->dump_rows,
                  "Write every checked row above half the row bound, or above the bound before its ambiguous h "
                  "codes and scales (got and reference values, the error against the plain reference, its "
                  "experts and router weights; at most 16 per cell) as JSON, to locate an error inside a row");
  cmd->callback([fl] { run(*fl); });
}

}  // namespace xstage::cli
