// MoE shapes (bench/moe-models.json, embedded at build time) and reproducible top-k routing
// (include/xstage/moe_routing.hpp).
//
// Sampling: a token's k experts are the k largest of log p(e) + Gumbel noise, which draws
// k distinct experts with probabilities proportional to p, without replacement (the
// Gumbel-top-k trick). Balanced routing is p uniform; skewed routing is a Zipf law over a
// seeded permutation of the experts. The router weights are the softmax of the chosen keys,
// so a token's weights sum to 1 and vary from token to token as a trained router's do.
#include "xstage/moe_routing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>

#include "xstage/error.hpp"
#include "xstage_generated/moe_models_json.hpp"  // bench/moe-models.json (cmake/moe_models.cmake)

namespace xstage::moe {
namespace {

// splitmix64: a small, well-mixed 64-bit generator; enough for test-data routing.
struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so log() stays finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
};

// The fields of a row of bench/moe-models.json; a row must have exactly these.
constexpr const char* kShapeFields[] = {"name", "hidden", "intermediate", "experts", "top_k", "shared",
                                        "shared_intermediate"};

[[noreturn]] void bad_table(std::string_view where, std::string_view what) {
  throw Error(fmt::format("moe model table {}: {}", where, what));
}

// An integer field in [0, INT_MAX]: 1408.0, "1408" or a negative count is a typo, not a size.
int size_field(const nlohmann::json& row, const char* key, std::string_view where) {
  const nlohmann::json& v = row.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT_MAX)
    bad_table(where, fmt::format("'{}' must be a non-negative integer, got {}", key, v.dump()));
  return static_cast<int>(v.get<int64_t>());
}

ModelShape parse_shape(const nlohmann::json& row, std::string_view where) {
  if (!row.is_object()) bad_table(where, "is not an object");
  for (auto it = row.begin(); it != row.end(); ++it)
    if (std::find(std::begin(kShapeFields), std::end(kShapeFields), it.key()) == std::end(kShapeFields))
      bad_table(where, fmt::format("unknown field '{}'", it.key()));
  for (const char* f : kShapeFields)
    if (!row.contains(f)) bad_table(where, fmt::format("missing field '{}'", f));
  const nlohmann::json& name = row.at("name");
  if (!name.is_string() || name.get<std::string>().empty()) bad_table(where, "'name' must be a non-empty string");
  ModelShape m{name.get<std::string>(),
               size_field(row, "hidden", where),
               size_field(row, "intermediate", where),
               size_field(row, "experts", where),
               size_field(row, "top_k", where),
               size_field(row, "shared", where),
               size_field(row, "shared_intermediate", where)};
  if (m.hidden < 1 || m.intermediate < 1 || m.experts < 1 || m.top_k < 1)
    bad_table(where, "hidden, intermediate, experts and top_k must be >= 1");
  if (m.top_k > m.experts) bad_table(where, fmt::format("top_k {} exceeds the {} experts", m.top_k, m.experts));
  if ((m.shared == 0) != (m.shared_intermediate == 0))
    bad_table(where, "shared_intermediate must be 0 exactly when shared is 0");
  return m;
}

}  // namespace

std::vector<ModelShape> parse_model_shapes(std::string_view json_text, std::string_view origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    bad_table(origin, e.what());
  }
  if (!doc.is_object()) bad_table(origin, "is not a JSON object");
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (it.key() != "about" && it.key() != "models") bad_table(origin, fmt::format("unknown key '{}'", it.key()));
  if (!doc.contains("models") || !doc["models"].is_array() || doc["models"].empty())
    bad_table(origin, "needs a non-empty \"models\" list");
  std::vector<ModelShape> shapes;
  for (size_t i = 0; i < doc["models"].size(); ++i) {
    ModelShape m = parse_shape(doc["models"][i], fmt::format("{}: models[{}]", origin, i));
    for (const auto& prev : shapes)
      if (prev.name == m.name) bad_table(origin, fmt::format("model '{}' appears twice", m.name));
    shapes.push_back(std::move(m));
  }
  return shapes;
}

const std::vector<ModelShape>& model_shapes() {
  // Parsed once; a malformed embedded file throws here on every call (the CPU tests call it).
  static const std::vector<ModelShape> shapes = parse_model_shapes(embedded::kModelsJson, embedded::kModelsOrigin);
  return shapes;
}

