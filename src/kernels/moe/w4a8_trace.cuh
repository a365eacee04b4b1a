// Diagnostic per-stage trace of the W4A8 mainloop: compiled only in the MoE measurement build
// (XSTAGE_MOE_STUDY, study.hpp); without it every W4_TRACE is empty and the shipped kernels are
// unchanged.
//
// With it, each CTA records, for its first kW4TraceStages ring stages, the SM clock (low 32
// bits of clock64) at fixed points of every role into trace[cta][stage][kW4TraceSlots]
// (0xffffffff = not reached), and launch_moe_w4a8 writes the buffer of the last launch to the
// file named by XSTAGE_W4A8_TRACE_FILE (a header line, then one line per CTA and stage).
// python/w4a8_trace.py summarises it. The register-operand kernels (w4a8_rs.cuh) record their
// own slots (W4RsTraceSlot) and their launcher writes "register-operand" and the piece count
// in the header line (python/w4a8_trace.py --rs).
#pragma once
#include "kernels/moe/study.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

namespace xstage::kernels::moe {

inline constexpr int kW4TraceStages = 64;
inline constexpr int kW4TraceSlots = 20;

// Slots. Producer (one thread): 0 = empty wait done (TMA issued right after).
// Converter warp 1, lane 0: 1 = full wait done, 2 = cempty wait done, 3 = cfull arrived.
// Consumer warp group w (thread 0 of the group), base 4 + 5 w: +0 = full and cfull waits done,
// +1 = wgmmas committed, +2 = own conversion of the next stage done, +3 = wgmmas complete,
// +4 = promoted and released.
enum W4TraceSlot : int {
  kTrProducerIssue = 0,
  kTrConvFull = 1,
  kTrConvEmpty = 2,
  kTrConvArrived = 3,
  kTrConsumerBase = 4,
};

// Register-operand kernels: slot 0 = producer's empty wait done (TMA issued right after);
// consumer warp group g (thread 0 of the group) at base 4 + 8 g, per K block it:
//   two pieces: +0 piece 0 issued, +1 piece 0 complete, +2 piece 0 promoted, +3 piece 1 issued,
//               +4 piece 1 complete, +5 promoted and released, +6 full of block it + 1 seen,
//               +7 block it + 1 converted;
//   one piece:  +0 issued, +1 full of block it + 1 seen, +2 block it + 1 converted, +3 complete,
//               +4 promoted and released.
enum W4RsTraceSlot : int {
  kTrRsConsumerBase = 4,
  kTrRsConsumerStride = 8,
};

#ifdef XSTAGE_MOE_STUDY
// Host side of a traced launch: XSTAGE_W4A8_TRACE_FILE names the file; begin() returns the
// device buffer (null when no file is asked for), finish() waits for the launch and writes
// `header` and one line per CTA and stage.
struct W4TraceHost {
  const char* file = std::getenv("XSTAGE_W4A8_TRACE_FILE");
  size_t words = 0;
  uint32_t* buf = nullptr;
  cudaError_t begin(int ctas, cudaStream_t stream) {
    if (file == nullptr) return cudaSuccess;
    static uint32_t* keep = nullptr;  // diagnostic build only: one buffer for the process
    static size_t cap = 0;
    words = static_cast<size_t>(ctas) * kW4TraceStages * kW4TraceSlots;
    if (cap < words) {
      if (keep != nullptr) cudaFree(keep);
      keep = nullptr;
      cap = 0;
      if (cudaMalloc(&keep, words * 4) != cudaSuccess) return cudaErrorMemoryAllocation;
      cap = words;
    }
    buf = keep;
    return cudaMemsetAsync(buf, 0xff, words * 4, stream);
  }
  cudaError_t finish(cudaStream_t stream, int ctas, const char* header) const {
    if (buf == nullptr) return cudaSuccess;
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return e;
    std::vector<uint32_t> h(words);
    e = cudaMemcpy(h.data(), buf, words * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return e;
    if (FILE* f = std::fopen(file, "w")) {
      std::fprintf(f, "%s\n", header);
      for (int c = 0; c < ctas; ++c)
        for (int s = 0; s < kW4TraceStages; ++s) {
          std::fprintf(f, "%d %d", c, s);
          for (int k = 0; k < kW4TraceSlots; ++k)
            std::fprintf(f, " %u", h[(static_cast<size_t>(c) * kW4TraceStages + s) * kW4TraceSlots + k]);
          std::fprintf(f, "\n");
        }
      std::fclose(f);
    }
    return cudaSuccess;
  }
};
#endif

}  // namespace xstage::kernels::moe

#ifdef XSTAGE_MOE_STUDY
#define W4_TRACE(buf, stage, slot)                                                                         \
  do {                                                                                                     \
    if ((buf) != nullptr && (stage) < ::xstage::kernels::moe::kW4TraceStages)                              \
      (buf)[(static_cast<size_t>(blockIdx.x) * ::xstage::kernels::moe::kW4TraceStages + (stage)) *         \
                ::xstage::kernels::moe::kW4TraceSlots +                                                    \
            (slot)] = static_cast<uint32_t>(clock64());                                                    \
  } while (0)
#else
#define W4_TRACE(buf, stage, slot) \
  do {                             \
  } while (0)
#endif
