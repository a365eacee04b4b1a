#include "cli/model_source.hpp"

#include <filesystem>

#include "xstage/error.hpp"

#ifndef XSTAGE_PRESET_DIR
#define XSTAGE_PRESET_DIR "presets"  // CMake defines the real path
#endif

namespace xstage::cli {

model::Params load_model_params(const std::string& given, std::string* used) {
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

}  // namespace xstage::cli
