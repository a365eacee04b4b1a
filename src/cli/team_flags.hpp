// The team of a multi-rank command: --gpus real GPUs, or --virtual-ranks P ranks on one GPU
// (docs/virtual-ranks.md), and the label every table and JSON of such a run carries so that a
// virtual-rank figure is never read as a multi-GPU one.
#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "xstage/error.hpp"
#include "xstage/team.hpp"
#include "xstage/virtual_ranks.hpp"

namespace xstage::cli {

inline constexpr const char* kVirtualNote =
    "virtual ranks: SM partitions of one GPU; 'remote' stores are HBM-local stores into another rank's "
    "allocation, not NVLink traffic - not a multi-GPU figure";

// Ranks the command will run with (for validating shapes before any GPU work).
inline int team_ranks(int gpus, int virtual_ranks) { return virtual_ranks > 0 ? virtual_ranks : gpus; }

inline void check_virtual_flag(const char* cmd, int virtual_ranks) {
  if (virtual_ranks < 0 || virtual_ranks > kMaxVirtualRanks)
    throw InvalidArgument(fmt::format("{}: --virtual-ranks {} must be 1..{} (0: real GPUs)", cmd, virtual_ranks,
                                      kMaxVirtualRanks));
}

inline std::unique_ptr<Team> make_team(const TeamOptions& real, int virtual_ranks) {
  if (virtual_ranks <= 0) return Team::local(real);
  // CUDA_DEVICE_MAX_CONNECTIONS and CUDA_MODULE_LOADING are set by main(), before CUDA starts.
  TeamOptions o = real;
  o.min_gpus = 1;
  return Team::virtual_ranks(virtual_ranks, o);
}

// {"kind": "gpus"|"virtual", "ranks": P, "partition": ..., "note": ...}
inline nlohmann::json team_label(const Team& t) {
  nlohmann::json j = {{"kind", t.kind()}, {"ranks", t.world_size()}};
  if (t.is_virtual()) {
    j["partition"] = t.partition_story();
    j["note"] = kVirtualNote;
  }
  return j;
}

// The first table line of a virtual-rank run.
inline void print_team_banner(const Team& t) {
  if (t.is_virtual())
    std::printf("# VIRTUAL RANKS: %d ranks on one GPU (%s). %s\n", t.world_size(), t.partition_story().c_str(),
                kVirtualNote);
}

}  // namespace xstage::cli
