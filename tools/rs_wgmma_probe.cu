// rs_wgmma_probe: how a register-operand (RS) FP8 wgmma shares an SM sub-partition with other
// work, against the shared-memory-operand (SS) form. A measurement tool for the W4A8 kernels
// (docs/moe-gemm-w4a8.md §256-token tiles), not shipped; the data it multiplies is a fixed pattern.
//
// One CTA per SM, three warp groups:
//   T0, T1  tensor groups: each loop iteration issues one "piece" (four m64n128k32 e4m3 wgmmas,
//           K = 128, from zero), commits and waits for it - the shape of one token piece of
//           the W4A8 256-token tile. RS: A (weights) from registers; SS: A from shared memory.
//   C       CUDA-core group: each iteration is a promotion of one piece (64 FFMAs into a
//           running accumulator), with its four scale loads from shared memory (mode "lds") or
//           scales in registers (mode "reg"); or a chain of dependent loads from shared memory
//           or L1-resident global memory (per-load latency).
// Each group reports cycles per iteration (SM clock). The CUDA-core group runs until tensor
// group T0 is done (or a fixed count when there is none), so its rate is measured under
// whatever the tensor groups do. Per tensor piece it also reports the issue time (first
// wgmma to commit) and the wait (commit to completion).
//
//   rs_wgmma_probe [--iters N]     prints one line per configuration
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_desc.hpp>

namespace {

#define PROBE_CHECK(x)                                                                      \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "rs_wgmma_probe: %s failed: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

enum Tensor : int { kNone = 0, kRs = 1, kSs = 2 };
enum Cuda : int { kNoCuda = 0, kFfmaReg = 1, kFfmaLds = 2, kLdsChain = 3, kLdgChain = 4, kFfmaLds64 = 5, kFfmaLds32 = 6,
                  kLds128Chain = 7, kFfmaLdsAhead = 8 };

constexpr int kThreads = 384;
constexpr int kSmemB = 16384;  // 128 tokens x 128 K e4m3, K-major, 128-byte swizzle
constexpr int kSmemA = 8192;   // 64 rows x 128 K (SS form)
constexpr int kSmemS = 4096;   // scales of the CUDA-core group
constexpr int kSmemAlloc = 160 * 1024;  // one CTA per SM

struct Out {
  unsigned long long t_cycles[2];  // tensor group g: cycles of the whole loop
  unsigned long long t_issue[2];   // sum of (commit - first wgmma)
  unsigned long long c_cycles;     // CUDA-core group: cycles of its loop
  unsigned long long c_iters;
  float sink;
};

__device__ __forceinline__ unsigned long long clk() {
  unsigned long long c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
  return c;
}

// K-major, 128-byte swizzle descriptor of `rows` x 128 bytes at smem address `addr`.
__device__ __forceinline__ uint64_t desc_k128(uint32_t addr) {
  cute::GmmaDescriptor d;
  d.desc_ = 0;
  d.bitfield.start_address_ = static_cast<uint16_t>(addr >> 4);
  d.bitfield.leading_byte_offset_ = 1;
  d.bitfield.stride_byte_offset_ = 1024 >> 4;  // 8 rows x 128 B
  d.bitfield.layout_type_ = 1;                 // SWIZZLE_128B
  return d.desc_;
}

// A 16-byte shared-memory load the compiler can neither hoist nor merge (the probe's data is
// loop-invariant, so a plain load would leave the loop).
__device__ __forceinline__ float4 lds128(const float* p) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p)))
               : "memory");
  return v;
}

#define PROBE_D(a) a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], \
    a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27], a[28], a[29],  \
    a[30], a[31], a[32], a[33], a[34], a[35], a[36], a[37], a[38], a[39], a[40], a[41], a[42], a[43], a[44],  \
    a[45], a[46], a[47], a[48], a[49], a[50], a[51], a[52], a[53], a[54], a[55], a[56], a[57], a[58], a[59],  \
    a[60], a[61], a[62], a[63]

