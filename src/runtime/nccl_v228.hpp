// Every line that depends on the NCCL version lives here (written for NCCL 2.28.x; 2.29+
// changed parts of the device API). Host side: device communicator and window setup.
// Device side: the pointer to a peer's copy of a symmetric window.
#pragma once
#include <nccl.h>
#include <nccl_device.h>

#include "runtime/check.hpp"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)
#error "xstage needs NCCL >= 2.28 (device API: nccl_device.h, symmetric windows)"
#endif

namespace xstage::nccl {

// Device communicator with `lsa_barriers` LSA barriers (NCCL's own, untimed: xstage's
// waits use the timed barrier in src/kernels/common/barrier.cuh instead).
inline void dev_comm_create(ncclComm_t comm, int lsa_barriers, ncclDevComm* out) {
  ncclDevCommRequirements reqs{};
  reqs.lsaBarrierCount = lsa_barriers;
  XS_NCCL(ncclDevCommCreate(comm, &reqs, out), "creating the NCCL device communicator");
}

inline void dev_comm_destroy(ncclComm_t comm, const ncclDevComm* dc) { ncclDevCommDestroy(comm, dc); }

inline void window_register(ncclComm_t comm, void* ptr, size_t bytes, ncclWindow_t* win) {
  XS_NCCL(ncclCommWindowRegister(comm, ptr, bytes, win, NCCL_WIN_COLL_SYMMETRIC),
          "registering a symmetric window of " + std::to_string(bytes) + " bytes");
}

inline void window_deregister(ncclComm_t comm, ncclWindow_t win) { ncclCommWindowDeregister(comm, win); }

// Size of the NVLink load/store-accessible team of this communicator (ranks reachable with
// plain pointers).
inline int lsa_size(const ncclDevComm& dc) { return dc.lsaSize; }

#if defined(__CUDACC__)
// Pointer to rank `peer`'s copy of `win` at byte `offset` (peer = LSA rank; xstage requires
// the LSA team to be the whole world, so LSA rank == world rank).
__device__ __forceinline__ void* peer_ptr(ncclWindow_t win, size_t offset, int peer) {
  return ncclGetLsaPointer(win, offset, peer);
}
#endif

}  // namespace xstage::nccl
