// The Mega-MoE tile configurations (include/xstage/mega_tile.hpp): block sizes, tile counts,
// the Linear-1 counter target each Linear-2 tile waits for, and the tile order's
// deadlock-freedom precondition (every Linear-2 tile after all Linear-1 tiles of its block)
// with the blocks each configuration makes of uneven, empty and one-row experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "xstage/mega_tile.hpp"
#include "xstage/moe_tile_order.hpp"

using namespace xstage::moe;

namespace {

constexpr MegaTile kTiles[] = {MegaTile::m64n256, MegaTile::m128n256};
// With the per-token W4A8 kernel's own tile (not a W8A8 choice), for what all configurations share:
// the scratch bound and the order's precondition.
constexpr MegaTile kAllTiles[] = {MegaTile::m64n256, MegaTile::m128n256, MegaTile::m256n128_tok,
                                  MegaTile::m128n256_tok};

// What the kernel's prologue builds (mega_prologue.cuh): block starts of the local experts and,
// for expert-wave, each expert's wave bounds.
struct Layout {
  std::vector<int> block_start, wave_first, wave_last;
  TileOrder order(OrderKind kind, int n1, int n2, int l1_per_l2, int lead, int tail_blocks = 0) const {
    TileOrder o;
    o.kind = kind;
    o.experts = static_cast<int>(wave_first.size());
    o.block_start = block_start.data();
    o.wave_first = wave_first.data();
    o.wave_last = wave_last.data();
    o.n1 = n1;
    o.n2 = n2;
    o.l1_per_l2 = l1_per_l2;
    o.lead = lead;
    set_tail_blocks(o, tail_blocks);
    return o;
  }
};
Layout layout(const std::vector<int>& rows, int block_m, int n1, int ctas) {
  Layout l;
  const int E = static_cast<int>(rows.size());
  l.block_start.assign(E + 1, 0);
  for (int e = 0; e < E; ++e) l.block_start[e + 1] = l.block_start[e] + mega_blocks(rows[e], block_m);
  l.wave_first.resize(E);
  l.wave_last.resize(E);
  for (int e = 0; e < E; ++e) wave_bounds(l.block_start.data(), E, n1, ctas, e, &l.wave_first[e], &l.wave_last[e]);
  return l;
}

}  // namespace

TEST(MegaTile, ShapesFollowTheConfiguration) {
  const MegaTileShape a = mega_tile_shape(MegaTile::m64n256);
  const MegaTileShape b = mega_tile_shape(MegaTile::m128n256);
  EXPECT_EQ(a.block_m, 64);
  EXPECT_EQ(b.block_m, 128);
  // Both: 128 h channels per Linear-1 tile (256 gate/up rows), 256 hidden channels per Linear-2 tile.
  for (const auto& s : {a, b}) {
    EXPECT_EQ(s.l1_n, 128);
    EXPECT_EQ(s.l2_n, 256);
    EXPECT_EQ(mega_l1_tiles(s, 640), 5);
    EXPECT_EQ(mega_l2_tiles(s, 1408), 6);  // the last one half wide
    EXPECT_EQ(mega_l2_tiles(s, 7168), 28);
  }
  // One counting epilogue piece per 64-row warp-group half of a Linear-1 tile.
  EXPECT_EQ(a.l1_pieces, 1);
  EXPECT_EQ(b.l1_pieces, 2);
  EXPECT_EQ(mega_l1_target(a, 5), 5u);
  EXPECT_EQ(mega_l1_target(b, 5), 10u);
  // The per-token tile: 256-row blocks, 64 h channels (128 interleaved gate/up rows) per Linear-1
  // tile, 128 hidden channels per Linear-2 tile, one count per Linear-1 tile.
  const MegaTileShape t = mega_tile_shape(MegaTile::m256n128_tok);
  EXPECT_EQ(t.block_m, 256);
  EXPECT_EQ(t.l1_n, 64);
  EXPECT_EQ(t.l2_n, 128);
  EXPECT_EQ(t.l1_pieces, 1);
  EXPECT_EQ(mega_l1_tiles(t, 640), 10);
  EXPECT_EQ(mega_l2_tiles(t, 1408), 11);
  EXPECT_EQ(mega_l1_target(t, 10), 10u);
  EXPECT_EQ(std::string(mega_tile_name(MegaTile::m256n128_tok)), "m256n128_tok");
  // Its wide tile: 128-row blocks, 128 h channels (two chunks of interleaved gate/up rows) per
  // Linear-1 tile, 256 hidden channels per Linear-2 tile (the last of one chunk where H / 128 is
  // odd), one count per Linear-1 tile: the W8A8 tiles' counts per block.
  const MegaTileShape w = mega_tile_shape(MegaTile::m128n256_tok);
  EXPECT_EQ(w.block_m, 128);
  EXPECT_EQ(w.l1_n, 128);
  EXPECT_EQ(w.l2_n, 256);
  EXPECT_EQ(w.l1_pieces, 1);
  EXPECT_EQ(mega_l1_tiles(w, 640), 5);
  EXPECT_EQ(mega_l2_tiles(w, 1408), 6);
  EXPECT_EQ(mega_l1_target(w, 5), 5u);
  EXPECT_EQ(std::string(mega_tile_name(MegaTile::m128n256_tok)), "m128n256_tok");
  for (MegaTile k : kAllTiles) EXPECT_EQ(mega_tile_is_tok(k), k == MegaTile::m256n128_tok || k == MegaTile::m128n256_tok);
  EXPECT_FALSE(mega_tile_is_tok(MegaTile::automatic));
}

