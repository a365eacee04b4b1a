// MoE layer shapes (../shared/docs/MOE.md) and the reproducible top-k routing that the
// Mega-MoE benchmark (issue 8) and its PyTorch baseline both use. Plain host code: the
// generator is deterministic in (shape, ranks, tokens, kind, exponent, seed), so the C++
// kernel and python/bench_moe_torch.py see the same tokens go to the same experts.
//
// Expert parallelism: experts are split evenly over the ranks, expert e lives on rank
// e / (experts / ranks). Every rank holds `tokens_per_rank` tokens and routes each to
// `top_k` distinct experts with weights that sum to 1.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace xstage::moe {

struct ModelShape {
  std::string name;
  int hidden = 0;
  int intermediate = 0;         // routed experts' intermediate size
  int experts = 0;              // routed experts
  int top_k = 0;
  int shared = 0;               // shared experts
  int shared_intermediate = 0;  // intermediate size of the shared MLP (0 when shared == 0)
};

// The seven shapes of MOE.md, in its order: bench/moe-models.json, embedded at build time and
// parsed on first use (throws Error if the embedded file is malformed).
const std::vector<ModelShape>& model_shapes();
// A shape table in the format of bench/moe-models.json. Strict: every field present, no unknown
// ones, sizes integers (hidden, intermediate, experts, top_k >= 1; shared counts >= 0), top_k <=
// experts, shared_intermediate 0 exactly when shared is, names unique; throws Error naming
// `origin` and the bad entry otherwise.
std::vector<ModelShape> parse_model_shapes(std::string_view json_text, std::string_view origin);
// Throws InvalidArgument naming the known models when `name` is not one of them.
const ModelShape& find_model(std::string_view name);

enum class RoutingKind { balanced, skewed };
std::string_view routing_name(RoutingKind k);
RoutingKind parse_routing(std::string_view s);  // "balanced" | "skewed", else InvalidArgument

struct RoutingConfig {
  RoutingKind kind = RoutingKind::balanced;
  // skewed: expert popularity p(e) ∝ 1 / rank(e)^zipf_s, rank = position in a seeded
  // permutation of the experts (so the hot experts land on random ranks).
  double zipf_s = 1.0;
  uint64_t seed = 2026;
};

struct RankRouting {
  std::vector<int32_t> experts;  // [tokens * top_k], token-major, distinct within a token
  std::vector<float> weights;    // same layout; a token's weights sum to 1
};

struct Routing {
  ModelShape shape;
  RoutingConfig config;
  int ranks = 0;
  int tokens_per_rank = 0;
  int experts_per_rank = 0;
  std::vector<RankRouting> per_rank;

  int owner(int expert) const { return expert / experts_per_rank; }
};

// Throws InvalidArgument for ranks < 1, ranks not dividing the expert count, tokens < 1,
// top_k > experts, or a non-finite / negative exponent.
Routing make_routing(const ModelShape& shape, int ranks, int tokens_per_rank, const RoutingConfig& cfg);

struct RoutingStats {
  std::vector<int64_t> expert_rows;           // [experts] (token, expert) rows per expert
  std::vector<std::vector<int64_t>> rows;     // [src rank][dst rank] rows dispatched
  std::vector<int64_t> received;              // [rank] rows each rank's experts compute
  double max_expert_over_mean = 0;            // hottest expert's rows / mean rows per expert
  double max_rank_over_mean = 0;              // busiest rank's received rows / mean
  int empty_experts = 0;                      // experts no token chose
};
RoutingStats routing_stats(const Routing& r);

// Schema "xstage.moe.routing.v1" (see docs/megamoe.md); with_tokens = false leaves out the
// per-rank arrays (summaries only).
nlohmann::json to_json(const Routing& r, bool with_tokens = true);
nlohmann::json to_json(const RoutingStats& s);

}  // namespace xstage::moe
