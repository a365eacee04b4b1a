// `xstage info`: the node's GPUs, links, NCCL capabilities and how virtual ranks would split
// each GPU, as a table or JSON. Without a GPU it says so and shows what works anyway: the
// shipped Burst-Gap preset's predictions for a few burst schedules (exit 0).
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cli/model_source.hpp"
#include "runtime/green_contexts.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"
#include "xstage/topology.hpp"
#include "xstage/virtual_ranks.hpp"

namespace xstage::cli {
namespace {

// Per GPU: whether green contexts are there and the split at P = 2, 4, 8.
nlohmann::json virtual_rank_report(const Topology& t) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& g : t.gpus) {
    nlohmann::json j{{"gpu", g.index}, {"sm_count", g.sm_count}, {"max_ranks", max_virtual_ranks(g.sm_count)}};
    const std::string green = green::available(g.index);
    j["partition"] = green.empty() ? "green contexts" : "reduced grids on plain streams (green contexts: " + green + ")";
    nlohmann::json splits = nlohmann::json::object();
    for (int p : {2, 4, 8}) {
      SmSplit s;
      const std::string why = plan_sm_split(g.sm_count, p, &s);
      splits[std::to_string(p)] = why.empty() ? describe(s) : "impossible: " + why;
    }
    j["splits"] = splits;
    out.push_back(j);
  }
  return out;
}

std::string virtual_rank_table(const nlohmann::json& v) {
  std::string s = "# virtual ranks (P ranks on one GPU, each on its own SM partition: --virtual-ranks P)\n";
  for (const auto& g : v)
    s += fmt::format("  gpu {}: up to {} ranks via {}; P=2: {}, P=4: {}, P=8: {}\n", g["gpu"].get<int>(),
                     g["max_ranks"].get<int>(), g["partition"].get<std::string>(),
                     g["splits"]["2"].get<std::string>(), g["splits"]["4"].get<std::string>(),
                     g["splits"]["8"].get<std::string>());
  return s;
}

// No GPU: what the shipped preset predicts for bursts of every SM of the node it describes.
nlohmann::json offline_report(const std::string& why) {
  std::string used;
  const model::Params p = load_model_params("", &used);
  nlohmann::json j{{"gpu_count", 0}, {"no_gpu", why}, {"preset", used}, {"preset_source", p.source}};
  const int K = p.sm_count > 0 ? p.sm_count : 132;
  nlohmann::json rows = nlohmann::json::array();
  for (long long b : {16384LL, 65536LL})
    for (double g : {0.0, 2.0, 8.0}) {
      const model::Prediction pr = model::predict(p, K, b, g);
      rows.push_back({{"producers", K}, {"burst_bytes", b}, {"gap_us", g}, {"issue_us", pr.issue_us},
                      {"period_us", pr.period_us}, {"backpressure_us", pr.backpressure_us},
                      {"recovery_gap_us", pr.recovery_gap_us}, {"regime", model::regime_name(pr.regime)}});
    }
  j["predictions"] = rows;
  SmSplit s8;
  j["virtual_ranks_on_preset_gpu"] = plan_sm_split(K, 8, &s8).empty() ? describe(s8) : "n/a";
  j["a_gpu_run_adds"] = "the GPUs, peer access and NVLink per pair, NCCL device API, green contexts; then `xstage probe` "
                        "measures what these rows predict";
  return j;
}

void print_offline(const nlohmann::json& j) {
  std::printf("# no CUDA GPU here (%s)\n", j["no_gpu"].get<std::string>().c_str());
  std::printf("# what works without one: the Burst-Gap model. Preset %s\n#   (%s)\n", j["preset"].get<std::string>().c_str(),
              j["preset_source"].get<std::string>().c_str());
  std::printf("# predicted X-Stage of bursts from every SM of that node (xstage predict --help for more):\n");
  std::printf("#%5s %9s %7s %10s %10s %14s %12s  %s\n", "K", "B", "G(us)", "issue(us)", "period", "backpressure",
              "recovery G*", "regime");
  for (const auto& r : j["predictions"])
    std::printf(" %5d %9lld %7.1f %10.3f %10.3f %14.3f %12.3f  %s\n", r["producers"].get<int>(),
                r["burst_bytes"].get<long long>(), r["gap_us"].get<double>(), r["issue_us"].get<double>(),
                r["period_us"].get<double>(), r["backpressure_us"].get<double>(), r["recovery_gap_us"].get<double>(),
                r["regime"].get<std::string>().c_str());
  std::printf("# virtual ranks on that GPU at P=8: %s\n", j["virtual_ranks_on_preset_gpu"].get<std::string>().c_str());
  std::printf("# a GPU run adds %s\n", j["a_gpu_run_adds"].get<std::string>().c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "info",
      "Show GPUs, peer access/NVLink between every pair, NCCL support and how virtual ranks would split each GPU.\n"
      "Without a GPU: says so and prints the shipped model preset's predictions instead (exit 0).");
  auto json = std::make_shared<bool>(false);
  auto out = std::make_shared<std::string>();
  cmd->add_flag("--json", *json, "Print JSON (schema xstage.info.v1) instead of a table");
  cmd->add_option("--out", *out, "Also write the JSON to this file");
  cmd->callback([json, out] {
    nlohmann::json j;
    bool offline = false;
    Topology t;
    try {
      t = discover_topology();
    } catch (const Error& e) {
      offline = true;
      j = offline_report(e.what());
    }
    if (!offline) {
      j = to_json(t);
      j["virtual_ranks"] = virtual_rank_report(t);
    }
    j["schema"] = "xstage.info.v1";
    if (*json)
      std::printf("%s\n", j.dump(2).c_str());
    else if (offline)
      print_offline(j);
    else
      std::printf("%s%s", format_topology_table(t).c_str(), virtual_rank_table(j["virtual_ranks"]).c_str());
    if (!out->empty()) {
      FILE* f = std::fopen(out->c_str(), "w");
      if (!f) throw Error("cannot write " + *out);
      std::fprintf(f, "%s\n", j.dump(2).c_str());
      std::fclose(f);
    }
  });
}

}  // namespace xstage::cli
