// xstage.model over the C++ Burst-Gap model (include/xstage/model.hpp, fitter.hpp,
// validation.hpp). Everything crosses as JSON text, so the Python side is plain dicts and the
// C++ (de)serialisers stay the single definition of the formats.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <nlohmann/json.hpp>
#include <string>

#include "python/bind.hpp"
#include "xstage/error.hpp"
#include "xstage/fitter.hpp"
#include "xstage/model.hpp"
#include "xstage/probe_data.hpp"
#include "xstage/validation.hpp"

namespace nb = nanobind;

namespace xstage::python {
namespace {

nlohmann::json parse(const std::string& text, const char* what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(format_error(what, std::string("not valid JSON: ") + e.what()));
  }
}

// JSON text -> checked, sorted params (xstage::Error on a bad field becomes ValueError: the
// caller handed us the data).
model::Params params_from(const std::string& text) {
  const nlohmann::json j = parse(text, "params");
  try {
    model::Params p = j.get<model::Params>();
    model::check_params(p);
    return p;
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    throw InvalidArgument(e.what());
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(format_error("params", e.what()));
  }
}

std::string normalize_params(const std::string& text) { return nlohmann::json(params_from(text)).dump(); }

std::string predict(const std::string& params, int producers, long long burst_bytes, double gap_us,
                    int max_producers) {
  model::validate_inputs(producers, burst_bytes, gap_us, 0);
  const model::Params p = params_from(params);
  model::validate_inputs(producers, burst_bytes, gap_us, max_producers < 0 ? p.sm_count : max_producers);
  return nlohmann::json(model::predict(p, producers, burst_bytes, gap_us)).dump();
}

std::string fit(const std::string& probe_run, const std::string& options) {
  const nlohmann::json jr = parse(probe_run, "probe data");
  ProbeRun run;
  try {
    run = jr.get<ProbeRun>();
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    throw InvalidArgument(e.what());
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(format_error("probe data", e.what()));
  }
  model::FitOptions o;
  const nlohmann::json jo = parse(options, "fit options");
  for (auto it = jo.begin(); it != jo.end(); ++it) {
    const std::string& k = it.key();
    try {
      if (k == "zero_gap_max_us") o.zero_gap_max_us = it->get<double>();
      else if (k == "zero_gap_min_bursts") o.zero_gap_min_bursts = it->get<int>();
      else if (k == "isolated_min_gap_us") o.isolated_min_gap_us = it->get<double>();
      else if (k == "knee_margin") o.knee_margin = it->get<double>();
      else if (k == "max_iterations") o.max_iterations = it->get<int>();
      else if (k == "role") o.role = it->get<std::string>();
      else if (k == "dest") o.dest = it->get<std::string>();
      else if (k == "store") o.store = it->get<std::string>();
      else if (k == "addr") o.addr = it->get<std::string>();
      else if (k == "gap_kind") o.gap_kind = it->get<std::string>();
      else throw InvalidArgument("fit: unknown option '" + k + "'");
    } catch (const nlohmann::json::exception& e) {
      throw InvalidArgument("fit: option '" + k + "' has the wrong type (" + e.what() + ")");
    }
  }
  model::FitResult fr;
  model::ValidationReport val;
  try {
    fr = model::fit(run, o);
    val = model::validate(fr.params, run.points, model::ValidationOptions::from(o));
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    throw InvalidArgument(e.what());  // not enough of the right points: the caller's data
  }
  nlohmann::json diag = fr;
  diag.erase("params");
  const nlohmann::json out{{"params", fr.params}, {"fit", diag}, {"validation", val}};
  return out.dump();
}

std::string format_params(const std::string& params) { return model::format_params(params_from(params)); }

}  // namespace

void bind_model(nb::module_& m) {
  m.def("model_normalize_params", &normalize_params, nb::arg("params_json"),
        "Check and sort an xstage.params.v2 JSON text; returns the normalised JSON text.");
  m.def("model_predict", &predict, nb::arg("params_json"), nb::arg("producers"), nb::arg("burst_bytes"),
        nb::arg("gap_us"), nb::arg("max_producers") = -1,
        "Burst-Gap prediction as JSON text (max_producers -1: the params' sm_count, 0: no limit).");
  m.def("model_fit", &fit, nb::arg("probe_run_json"), nb::arg("options_json") = "{}",
        "Fit on the 'fit' points of a probe run and validate on the held-out ones; JSON text "
        "{params, fit, validation}.");
  m.def("model_format_params", &format_params, nb::arg("params_json"));
  m.attr("params_schema") = model::kParamsSchema;
}

}  // namespace xstage::python
