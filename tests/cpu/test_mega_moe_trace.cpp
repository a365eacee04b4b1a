// The Mega-MoE per-tile trace summary (src/ops/mega_moe_trace.hpp) on a synthetic trace whose
// every number is known: per-kind means, unrecorded positions and waits, CTAs out of range,
// the busy share, the prologue (first tile) and the last tile's end across CTAs.
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
  // 1 cycle per ns: 1000 cycles = 1 us. CTA 0 starts at 5000 ns and runs 20 us; CTA 1 starts
  // 1 us later and runs 15 us.
  const std::vector<uint64_t> clk{1000, 5000, 21000, 25000, 0, 6000, 15000, 21000};
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
}

TEST(MegaMoeTrace, AnEmptyTraceGivesZeros) {
  const std::vector<uint64_t> clk{0, 0, 1000, 1000};
  const std::vector<uint32_t> tr(16, kNone);
  const ops::MegaMoeTileStats s = ops::summarize_mega_trace(tr, clk, 1.0);
  EXPECT_EQ(s.l1.tiles, 0);
  EXPECT_EQ(s.l2.tiles, 0);
  EXPECT_DOUBLE_EQ(s.busy_share, 0.0);
  EXPECT_DOUBLE_EQ(s.first_tile_us, 0.0);
}
#endif
