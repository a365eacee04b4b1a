// Where CLI commands get Burst-Gap parameters: the file the user named, or the shipped
// H200 preset (presets/h200-nvlink.json, fitted from real measurements).
#pragma once
#include <string>

#include "xstage/model.hpp"

namespace xstage::cli {

// given: a params file or empty (the preset). *used receives the path read. A bad file the
// user named is InvalidArgument (exit 2); a missing preset is Error.
model::Params load_model_params(const std::string& given, std::string* used);

}  // namespace xstage::cli
