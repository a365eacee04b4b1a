// Rendezvous for launcher mode: rank 0 publishes a small blob (the NCCL unique id) over
// TCP; every other rank connects and receives it. Bounded by a timeout, never a hang.
#pragma once
#include <string>
#include <vector>

#include "xstage/launch_env.hpp"

namespace xstage {

// Rank 0 passes the blob and gets it back; others pass {} and receive rank 0's blob.
// Throws Error naming the address, port and time waited when peers do not show up.
std::vector<char> rendezvous_broadcast(const LaunchEnv& env, const std::vector<char>& blob,
                                       double timeout_s = 60.0);

}  // namespace xstage
