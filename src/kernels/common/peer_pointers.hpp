// Pointers to every rank's copy of a symmetric window, as mapped in this GPU: what operators
// that store into peers (Ulysses, expert-parallel MoE) put into their kernel arguments.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>

namespace xstage::kernels {

// out_host[p] = rank p's address of `offset` in `window`, for p < world (resolved on the device
// with NCCL's LSA API; synchronous).
cudaError_t resolve_peer_pointers(ncclWindow_t window, size_t offset, int world, void** out_host);

}  // namespace xstage::kernels
