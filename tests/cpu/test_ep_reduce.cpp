// The wide top-k sum's work split (src/kernels/moe/ep_reduce_cursor.hpp): every (token, vector)
// of the output is taken by exactly one (warp, lane, vector slot), for the models' hidden sizes
// and top-k values, grids of one to many warps, and token counts around the warp count.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/moe/ep_reduce_cursor.hpp"

using namespace xstage::kernels::moe;

namespace {

// Runs the kernel's loop structure on the host: how often each (token, vector) is written.
std::vector<int> coverage(int tokens, int hidden, int k, long long warps) {
  const int u = reduce_vectors_per_lane(k);
  const int vpr = hidden / 8;
  const int upr = reduce_units_per_row(hidden, u);
  std::vector<int> hits(static_cast<size_t>(tokens) * vpr, 0);
  for (long long w = 0; w < warps; ++w)
    for (ReduceCursor c(w, warps, upr); c.token < tokens; c.advance()) {
      EXPECT_GE(c.piece, 0);
      EXPECT_LT(c.piece, upr);
      for (int lane = 0; lane < 32; ++lane)
        for (int q = 0; q < u; ++q) {
          const int v = c.piece * 32 * u + lane + 32 * q;
          if (v < vpr) ++hits[static_cast<size_t>(c.token) * vpr + v];
        }
    }
  return hits;
}

}  // namespace

TEST(EpReduce, VectorsPerLaneKeepTwelveLoadsInFlightUpToSixVectors) {
  const int want[] = {6, 6, 4, 3, 3, 2, 2, 2, 2, 2};
  for (int k = 1; k <= 10; ++k) {
    EXPECT_EQ(reduce_vectors_per_lane(k), want[k - 1]) << "k " << k;
    EXPECT_GE(k * reduce_vectors_per_lane(k), k == 1 ? 6 : 12);
    EXPECT_LE(k * reduce_vectors_per_lane(k), 20) << "registers for the loaded rows";
  }
}

TEST(EpReduce, EveryOutputVectorIsWrittenExactlyOnce) {
  // Hidden sizes of bench/moe-models.json and a 128-multiple that leaves a partial unit.
  for (int hidden : {1408, 4096, 6144, 7168, 128})
    for (int k : {1, 2, 6, 8, 10})
      for (long long warps : {1LL, 7LL, 8LL * 132, 8LL * 3})
        for (int tokens : {1, 5, 33, 1057}) {
          const std::vector<int> hits = coverage(tokens, hidden, k, warps);
          int bad = 0;
          for (int h : hits) bad += h != 1;
          ASSERT_EQ(bad, 0) << "hidden " << hidden << " k " << k << " warps " << warps << " tokens " << tokens;
        }
}

TEST(EpReduce, CursorStepsLikeTheDivision) {
  for (int upr : {1, 3, 8, 28})
    for (long long warps : {1LL, 5LL, 64LL, 1056LL})
      for (long long first = 0; first < warps && first < 40; ++first) {
        ReduceCursor c(first, warps, upr);
        for (long long unit = first; unit < 20000; unit += warps, c.advance()) {
          ASSERT_EQ(c.token, unit / upr);
          ASSERT_EQ(c.piece, unit % upr);
        }
      }
}
