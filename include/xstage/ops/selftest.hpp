// Runtime selftests, used by the GPU tests and `xstage selftest`: they prove the team's
// symmetric memory, device-initiated remote stores, the timed barrier and the timeout path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xstage/team.hpp"

namespace xstage::ops {

struct ExchangeReport {
  int rank = 0;
  size_t slot_bytes = 0;
  std::vector<unsigned long long> wrong_words;  // per source rank
};

// Every rank writes slot_bytes into every peer (itself included) with device stores,
// barriers, and verifies. Collective: all ranks of the team call it (run() in local mode).
// slot_bytes must be a positive multiple of 16.
std::vector<ExchangeReport> exchange_selftest(Team& team, size_t slot_bytes, uint32_t salt);

// Launches a kernel that waits on a flag nobody sets and returns the error text the host
// got (empty if, wrongly, none). Measures the wall time it took into *seconds.
std::string timeout_selftest(Team& team, int local_index, double* seconds);

}  // namespace xstage::ops