// The per-token automatic tile: the wide one below kMegaTokWideMaxMeanRows mean routed rows per
// expert where a rank's experts give every CTA a wide Linear-2 tile, only where the build has it.
TEST(MegaTile, PerTokenAutomaticTileFollowsTheMeanRowsAndTheLinear2Tiles) {
  const MegaTile wide = MegaTile::m128n256_tok, tall = MegaTile::m256n128_tok;
  // 256 experts, hidden 4096 (16 wide Linear-2 tiles each), 132 CTAs: by the mean rows.
  EXPECT_EQ(choose_tok_tile(95LL * 256 + 255, 256, 256, 4096, 132, true), wide);
  EXPECT_EQ(choose_tok_tile(96LL * 256, 256, 256, 4096, 132, true), tall);
  EXPECT_EQ(choose_tok_tile(1, 256, 256, 4096, 132, true), wide);
  // The measured cells (mean rows: tokens x top-k / experts, one rank): wide at Qwen3.5 512 / 2048
  // (10 / 40), MiMo-V2.5 2048 (64), Hy3 2048 (85); not at DSv4-Pro 8192 (128), Qwen3.5 8192 (160),
  // nor DiT-MoE-G 512 (64 rows, but 16 x 6 = 96 Linear-2 tiles for 132 CTAs).
  EXPECT_EQ(choose_tok_tile(512LL * 10, 512, 512, 4096, 132, true), wide);
  EXPECT_EQ(choose_tok_tile(2048LL * 10, 512, 512, 4096, 132, true), wide);
  EXPECT_EQ(choose_tok_tile(2048LL * 8, 256, 256, 4096, 132, true), wide);
  EXPECT_EQ(choose_tok_tile(2048LL * 8, 192, 192, 4096, 132, true), wide);
  EXPECT_EQ(choose_tok_tile(8192LL * 6, 384, 384, 7168, 132, true), tall);
  EXPECT_EQ(choose_tok_tile(8192LL * 10, 512, 512, 4096, 132, true), tall);
  EXPECT_EQ(choose_tok_tile(512LL * 2, 16, 16, 1408, 132, true), tall);
  EXPECT_EQ(choose_tok_tile(512LL * 2, 16, 16, 1408, 96, true), wide);  // one tile per CTA: enough
  // Virtual ranks: a rank's own experts and CTAs count.
  EXPECT_EQ(choose_tok_tile(80LL * 3, 8, 4, 256, 3, true), wide);
  EXPECT_EQ(choose_tok_tile(80LL * 3, 8, 4, 256, 5, true), tall);
  for (long long rows : {1LL, 95LL * 256, 1LL << 20})
    EXPECT_EQ(choose_tok_tile(rows, 256, 256, 4096, 132, false), tall);
  EXPECT_EQ(choose_tok_tile(5, 0, 0, 4096, 132, true), tall);
}

