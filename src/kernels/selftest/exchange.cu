// Selftest kernels for the runtime: every rank writes a pattern into every peer's copy of a
// symmetric buffer with device-initiated 16-byte stores, crosses a timed barrier, and checks
// what arrived from each peer. Plus a kernel that waits on a flag nobody sets (timeout path).
#include "kernels/selftest/exchange.hpp"
#include <cstdint>

#include "kernels/common/barrier.cuh"
#include "kernels/common/store.cuh"

namespace xstage::kernels {

// Word i of the slot that rank `src` fills on rank `dst`, for launch `salt`.
__host__ __device__ __forceinline__ uint32_t exchange_word(uint32_t salt, int src, int dst, uint64_t i) {
  uint64_t x = (uint64_t(salt) << 40) ^ (uint64_t(src) << 32) ^ (uint64_t(dst) << 24) ^ i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// buf layout on every rank: world slots of slot_bytes; slot s holds what rank s sent.
__global__ void exchange_write(TeamDevice t, PeerWindow buf, size_t slot_bytes, uint32_t salt) {
  const uint64_t vecs = slot_bytes / 16;
  for (int dst = 0; dst < t.world; ++dst) {
    char* base = static_cast<char*>(buf.at(dst, slot_bytes * t.rank));
    for (uint64_t v = blockIdx.x * blockDim.x + threadIdx.x; v < vecs; v += uint64_t(gridDim.x) * blockDim.x) {
      uint4 w{exchange_word(salt, t.rank, dst, 4 * v), exchange_word(salt, t.rank, dst, 4 * v + 1),
              exchange_word(salt, t.rank, dst, 4 * v + 2), exchange_word(salt, t.rank, dst, 4 * v + 3)};
      dev::st_v4(base + 16 * v, w);
    }
  }
}

__global__ void exchange_barrier(TeamDevice t, uint64_t epoch) { dev::team_barrier_block(t, epoch); }

// Counts words that differ from the expected pattern (per source rank into bad[src]).
__global__ void exchange_verify(TeamDevice t, const uint32_t* local, size_t slot_bytes, uint32_t salt,
                                unsigned long long* bad) {
  const uint64_t words = slot_bytes / 4;
  for (int src = 0; src < t.world; ++src) {
    unsigned long long n = 0;
    for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x)
      n += local[src * words + i] != exchange_word(salt, src, t.rank, i);
    if (n) atomicAdd(&bad[src], n);
  }
}

// Waits for a control-window flag that nothing ever sets: must end in a reported timeout.
__global__ void wait_never_set(TeamDevice t, size_t flag_offset) {
  if (threadIdx.x != 0) return;
  const uint64_t* f = static_cast<const uint64_t*>(t.ctrl.at(t.rank, flag_offset));
  dev::wait_geq(f, ~0ull, t.status, WaitId::test_never_set, t.rank, t.timeout_ns);
}

}  // namespace xstage::kernels

namespace xstage::kernels {

cudaError_t launch_exchange_write(const TeamDevice& t, const PeerWindow& buf, size_t slot_bytes, uint32_t salt,
                                  cudaStream_t s) {
  exchange_write<<<64, 256, 0, s>>>(t, buf, slot_bytes, salt);
  return cudaGetLastError();
}
cudaError_t launch_team_barrier(const TeamDevice& t, uint64_t epoch, cudaStream_t s) {
  exchange_barrier<<<1, 32, 0, s>>>(t, epoch);
  return cudaGetLastError();
}
cudaError_t launch_exchange_verify(const TeamDevice& t, const uint32_t* local, size_t slot_bytes, uint32_t salt,
                                   unsigned long long* bad, cudaStream_t s) {
  exchange_verify<<<64, 256, 0, s>>>(t, local, slot_bytes, salt, bad);
  return cudaGetLastError();
}
cudaError_t launch_wait_never_set(const TeamDevice& t, size_t flag_offset, cudaStream_t s) {
  wait_never_set<<<1, 32, 0, s>>>(t, flag_offset);
  return cudaGetLastError();
}

}  // namespace xstage::kernels