template <int kT>
__device__ __forceinline__ void piece(float (&d)[64], const uint32_t (&a)[4][4], uint32_t sa, uint32_t sb) {
  using Rs = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_RS_TN<>;
  using Ss = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
  CUTE_UNROLL
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
  cute::warpgroup_arrive();
  CUTE_UNROLL
  for (int k = 0; k < 4; ++k) {
    const auto scale = k == 0 ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One;
    const uint64_t db = desc_k128(sb + 32 * k);
    if constexpr (kT == kRs) {
      Rs::fma(a[k][0], a[k][1], a[k][2], a[k][3], db, PROBE_D(d), scale);
    } else {
      Ss::fma(desc_k128(sa + 32 * k), db, PROBE_D(d), scale);
    }
  }
  cute::warpgroup_commit_batch();
}

template <int kT0, int kT1, int kC>
__global__ void __launch_bounds__(kThreads, 1) probe_kernel(int iters, Out* out, const uint32_t* chain) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128;
  // Fixed small e4m3 values (no NaN), scales near 1.
  for (int i = tid; i < kSmemB + kSmemA; i += kThreads) smem[i] = static_cast<unsigned char>(0x30 + (i * 37) % 16);
  float* scales = reinterpret_cast<float*>(smem + kSmemB + kSmemA);
  for (int i = tid; i < kSmemS / 4; i += kThreads) scales[i] = 1.0f + 1e-3f * static_cast<float>(i % 7);
  volatile int* done = reinterpret_cast<volatile int*>(smem + kSmemB + kSmemA + kSmemS);
  if (tid == 0) *done = 0;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  Out& o = out[blockIdx.x];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sb = sbase, sa = sbase + kSmemB;

  static_assert(kT1 == kNone || kT1 == kT0, "both tensor groups run the same form");
  if (wg < 2) {
    if ((wg == 0 ? kT0 : kT1) == kNone) {
      if (wt == 0) o.t_cycles[wg] = o.t_issue[wg] = 0;
      return;
    }
    uint32_t a[4][4];
    CUTE_UNROLL
    for (int k = 0; k < 4; ++k)
      CUTE_UNROLL
      for (int j = 0; j < 4; ++j) a[k][j] = 0x34343434u + 0x01010101u * ((wt + j + k) % 8);
    float d[64];
    CUTE_UNROLL
    for (int i = 0; i < 64; ++i) d[i] = 0.f;
    float acc = 0.f;
    unsigned long long issue = 0;
    const unsigned long long t0 = clk();
    for (int it = 0; it < iters; ++it) {
      const unsigned long long i0 = clk();
      piece<kT0>(d, a, sa, sb);
      const unsigned long long i1 = clk();
      issue += i1 - i0;
      cute::warpgroup_wait<0>();
      CUTE_UNROLL
      for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
      acc += d[0] + d[63];
    }
    const unsigned long long t1 = clk();
    if (wg == 0 && wt == 0) *done = 1;
    if (wt == 0) {
      o.t_cycles[wg] = t1 - t0;
      o.t_issue[wg] = issue;
    }
    if (acc == 12345.f) o.sink = acc;
    return;
  }
  // CUDA-core group.
  if constexpr (kC == kNoCuda) {
    if (wt == 0) o.c_cycles = o.c_iters = 0;
    return;
  } else if constexpr (kC == kLdsChain || kC == kLdgChain || kC == kLds128Chain) {
    // One iteration = 16 dependent loads (each address comes from the previous load): the
    // latency of a shared-memory / L1-resident global load under the tensor groups' work.
    uint32_t* ring = reinterpret_cast<uint32_t*>(scales);
    if (wt < 64) ring[wt] = static_cast<uint32_t>((wt + 17) % 64);
    asm volatile("bar.sync 1, 128;" ::: "memory");
    uint32_t idx = static_cast<uint32_t>(wt % 64);
    unsigned long long n = 0;
    const unsigned long long t0 = clk();
    const long long cap = kT0 == kNone ? iters : (1ll << 40);
    while (n < static_cast<unsigned long long>(cap)) {
      CUTE_UNROLL
      for (int j = 0; j < 16; ++j) {
        if constexpr (kC == kLdsChain) {
          asm volatile("ld.shared.u32 %0, [%1];" : "=r"(idx) : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(ring + idx))) : "memory");
        } else if constexpr (kC == kLds128Chain) {
          uint32_t y, z, w;
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(idx), "=r"(y), "=r"(z), "=r"(w)
                       : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(ring + (idx & ~3u)))) : "memory");
          idx += (y + z + w) & 0x80000000u;  // keeps all four live (0 for this data)
        } else {
          asm volatile("ld.global.ca.u32 %0, [%1];" : "=r"(idx) : "l"(chain + idx) : "memory");
        }
      }
      ++n;
      if (kT0 != kNone && *done) break;
    }
    const unsigned long long t1 = clk();
    if (wt == 0) {
      o.c_cycles = (t1 - t0) / 16;  // per load
      o.c_iters = n;
    }
    if (idx == 12345u) o.sink = 1.f;
  } else if constexpr (kC == kFfmaLdsAhead) {
    // The promotion with its scales loaded one iteration ahead (software pipelined): the
    // loads of iteration n + 1 are issued before the FFMAs of iteration n.
    float part[32], run[32];  // 32 products and sums reused: the registers hold two scale sets
    CUTE_UNROLL
    for (int i = 0; i < 32; ++i) {
      part[i] = 1e-3f * static_cast<float>(i + wt);
      run[i] = 0.f;
    }
    const int q = wt % 4;
    float4 cur[8], nxt[8];
    CUTE_UNROLL
    for (int c = 0; c < 8; ++c) cur[c] = *reinterpret_cast<const float4*>(&scales[q * 68 + 4 * c]);
    unsigned long long n = 0;
    const unsigned long long t0 = clk();
    const long long cap = kT0 == kNone ? iters : (1ll << 40);
    while (n < static_cast<unsigned long long>(cap)) {
      const int off = static_cast<int>(n & 1) * 4;
      CUTE_UNROLL
      for (int c = 0; c < 8; ++c) nxt[c] = lds128(&scales[q * 68 + 4 * c + off]);
      CUTE_UNROLL
      for (int c = 0; c < 8; ++c) {
        CUTE_UNROLL
        for (int e = 0; e < 8; ++e) {
          const int i = 8 * c + e;
          const float s = (i & 4) ? ((i & 1) ? cur[c].w : cur[c].z) : ((i & 1) ? cur[c].y : cur[c].x);
          run[i & 31] = fmaf(part[i & 31], s, run[i & 31]);
        }
      }
      CUTE_UNROLL
      for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(part[i])::"memory");
      CUTE_UNROLL
      for (int c = 0; c < 8; ++c) cur[c] = nxt[c];
      ++n;
      if (kT0 != kNone && *done) break;
    }
    const unsigned long long t1 = clk();
    float s = 0.f;
    CUTE_UNROLL
    for (int i = 0; i < 32; ++i) s += run[i];
    if (wt == 0) {
      o.c_cycles = t1 - t0;
      o.c_iters = n;
    }
    if (s == 12345.f) o.sink = s;
  } else {
    float part[64], run[64];
    CUTE_UNROLL
    for (int i = 0; i < 64; ++i) {
      part[i] = 1e-3f * static_cast<float>(i + wt);
      run[i] = 0.f;
    }
    const int q = wt % 4;
    float4 sreg = make_float4(1.f, 1.001f, 0.999f, 1.002f);
    unsigned long long n = 0;
    const unsigned long long t0 = clk();
    const long long cap = kT0 == kNone ? iters : (1ll << 40);
    while (n < static_cast<unsigned long long>(cap)) {
      CUTE_UNROLL
      for (int c = 0; c < 8; ++c) {
        float4 s4 = sreg;
        if constexpr (kC == kFfmaLds) s4 = lds128(&scales[q * 68 + 4 * c]);
        if constexpr (kC == kFfmaLds64) {
          const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(&scales[q * 68 + 4 * c]));
          asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(s4.x), "=f"(s4.y) : "r"(a) : "memory");
          asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(s4.z), "=f"(s4.w) : "r"(a + 8) : "memory");
        }
        if constexpr (kC == kFfmaLds32) {
          const volatile float* v = &scales[q * 68 + 4 * c];
          s4 = make_float4(v[0], v[1], v[2], v[3]);
        }
        CUTE_UNROLL
        for (int e = 0; e < 8; ++e) {
          const int i = 8 * c + e;
          const float s = (i & 4) ? ((i & 1) ? s4.w : s4.z) : ((i & 1) ? s4.y : s4.x);
          run[i] = fmaf(part[i], s, run[i]);
        }
      }
      CUTE_UNROLL
      for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(part[i])::"memory");
      ++n;
      if (kT0 != kNone && *done) break;
    }
    const unsigned long long t1 = clk();
    float s = 0.f;
    CUTE_UNROLL
    for (int i = 0; i < 64; ++i) s += run[i];
    if (wt == 0) {
      o.c_cycles = t1 - t0;
      o.c_iters = n;
    }
    if (s == 12345.f) o.sink = s;
  }
}

