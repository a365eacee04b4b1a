// Helpers of the CPU tests that run the repository's Python tools (python/*.py) on synthetic
// inputs: read a whole file, quote a path for the shell, run a command (or one of the tools)
// with its output captured in a file and return its exit status; the passing correctness
// record every bench cell carries (docs/checkers.md), for synthetic bench JSON.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace xstage::test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// '<path>' for a shell command line, built by appending (GCC 12 warns falsely, -Wrestrict, on
// "'" + std::string temporaries).
inline std::string quote(const std::filesystem::path& p) {
  std::string q = "'";
  q += p.string();
  q += '\'';
  return q;
}

// Runs `cmd` with stdout and stderr in `out`; the exit status, or -1 if it did not exit.
inline int run(const std::string& cmd, const std::filesystem::path& out) {
  std::string line = cmd;
  line += " >";
  line += quote(out);
  line += " 2>&1";
  const int st = std::system(line.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Runs python/<script> of this repository with `args` (already shell-quoted where needed),
// output in `out`; the exit status. XSTAGE_SOURCE_DIR comes from tests/CMakeLists.txt.
inline int run_python_tool(const char* script, const std::string& args, const std::filesystem::path& out) {
  std::string cmd = "python3 ";
  cmd += quote(std::filesystem::path(XSTAGE_SOURCE_DIR) / "python" / script);
  cmd += " ";
  cmd += args;
  return run(cmd, out);
}

// The correctness record of a cell that was checked and passed (the schema the benches write).
inline nlohmann::json passing_correctness() {
  return {{"checked", true}, {"passed", true},     {"max_abs_err", 0.004}, {"rel_err", 0.002},
          {"rows_checked", 256}, {"nonfinite", 0}, {"rel_tol", 0.02}};
}

}  // namespace xstage::test
