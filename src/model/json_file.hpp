// Reading a typed JSON file and writing one, with one-line errors that name the file
// (a directory, a missing file, bad JSON and a bad field each say so).
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "xstage/error.hpp"

namespace xstage::detail {

// Parses `path` as JSON and converts it to T (its from_json throws Error naming the field);
// `what` names the file's kind in the messages ("params file", "probe data file").
template <class T>
T load_json_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(format_error(path, "is a directory, not a " + what));
  std::ifstream in(path);
  if (!in) throw Error(format_error(path, "cannot open the " + what + " for reading"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(format_error(path, std::string("not valid JSON (") + e.what() + ")"));
  }
  try {
    return j.get<T>();
  } catch (const Error& e) {
    throw Error(format_error(path, e.what()));
  }
}

// Writes j to `path`, indented by `indent`, with a final newline.
inline void save_json_file(const nlohmann::json& j, const std::string& path, const std::string& what, int indent) {
  std::ofstream out(path);
  if (!out) throw Error(format_error(path, "cannot open the " + what + " for writing"));
  out << j.dump(indent) << "\n";
  if (!out) throw Error(format_error(path, "write failed"));
}

}  // namespace xstage::detail
