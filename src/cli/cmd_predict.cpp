// `xstage predict`: Burst-Gap model predictions for one store schedule (K, B, G).
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "xstage/error.hpp"
#include "xstage/model.hpp"

#ifndef XSTAGE_PRESET_DIR
#define XSTAGE_PRESET_DIR "presets"  // CMake defines the real path
#endif

namespace xstage::cli {
namespace {

struct PredictArgs {
  int producers = 0;
  long long burst_bytes = 0;
  double gap_us = 0;
  std::string params;
  bool json = false;
};

model::Params load_for_predict(const std::string& given, std::string* used) {
  if (given.empty()) {
    const std::string preset = std::string(XSTAGE_PRESET_DIR) + "/h200-nvlink.json";
    if (!std::filesystem::exists(preset))
      throw Error(format_error(preset, "the shipped preset is missing (it is written from real H200 "
                                       "measurements); pass --params FILE, e.g. from `xstage fit DATA.json --out FILE`"));
    *used = preset;
    return model::load_params(preset);
  }
  *used = given;
  try {
    return model::load_params(given);
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    throw InvalidArgument(e.what());  // the user named the file: bad input, exit 2
  }
}

void run_predict(const PredictArgs& a) {
  model::validate_inputs(a.producers, a.burst_bytes, a.gap_us, 0);  // before any file access
  std::string used;
  const model::Params p = load_for_predict(a.params, &used);
  model::validate_inputs(a.producers, a.burst_bytes, a.gap_us, p.sm_count);
  const model::Prediction pr = model::predict(p, a.producers, a.burst_bytes, a.gap_us);

  if (a.json) {
    const nlohmann::json j{{"producers", a.producers},
                           {"burst_bytes", a.burst_bytes},
                           {"volume_bytes", pr.volume_bytes},
                           {"gap_us", a.gap_us},
                           {"issue_us", pr.issue_us},
                           {"period_us", pr.period_us},
                           {"backpressure_us", pr.backpressure_us},
                           {"recovery_gap_us", pr.recovery_gap_us},
                           {"cold_issue_us", pr.cold_issue_ext_us},  // extended model
                           {"cold_issue_base_us", pr.cold_issue_us},
                           {"backpressure_free", pr.backpressure_free},
                           {"regime", model::regime_name(pr.regime)},
                           {"t0_us", pr.t0_us},
                           {"drain_us", pr.drain_us},
                           {"q_bytes", pr.q_bytes},
                           {"params_file", used},
                           {"params", p}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << fmt::format("xstage predict: K={} x B={} B (V = {:.3f} MiB), gap G = {} us\n", a.producers,
                           a.burst_bytes, static_cast<double>(pr.volume_bytes) / model::kMiB, a.gap_us)
            << fmt::format("  params: {}\n", used)
            << fmt::format("  {:<26} {:>10.3f} us  ({})\n", "steady issue span", pr.issue_us,
                           model::regime_name(pr.regime))
            << fmt::format("  {:<26} {:>10.3f} us\n", "period", pr.period_us)
            << fmt::format("  {:<26} {:>10.3f} us  ({})\n", "backpressure per burst", pr.backpressure_us,
                           pr.backpressure_free ? "backpressure-free" : "stalls")
            << fmt::format("  {:<26} {:>10.3f} us\n", "recovery gap G*", pr.recovery_gap_us)
            << fmt::format("  {:<26} {:>10.3f} us  (base model {:.3f} us)\n", "cold (first) burst",
                           pr.cold_issue_ext_us, pr.cold_issue_us)
            << fmt::format("  {:<26} {:>10.3f} us / {:.3f} us / {:.3f} MiB\n", "T0 / V/R / Q(K)", pr.t0_us,
                           pr.drain_us, pr.q_bytes / model::kMiB);
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
                  "model parameters (xstage.params.v1); default: the shipped H200 preset");
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->callback([args] { run_predict(*args); });
}

}  // namespace xstage::cli
