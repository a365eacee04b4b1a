// Arguments of the Mega-MoE persistent kernel (src/kernels/moe/mega_kernel.cuh) beyond the
// transport's (EpMoeArgs: routing, symmetric buffers, cross-rank counters): this rank's local
// scratch and counters, the tile order's parameters and the measurement hooks. Plain data,
// filled by src/ops/mega_moe_op.cpp. Protocol in docs/megamoe.md ("The kernel").
#pragma once
#include <cstdint>

#include "kernels/moe/ep_args.hpp"

namespace xstage::kernels::moe {

// Local experts per rank the kernel's shared-memory layout holds (E <= 1024 over >= 2 ranks).
inline constexpr int kMegaMaxLocalExperts = kEpMaxExperts / 2;

// Words 8-10 (measurement build XSTAGE_MEGA_PRODUCER_TRACE only; the register-operand kernels'
// producer, mega_common.cuh): its claim, its hand-over (push) and the end of its K-block loads, SM
// cycles after the CTA's start clock.
#ifdef XSTAGE_MEGA_PRODUCER_TRACE
inline constexpr int kMegaTraceWords = 11;
#else
inline constexpr int kMegaTraceWords = 8;
#endif
// MegaMoeArgs::cta_clock words per CTA: clock64 and globaltimer ns at the start, the same at the
// end, and clock64 when the reduce starts (every combine piece arrived; the phase breakdown).
inline constexpr int kMegaClockWords = 5;

struct MegaMoeArgs {
  EpMoeArgs ep;
  int intermediate = 0;

  // Local scratch (device), all reused across calls; "by parity" = two halves, the call with
  // epoch e uses half e & 1 and zeroes the other half for the next call.
  int32_t* hist = nullptr;       // [2][E] this rank's rows per expert, by parity
  uint32_t* hist_done = nullptr;  // CTAs that added their histogram share (grows by grid per call)
  uint32_t* l1_done = nullptr;   // [2][max_blocks] Linear-1 tiles finished per block, by parity
  int max_blocks = 0;            // cap / 64 + local experts (the smallest block, xstage/mega_tile.hpp)
  uint64_t* rows_base = nullptr;  // [2] rows received before this call, by parity (monotonic flag)
  uint32_t* ctas_done = nullptr;  // CTAs past their last tile (grows by grid per call)
  uint8_t* h = nullptr;           // [cap, I] fp8 SwiGLU output
  float* h_scales = nullptr;      // [I/128, cap]

  // Tile order (moe_tile_order.hpp).
  int order = 0;  // moe::OrderKind
  int l1_per_l2 = 1;
  int lead = 0;
  // Interleaved: Linear-2 tiles wanted after the last Linear-1 tile (0: the plain order); the
  // kernel takes the last ceil(tail_l2 / n2) blocks' Linear-2 tiles there (moe::set_tail_tiles).
  int tail_l2 = 0;
  // Tile claiming (tile_queue.cuh): 1 = each CTA's producer takes the next list position from
  // tile_next (one atomic per tile, in time order); 0 = the static split c, c + K, ...
  int dynamic_claim = 1;
  uint32_t* tile_next = nullptr;  // [2] next unclaimed list position, by parity

  // Measurement. control_local: every combine row goes to this rank's own combine buffer (a
  // local-store control for the span measurement; the layer's output is then meaningless).
  int control_local = 0;
  uint32_t* spans = nullptr;       // [max_blocks * n2 * 2] sender-visible combine span of each
                                   // Linear-2 warp-group piece, SM cycles; null: not recorded
  uint64_t* cta_clock = nullptr;   // [grid][kMegaClockWords] per CTA, see kMegaClockWords
  // [tiles][kMegaTraceWords] per list position: CTA | kind << 16, start (SM cycles after the CTA's start
  // clock), mainloop cycles, epilogue cycles, producer input-wait cycles, the epilogue's store
  // tail (copy-out + fences + barrier, from the destination's tile_stored hook), and for
  // Linear-1 the cycles from the mainloop's end to the up values' hand-over and to the fp8
  // rows being staged; null: not recorded (needs cta_clock and trace_hook).
  uint32_t* trace = nullptr;
  uint32_t* trace_hook = nullptr;  // [3][grid] per CTA's first consumer thread: last store tail, mark 0, mark 1

  // Per-token W4A8 (mega_w4a8_tok_kernel.cuh): h in bf16 before its per-token quantisation, and
  // each token's |h| maximum (float bits; zero between calls: the quantisation resets it).
  // h_scales then holds one scale per token ([cap]).
  // h_qclaim: each block's quantisation chunks claimed so far in this call (docs/megamoe.md
  // "Per-token activations in the fused kernel"; zeroed by the call's prologue).
  uint16_t* h16 = nullptr;       // [cap, I]
  uint32_t* h_amax = nullptr;    // [cap]
  uint32_t* h_qclaim = nullptr;  // [max_blocks]
};

}  // namespace xstage::kernels::moe
