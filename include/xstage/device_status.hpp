// How device-side waits report a timeout to the host: a small record in device memory,
// written once by the first wait that gives up, read and cleared by the host after the
// kernel. Every wait in xstage kernels is bounded and reports through this record.
#pragma once
#include <cstdint>
#include <string>

namespace xstage {

enum class WaitId : uint32_t {
  none = 0,
  barrier = 1,         // cross-rank barrier (flags in the control window)
  flag = 2,            // generic flag wait (release/acquire)
  probe_receiver = 3,  // probe: receiver waits for the producers' completion counter
  test_never_set = 4,  // selftest: a flag nobody sets (the timeout path)
  ulysses_ready = 5,    // Ulysses sender: waits until the receiving rank announced the call
  ulysses_receive = 6,  // Ulysses receiver: waits until every rank delivered its rows
  ulysses_tile = 7,     // Ulysses comm-sm copier: waits for a slice the attention has not written
  moe_counts = 8,       // expert-parallel MoE: waits for every rank's routing counts of the call
  moe_ready = 9,        // expert-parallel MoE: waits until a rank announced the call (buffers free)
  moe_rows = 10,        // expert-parallel MoE owner: waits for the rows dispatched to its experts
  moe_combine = 11,     // expert-parallel MoE: waits for its tokens' expert outputs
  moe_bad_expert = 12,  // expert-parallel MoE: a routing entry outside [0, experts) (bad input, code 2)
  moe_histogram = 13,   // Mega-MoE kernel: CTA 0 waits for every CTA's share of the routing histogram
  moe_linear1 = 14,     // Mega-MoE kernel: a Linear-2 tile waits for its block's Linear-1 tiles
};
const char* wait_name(WaitId id);

struct DeviceStatus {
  uint32_t code;          // 0 = ok, 1 = a wait timed out, 2 = a kernel found bad input
  uint32_t wait_id;       // WaitId
  int32_t rank;           // rank whose kernel gave up
  int32_t block;          // blockIdx.x of the waiting thread
  uint64_t waited_ns;     // how long it waited
  uint64_t expected;      // value it waited for (>=)
  uint64_t observed;      // last value it saw
};

// Formats the one-line error for a timed-out wait (empty string when status is ok).
std::string describe_device_status(const DeviceStatus& s);

}  // namespace xstage
