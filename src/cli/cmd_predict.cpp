// `xstage predict`: Burst-Gap model predictions for one store schedule (K, B, G).
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/model_source.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"

namespace xstage::cli {
namespace {

struct PredictArgs {
  int producers = 0;
  long long burst_bytes = 0;
  double gap_us = 0;
  std::string params;
  bool json = false;
};

void run_predict(const PredictArgs& a) {
  model::validate_inputs(a.producers, a.burst_bytes, a.gap_us, 0);  // before any file access
  std::string used;
  const model::Params p = load_model_params(a.params, &used);
  model::validate_inputs(a.producers, a.burst_bytes, a.gap_us, p.sm_count);
  const model::Prediction pr = model::predict(p, a.producers, a.burst_bytes, a.gap_us);

  if (a.json) {
    nlohmann::json j{{"producers", a.producers}, {"burst_bytes", a.burst_bytes}, {"gap_us", a.gap_us}};
    j.update(nlohmann::json(pr));  // issue_us ... cold_issue_us (extended), cold_issue_base_us, the terms
    j["params_file"] = used;
    j["params"] = p;
    std::cout << j.dump(2) << "\n";
    return;
  }
  const auto row = [](const char* name, double us) { return fmt::format("  {:<26} {:>10.3f} us", name, us); };
  std::cout << fmt::format("xstage predict: K={} x B={} B (V = {:.3f} MiB), gap G = {} us\n", a.producers,
                           a.burst_bytes, static_cast<double>(pr.volume_bytes) / model::kMiB, a.gap_us)
            << fmt::format("  params: {}\n", used)
            << row("steady issue span", pr.issue_us) << fmt::format("  ({})\n", model::regime_name(pr.regime))
            << row("period", pr.period_us) << "\n"
            << row("backpressure per burst", pr.backpressure_us)
            << fmt::format("  ({})\n", pr.backpressure_free ? "backpressure-free" : "stalls")
            << row("recovery gap G*", pr.recovery_gap_us) << "\n"
            << row("cold (first) burst", pr.cold_issue_us)
            << fmt::format("  (base model {:.3f} us)\n", pr.cold_issue_base_us)
            << "  terms:\n"
            << row("T0(B)", pr.t0_us) << "\n"
            << row("D = V/R(K) - G - delta(K)", pr.drain_term_us)
            << fmt::format("  (R = {:.1f} GB/s, delta = {:.3f} us)\n", pr.r_gbps, pr.delta_us)
            << row("F = (V - Q(K))/R_agg", pr.fill_term_us)
            << fmt::format("  (Q {} {:.3f} MiB, R_agg = {:.1f} GB/s)\n", pr.q_lower_bound ? ">=" : "=",
                           pr.q_bytes / model::kMiB, pr.r_agg_gbps)
            << row("(V - Q_cold(K))/R_agg", pr.cold_fill_term_us)
            << fmt::format("  (Q_cold = {:.3f} MiB)\n", pr.q_cold_bytes / model::kMiB);
  // Beyond the largest measured burst a lower-bound Q predicts an overflow nobody has seen.
  if (pr.q_lower_bound && pr.fill_term_us > pr.t0_us)
    std::cout << "  note: Q(K) is a lower bound (no measured isolated burst overflowed the stage), so F is an\n"
                 "        upper bound: the fill term may overstate the stall of this burst\n";
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand(
      "predict", "Predict issue span, period, backpressure and recovery gap of a burst schedule (Burst-Gap model)");
  cmd->add_option("--producers,-k", args->producers, "K: producer CTAs")->required();
  cmd->add_option("--burst-bytes,-b", args->burst_bytes, "B: bytes each producer stores per burst (multiple of 16)")
      ->required();
  cmd->add_option("--gap-us,-g", args->gap_us, "G: gap after each burst's issue, microseconds")->required();
  cmd->add_option("--params", args->params,
                  "model parameters (xstage.params.v2); default: the shipped H200 preset");
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->callback([args] { run_predict(*args); });
}

}  // namespace xstage::cli
