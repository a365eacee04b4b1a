// The TMA -> shared-memory ring of the warp-specialised kernels (attention and MoE GEMMs):
// `kStages` buffers, each with a full barrier (the producer's arrival + the TMA transaction
// bytes) and an empty barrier (one arrival per consumer warp once its wgmma on the buffer
// completed). In a cluster of kClusterSize CTAs that multicast into each other's buffers, a
// buffer may only be refilled once the consumers of every CTA released it: each consumer warp
// arrives on the empty barrier of every CTA of the cluster (lane i on CTA i), so the count is
// warps x cluster size. Every wait is bounded: a synchronisation bug traps
// (cudaErrorLaunchFailure) instead of hanging the GPU (docs/attention.md §Design "Hang guard",
// docs/moe-gemm.md §Design "Pipeline").
#pragma once
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "kernels/common/clock.cuh"

namespace xstage::dev {

// Legitimate waits are microseconds (a whole 64K-key attention tile is < 1 ms); 20 s means
// something is broken.
constexpr uint64_t kWaitTimeoutNs = 20ull * 1000 * 1000 * 1000;

// Polls done() until it holds; traps (a host-visible launch error) after kWaitTimeoutNs. The
// clock is read only when the first poll fails, and then every 1024 polls.
template <class Done>
__device__ __forceinline__ void bounded_poll(Done done) {
  if (done()) return;
  const uint64_t t0 = global_ns();
  uint32_t polls = 0;
  while (!done()) {
    if ((++polls & 1023u) == 0u && global_ns() - t0 > kWaitTimeoutNs) __trap();
  }
}

// Waits for the mbarrier phase of parity `phase` to complete.
__device__ __forceinline__ void bounded_wait(uint64_t const* bar, uint32_t phase) {
  bounded_poll([&] { return cutlass::arch::ClusterBarrier::try_wait(bar, phase); });
}

// Position in a ring of buffers: the index and the parity of the barrier phase to wait for.
template <int kStages>
struct PipeState {
  int index = 0;
  uint32_t phase = 0;
  __device__ void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

template <int kStages, int kClusterSize = 1>
struct TmaPipeline {
  struct Storage {
    uint64_t full[kStages];
    uint64_t empty[kStages];
  };
  Storage* s;

  // One thread, before the CTA-wide sync that follows barrier initialisation.
  // full_arrivals: the producer thread's arrival, plus any asynchronous ones (cp.async
  // completions of a scale warp) that must also land before the stage is full.
  __device__ static void init(Storage& st, int consumer_warps, int full_arrivals = 1) {
    for (int i = 0; i < kStages; ++i) {
      cutlass::arch::ClusterTransactionBarrier::init(&st.full[i], full_arrivals);
      cutlass::arch::ClusterBarrier::init(&st.empty[i], consumer_warps * kClusterSize);
    }
  }
  // The producer starts at phase 1: every buffer starts empty.
  __device__ static PipeState<kStages> producer_start() { return PipeState<kStages>{0, 1u}; }

  __device__ void producer_acquire(PipeState<kStages> st, uint32_t tx_bytes) const {
    bounded_wait(&s->empty[st.index], st.phase);
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&s->full[st.index], tx_bytes);
  }
  __device__ uint64_t& full_barrier(PipeState<kStages> st) const { return s->full[st.index]; }
  // A second producer warp (all lanes): wait until the buffer is free, without arriving.
  __device__ void producer_wait_empty(PipeState<kStages> st) const { bounded_wait(&s->empty[st.index], st.phase); }

  __device__ void consumer_wait(PipeState<kStages> st) const { bounded_wait(&s->full[st.index], st.phase); }
  // Every consumer thread, after its warp group's wgmma reading the buffer has completed.
  __device__ void consumer_release(PipeState<kStages> st) const {
    const uint32_t lane = threadIdx.x & 31u;
    if constexpr (kClusterSize == 1) {
      if (lane == 0u) cutlass::arch::ClusterBarrier::arrive(&s->empty[st.index]);
    } else {
      cutlass::arch::ClusterBarrier::arrive(&s->empty[st.index], lane, lane < static_cast<uint32_t>(kClusterSize));
    }
  }
  // Producer, after its last load: wait until every buffer was released by all consumers of
  // the cluster, so no peer arrives on (or multicasts into) this CTA after it exited.
  __device__ void producer_tail(PipeState<kStages> st) const {
    for (int i = 0; i < kStages; ++i) {
      bounded_wait(&s->empty[st.index], st.phase);
      st.advance();
    }
  }
};

}  // namespace xstage::dev
