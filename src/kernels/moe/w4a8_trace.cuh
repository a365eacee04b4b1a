// Diagnostic per-stage trace of the W4A8 mainloop (docs/moe-gemm-w4a8.md, "W4A8 stage trace"): compiled
// only with -DXSTAGE_W4A8_TRACE (scripts/moe-w4a8-trace-run builds it in its own directory);
// without it every W4_TRACE is empty and the shipped kernels are unchanged.
//
// With it, each CTA records, for its first kW4TraceStages ring stages, the SM clock (low 32
// bits of clock64) at fixed points of every role into trace[cta][stage][kW4TraceSlots]
// (0xffffffff = not reached), and launch_moe_w4a8 writes the buffer of the last launch to the
// file named by XSTAGE_W4A8_TRACE_FILE (a header line, then one line per CTA and stage).
// python/w4a8_trace.py summarises it.
#pragma once
#include <cstdint>

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

}  // namespace xstage::kernels::moe

#ifdef XSTAGE_W4A8_TRACE
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
