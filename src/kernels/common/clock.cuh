// Clocks on the device. clock64 counts this SM's cycles (fine-grained, per SM);
// %globaltimer is nanoseconds shared by the GPU (coarse, but comparable across SMs).
#pragma once
#include <cstdint>

namespace xstage::dev {

__device__ __forceinline__ uint64_t sm_cycles() { return clock64(); }

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins on this SM's cycle counter until `cycles` have passed since `start`.
__device__ __forceinline__ uint64_t spin_until(uint64_t start, uint64_t cycles) {
  uint64_t now = clock64();
  while (now - start < cycles) now = clock64();
  return now;
}

}  // namespace xstage::dev
