// The X-Stage probe: K producer CTAs, each issuing B bytes of stores per burst to a peer GPU
// (or round robin over peers, or locally as the control), then a gap of idle spinning or of
// FMA work, repeated. Each CTA records the cycles at which each burst's issue began and
// ended (all its threads past their last store instruction): the sender-visible issue span.
// Stamps are kept in shared memory and written out after the last burst. Optionally a
// warm-up of remote stores and an idle wait precede burst 0 (to study the cold burst).
// At the end every CTA releases a completion counter on each destination, and block 0
// measures when all of them have landed (acquire), which is the completion time.
#pragma once
#include "kernels/common/barrier.cuh"
#include "kernels/common/clock.cuh"
#include "kernels/common/flags.cuh"
#include "kernels/common/store.cuh"
#include "kernels/probe/probe_args.hpp"

namespace xstage::kernels {

__device__ __forceinline__ int probe_dest_rank(const ProbeArgs& a, int burst) {
  const TeamDevice& t = a.team;
  if (a.dest == DestKind::local) return t.rank;
  if (a.dest == DestKind::peer) return a.peer;
  const int others = t.world - 1;  // round robin over every other rank
  return (t.rank + 1 + (int(blockIdx.x) + burst) % others) % t.world;
}

// FMA work of a fixed amount: 4 independent chains per thread.
__device__ __forceinline__ float probe_work(uint64_t iters, float seed) {
  float a = seed, b = seed + 1.f, c = seed + 2.f, d = seed + 3.f;
  for (uint64_t i = 0; i < iters; ++i) {
    a = fmaf(a, 0.9999f, 0.0001f);
    b = fmaf(b, 0.9999f, 0.0001f);
    c = fmaf(c, 0.9999f, 0.0001f);
    d = fmaf(d, 0.9999f, 0.0001f);
  }
  return a + b + c + d;
}

template <StoreKind S>
__device__ __forceinline__ void probe_issue(const ProbeArgs& a, char* dst, uint4 v, const char* smem) {
  if constexpr (S == StoreKind::bulk) {
    if (threadIdx.x == 0) {
      for (uint64_t off = 0; off < a.burst_bytes; off += a.bulk_chunk) {
        uint32_t n = static_cast<uint32_t>(a.burst_bytes - off < a.bulk_chunk ? a.burst_bytes - off : a.bulk_chunk);
        dev::bulk_s2g(dst + off, smem, n);
      }
      dev::bulk_commit();
      dev::bulk_wait_read_all();
    }
  } else {
    const uint64_t vecs = a.burst_bytes / 16;
#pragma unroll 4
    for (uint64_t i = threadIdx.x; i < vecs; i += blockDim.x) {
      char* p = dst + 16 * i;
      if constexpr (S == StoreKind::v4) dev::st_v4(p, v);
      if constexpr (S == StoreKind::v4_noalloc) dev::st_v4_noalloc(p, v);
      if constexpr (S == StoreKind::v4_release) dev::st_v4_release(p, v);
    }
  }
}

template <StoreKind S>
__global__ void __launch_bounds__(1024, 1) probe_kernel(ProbeArgs a) {
  extern __shared__ __align__(128) char dyn_smem[];
  uint64_t* stamps = reinterpret_cast<uint64_t*>(dyn_smem);  // [bursts][2]
  char* smem = dyn_smem + kProbeStampBytes;                   // bulk staging
  const int K = gridDim.x;
  uint4 v{0x01234567u ^ blockIdx.x, 0x89abcdefu, 0xdeadbeefu ^ threadIdx.x, 0x5a5a5a5au};
  if constexpr (S == StoreKind::bulk) {
    for (uint32_t i = threadIdx.x; i < a.bulk_chunk / 16; i += blockDim.x) reinterpret_cast<uint4*>(smem)[i] = v;
    dev::fence_proxy_async_smem();
  }
  if (a.warmup_bytes) {
    ProbeArgs w = a;
    w.burst_bytes = a.warmup_bytes;
    char* dst = static_cast<char*>(
        a.dst.at(probe_dest_rank(a, 0), a.warmup_offset + uint64_t(blockIdx.x) * a.warmup_bytes));
    probe_issue<S>(w, dst, v, smem);
    __syncthreads();
  }
  // Every rank's base pointer, looked up once and kept in registers: a window lookup is a
  // global load and even a shared-memory load queues behind a backlog of stores in the
  // load/store pipeline, which would hide stall time between bursts.
  char* bases[kMaxProbeRanks];
#pragma unroll
  for (int r = 0; r < kMaxProbeRanks; ++r)
    bases[r] = r < a.team.world ? static_cast<char*>(a.dst.at(r, 0)) : nullptr;
  if (a.pre_wait_cycles) dev::spin_until(dev::sm_cycles(), a.pre_wait_cycles);
  float acc = 0.f;
  uint64_t first_start = 0, prev_t0 = 0, prev_t1 = 0;
  const uint64_t g_start = dev::global_ns();
  for (int b = 0; b < a.bursts; ++b) {
    const int dst_rank = probe_dest_rank(a, b);
    const uint64_t slot = a.fresh ? (uint64_t(b) * K + blockIdx.x) : blockIdx.x;
    char* base = bases[0];
#pragma unroll
    for (int r = 1; r < kMaxProbeRanks; ++r) base = r == dst_rank ? bases[r] : base;  // selects, no indexing
    char* dst = base + slot * a.burst_bytes;
    __syncthreads();
    const uint64_t t0 = dev::sm_cycles();
    // The previous burst's stamps are stored inside this burst's issue: a shared store can
    // wait behind the store backlog too, and there that wait is issue time, as it should be.
    if (threadIdx.x == 0) {
      if (b > 0) {
        stamps[2 * b - 2] = prev_t0;
        stamps[2 * b - 1] = prev_t1;
      } else {
        first_start = t0;
      }
    }
    probe_issue<S>(a, dst, v, smem);
    __syncthreads();
    const uint64_t t1 = dev::sm_cycles();
    prev_t0 = t0;
    prev_t1 = t1;
    if (b + 1 < a.bursts) {
      if (a.work_iters) acc += probe_work(a.work_iters, float(b));
      else dev::spin_until(t1, a.gap_cycles);
    }
  }
  if (a.work_iters && acc == 1234.5f) a.sink[blockIdx.x] = acc;  // never true; keeps the work
  if (threadIdx.x == 0) {
    stamps[2 * a.bursts - 2] = prev_t0;
    stamps[2 * a.bursts - 1] = prev_t1;
  }
  __syncthreads();
  const uint64_t g_end = dev::global_ns();
  if (threadIdx.x == 0) {
    a.gtime[2 * blockIdx.x] = g_start;
    a.gtime[2 * blockIdx.x + 1] = g_end;
  }
  // Completion: release a counter on every destination this CTA wrote to.
  for (int i = threadIdx.x; i < 2 * a.bursts; i += blockDim.x)
    a.rec[(uint64_t(i / 2) * K + blockIdx.x) * 2 + (i % 2)] = stamps[i];
  if (threadIdx.x == 0) {
    if constexpr (S == StoreKind::bulk) dev::bulk_wait_all();
    dev::fence_sys();
    const TeamDevice& t = a.team;
    const size_t my_slot = a.counter_offset + sizeof(uint64_t) * t.rank;
    for (int r = 0; r < t.world; ++r) {
      bool wrote = a.dest == DestKind::all_peers ? r != t.rank : r == probe_dest_rank(a, 0);
      if (wrote) dev::flag_add_release(dev::ctrl_slot(t, my_slot, r), 1);
    }
    if (blockIdx.x == 0) {
      bool ok = true;
      for (int r = 0; r < t.world && ok; ++r) {
        bool wrote = a.dest == DestKind::all_peers ? r != t.rank : r == probe_dest_rank(a, 0);
        if (wrote)
          ok = dev::wait_geq(dev::ctrl_slot(t, my_slot, r), a.counter_target, t.status, WaitId::probe_receiver,
                             t.rank, t.timeout_ns);
      }
      *a.done_cycles = ok ? dev::sm_cycles() - first_start : 0;
    }
  }
}

// Measures the SM clock against the global nanosecond timer (for cycle -> time).
__global__ void probe_clock(uint64_t spin_ns, uint64_t* out) {
  const uint64_t g0 = dev::global_ns(), c0 = dev::sm_cycles();
  uint64_t g = g0;
  while (g - g0 < spin_ns) g = dev::global_ns();
  const uint64_t c1 = dev::sm_cycles();
  out[0] = g - g0;
  out[1] = c1 - c0;
}

// Cycles per iteration of probe_work (to turn a requested gap into work).
__global__ void probe_work_calibrate(uint64_t iters, uint64_t* cycles, float* sink) {
  const uint64_t c0 = dev::sm_cycles();
  float r = probe_work(iters, float(threadIdx.x));
  __syncthreads();
  const uint64_t c1 = dev::sm_cycles();
  if (threadIdx.x == 0) cycles[blockIdx.x] = c1 - c0;
  if (r == 1234.5f) sink[0] = r;
}

}  // namespace xstage::kernels
