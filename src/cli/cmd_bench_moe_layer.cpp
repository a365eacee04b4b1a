// `xstage bench moe-layer`: the unfused expert-parallel MoE layer (include/xstage/ops/ep_moe.hpp,
// W8A8) on --gpus GPUs over MOE.md configurations, with the routing of `xstage moe-routing`;
// compare with python/bench_moe_torch.py (same routing). Weights and activations are random
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
#include "kernels/selftest/exchange.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/moe_routing.hpp"
#include "xstage/ops/ep_moe.hpp"
#include "xstage/team.hpp"

namespace xstage::cli {
namespace {

struct Flags {
  std::vector<std::string> models;
  std::vector<int> tokens{2048, 8192};
  std::vector<std::string> routings{"balanced", "skewed"};
  int gpus = 2;
  int warmup = 3;
  int iters = 20;
  double timeout_s = 10;
  std::string json_out;
};

// A device buffer of `bytes` filled with random finite e4m3 codes (|v| <= 2), by replicating
// a 16 MiB pattern device to device.
void* random_fp8(size_t bytes, const void* pattern, size_t pattern_bytes, cudaStream_t s) {
  void* d = nullptr;
  XS_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 16)), fmt::format("bench moe-layer: allocating {} bytes", bytes));
  for (size_t off = 0; off < bytes; off += pattern_bytes)
    XS_CUDA(cudaMemcpyAsync(static_cast<char*>(d) + off, pattern, std::min(pattern_bytes, bytes - off),
                            cudaMemcpyDeviceToDevice, s),
            "bench moe-layer: filling");
  return d;
}
float* const_floats(size_t n, float v) {
  std::vector<float> h(n, v);
  float* d = nullptr;
  XS_CUDA(cudaMalloc(&d, sizeof(float) * std::max<size_t>(n, 1)), "bench moe-layer: scales");
  XS_CUDA(cudaMemcpy(d, h.data(), sizeof(float) * n, cudaMemcpyHostToDevice), "bench moe-layer: scales");
  return d;
}
template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  XS_CUDA(cudaMalloc(&d, sizeof(T) * std::max<size_t>(h.size(), 1)), "bench moe-layer: routing");
  XS_CUDA(cudaMemcpy(d, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice), "bench moe-layer: routing");
  return d;
}

