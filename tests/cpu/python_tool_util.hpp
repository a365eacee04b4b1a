// Helpers of the CPU tests that run the repository's Python tools (python/compare_*.py) on
// synthetic inputs: read a whole file, quote a path for the shell, run a command with its
// output captured in a file and return its exit status.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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

}  // namespace xstage::test
