// The Mega-MoE kernel's tile configurations (docs/megamoe.md "Tile configurations"), as plain
// numbers shared by the host (operator, bench, CPU tests) and the kernel, so the block size,
// the tile counts and the Linear-1 counter target the tests check are the kernel's. No CUDA
// types; __host__ __device__ under nvcc.
//
//   m64n256   64-row blocks; warp groups 1 and 2 each a 64 x 128 half (gate / up for Linear-1);
//             one epilogue piece per Linear-1 tile counts into the block's counter.
//   m128n256  128-row blocks (the grouped GEMM's 128 x 256 tiles, MoeTraits::kDual): each
//             warp group 64 rows x both 128-column pieces (a block of <= 64 rows: both warp
//             groups on its rows, one piece each); both warp groups count their piece into the
//             block's counter (also an empty second half), so the target is 2 n1.
//   automatic the host's choice per layer (choose_mega_tile): never reaches the kernel.
//   m256n128_tok  the per-token W4A8 kernel's own tile (mega_w4a8_tok_kernel.cuh): 256-row
//             blocks, Linear-1 tiles of 64 h channels (128 gate/up-interleaved rows), Linear-2
//             tiles of 128 hidden channels; not a choice of the W8A8 kernels (kMegaTileCount).
//   m128n256_tok  its wide few-row tile (XSTAGE_MEGA_TOK_WIDE; docs/megamoe.md "Wide per-token
//             tiles"): 128-row blocks, Linear-1 tiles of 128 h channels (two 128-row W1 chunks),
//             Linear-2 tiles of 256 hidden channels (the last one 128 where hidden / 128 is odd).
#pragma once

#if defined(__CUDACC__)
#define XS_MEGA_HD __host__ __device__ constexpr
#else
#define XS_MEGA_HD constexpr
#endif

