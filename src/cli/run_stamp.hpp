// What every recorded result carries besides its numbers: when it ran and from which commit.
#pragma once
#include <cstdlib>
#include <ctime>
#include <string>

namespace xstage::cli {

// UTC time now, ISO-8601.
inline std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The commit of the code that ran: XSTAGE_COMMIT from the environment (scripts/gpu-run passes
// it; the GPU machine's copy of the tree has no .git), else "unknown".
inline std::string commit_id() {
  const char* c = std::getenv("XSTAGE_COMMIT");
  return c && *c ? c : "unknown";
}

}  // namespace xstage::cli