void run(const Flags& fl) {
  if (fl.iters < 20) throw InvalidArgument(fmt::format("bench moe-layer: --iters {} must be >= 20", fl.iters));
  std::vector<moe::ModelShape> shapes;
  if (fl.models.empty()) shapes = moe::model_shapes();
  for (const auto& m : fl.models) shapes.push_back(moe::find_model(m));
  std::vector<moe::RoutingKind> kinds;
  for (const auto& r : fl.routings) kinds.push_back(moe::parse_routing(r));
  for (int t : fl.tokens)
    if (t < 1) throw InvalidArgument(fmt::format("bench moe-layer: tokens {} must be >= 1", t));
  for (const auto& s : shapes) ops::validate_ep_moe({s.hidden, s.intermediate, s.experts, s.top_k, 1}, fl.gpus);

  TeamOptions to;
  to.gpus = fl.gpus;
  to.min_gpus = 2;
  to.wait_timeout_s = fl.timeout_s;
  auto team = Team::local(to);
  const int n = team->local_count();
  // Pattern: random finite e4m3 codes with |v| <= 2 (exponent field <= 8).
  const size_t pat_bytes = size_t(16) << 20;
  std::vector<uint8_t> pat(pat_bytes);
  std::mt19937 rng(20261130u);
  for (auto& b : pat) b = static_cast<uint8_t>((rng() & 0x80u) | (rng() % 0x40u));
  std::vector<void*> pat_dev(n);
  team->run([&](int i) {
    XS_CUDA(cudaMalloc(&pat_dev[i], pat_bytes), "bench moe-layer: pattern");
    XS_CUDA(cudaMemcpy(pat_dev[i], pat.data(), pat_bytes, cudaMemcpyHostToDevice), "bench moe-layer: pattern");
  });

  std::printf("# xstage bench moe-layer (unfused expert-parallel W8A8 layer) on %d GPUs, median of %d (max over ranks)\n",
              team->world_size(), fl.iters);
  std::printf("#%19s %8s %7s %10s %10s %10s %9s\n", "model", "routing", "tokens", "median_us", "p10_us", "p90_us",
              "max_rows");
  nlohmann::json results = nlohmann::json::array();
  for (const auto& shape : shapes)
    for (auto kind : kinds)
      for (int tokens : fl.tokens) {
        std::fprintf(stderr, "bench moe-layer: %s %s T=%d ...\n", shape.name.c_str(),
                     std::string(moe::routing_name(kind)).c_str(), tokens);
        moe::RoutingConfig rc;
        rc.kind = kind;
        const moe::Routing r = moe::make_routing(shape, team->world_size(), tokens, rc);
        const moe::RoutingStats st = moe::routing_stats(r);
        ops::EpMoeLayer layer(*team, {shape.hidden, shape.intermediate, shape.experts, shape.top_k, tokens});
        const int epr = shape.experts / team->world_size();
        const size_t H = shape.hidden, I = shape.intermediate;
        std::vector<ops::EpMoeRankInputs> in(n);
        std::vector<std::vector<double>> us(n);
        team->run([&](int i) {
          cudaStream_t s = team->stream(i);
          const int rank = team->rank(i);
          auto& d = in[i];
          d.topk_experts = upload(r.per_rank[rank].experts);
          d.topk_weights = upload(r.per_rank[rank].weights);
          d.x = random_fp8(size_t(tokens) * H, pat_dev[i], pat_bytes, s);
          d.x_scales = const_floats((H / 128) * tokens, 1.f / 16);
          d.w1 = random_fp8(size_t(epr) * 2 * I * H, pat_dev[i], pat_bytes, s);
          d.w1_scales = const_floats(size_t(epr) * (2 * I / 128) * (H / 128), 1.f / 256);
          d.w2 = random_fp8(size_t(epr) * H * I, pat_dev[i], pat_bytes, s);
          d.w2_scales = const_floats(size_t(epr) * (H / 128) * (I / 128), 1.f / 256);
          void* out = nullptr;
          XS_CUDA(cudaMalloc(&out, size_t(tokens) * H * 2), "bench moe-layer: output");
          d.out = out;
          XS_CUDA(cudaStreamSynchronize(s), "bench moe-layer: setup");
          const TeamDevice td = team->device_view(i);
          std::vector<cudaEvent_t> ev(2 * fl.iters);
          for (auto& e : ev) XS_CUDA(cudaEventCreate(&e), "events");
          for (int w = 0; w < fl.warmup; ++w) layer.forward(i, d, s);
          for (int it = 0; it < fl.iters; ++it) {
            XS_CUDA(kernels::launch_team_barrier(td, team->next_epoch(i), s), "bench barrier");
            XS_CUDA(cudaEventRecord(ev[2 * it], s), "events");
            layer.forward(i, d, s);
            XS_CUDA(cudaEventRecord(ev[2 * it + 1], s), "events");
          }
          XS_CUDA(cudaStreamSynchronize(s), fmt::format("bench moe-layer {} T={}", shape.name, tokens));
          team->check_device_status(i);
          for (int it = 0; it < fl.iters; ++it) {
            float ms = 0;
            XS_CUDA(cudaEventElapsedTime(&ms, ev[2 * it], ev[2 * it + 1]), "events");
            us[i].push_back(ms * 1e3);
          }
          for (auto& e : ev) cudaEventDestroy(e);
          for (const void* p : {static_cast<const void*>(d.topk_experts), static_cast<const void*>(d.topk_weights), d.x,
                                static_cast<const void*>(d.x_scales), d.w1, static_cast<const void*>(d.w1_scales),
                                d.w2, static_cast<const void*>(d.w2_scales), static_cast<const void*>(d.out)})
            cudaFree(const_cast<void*>(p));
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
        std::printf(" %19s %8s %7d %10.1f %10.1f %10.1f %9lld\n", shape.name.c_str(),
                    std::string(moe::routing_name(kind)).c_str(), tokens, med, p10, p90, max_rows);
        std::fflush(stdout);
        results.push_back({{"model", shape.name}, {"weights", "w8a8"}, {"routing", std::string(moe::routing_name(kind))},
                           {"tokens_per_rank", tokens}, {"median_us", med}, {"p10_us", p10}, {"p90_us", p90},
                           {"rank_median_us", rank_med}, {"rows_received", st.received}});
      }
  team->run([&](int i) { cudaFree(pat_dev[i]); });
  if (!fl.json_out.empty()) {
    nlohmann::json j;
    j["schema"] = "xstage.bench.moe_layer.v1";
    j["variant"] = "unfused: counts, dispatch, layout, grouped GEMM L1 (SwiGLU fp8), L2 (bf16), combine, reduce";
    j["world"] = team->world_size();
    j["commit"] = commit_id();
    j["date"] = now_iso();
    j["config"] = {{"warmup", fl.warmup}, {"iters", fl.iters}, {"timing", "team barrier, then CUDA events around one call per rank; median per rank, max over ranks"}};
    j["results"] = results;
    write_json_file(j, fl.json_out);
  }
}

}  // namespace

void add_moe_layer_bench_command(CLI::App& app) {
  auto fl = std::make_shared<Flags>();
  auto* cmd = bench_group(app)->add_subcommand(
      "moe-layer",
      "Unfused expert-parallel MoE layer (W8A8) on --gpus GPUs: counts, dispatch, grouped GEMMs, combine and\n"
      "top-k sum over symmetric memory, per MOE.md model x routing x tokens per rank. Routing as `xstage\n"
      "moe-routing`; compare with python/bench_moe_torch.py.");
  cmd->add_option("--models", fl->models, "Model names (default: all seven)")->delimiter(',');
  cmd->add_option("--tokens,-t", fl->tokens, "Tokens per rank")->delimiter(',')->capture_default_str();
  cmd->add_option("--routings", fl->routings, "balanced, skewed")->delimiter(',')->capture_default_str();
  cmd->add_option("--gpus", fl->gpus, "Ranks (GPUs)")->capture_default_str();
  cmd->add_option("--warmup", fl->warmup, "Untimed calls")->capture_default_str();
  cmd->add_option("--iters", fl->iters, "Timed calls (>= 20)")->capture_default_str();
  cmd->add_option("--timeout", fl->timeout_s, "Device wait bound in seconds")->capture_default_str();
  cmd->add_option("--json", fl->json_out, "Write results as JSON (xstage.bench.moe_layer.v1)");
  cmd->callback([fl] { run(*fl); });
}

}  // namespace xstage::cli