// The per-token kernel's protocol (mega_w4a8_tok_kernel.cuh): each of a block's n1 Linear-1 tiles
// adds one to the counter and reads the value before its add; the one that reads n1 - 1 (exactly
// one, whatever the completion order) quantises h and adds one more, and the block's Linear-2
// tiles wait for n1 + 1 — which no count of Linear-1 tiles alone reaches.
TEST(MegaTile, ThePerTokenBlockIsReleasedOnlyAfterItsQuantisation) {
  const MegaTileShape s = mega_tile_shape(MegaTile::m256n128_tok);
  for (int n1 : {1, 6, 32}) {
    const unsigned target = mega_l1_target(s, n1) + 1;  // the kernel's Linear-2 gate
    unsigned counter = 0;
    int last = 0;
    for (int j = 0; j < n1; ++j) {
      const unsigned before = counter++;
      EXPECT_LT(counter, target) << "released before the quantisation, n1 " << n1;
      if (before + 1 == static_cast<unsigned>(n1)) ++last;
    }
    EXPECT_EQ(last, 1) << n1;
    ++counter;  // the quantising CTA's count
    EXPECT_EQ(counter, target) << n1;
  }
}

TEST(MegaTile, BlocksOfAnExpert) {
  EXPECT_EQ(mega_blocks(0, 128), 0);
  EXPECT_EQ(mega_blocks(1, 128), 1);
  EXPECT_EQ(mega_blocks(128, 128), 1);
  EXPECT_EQ(mega_blocks(129, 128), 2);
  EXPECT_EQ(mega_blocks(300, 128), 3);
  EXPECT_EQ(mega_blocks(300, 64), 5);
}

// The tails fold (docs/megamoe.md "Tails fold"): a last block of <= fold rows after a full one
// joins it; every row is in exactly one block, in order, no block above block_m + fold, and a
// block is short only where it is the expert's only one.
TEST(MegaTile, TheTailsFoldKeepsEveryRowInOneBlock) {
  EXPECT_EQ(mega_blocks(0, 256, 32), 0);
  EXPECT_EQ(mega_blocks(5, 256, 32), 1);
  EXPECT_EQ(mega_blocks(256, 256, 32), 1);
  EXPECT_EQ(mega_blocks(288, 256, 32), 1);
  EXPECT_EQ(mega_blocks(289, 256, 32), 2);
  EXPECT_EQ(mega_blocks(544, 256, 32), 2);
  EXPECT_EQ(mega_blocks(545, 256, 32), 3);
  EXPECT_EQ(mega_block_rows(288, 0, 256, 32), 288);
  EXPECT_EQ(mega_block_rows(289, 0, 256, 32), 256);
  EXPECT_EQ(mega_block_rows(289, 1, 256, 32), 33);
  for (int fold : {0, 32})
    for (int rows = 0; rows <= 2000; ++rows) {
      const int nb = mega_blocks(rows, 256, fold);
      if (fold == 0) EXPECT_EQ(nb, (rows + 255) / 256) << rows;
      int covered = 0;
      for (int mb = 0; mb < nb; ++mb) {
        const int r = mega_block_rows(rows, mb, 256, fold);
        EXPECT_GE(r, 1) << rows << " " << mb;
        EXPECT_LE(r, 256 + fold) << rows << " " << mb;
        if (mb + 1 < nb) EXPECT_EQ(r, 256) << rows << " " << mb;
        if (fold > 0 && nb > 1 && mb + 1 == nb) EXPECT_GT(r, fold) << rows;  // no tail left unfolded
        covered += r;
      }
      EXPECT_EQ(covered, rows) << rows << " fold " << fold;
    }
}

TEST(MegaTile, NamesRoundTripAndUnknownNamesAreRejected) {
  for (MegaTile t : kAllTiles) {
    MegaTile back = t == MegaTile::m64n256 ? MegaTile::m128n256 : MegaTile::m64n256;
    ASSERT_TRUE(parse_mega_tile(mega_tile_name(t), &back)) << mega_tile_name(t);
    EXPECT_EQ(back, t);
  }
  MegaTile t = MegaTile::m64n256;
  for (const char* bad : {"", "m128", "m128n2560", "M128N256", "m128n256 ", "m192n128", "m128n256_to", "m256n128_tok2"})
    EXPECT_FALSE(parse_mega_tile(bad, &t)) << bad;
}