// Two tensor groups that each promote their own piece after its wait (the register-operand
// W4A8 kernel's loop without the conversion): kP = 0 no promotion, 1 scales loaded after the
// wait (LDS.128 interleaved with the FFMAs, as the kernel), 2 scales loaded between the issue
// and the wait, 3 scales in registers. 256 threads: the registers allow 64 + 64 + 32.
template <int kT, int kP>
__global__ void __launch_bounds__(256, 1) pair_kernel(int iters, Out* out, const uint32_t*) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128;
  for (int i = tid; i < kSmemB + kSmemA; i += 256) smem[i] = static_cast<unsigned char>(0x30 + (i * 37) % 16);
  float* scales = reinterpret_cast<float*>(smem + kSmemB + kSmemA);
  for (int i = tid; i < kSmemS / 4; i += 256) scales[i] = 1.0f + 1e-3f * static_cast<float>(i % 7);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  Out& o = out[blockIdx.x];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint32_t a[4][4];
  CUTE_UNROLL
  for (int k = 0; k < 4; ++k)
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) a[k][j] = 0x34343434u + 0x01010101u * ((wt + j + k) % 8);
  float d[64], run[64];
  CUTE_UNROLL
  for (int i = 0; i < 64; ++i) d[i] = run[i] = 0.f;
  const int q = wt % 4;
  float4 sreg = make_float4(1.f, 1.001f, 0.999f, 1.002f);
  unsigned long long issue = 0;
  const unsigned long long t0 = clk();
  for (int it = 0; it < iters; ++it) {
    const unsigned long long i0 = clk();
    piece<kT>(d, a, sbase + kSmemB, sbase);
    const unsigned long long i1 = clk();
    issue += i1 - i0;
    const float* srow = &scales[q * 68 + 4 * (it & 1)];
    float4 s4[8];
    if constexpr (kP == 2) {
      CUTE_UNROLL
      for (int c = 0; c < 8; ++c) s4[c] = lds128(srow + 4 * c);
    }
    cute::warpgroup_wait<0>();
    CUTE_UNROLL
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
    if constexpr (kP != 0) {
      CUTE_UNROLL
      for (int c = 0; c < 8; ++c) {
        float4 v = sreg;
        if constexpr (kP == 1) v = lds128(srow + 4 * c);
        if constexpr (kP == 2) v = s4[c];
        CUTE_UNROLL
        for (int e = 0; e < 8; ++e) {
          const int i = 8 * c + e;
          const float sc = (i & 4) ? ((i & 1) ? v.w : v.z) : ((i & 1) ? v.y : v.x);
          run[i] = fmaf(d[i], sc, run[i]);
        }
      }
    } else {
      run[0] += d[0];
    }
  }
  const unsigned long long t1 = clk();
  float sum = 0.f;
  CUTE_UNROLL
  for (int i = 0; i < 64; ++i) sum += run[i];
  if (wt == 0) {
    o.t_cycles[wg] = t1 - t0;
    o.t_issue[wg] = issue;
    if (wg == 0) o.c_cycles = o.c_iters = 0;
  }
  if (sum == 12345.f) o.sink = sum;
}

