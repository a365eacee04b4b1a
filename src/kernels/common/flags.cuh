// Release/acquire flags across GPUs, and bounded waits on them. A wait that runs out of
// time records the story in the team's DeviceStatus (first one wins) and returns false; the
// host turns it into an error after the kernel. Waits also give up early once any other
// wait of this rank has timed out, so a kernel never lingers after the first failure.
#pragma once
#include <cstdint>

#include "kernels/common/clock.cuh"
#include "xstage/device_status.hpp"

namespace xstage::dev {

__device__ __forceinline__ void flag_store_release(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t flag_load_acquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// Atomic add with release semantics (counters that several producers bump).
__device__ __forceinline__ void flag_add_release(uint64_t* p, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void report_timeout(DeviceStatus* st, WaitId id, int rank, uint64_t waited,
                                               uint64_t expected, uint64_t observed) {
  if (atomicCAS(&st->code, 0u, 1u) == 0u) {
    st->wait_id = static_cast<uint32_t>(id);
    st->rank = rank;
    st->block = static_cast<int32_t>(blockIdx.x);
    st->waited_ns = waited;
    st->expected = expected;
    st->observed = observed;
    __threadfence();
  }
}

// A kernel found bad input (e.g. an index out of range): recorded like a timeout, with
// code 2 (first report wins), so the host's check names it and this rank's waits give up.
__device__ __forceinline__ void report_bad_input(DeviceStatus* st, WaitId id, int rank, uint64_t limit,
                                                 uint64_t observed) {
  if (atomicCAS(&st->code, 0u, 2u) == 0u) {
    st->wait_id = static_cast<uint32_t>(id);
    st->rank = rank;
    st->block = static_cast<int32_t>(blockIdx.x);
    st->waited_ns = 0;
    st->expected = limit;
    st->observed = observed;
    __threadfence();
  }
}

// Polls load() until it returns >= target. Returns false on timeout (reported) or when
// another wait of this rank already failed.
template <class T, class Load>
__device__ __forceinline__ bool bounded_wait_geq(Load load, T target, DeviceStatus* st, WaitId id, int rank,
                                                 uint64_t timeout_ns) {
  T v = load();
  if (v >= target) return true;
  const uint64_t t0 = global_ns();
  uint32_t spins = 0;
  while (true) {
    v = load();
    if (v >= target) return true;
    if ((++spins & 255u) == 0u) {
      const uint64_t waited = global_ns() - t0;
      if (waited > timeout_ns) {
        report_timeout(st, id, rank, waited, uint64_t(target), uint64_t(v));
        return false;
      }
      if (*reinterpret_cast<volatile uint32_t*>(&st->code) != 0u) return false;
    }
  }
}

// Waits until *p >= target (acquire, system scope: flags written by other GPUs).
__device__ __forceinline__ bool wait_geq(const uint64_t* p, uint64_t target, DeviceStatus* st, WaitId id, int rank,
                                        uint64_t timeout_ns) {
  return bounded_wait_geq([p] { return flag_load_acquire(p); }, target, st, id, rank, timeout_ns);
}

// A counter inside this GPU (gpu scope), e.g. CTAs of one kernel waiting on each other.
__device__ __forceinline__ uint32_t load_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ bool wait_geq_gpu(const uint32_t* p, uint32_t target, DeviceStatus* st, WaitId id, int rank,
                                            uint64_t timeout_ns) {
  return bounded_wait_geq([p] { return load_acquire_gpu(p); }, target, st, id, rank, timeout_ns);
}

}  // namespace xstage::dev
