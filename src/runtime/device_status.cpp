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
  }
  return "unknown wait";
}

std::string describe_device_status(const DeviceStatus& s) {
  if (s.code == 0) return {};
  return fmt::format("rank {}: device wait '{}' timed out after {:.3f} s in block {} (waited for >= {}, last saw {}); "
                     "a peer rank did not deliver - check that every rank launched the same operation",
                     s.rank, wait_name(static_cast<WaitId>(s.wait_id)), s.waited_ns * 1e-9, s.block, s.expected,
                     s.observed);
}

}  // namespace xstage