namespace xstage::moe {

enum class MegaTile : int { m64n256 = 0, m128n256 = 1, automatic = 2, m256n128_tok = 3, m128n256_tok = 4 };
inline constexpr int kMegaTileCount = 2;  // the W8A8 configurations (automatic is not one; nor are the _tok tiles)
inline constexpr int kMegaTileNames = 5;  // every value, automatic and the per-token tiles included
XS_MEGA_HD bool mega_tile_is_tok(MegaTile t) { return t == MegaTile::m256n128_tok || t == MegaTile::m128n256_tok; }

// automatic: 128-row tiles from 32 mean routed rows per expert (docs/megamoe.md "Tile
// configurations", "Half blocks"): 128 x 256 wins from 64 mean rows per expert (GLM-5.2, MiMo-V2.5
// and Hy3 at 2048 tokens; every 8192-token layer; DiT-MoE-G); at 32-48 (DSv4-Pro, Qwen3.5 and
// DSv4-Flash at 2048 tokens), with half blocks split, it is within 0.5-0.7 % of 64 x 256 under
// balanced routing and 4-12 % faster under skewed routing, which the host cannot see.
inline constexpr int kMega128MinMeanRows = 32;
XS_MEGA_HD MegaTile choose_mega_tile(long long routed_rows, int experts) {
  return experts > 0 && routed_rows >= static_cast<long long>(kMega128MinMeanRows) * experts ? MegaTile::m128n256
                                                                                            : MegaTile::m64n256;
}

struct MegaTileShape {
  int block_m;    // rows of an m-block (one Linear-1 / Linear-2 tile height)
  int l1_n;       // h channels per Linear-1 tile (2 x l1_n gate/up weight rows)
  int l2_n;       // hidden channels per Linear-2 tile (the last one may be partial)
  int l1_pieces;  // epilogue pieces of a Linear-1 tile, each one count in its block's counter
};

XS_MEGA_HD MegaTileShape mega_tile_shape(MegaTile t) {
  return t == MegaTile::m128n256       ? MegaTileShape{128, 128, 256, 2}
         : t == MegaTile::m256n128_tok ? MegaTileShape{256, 64, 128, 1}
         : t == MegaTile::m128n256_tok ? MegaTileShape{128, 128, 256, 1}
                                       : MegaTileShape{64, 128, 256, 1};
}

// m-blocks of an expert with `rows` rows. fold > 0 (the per-token tile's tails fold,
// docs/megamoe.md "Tails fold"): a last block of <= fold rows after a full one joins that one,
// which then holds up to block_m + fold rows; mega_block_rows gives each block's rows.
XS_MEGA_HD int mega_blocks(int rows, int block_m, int fold = 0) {
  if (rows <= 0) return 0;
  const int b = (rows - fold + block_m - 1) / block_m;
  return b > 1 ? b : 1;
}
// Rows of m-block mb (0-based) of an expert with `rows` rows, under the same fold.
XS_MEGA_HD int mega_block_rows(int rows, int mb, int block_m, int fold = 0) {
  const int left = rows - mb * block_m;
  return left <= block_m + fold ? left : block_m;
}
// 1 when an expert of `rows` rows ends in a half block of the 128 x 256 tile (its last 128-row
// block holds 1..64 rows: both warp groups take them, one N piece each; docs/megamoe.md "Half blocks").
XS_MEGA_HD int mega_half_block(int rows, int block_m) { return block_m == 128 && rows % 128 != 0 && rows % 128 <= 64 ? 1 : 0; }
// Tiles per m-block: Linear-1 (intermediate / l1_n), Linear-2 (ceil(hidden / l2_n)).
XS_MEGA_HD int mega_l1_tiles(const MegaTileShape& s, int intermediate) { return intermediate / s.l1_n; }
XS_MEGA_HD int mega_l2_tiles(const MegaTileShape& s, int hidden) { return (hidden + s.l2_n - 1) / s.l2_n; }
// automatic with per-token activations (where the wide tile is built; docs/megamoe.md "Wide
// per-token tiles", one H100): m128n256_tok below kMegaTokWideMaxMeanRows mean routed rows per
// expert — 1.02-1.28x the 256-row tile from 10 to 85 mean rows, 0.95-0.97x at 128, 0.73-0.85x
// from 192 (the 256-row tile's two-piece blocks use each converted weight twice) — and only where
// a rank's local experts give its CTAs at least one wide Linear-2 tile each (experts_per_rank x
// ceil(hidden / 256) >= ctas): with fewer, the list ends in fewer long tiles than CTAs
// (DiT-MoE-G at 512 tokens: 96 tiles of K = 5632 on 132 CTAs, 0.86-0.91x). Else m256n128_tok.
inline constexpr int kMegaTokWideMaxMeanRows = 96;
XS_MEGA_HD MegaTile choose_tok_tile(long long routed_rows, int experts, int experts_per_rank, int hidden, int ctas,
                                    bool wide_built) {
  return wide_built && experts > 0 && routed_rows < static_cast<long long>(kMegaTokWideMaxMeanRows) * experts &&
                 static_cast<long long>(experts_per_rank) *
                         mega_l2_tiles(mega_tile_shape(MegaTile::m128n256_tok), hidden) >=
                     ctas
             ? MegaTile::m128n256_tok
             : MegaTile::m256n128_tok;
}

// The value a block's Linear-1 counter reaches once all its Linear-1 tiles are stored (the
// Linear-2 tiles of the block wait for it).
XS_MEGA_HD unsigned mega_l1_target(const MegaTileShape& s, int n1) { return static_cast<unsigned>(n1 * s.l1_pieces); }
// Upper bound on the m-blocks of one rank: `cap` receive rows over `experts` local experts
// (each expert's last block may be partial).
XS_MEGA_HD int mega_max_blocks(int cap, int experts, int block_m) { return cap / block_m + experts; }

// Names for flags and JSON ("m64n256", "m128n256", "auto", "m256n128_tok", "m128n256_tok"; the
// operator says which tile a call's weights and activations may run); parse returns false on an
// unknown name.
inline const char* mega_tile_name(MegaTile t) {
  return t == MegaTile::m128n256       ? "m128n256"
         : t == MegaTile::automatic    ? "auto"
         : t == MegaTile::m256n128_tok ? "m256n128_tok"
         : t == MegaTile::m128n256_tok ? "m128n256_tok"
                                       : "m64n256";
}
inline bool parse_mega_tile(const char* s, MegaTile* out) {
  for (int i = 0; i < kMegaTileNames; ++i) {
    const MegaTile t = static_cast<MegaTile>(i);
    const char* n = mega_tile_name(t);
    int k = 0;
    while (n[k] != 0 && s[k] == n[k]) ++k;
    if (n[k] == 0 && s[k] == 0) {
      *out = t;
      return true;
    }
  }
  return false;
}

}  // namespace xstage::moe
