// The PeerWindow of a registered NCCL window: every rank's base address as mapped on this
// GPU, resolved once with NCCL's LSA API (a one-thread kernel; synchronous).
#pragma once
#include <nccl.h>

#include "xstage/team.hpp"

namespace xstage::nccl {

cudaError_t resolve_window_peers(ncclWindow_t window, int world, PeerWindow* out);

}  // namespace xstage::nccl