// The scratch sized for 64-row blocks (the operator's max_blocks) holds every configuration's
// blocks, whatever the split of the receive rows over the experts.
TEST(MegaTile, TheScratchBoundHoldsForEveryConfiguration) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 64);
    const int cap = static_cast<int>(rng() % 5000);
    std::vector<int> rows(E, 0);
    for (int r = 0; r < cap; ++r) ++rows[rng() % E];
    const int bound = mega_max_blocks(cap, E, mega_tile_shape(MegaTile::m64n256).block_m);
    for (MegaTile t : kAllTiles) {
      int blocks = 0;
      for (int n : rows) blocks += mega_blocks(n, mega_tile_shape(t).block_m);
      EXPECT_LE(blocks, bound) << mega_tile_name(t) << " E " << E << " cap " << cap;
    }
  }
}

// The kernel's Linear-1 epilogues report one piece per 64-row consumer warp group of a tile
// (an empty half too), each counting once into the block's counter, in any completion order:
// the counter must reach the target exactly when the last piece of the block's n1 tiles is in.
// A target of n1 with 128-row tiles would release a Linear-2 tile while half of its inputs
// are still missing.
TEST(MegaTile, TheLinear1TargetIsReachedOnlyByTheBlocksLastPiece) {
  std::mt19937 rng(11);
  for (MegaTile t : kTiles) {
    const MegaTileShape s = mega_tile_shape(t);
    const int groups = s.block_m / 64;  // consumer warp groups along M, 64 rows each
    for (int n1 : {1, 5, 16}) {
      std::vector<int> pieces;  // tile j's pieces
      for (int j = 0; j < n1; ++j)
        for (int h = 0; h < groups; ++h) pieces.push_back(j);
      for (int trial = 0; trial < 20; ++trial) {
        std::shuffle(pieces.begin(), pieces.end(), rng);
        unsigned counter = 0;
        for (size_t k = 0; k < pieces.size(); ++k) {
          ++counter;
          const bool last = k + 1 == pieces.size();
          EXPECT_EQ(counter >= mega_l1_target(s, n1), last) << mega_tile_name(t) << " n1 " << n1 << " piece " << k;
        }
      }
    }
  }
}

