// `xstage bench moe` (alias `moe-layer`): the expert-parallel W8A8 MoE layer on --gpus GPUs over
// MOE.md configurations, in one run per configuration: the unfused layer (ops::EpMoeLayer) and
// the Mega-MoE kernel (ops::MegaMoeLayer) with both tile orders; optionally the per-piece
// combine-store spans of both orders next to a local-store control and the model's prediction.
// Routing as `xstage moe-routing`; compare with python/bench_moe_torch.py (same routing) through
// python/compare_moe.py. Weights and activations are random
// finite fp8 codes with constant scales (timing does not depend on the values; correctness is
// the GPU tests' job).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

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
  bool spans = false;
  std::string params;
  double tile_tflops = 7.0;
  std::string json_out;
};

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
bool is_fused(const std::string& v) {
  return v == "expert-wave" || v == "interleaved" || v == "expert-wave-static" || v == "interleaved-static" ||
         lead_rounds(v) >= 0;
}
const char* kVariantList =
    "unfused, expert-wave, interleaved, expert-wave-static, interleaved-static, interleaved-lead<rounds in [0, 64]>";

nlohmann::json tile_kind_json(const ops::MegaMoeTileKind& k) {
  return {{"tiles", k.tiles}, {"mainloop_us", k.mainloop_us}, {"epilogue_us", k.epilogue_us}, {"store_tail_us", k.store_tail_us},
          {"handover_us", k.handover_us}, {"staged_us", k.staged_us},
          {"input_wait_us", k.input_wait_us}};
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
// Weight formats by name (the PyTorch baseline names W4A8 rows "w4a8": it runs them in FP8).
ops::MoeQuant parse_weights(const std::string& w) {
  if (w == "w8a8") return ops::MoeQuant::w8a8;
  if (w == "w4a8-int4") return ops::MoeQuant::w4a8_int4;
  if (w == "w4a8-mxfp4") return ops::MoeQuant::w4a8_mxfp4;
  throw InvalidArgument(fmt::format("bench moe: unknown weights '{}' (w8a8, w4a8-int4, w4a8-mxfp4)", w));
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
  for (const auto& v : fl.variants)
    if (v != "unfused" && !is_fused(v))
      throw InvalidArgument(fmt::format("bench moe: unknown variant '{}' ({})", v, kVariantList));
  if (fl.variants.empty()) throw InvalidArgument("bench moe: --variants is empty");
  if (fl.weights.empty()) throw InvalidArgument("bench moe: --weights is empty");
  std::vector<std::pair<std::string, ops::MoeQuant>> formats;
  for (const auto& w : fl.weights) formats.emplace_back(w, parse_weights(w));
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
  // Pattern: random finite e4m3 codes with |v| <= 2 (exponent field <= 8).
  const size_t pat_bytes = size_t(16) << 20;
  std::vector<uint8_t> pat(pat_bytes);
  std::mt19937 rng(20261130u);
  for (auto& b : pat) b = static_cast<uint8_t>((rng() & 0x80u) | (rng() % 0x40u));
  std::vector<void*> pat_dev(n);
  team->run([&](int i) {
    XS_CUDA(cudaMalloc(&pat_dev[i], pat_bytes), "bench moe: pattern");
    XS_CUDA(cudaMemcpy(pat_dev[i], pat.data(), pat_bytes, cudaMemcpyHostToDevice), "bench moe: pattern");
  });

  print_team_banner(*team);
  std::printf("# xstage bench moe (expert-parallel layer) on %d %s, median of %d (max over ranks); model %s\n",
              team->world_size(), team->is_virtual() ? "virtual ranks of one GPU" : "GPUs", fl.iters,
              model_used.c_str());
  std::printf("#%19s %10s %8s %7s %12s %10s %10s %10s %9s%s\n", "model", "weights", "routing", "tokens", "variant",
              "median_us", "p10_us", "p90_us", "max_rows", fl.spans ? "  span_remote/local/pred_us" : "");
  nlohmann::json results = nlohmann::json::array();
  for (const auto& shape : shapes)
    for (auto kind : kinds)
      for (int tokens : fl.tokens)
        for (const auto& [wname, quant] : formats) {
          std::fprintf(stderr, "bench moe: %s %s %s T=%d ...\n", shape.name.c_str(), wname.c_str(),
                       std::string(moe::routing_name(kind)).c_str(), tokens);
          moe::RoutingConfig rc;
          rc.kind = kind;
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
            d.x = random_fp8(size_t(tokens) * H, pat_dev[i], pat_bytes, s);
            d.x_scales = const_floats((H / 128) * tokens, 1.f / 16);
            d.quant = quant;
            if (quant == ops::MoeQuant::w8a8) {
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
            if (is_fused(v) && !mega && quant == ops::MoeQuant::w8a8)
              mega = std::make_unique<ops::MegaMoeLayer>(*team, cfg, model, fl.tile_tflops);
          }
          for (const auto& v : fl.variants) {
            if (is_fused(v) && quant != ops::MoeQuant::w8a8) continue;  // the fused kernel is W8A8 only
            ops::MegaMoeOptions opt;
            opt.schedule = v.rfind("expert-wave", 0) == 0 ? moe::MoeSchedule::expert_wave : moe::MoeSchedule::interleaved;
            opt.dynamic_claim = v.find("-static") == std::string::npos;
            if (lead_rounds(v) >= 0) opt.lead_tiles = static_cast<int>(std::lround(lead_rounds(v) * mega->ctas(0)));
            auto call = [&](int i, const ops::MegaMoeOptions& o) {
              if (v == "unfused") unfused->forward(i, in[i], team->stream(i));
              else mega->forward(i, in[i], team->stream(i), o);
            };
            std::vector<std::vector<double>> us(n), remote(n), local(n);
            std::vector<double> ghz(n, 0);
            std::vector<ops::MegaMoeTileStats> tiles(n);
            team->run([&](int i) {
              cudaStream_t s = team->stream(i);
              const TeamDevice td = team->device_view(i);
              std::vector<cudaEvent_t> ev(2 * fl.iters);
              for (auto& e : ev) XS_CUDA(cudaEventCreate(&e), "events");
              for (int w = 0; w < fl.warmup; ++w) call(i, opt);
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
            nlohmann::json row{{"model", shape.name}, {"weights", wname}, {"routing", std::string(moe::routing_name(kind))},
                               {"tokens_per_rank", tokens}, {"variant", v}, {"median_us", med}, {"p10_us", p10},
                               {"p90_us", p90}, {"rank_median_us", rank_med}, {"rows_received", st.received}};
            std::string span_txt;
            if (is_fused(v)) {
              nlohmann::json plan;
              to_json(plan, mega->plan());
              row["plan"] = plan;
              if (opt.schedule == moe::MoeSchedule::interleaved)
                row["lead_tiles"] = opt.lead_tiles >= 0 ? opt.lead_tiles : mega->plan().lead_tiles;
            }
            if (fl.spans && is_fused(v)) {
              std::vector<double> all_remote, all_local;
              for (int i = 0; i < n; ++i) {
                all_remote.insert(all_remote.end(), remote[i].begin(), remote[i].end());
                all_local.insert(all_local.end(), local[i].begin(), local[i].end());
              }
              const double pred = opt.schedule == moe::MoeSchedule::expert_wave ? mega->plan().predicted_wave_span_us
                                                     : mega->plan().predicted_interleaved_span_us;
              row["spans"] = {{"remote", span_summary(all_remote)}, {"local", span_summary(all_local)},
                              {"predicted_us", pred}, {"sm_ghz", quantile(ghz, 0.5)}};
              nlohmann::json tj = nlohmann::json::array();
              for (int i = 0; i < n; ++i)
                tj.push_back({{"l1", tile_kind_json(tiles[i].l1)}, {"l2", tile_kind_json(tiles[i].l2)},
                              {"first_tile_us", tiles[i].first_tile_us}, {"busy_share", tiles[i].busy_share},
                              {"last_tile_end_us", {tiles[i].last_tile_end_us_min, tiles[i].last_tile_end_us_max}}});
              row["tiles"] = tj;
              const ops::MegaMoeTileStats& t0 = tiles[0];
              span_txt = fmt::format(
                  "  {:.2f}/{:.2f}/{:.2f}  [rank0 busy {:.2f}, first tile {:.0f} us, last tile end {:.0f}..{:.0f} us; "
                  "L1 ml/epi(handover,staged,tail)/wait {:.2f}/{:.2f}({:.2f},{:.2f},{:.2f})/{:.2f}, L2 ml/epi(tail)/wait "
                  "{:.2f}/{:.2f}({:.2f})/{:.2f} us]",
                  all_remote.empty() ? 0.0 : quantile(all_remote, 0.5), all_local.empty() ? 0.0 : quantile(all_local, 0.5),
                  pred, t0.busy_share, t0.first_tile_us, t0.last_tile_end_us_min, t0.last_tile_end_us_max,
                  t0.l1.mainloop_us, t0.l1.epilogue_us, t0.l1.handover_us, t0.l1.staged_us, t0.l1.store_tail_us,
                  t0.l1.input_wait_us, t0.l2.mainloop_us,
                  t0.l2.epilogue_us, t0.l2.store_tail_us, t0.l2.input_wait_us);
            }
            std::printf(" %19s %10s %8s %7d %12s %10.1f %10.1f %10.1f %9lld%s\n", shape.name.c_str(), wname.c_str(),
                        std::string(moe::routing_name(kind)).c_str(), tokens, v.c_str(), med, p10, p90, max_rows,
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
  if (!fl.json_out.empty()) {
    nlohmann::json j;
    j["schema"] = "xstage.bench.moe.v1";
    j["variants"] = {{"unfused", "counts, dispatch, layout, grouped GEMM L1 (SwiGLU fp8), L2 (bf16), combine, reduce: 7 kernels"},
                     {"expert-wave", "Mega-MoE persistent kernel, expert-wave tile order"},
                     {"interleaved", "Mega-MoE persistent kernel, interleaved tile order (mix from the Burst-Gap model)"},
                     {"expert-wave-static", "as expert-wave, CTA c taking list positions c, c + K, ... (no claiming)"},
                     {"interleaved-static", "as interleaved, CTA c taking list positions c, c + K, ... (no claiming)"},
                     {"interleaved-leadR", "as interleaved with a lead of R rounds of CTAs (R x K Linear-1 tiles) instead of the plan's 1"}};
    j["model_params"] = model_used;
    j["world"] = team->world_size();
    j["team"] = team_label(*team);
    j["commit"] = commit_id();
    j["date"] = now_iso();
    j["config"] = {{"warmup", fl.warmup}, {"iters", fl.iters}, {"tile_tflops", fl.tile_tflops},
                   {"timing", "team barrier, then CUDA events around one call per rank; median per rank, max over ranks"},
                   {"spans", "per Linear-2 warp-group piece (64 x 128 bf16): SM cycles from before its first combine store to after its last store and the group's barrier, over the measured SM clock; local = same call with every combine row stored to this rank's own buffer"}};
    j["results"] = results;
    write_json_file(j, fl.json_out);
  }
}

}  // namespace

void add_moe_bench_command(CLI::App& app) {
  auto fl = std::make_shared<Flags>();
  auto* cmd = bench_group(app)->add_subcommand(
      "moe",
      "Expert-parallel MoE layer on --gpus GPUs, per MOE.md model x routing x tokens per rank x weights, variants\n"
      "in one run: unfused (7 kernels: counts, dispatch, grouped GEMMs, combine, top-k sum) and the Mega-MoE\n"
      "persistent kernel with the expert-wave and interleaved tile orders. --spans adds each fused order's\n"
      "per-piece combine-store span, a local-store control and the Burst-Gap prediction. Routing as `xstage\n"
      "moe-routing`; compare with python/bench_moe_torch.py via python/compare_moe.py.");
  cmd->alias("moe-layer");
  cmd->add_option("--models", fl->models, "Model names (default: all seven)")->delimiter(',');
  cmd->add_option("--tokens,-t", fl->tokens, "Tokens per rank")->delimiter(',')->capture_default_str();
  cmd->add_option("--routings", fl->routings, "balanced, skewed")->delimiter(',')->capture_default_str();
  cmd->add_option("--weights", fl->weights,
                  "w8a8, w4a8-int4, w4a8-mxfp4 (W4A8: the unfused layer only; the fused kernel is W8A8)")
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
                  "(static c, c + K, ... split); interleaved-leadR (lead of R rounds of CTAs, e.g. interleaved-lead0.25)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--spans", fl->spans,
                "Record combine-store spans and the per-tile trace (fused variants; two extra calls each)");
  cmd->add_option("--params", fl->params, "Burst-Gap parameters for the interleaved mix (default: the shipped H200 preset)");
  cmd->add_option("--tile-tflops", fl->tile_tflops, "One CTA's FP8 TFLOP/s (the schedule's tile times)")->capture_default_str();
  cmd->add_option("--json", fl->json_out, "Write results as JSON (xstage.bench.moe.v1)");
  cmd->callback([fl] { run(*fl); });
}

}  // namespace xstage::cli