const ModelShape& find_model(std::string_view name) {
  std::string known;
  for (const auto& m : model_shapes()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw InvalidArgument(fmt::format("moe: unknown model '{}' (known: {})", name, known));
}

std::string_view routing_name(RoutingKind k) { return k == RoutingKind::balanced ? "balanced" : "skewed"; }

RoutingKind parse_routing(std::string_view s) {
  if (s == "balanced") return RoutingKind::balanced;
  if (s == "skewed") return RoutingKind::skewed;
  throw InvalidArgument(fmt::format("moe: routing must be 'balanced' or 'skewed', got '{}'", s));
}

Routing make_routing(const ModelShape& shape, int ranks, int tokens_per_rank, const RoutingConfig& cfg) {
  auto bad = [](const std::string& m) { throw InvalidArgument("moe routing: " + m); };
  if (ranks < 1) bad(fmt::format("ranks must be >= 1, got {}", ranks));
  if (shape.experts < 1 || shape.top_k < 1) bad(fmt::format("model '{}' has no experts or top_k < 1", shape.name));
  if (shape.experts % ranks != 0)
    bad(fmt::format("{} experts of '{}' do not split evenly over {} ranks", shape.experts, shape.name, ranks));
  if (tokens_per_rank < 1) bad(fmt::format("tokens per rank must be >= 1, got {}", tokens_per_rank));
  if (shape.top_k > shape.experts) bad(fmt::format("top_k {} > experts {}", shape.top_k, shape.experts));
  if (!std::isfinite(cfg.zipf_s) || cfg.zipf_s < 0) bad(fmt::format("zipf exponent must be >= 0, got {}", cfg.zipf_s));

  Routing r;
  r.shape = shape;
  r.config = cfg;
  r.ranks = ranks;
  r.tokens_per_rank = tokens_per_rank;
  r.experts_per_rank = shape.experts / ranks;

  const int E = shape.experts, k = shape.top_k;
  // log p(e): uniform, or Zipf over a seeded permutation (hot experts on random ranks).
  std::vector<double> log_p(E, 0.0);
  if (cfg.kind == RoutingKind::skewed) {
    std::vector<int> perm(E);
    std::iota(perm.begin(), perm.end(), 0);
    SplitMix64 g{cfg.seed ^ 0x5EEDu};
    for (int i = E - 1; i > 0; --i) std::swap(perm[i], perm[static_cast<int>(g.next() % uint64_t(i + 1))]);
    for (int pos = 0; pos < E; ++pos) log_p[perm[pos]] = -cfg.zipf_s * std::log(double(pos + 1));
  }

  r.per_rank.resize(ranks);
  std::vector<double> key(E);
  std::vector<int> idx(E);
  for (int rank = 0; rank < ranks; ++rank) {
    RankRouting& rr = r.per_rank[rank];
    rr.experts.resize(size_t(tokens_per_rank) * k);
    rr.weights.resize(size_t(tokens_per_rank) * k);
    SplitMix64 g{cfg.seed * 0x100000001B3ull + uint64_t(rank + 1) * 0x9E3779B97F4A7C15ull};
    for (int t = 0; t < tokens_per_rank; ++t) {
      for (int e = 0; e < E; ++e) key[e] = log_p[e] - std::log(-std::log(g.uniform()));
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return key[a] > key[b]; });
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += std::exp(key[idx[j]] - key[idx[0]]);
      for (int j = 0; j < k; ++j) {
        rr.experts[size_t(t) * k + j] = idx[j];
        rr.weights[size_t(t) * k + j] = static_cast<float>(std::exp(key[idx[j]] - key[idx[0]]) / sum);
      }
    }
  }
  return r;
}

RoutingStats routing_stats(const Routing& r) {
  RoutingStats s;
  const int E = r.shape.experts;
  s.expert_rows.assign(E, 0);
  s.rows.assign(r.ranks, std::vector<int64_t>(r.ranks, 0));
  s.received.assign(r.ranks, 0);
  for (int src = 0; src < r.ranks; ++src)
    for (int32_t e : r.per_rank[src].experts) {
      ++s.expert_rows[e];
      ++s.rows[src][r.owner(e)];
      ++s.received[r.owner(e)];
    }
  const double total = double(r.ranks) * r.tokens_per_rank * r.shape.top_k;
  s.max_expert_over_mean = *std::max_element(s.expert_rows.begin(), s.expert_rows.end()) / (total / E);
  s.max_rank_over_mean = *std::max_element(s.received.begin(), s.received.end()) / (total / r.ranks);
  s.empty_experts = static_cast<int>(std::count(s.expert_rows.begin(), s.expert_rows.end(), 0));
  return s;
}

nlohmann::json to_json(const RoutingStats& s) {
  return nlohmann::json{{"expert_rows", s.expert_rows},
                        {"rows_src_dst", s.rows},
                        {"received", s.received},
                        {"max_expert_over_mean", s.max_expert_over_mean},
                        {"max_rank_over_mean", s.max_rank_over_mean},
                        {"empty_experts", s.empty_experts}};
}

nlohmann::json to_json(const Routing& r, bool with_tokens) {
  nlohmann::json j{{"schema", "xstage.moe.routing.v1"},
                   {"model", r.shape.name},
                   {"hidden", r.shape.hidden},
                   {"intermediate", r.shape.intermediate},
                   {"experts", r.shape.experts},
                   {"top_k", r.shape.top_k},
                   {"shared", r.shape.shared},
                   {"shared_intermediate", r.shape.shared_intermediate},
                   {"ranks", r.ranks},
                   {"tokens_per_rank", r.tokens_per_rank},
                   {"experts_per_rank", r.experts_per_rank},
                   {"routing", std::string(routing_name(r.config.kind))},
                   {"zipf_s", r.config.kind == RoutingKind::skewed ? r.config.zipf_s : 0.0},
                   {"seed", r.config.seed},
                   {"stats", to_json(routing_stats(r))}};
  if (with_tokens) {
    nlohmann::json per = nlohmann::json::array();
    for (const auto& rr : r.per_rank) per.push_back({{"experts", rr.experts}, {"weights", rr.weights}});
    j["per_rank"] = std::move(per);
  }
  return j;
}

}  // namespace xstage::moe