// Both orders over the blocks each configuration makes: every tile once, and every Linear-2
// tile after all Linear-1 tiles of its block (so the lowest unfinished claimed tile always has
// its inputs: docs/megamoe.md "Deadlock freedom"); the blocks cover each expert's rows exactly.
TEST(MegaTile, TheOrderKeepsEveryLinear2TileAfterItsInputs) {
  const std::vector<std::vector<int>> experts = {
      {300, 0, 1, 128, 129, 64, 0, 1000},  // uneven, empty, one-row, exact and one-over blocks
      {0, 0, 0, 300},                      // every row in one expert
      {1},
      std::vector<int>(32, 97),
  };
  for (MegaTile tile : kAllTiles) {
    const MegaTileShape s = mega_tile_shape(tile);
    for (const auto& rows : experts)
      for (int ctas : {1, 3, 132})
        for (int variant = 0; variant < 4; ++variant) {
          // expert-wave; interleaved; interleaved with the last 2 blocks' / every block's Linear-2
          // tiles at the end (tail_blocks; more than the blocks there are: all of them).
          const OrderKind kind = variant == 0 ? OrderKind::expert_wave : OrderKind::interleaved;
          const int tail = variant == 2 ? 2 : variant == 3 ? 1000 : 0;
          const int n1 = 5, n2 = 6;
          const Layout l = layout(rows, s.block_m, n1, ctas);
          const TileOrder o = l.order(kind, n1, n2, 1, ctas, tail);
          const std::string what = std::string(mega_tile_name(tile)) + (kind == OrderKind::expert_wave ? " ew" : " il") +
                                   " tail " + std::to_string(tail) + " ctas " + std::to_string(ctas) + " experts " +
                                   std::to_string(rows.size());
          // Blocks cover the rows: block b of expert e holds min(block_m, rows - mb * block_m) > 0 rows.
          int covered = 0;
          for (int b = 0; b < o.blocks(); ++b) {
            const int e = expert_of_block(o, b);
            const int mb = b - l.block_start[e];
            const int n = std::min(s.block_m, rows[e] - mb * s.block_m);
            ASSERT_GT(n, 0) << what << " block " << b;
            covered += n;
          }
          EXPECT_EQ(covered, std::accumulate(rows.begin(), rows.end(), 0)) << what;
          std::map<std::pair<int, int>, int> seen;  // (kind, tile index) -> position
          std::vector<int> last_l1(o.blocks(), -1);
          for (int p = 0; p < o.total(); ++p) {
            const OrderedTile t = tile_at(o, p);
            ASSERT_TRUE(t.block >= 0 && t.block < o.blocks()) << what;
            const int idx = t.block * (t.kind == 1 ? n1 : n2) + t.n_block;
            EXPECT_TRUE(seen.emplace(std::make_pair(t.kind, idx), p).second) << what << " position " << p;
            if (t.kind == 1) {
              last_l1[t.block] = std::max(last_l1[t.block], p);
            } else {
              // All n1 Linear-1 tiles of the block came earlier.
              int before = 0;
              for (int j = 0; j < n1; ++j) {
                auto it = seen.find({1, t.block * n1 + j});
                if (it != seen.end() && it->second < p) ++before;
              }
              EXPECT_EQ(before, n1) << what << " Linear-2 at " << p;
            }
          }
          EXPECT_EQ(static_cast<int>(seen.size()), o.blocks() * (n1 + n2)) << what;
        }
  }
}

// The end of the interleaved list (set_tail_blocks): the last tail_blocks blocks' Linear-2
// tiles come after every Linear-1 tile, in tile order, and end the list; the other blocks' tiles
// keep the positions of the plain order relative to each other; tail_blocks = 0 is the plain order.
// Lead 0, one Linear-1 tile per Linear-2 tile and n1 > n2: the plain order puts each block's
// Linear-2 tiles right after its Linear-1 tiles (its own end holds the last block's only), so a
// tail of 2 or more blocks moves tiles.
TEST(MegaTile, TheTailPutsTheLastBlocksLinear2TilesAtTheEnd) {
  const std::vector<int> rows = {300, 0, 1, 128, 129, 64, 0, 1000, 256, 256};
  for (int n2 : {1, 6, 11})
    for (int tail : {0, 1, 3, 1000}) {
      const int n1 = 24;
      const Layout l = layout(rows, 64, n1, 132);
      const TileOrder plain = l.order(OrderKind::interleaved, n1, n2, 1, 0);
      const TileOrder o = l.order(OrderKind::interleaved, n1, n2, 1, 0, tail);
      const int blocks = o.blocks(), first_tail = std::max(0, blocks - tail);
      const std::string what = "n2 " + std::to_string(n2) + " tail " + std::to_string(tail);
      auto same = [](const OrderedTile& a, const OrderedTile& b) {
        return a.kind == b.kind && a.block == b.block && a.n_block == b.n_block;
      };
      std::vector<OrderedTile> got, rest;
      for (int p = 0; p < o.total(); ++p) got.push_back(tile_at(o, p));
      for (int p = 0; p < plain.total(); ++p) {
        const OrderedTile t = tile_at(plain, p);
        if (t.kind == 1 || t.block < first_tail) rest.push_back(t);
      }
      const int tail_tiles = (blocks - first_tail) * n2;
      ASSERT_EQ(static_cast<int>(got.size()), static_cast<int>(rest.size()) + tail_tiles) << what;
      // A tail of 2 or more blocks changes the order (else the test would pass a no-op).
      bool moved = false;
      for (int p = 0; p < o.total(); ++p) moved |= !same(tile_at(plain, p), got[p]);
      EXPECT_EQ(moved, tail >= 2) << what;
      // The last tail_tiles positions: the tail blocks' Linear-2 tiles in tile order.
      for (int i = 0; i < tail_tiles; ++i) {
        const OrderedTile t = got[got.size() - tail_tiles + i];
        EXPECT_EQ(t.kind, 2) << what << " tail " << i;
        EXPECT_EQ(t.block * n2 + t.n_block, first_tail * n2 + i) << what << " tail " << i;
      }
      // Before them: the plain order without the tail blocks' Linear-2 tiles.
      for (size_t i = 0; i < rest.size(); ++i) EXPECT_TRUE(same(got[i], rest[i])) << what << " position " << i;
      // set_tail_tiles (the kernel's and the plan's form): a tile count rounds up to whole blocks.
      for (int tiles : {tail * n2, tail * n2 - n2 + 1}) {
        TileOrder by_tiles = plain;
        set_tail_tiles(by_tiles, tiles);
        EXPECT_EQ(by_tiles.tail_l2_from, o.tail_l2_from) << what << " tiles " << tiles;
      }
    }
}

