// The Mega-MoE per-tile trace summary (src/ops/mega_moe_trace.hpp) on a synthetic trace whose
// every number is known: per-kind means, unrecorded positions and waits, CTAs out of range,
// the busy share, the prologue (first tile), the last tile's end across CTAs and the phase breakdown.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/moe/mega_args.hpp"
#include "ops/mega_moe_trace.hpp"

using namespace xstage;

namespace {

constexpr uint32_t kNone = 0xffffffffu;

// One position: CTA | kind << 16, start, mainloop, epilogue, input wait, store tail, hand-over, staged.
void tile(std::vector<uint32_t>& tr, uint32_t cta, uint32_t kind, uint32_t start, uint32_t ml, uint32_t ep,
          uint32_t wait, uint32_t tail, uint32_t handover = 0, uint32_t staged = 0) {
  for (uint32_t w : {cta | (kind << 16), start, ml, ep, wait, tail, handover, staged}) tr.push_back(w);
}

}  // namespace

TEST(MegaMoeTrace, SummarisesAKnownTrace) {
  static_assert(kernels::moe::kMegaTraceWords == 8, "the synthetic trace writes 8 words per position");
  static_assert(kernels::moe::kMegaClockWords == 5, "the synthetic clocks write 5 words per CTA");
  // 1 cycle per ns: 1000 cycles = 1 us. CTA 0 starts at 5000 ns and runs 20 us, its reduce
  // starting 16 us in; CTA 1 starts 1 us later and runs 15 us, its reduce 10 us in.
  const std::vector<uint64_t> clk{1000, 5000, 21000, 25000, 17000, 0, 6000, 15000, 21000, 10000};
  std::vector<uint32_t> tr;
  tile(tr, 0, 1, 2000, 5000, 1000, 100, 300, 200, 600);  // Linear-1 on CTA 0: [2, 8) us
  tile(tr, 1, 2, 1000, 4000, 2000, kNone, 500);          // Linear-2 on CTA 1: [1, 7) us, wait not recorded
  for (int i = 0; i < 8; ++i) tr.push_back(kNone);        // a position no tile recorded
  tile(tr, 0, 2, 9000, 3000, 1000, 400, 700);             // Linear-2 on CTA 0: [9, 13) us
  tile(tr, 5, 1, 0, 99000, 99000, 0, 0);                  // a CTA the clocks do not know: ignored
  const ops::MegaMoeTileStats s = ops::summarize_mega_trace(tr, clk, 1.0);

  EXPECT_EQ(s.l1.tiles, 1);
  EXPECT_DOUBLE_EQ(s.l1.mainloop_us, 5.0);
  EXPECT_DOUBLE_EQ(s.l1.epilogue_us, 1.0);
  EXPECT_DOUBLE_EQ(s.l1.input_wait_us, 0.1);
  EXPECT_DOUBLE_EQ(s.l1.store_tail_us, 0.3);
  EXPECT_DOUBLE_EQ(s.l1.handover_us, 0.2);
  EXPECT_DOUBLE_EQ(s.l1.staged_us, 0.6);
  EXPECT_EQ(s.l2.tiles, 2);
  EXPECT_DOUBLE_EQ(s.l2.mainloop_us, 3.5);
  EXPECT_DOUBLE_EQ(s.l2.epilogue_us, 1.5);
  EXPECT_DOUBLE_EQ(s.l2.input_wait_us, 0.2);  // the unrecorded wait counts as none
  EXPECT_DOUBLE_EQ(s.l2.store_tail_us, 0.6);
  // Busy: CTA 0 10 us of 20, CTA 1 6 us of 15.
  EXPECT_NEAR(s.busy_share, 16.0 / 35.0, 1e-12);
  // First tiles at 2 and 1 us after their CTA's start: the upper median of two.
  EXPECT_DOUBLE_EQ(s.first_tile_us, 2.0);
  // Last tile ends, from the earliest CTA start: CTA 0 at 13 us, CTA 1 at 1 + 7 = 8 us.
  EXPECT_NEAR(s.last_tile_end_us_min, 8.0, 1e-12);
  EXPECT_NEAR(s.last_tile_end_us_max, 13.0, 1e-12);
  // Phases, per CTA: CTA 0 prologue 2, L1 6, L2 4, gaps 13 - 2 - 10 = 1, combine 16 - 13 = 3,
  // reduce 20 - 16 = 4 (adds up to its 20 us); CTA 1 prologue 1, L2 6, gaps 0, combine 10 - 7 = 3,
  // reduce 5 (15 us). Means over both.
  EXPECT_EQ(s.phases.ctas, 2);
  EXPECT_NEAR(s.phases.prologue_us, 1.5, 1e-12);
  EXPECT_NEAR(s.phases.l1_us, 3.0, 1e-12);
  EXPECT_NEAR(s.phases.l2_us, 5.0, 1e-12);
  EXPECT_NEAR(s.phases.gaps_us, 0.5, 1e-12);
  EXPECT_NEAR(s.phases.combine_us, 3.0, 1e-12);
  EXPECT_NEAR(s.phases.reduce_us, 4.5, 1e-12);
  const ops::MegaMoePhases& p = s.phases;
  EXPECT_NEAR(p.prologue_us + p.l1_us + p.l2_us + p.gaps_us + p.combine_us + p.reduce_us, 17.5, 1e-12);
}

TEST(MegaMoeTrace, PhasesLeaveOutCtasWithoutTilesOrWithABadReduceStamp) {
  // CTA 0: one tile, reduce 9 us in, end 10 us. CTA 1: no tile. CTA 2: a tile ending at 6 us but
  // its reduce stamp at 5 us (before the tile's end: not a consistent record).
  const std::vector<uint64_t> clk{0, 0, 10000, 10000, 9000, 0, 0, 10000, 10000, 9000, 0, 0, 10000, 10000, 5000};
  std::vector<uint32_t> tr;
  tile(tr, 0, 1, 1000, 4000, 1000, 0, 0);
  tile(tr, 2, 2, 1000, 4000, 1000, 0, 0);
  const ops::MegaMoeTileStats s = ops::summarize_mega_trace(tr, clk, 1.0);
  EXPECT_EQ(s.phases.ctas, 1);
  EXPECT_NEAR(s.phases.prologue_us, 1.0, 1e-12);
  EXPECT_NEAR(s.phases.l1_us, 5.0, 1e-12);
  EXPECT_NEAR(s.phases.l2_us, 0.0, 1e-12);
  EXPECT_NEAR(s.phases.combine_us, 3.0, 1e-12);
  EXPECT_NEAR(s.phases.reduce_us, 1.0, 1e-12);
}

TEST(MegaMoeTrace, AnEmptyTraceGivesZeros) {
  const std::vector<uint64_t> clk{0, 0, 1000, 1000, 500};
  const std::vector<uint32_t> tr(16, kNone);
  const ops::MegaMoeTileStats s = ops::summarize_mega_trace(tr, clk, 1.0);
  EXPECT_EQ(s.l1.tiles, 0);
  EXPECT_EQ(s.l2.tiles, 0);
  EXPECT_DOUBLE_EQ(s.busy_share, 0.0);
  EXPECT_DOUBLE_EQ(s.first_tile_us, 0.0);
  EXPECT_EQ(s.phases.ctas, 0);
}
#endif