struct Config {
  const char* name;
  void (*kernel)(int, Out*, const uint32_t*);
  int threads = kThreads;
};

template <int kT0, int kT1, int kC>
Config config(const char* name) {
  return Config{name, probe_kernel<kT0, kT1, kC>};
}
template <int kT, int kP>
Config pair(const char* name) {
  return Config{name, pair_kernel<kT, kP>, 256};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 4000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::printf(
          "usage: rs_wgmma_probe [--iters N]\n"
          "Times register-operand (rs) and shared-operand (ss) FP8 wgmma pieces (4 x m64n128k32)\n"
          "alone, in two warp groups, and next to a CUDA-core warp group doing promotions\n"
          "(64 FFMAs with scales from registers or shared memory). One CTA per SM on every SM;\n"
          "cycles are SM clocks, medians over the CTAs. Needs an sm_90a GPU.\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (iters < 10) {
    std::fprintf(stderr, "rs_wgmma_probe: --iters must be >= 10\n");
    return 2;
  }
  int dev = 0, sms = 0, major = 0;
  PROBE_CHECK(cudaGetDevice(&dev));
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  PROBE_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major != 9) {
    std::fprintf(stderr, "rs_wgmma_probe: needs a Hopper (sm_90a) GPU, found compute capability %d.x\n", major);
    return 1;
  }
  const std::vector<Config> configs = {
      config<kRs, kNone, kNoCuda>("rs alone"),
      config<kSs, kNone, kNoCuda>("ss alone"),
      config<kNone, kNone, kFfmaReg>("promote(reg) alone"),
      config<kNone, kNone, kFfmaLds>("promote(lds) alone"),
      config<kRs, kNone, kFfmaReg>("rs + promote(reg)"),
      config<kSs, kNone, kFfmaReg>("ss + promote(reg)"),
      config<kRs, kNone, kFfmaLds>("rs + promote(lds)"),
      config<kSs, kNone, kFfmaLds>("ss + promote(lds)"),
      config<kRs, kRs, kNoCuda>("rs + rs"),
      config<kSs, kSs, kNoCuda>("ss + ss"),
      config<kRs, kRs, kFfmaLds>("rs + rs + promote(lds)"),
      config<kSs, kSs, kFfmaLds>("ss + ss + promote(lds)"),
      config<kNone, kNone, kFfmaLds64>("promote(lds64) alone"),
      config<kRs, kNone, kFfmaLds64>("rs + promote(lds64)"),
      config<kRs, kRs, kFfmaLds64>("rs + rs + promote(lds64)"),
      config<kNone, kNone, kFfmaLds32>("promote(lds32) alone"),
      config<kRs, kNone, kFfmaLds32>("rs + promote(lds32)"),
      config<kRs, kRs, kFfmaLds32>("rs + rs + promote(lds32)"),
      config<kRs, kRs, kFfmaReg>("rs + rs + promote(reg)"),
      config<kSs, kSs, kFfmaReg>("ss + ss + promote(reg)"),
      pair<kRs, 0>("pair rs, no promotion"),
      pair<kRs, 1>("pair rs, promote lds after"),
      pair<kRs, 2>("pair rs, promote lds before"),
      pair<kRs, 3>("pair rs, promote reg"),
      pair<kSs, 1>("pair ss, promote lds after"),
      pair<kSs, 2>("pair ss, promote lds before"),
      pair<kSs, 3>("pair ss, promote reg"),
      config<kNone, kNone, kFfmaLdsAhead>("promote(lds ahead) alone"),
      config<kRs, kNone, kFfmaLdsAhead>("rs + promote(lds ahead)"),
      config<kRs, kRs, kFfmaLdsAhead>("rs + rs + promote(lds ahead)"),
      config<kSs, kSs, kFfmaLdsAhead>("ss + ss + promote(lds ahead)"),
      config<kNone, kNone, kLds128Chain>("lds128 chain alone"),
      config<kRs, kNone, kLds128Chain>("rs + lds128 chain"),
      config<kRs, kRs, kLds128Chain>("rs + rs + lds128 chain"),
      config<kNone, kNone, kLdsChain>("lds chain alone"),
      config<kRs, kNone, kLdsChain>("rs + lds chain"),
      config<kSs, kNone, kLdsChain>("ss + lds chain"),
      config<kRs, kRs, kLdsChain>("rs + rs + lds chain"),
      config<kNone, kNone, kLdgChain>("ldg chain alone"),
      config<kRs, kNone, kLdgChain>("rs + ldg chain"),
      config<kRs, kRs, kLdgChain>("rs + rs + ldg chain"),
  };
  // The global chain: 64 words, word i holds (i + 17) % 64 (L1-resident after the first pass).
  uint32_t* d_chain = nullptr;
  {
    std::vector<uint32_t> hc(64);
    for (int i = 0; i < 64; ++i) hc[i] = static_cast<uint32_t>((i + 17) % 64);
    PROBE_CHECK(cudaMalloc(&d_chain, 64 * sizeof(uint32_t)));
    PROBE_CHECK(cudaMemcpy(d_chain, hc.data(), 64 * sizeof(uint32_t), cudaMemcpyHostToDevice));
  }
  Out* d_out = nullptr;
  PROBE_CHECK(cudaMalloc(&d_out, sizeof(Out) * sms));
  std::vector<Out> h(sms);
  std::printf("# rs_wgmma_probe: %d SMs, %d pieces per tensor group (piece = 4 x m64n128k32 e4m3, 1.05 M MACs)\n", sms,
              iters);
  std::printf("%-26s %12s %12s %12s %12s %12s\n", "config", "T0 cyc/pc", "T0 issue/pc", "T1 cyc/pc", "T1 issue/pc",
              "C cyc/iter");
  std::printf("# C cyc/iter: cycles per promotion (64 FFMAs), or per load for the chain configurations\n");
  for (const Config& c : configs) {
    PROBE_CHECK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemAlloc));
    for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
      PROBE_CHECK(cudaMemset(d_out, 0, sizeof(Out) * sms));
      c.kernel<<<sms, c.threads, kSmemAlloc>>>(iters, d_out, d_chain);
      PROBE_CHECK(cudaGetLastError());
      PROBE_CHECK(cudaDeviceSynchronize());
    }
    PROBE_CHECK(cudaMemcpy(h.data(), d_out, sizeof(Out) * sms, cudaMemcpyDeviceToHost));
    std::vector<double> t0, i0, t1, i1, cc;
    for (const Out& o : h) {
      if (o.t_cycles[0]) t0.push_back(double(o.t_cycles[0]) / iters), i0.push_back(double(o.t_issue[0]) / iters);
      if (o.t_cycles[1]) t1.push_back(double(o.t_cycles[1]) / iters), i1.push_back(double(o.t_issue[1]) / iters);
      if (o.c_iters) cc.push_back(double(o.c_cycles) / double(o.c_iters));
    }
    std::printf("%-26s %12.1f %12.1f %12.1f %12.1f %12.1f\n", c.name, median(t0), median(i0), median(t1), median(i1),
                median(cc));
  }
  PROBE_CHECK(cudaFree(d_out));
  PROBE_CHECK(cudaFree(d_chain));
  return 0;
}
