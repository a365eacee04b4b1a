// How P virtual ranks share one GPU's SMs (docs/virtual-ranks.md). Plain arithmetic, no CUDA:
// the CLI, the tests and `xstage info` use it without a GPU; the runtime checks the driver's
// own split against it.
#pragma once
#include <string>

namespace xstage {

struct SmSplit {
  int ranks = 0;         // P
  int sms_per_rank = 0;  // every rank's partition (all equal)
  int unused = 0;        // SMs no rank gets
};

// Hopper green contexts: partitions of at least 8 SMs, in multiples of 8 (cuda.h, Green
// Contexts). The reduced-grid fallback uses the same numbers so both modes size grids alike.
inline constexpr int kSmPartitionGranularity = 8;
inline constexpr int kMaxVirtualRanks = 8;

// Splits `total_sms` into `ranks` equal partitions, each a multiple of `granularity` and at
// least `granularity`. Empty string on success, else the one-line reason it is impossible.
std::string plan_sm_split(int total_sms, int ranks, SmSplit* out, int granularity = kSmPartitionGranularity);

// Largest P <= kMaxVirtualRanks that plan_sm_split accepts for `total_sms` (0 if none).
int max_virtual_ranks(int total_sms, int granularity = kSmPartitionGranularity);

// "4 x 32 SMs (4 unused)"
std::string describe(const SmSplit& s);

}  // namespace xstage
