// `xstage fit DATA.json`: calibrate the Burst-Gap model on the "fit" points of a probe run
// and validate it on the held-out "validate" points.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "xstage/error.hpp"
#include "xstage/fitter.hpp"
#include "xstage/model.hpp"
#include "xstage/probe_data.hpp"
#include "xstage/validation.hpp"

namespace xstage::cli {
namespace {

struct FitArgs {
  std::string data;
  std::string out;
  bool json = false;
  model::FitOptions fit;
};

void run_fit(const FitArgs& a) {
  ProbeRun run;
  try {
    run = load_probe_run(a.data);
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    throw InvalidArgument(e.what());  // a bad input file is a usage error (exit 2)
  }
  if (run.team == "virtual")
    throw InvalidArgument(a.data + " was measured on virtual ranks (SM partitions of one GPU: HBM-local stores); "
                          "its parameters would not describe NVLink - probe real GPUs to fit the model");
  const model::FitResult fr = model::fit(run, a.fit);
  const model::ValidationReport val =
      model::validate(fr.params, run.points, model::ValidationOptions::from(a.fit));
  if (!a.out.empty()) model::save_params(fr.params, a.out);

  if (a.json) {
    nlohmann::json diag = fr;
    diag.erase("params");
    const nlohmann::json j{{"params", fr.params}, {"fit", diag}, {"validation", val}};
    std::cout << j.dump(2) << "\n";
    if (!a.out.empty()) std::fprintf(stderr, "xstage fit: wrote %s\n", a.out.c_str());
    return;
  }
  std::cout << "xstage fit: " << a.data << ": " << run.points.size() << " points"
            << (run.device.empty() ? "" : ", " + run.device) << (run.date.empty() ? "" : ", " + run.date)
            << "\n\n"
            << model::format_fit(fr) << "\n"
            << model::format_validation(val);
  if (!a.out.empty()) std::cout << "\nwrote params to " << a.out << "\n";
}

}  // namespace

void add_fit_command(CLI::App& app) {
  auto args = std::make_shared<FitArgs>();
  CLI::App* cmd = app.add_subcommand(
      "fit", "Fit the Burst-Gap model (T0(B), R(K), R_agg, delta(K), Q(K), Q_cold(K)) to probe data; validate on held-out points");
  cmd->add_option("data", args->data, "probe data JSON (xstage.probe.v1), e.g. from `xstage probe`")->required();
  cmd->add_option("--out", args->out, "write the fitted parameters (xstage.params.v2) to this file");
  cmd->add_flag("--json", args->json, "print {params, fit, validation} as JSON on stdout");
  cmd->add_option("--dest", args->fit.dest, "calibrate on points with this destination")->capture_default_str();
  cmd->add_option("--store", args->fit.store, "calibrate on points with this store kind")->capture_default_str();
  cmd->add_option("--addr", args->fit.addr, "calibrate on points with this address pattern")->capture_default_str();
  cmd->add_option("--gap-kind", args->fit.gap_kind, "calibrate on points with this gap kind")->capture_default_str();
  cmd->add_option("--isolated-min-gap-us", args->fit.isolated_min_gap_us,
                  "smallest gap that counts as an isolated (warm) burst for T0 and Q")
      ->capture_default_str();
  cmd->add_option("--zero-gap-min-bursts", args->fit.zero_gap_min_bursts,
                  "fewest bursts a zero-gap point needs to count for R(K), delta(K) and R_agg")
      ->capture_default_str();
  cmd->callback([args] { run_fit(*args); });
}

}  // namespace xstage::cli