// The automatic tile (xstage/mega_tile.hpp choose_mega_tile) on configurations of the tile
// comparison (docs/megamoe.md "Tile configurations", "Half blocks"): 128 x 256 from 32 mean rows
// per expert, 64 x 256 below; names and parsing of "auto".
TEST(MegaTile, AutomaticChoosesTheMeasuredWinner) {
  struct Cfg {
    int tokens, top_k, experts;
    xstage::moe::MegaTile want;
  };
  using xstage::moe::MegaTile;
  for (Cfg c : {Cfg{2048, 6, 256, MegaTile::m128n256},   // DSv4-Flash 2048: 48 rows per expert
                Cfg{512, 6, 256, MegaTile::m64n256},     // DSv4-Flash 512: 12
                Cfg{8192, 6, 256, MegaTile::m128n256},   // DSv4-Flash 8192: 192
                Cfg{2048, 10, 512, MegaTile::m128n256},  // Qwen3.5-397B-A17B 2048: 40
                Cfg{2048, 8, 256, MegaTile::m128n256},   // GLM-5.2 and MiMo-V2.5 2048: 64
                Cfg{2048, 8, 192, MegaTile::m128n256},   // Hy3 2048: 85
                Cfg{2048, 6, 384, MegaTile::m128n256},   // DSv4-Pro 2048: 32
                Cfg{512, 8, 256, MegaTile::m64n256},     // GLM-5.2 512: 16
                Cfg{8192, 10, 512, MegaTile::m128n256},  // Qwen3.5-397B-A17B 8192: 160
                Cfg{2048, 2, 16, MegaTile::m128n256},    // DiT-MoE-G 2048: 256
                Cfg{8192, 2, 16, MegaTile::m128n256}})   // DiT-MoE-G 8192: 1024
    EXPECT_EQ(xstage::moe::choose_mega_tile(static_cast<long long>(c.tokens) * c.top_k, c.experts), c.want)
        << c.tokens << " tokens, " << c.experts << " experts";
  EXPECT_EQ(xstage::moe::choose_mega_tile(31 * 4 + 3, 4), MegaTile::m64n256);
  EXPECT_EQ(xstage::moe::choose_mega_tile(32 * 4, 4), MegaTile::m128n256);
  EXPECT_EQ(xstage::moe::choose_mega_tile(1 << 20, 0), MegaTile::m64n256);
  // Half blocks: an expert whose last 128-row block holds 1..64 rows.
  for (int rows : {1, 64, 129, 192, 300}) EXPECT_EQ(xstage::moe::mega_half_block(rows, 128), 1) << rows;
  for (int rows : {0, 65, 128, 200, 256}) EXPECT_EQ(xstage::moe::mega_half_block(rows, 128), 0) << rows;
  EXPECT_EQ(xstage::moe::mega_half_block(32, 64), 0);  // the 64-row tile has none
  MegaTile t = MegaTile::m64n256;
  EXPECT_TRUE(xstage::moe::parse_mega_tile("auto", &t));
  EXPECT_EQ(t, MegaTile::automatic);
  EXPECT_STREQ(xstage::moe::mega_tile_name(MegaTile::automatic), "auto");
  EXPECT_FALSE(xstage::moe::parse_mega_tile("m256n256", &t));
}
