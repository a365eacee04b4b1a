// Host-side launchers of the runtime selftest kernels (defined in exchange.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "xstage/team.hpp"

namespace xstage::kernels {

cudaError_t launch_exchange_write(const TeamDevice& t, const PeerWindow& buf, size_t slot_bytes, uint32_t salt,
                                  cudaStream_t s);
cudaError_t launch_team_barrier(const TeamDevice& t, uint64_t epoch, cudaStream_t s);
cudaError_t launch_exchange_verify(const TeamDevice& t, const uint32_t* local, size_t slot_bytes, uint32_t salt,
                                   unsigned long long* bad, cudaStream_t s);
cudaError_t launch_wait_never_set(const TeamDevice& t, size_t flag_offset, cudaStream_t s);

}  // namespace xstage::kernels
