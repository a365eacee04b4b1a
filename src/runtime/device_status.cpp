#include "xstage/device_status.hpp"

#include <fmt/format.h>

namespace xstage {

const char* wait_name(WaitId id) {
  switch (id) {
    case WaitId::none: return "none";
    case WaitId::barrier: return "cross-rank barrier";
    case WaitId::flag: return "flag";
    case WaitId::probe_receiver: return "probe receiver completion counter";
    case WaitId::test_never_set: return "test flag that is never set";
    case WaitId::ulysses_ready: return "Ulysses: a receiving rank never announced this call (did every rank call it?)";
    case WaitId::ulysses_receive: return "Ulysses: rows from the other ranks never all arrived (a rank did not deliver)";
    case WaitId::ulysses_tile: return "Ulysses comm-sm: a tile the local attention never finished";
    case WaitId::moe_counts: return "expert-parallel MoE: routing counts of a rank never arrived (a rank did not call)";
    case WaitId::moe_ready: return "expert-parallel MoE: a rank never announced the call";
    case WaitId::moe_rows: return "expert-parallel MoE: rows dispatched to this rank's experts never all arrived";
    case WaitId::moe_combine: return "expert-parallel MoE: expert outputs for this rank's tokens never all arrived";
    case WaitId::moe_bad_expert: return "expert-parallel MoE: the routing names an expert outside [0, experts)";
    case WaitId::moe_histogram: return "Mega-MoE: CTA 0 waiting for every CTA's share of the routing histogram";
    case WaitId::moe_linear1: return "Mega-MoE: a Linear-2 tile waiting for its block's Linear-1 tiles (or their quantisation)";
  }
  return "unknown wait";
}

std::string describe_device_status(const DeviceStatus& s) {
  if (s.code == 0) return {};
  if (s.code == 2)
    return fmt::format("rank {}: {} (limit {}, got {}, block {})", s.rank, wait_name(static_cast<WaitId>(s.wait_id)),
                       s.expected, s.observed, s.block);
  return fmt::format("rank {}: device wait '{}' timed out after {:.3f} s in block {} (waited for >= {}, last saw {}); "
                     "a peer rank did not deliver - check that every rank launched the same operation",
                     s.rank, wait_name(static_cast<WaitId>(s.wait_id)), s.waited_ns * 1e-9, s.block, s.expected,
                     s.observed);
}

}  // namespace xstage
