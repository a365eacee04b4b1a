// Arguments of the X-Stage probe kernel (one launch = one configuration, n bursts).
#pragma once
#include <cstdint>

#include "xstage/team.hpp"

namespace xstage::kernels {

enum class StoreKind : int { v4 = 0, v4_release = 1, v4_noalloc = 2, bulk = 3 };
enum class DestKind : int { peer = 0, all_peers = 1, local = 2 };

// Timestamps live in shared memory during the run (a global store by the recording thread
// would queue behind the remote stores and hide backpressure in the "gap"); at most this
// many bursts per launch.
constexpr int kMaxProbeBursts = 1024;
constexpr int kMaxProbeRanks = 8;  // destinations the probe addresses (one NVLink node)
constexpr size_t kProbeStampBytes = sizeof(uint64_t) * 2 * kMaxProbeBursts;

struct ProbeArgs {
  TeamDevice team;
  PeerWindow dst;            // symmetric data buffer (every rank has one)
  DestKind dest;
  int peer;                  // destination rank for DestKind::peer
  StoreKind store;
  bool fresh;                // fresh addresses every burst (else one region rewritten)
  uint64_t burst_bytes;      // B per producer per burst, multiple of 16
  int bursts;
  uint64_t gap_cycles;       // idle gap (spin on clock64) after each burst's issue
  uint64_t work_iters;       // >0: the gap is this much FMA work instead of spinning
  uint32_t bulk_chunk;       // bulk mode: bytes per cp.async.bulk (smem staging size)
  uint64_t warmup_bytes;     // per producer, stored to the peer before burst 0 (0 = none)
  size_t warmup_offset;      // where the warm-up stores go in dst (past the bursts' region)
  uint64_t pre_wait_cycles;  // idle spin between the warm-up and burst 0
  uint64_t* rec;             // [bursts][K][2]: start/end cycles of each burst's issue
  uint64_t* gtime;           // [K][2]: global ns before burst 0 and after the last burst
  uint64_t* done_cycles;     // [1]: block 0's cycles from first start to "all data landed"
  size_t counter_offset;     // control-window offset of the completion counters ([world] u64)
  uint64_t counter_target;   // value each destination's counter reaches when all CTAs are done
  float* sink;               // where work results go (keeps the FMA work alive)
};

}  // namespace xstage::kernels

#include <cuda_runtime.h>

namespace xstage::kernels {

// Host-side launchers (defined in probe.cu); they return the launch error, if any.
cudaError_t launch_probe(const ProbeArgs& a, int producers, int threads, cudaStream_t s);
cudaError_t launch_probe_clock(uint64_t spin_ns, uint64_t* out, cudaStream_t s);
cudaError_t launch_probe_work_calibrate(uint64_t iters, int threads, uint64_t* cycles, float* sink, cudaStream_t s);

}  // namespace xstage::kernels
