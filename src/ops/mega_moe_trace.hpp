// Host-side summary of the Mega-MoE kernel's per-tile trace (MegaMoeArgs::trace, layout in
// src/kernels/moe/mega_args.hpp): per tile kind the mean mainloop, epilogue, store tail,
// SwiGLU phases and input wait; the CTAs' busy share; the prologue (first tile) and the spread
// of the last tile's end; the phase breakdown (MegaMoePhases). Plain host code, unit-tested on
// synthetic traces.
#pragma once
#include <cstdint>
#include <vector>

#include "xstage/ops/mega_moe.hpp"

namespace xstage::ops {

// trace: kMegaTraceWords words per list position (word 0 = CTA | kind << 16; positions no tile
// recorded hold 0xffffffff); cta_clock: kMegaClockWords per CTA ({clock64, globaltimer ns} at
// start and end, clock64 at the reduce's start; kernels/moe/mega_args.hpp); sm_ghz: SM cycles per ns.
MegaMoeTileStats summarize_mega_trace(const std::vector<uint32_t>& trace, const std::vector<uint64_t>& cta_clock,
                                      double sm_ghz);

}  // namespace xstage::ops
