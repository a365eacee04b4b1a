// The tile order of one rank's Mega-MoE persistent kernel as a pure function of the list
// position, shared by the host planner (src/model/moe_schedule.cpp, CPU-tested) and the GPU
// kernel (src/kernels/moe/mega_kernel.cuh), so the order the tests check is the order the
// kernel runs. No allocation, no CUDA types; __host__ __device__ under nvcc.
//
// Work of a rank: its local experts in order, expert e with ceil(rows_e / block_m) m-blocks;
// m-blocks are numbered globally in expert order ("blocks"). Every block has n1 Linear-1
// tiles and n2 Linear-2 tiles; the Linear-2 tiles of a block read all of its Linear-1 tiles.
// Flat streams: Linear-1 tile j = (block j / n1, n-block j % n1), Linear-2 tile q = (block
// q / n2, n-block q % n2). The schedules only merge the two streams differently:
//
// * expert-wave: expert e belongs to wave floor(l1_start(e) / ctas) (l1_start = n1 x its first
//   block), i.e. the experts that begin in the same round of `ctas` Linear-1 tiles form a wave;
//   a wave's Linear-1 tiles, then its Linear-2 tiles.
// * interleaved: Linear-2 tile q goes right before Linear-1 tile
//       a(q) = max(u(q), a(q - 1) + r),    u(q) = (block(q) + 1) n1 + lead
//   (r = l1_per_l2 Linear-1 tiles between Linear-2 tiles, and never earlier than `lead`
//   Linear-1 tiles after the last input of its block); those with a(q) >= the Linear-1 count
//   form the tail. Because u is linear in the block, the recursion has the closed form
//       a(q) = n1 + lead + q r + max(0, block(q) (n1 - n2 r)),
//   so a position decodes with one binary search and no list. set_tail_blocks puts the Linear-2
//   tiles of the last blocks in the tail whatever their anchor (a(q) = the Linear-1 count), so
//   the list can end in about one Linear-2 tile per CTA instead of a few long ones that the other
//   CTAs wait for (docs/megamoe.md §Tile claiming, "The end of the list"). Positions still grow
//   with q, so the same search decodes them.
#pragma once

#if defined(__CUDACC__)
#define XS_TILE_HD __host__ __device__ __forceinline__
#else
#define XS_TILE_HD inline
#endif

namespace xstage::moe {

enum class OrderKind : int { expert_wave = 0, interleaved = 1 };

struct TileOrder {
  OrderKind kind = OrderKind::expert_wave;
  int experts = 0;                 // local experts
  const int* block_start = nullptr;  // [experts + 1]: first block of expert e; [experts] = blocks
  // expert-wave only: the first and one-past-last block of expert e's wave ([experts] each).
  const int* wave_first = nullptr;
  const int* wave_last = nullptr;
  int n1 = 1, n2 = 1;   // Linear-1 / Linear-2 tiles per block
  int l1_per_l2 = 1;    // interleaved: r >= 1
  int lead = 0;         // interleaved: Linear-1 tiles between a block's inputs and its first Linear-2 tile
  // Interleaved: Linear-2 tiles q >= tail_l2_from follow every Linear-1 tile (set_tail_blocks).
  int tail_l2_from = 0x7fffffff;

  XS_TILE_HD int blocks() const { return block_start[experts]; }
  XS_TILE_HD int total() const { return blocks() * (n1 + n2); }
};

struct OrderedTile {
  int kind;     // 1: Linear-1, 2: Linear-2 (moe::TileKind values)
  int block;    // global m-block
  int n_block;  // output channel block of the tile's kind
};

// Largest e in [0, n) with v[e] <= x (v non-decreasing, v[0] <= x).
XS_TILE_HD int upper_index(const int* v, int n, int x) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (v[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The expert that owns global block b (empty experts own none).
XS_TILE_HD int expert_of_block(const TileOrder& o, int b) { return upper_index(o.block_start, o.experts, b); }

// Fills wave_first / wave_last of expert e (expert-wave); any thread may do any e.
XS_TILE_HD void wave_bounds(const int* block_start, int experts, int n1, int ctas, int e, int* first, int* last) {
  const int w = block_start[e] * n1 / ctas;
  // First expert whose wave is >= w (resp. > w): the block starts are non-decreasing.
  auto first_with_wave_at_least = [&](int wave) {
    int lo = 0, hi = experts;  // answer in [0, experts]
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (block_start[mid] * n1 / ctas >= wave) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  *first = block_start[first_with_wave_at_least(w)];
  *last = block_start[first_with_wave_at_least(w + 1)];
}

// The Linear-2 tiles of the last `tail_blocks` blocks (all blocks if more) join the tail.
XS_TILE_HD void set_tail_blocks(TileOrder& o, int tail_blocks) {
  const int first = o.blocks() - tail_blocks;
  o.tail_l2_from = tail_blocks <= 0 ? 0x7fffffff : (first > 0 ? first : 0) * o.n2;
}
// The same for `tail_tiles` Linear-2 tiles, rounded up to whole blocks (no overflow).
XS_TILE_HD void set_tail_tiles(TileOrder& o, int tail_tiles) {
  if (tail_tiles > 0) set_tail_blocks(o, tail_tiles / o.n2 + (tail_tiles % o.n2 != 0));
}

// Interleaved: the Linear-1 index Linear-2 tile q precedes (before clamping to the tail).
XS_TILE_HD long long interleaved_anchor(const TileOrder& o, int q) {
  const long long b = q / o.n2;
  const long long d = o.n1 - static_cast<long long>(o.n2) * o.l1_per_l2;
  return o.n1 + o.lead + static_cast<long long>(q) * o.l1_per_l2 + (d > 0 ? b * d : 0);
}

// Position of Linear-2 tile q in the interleaved list.
XS_TILE_HD long long interleaved_position(const TileOrder& o, int q, long long l1_total) {
  const long long a = q >= o.tail_l2_from ? l1_total : interleaved_anchor(o, q);
  return (a < l1_total ? a : l1_total) + q;
}

// The tile at list position p in [0, total()).
XS_TILE_HD OrderedTile tile_at(const TileOrder& o, int p) {
  if (o.kind == OrderKind::expert_wave) {
    const int S = o.n1 + o.n2;
    // The wave holding p: the last expert whose wave starts at or before p (wave_first is
    // non-decreasing in e; an upper search over it).
    int lo = 0, hi = o.experts - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (o.wave_first[mid] * S <= p) lo = mid;
      else hi = mid - 1;
    }
    const int wb = o.wave_first[lo], nb = o.wave_last[lo] - wb;
    const int off = p - wb * S;
    if (off < nb * o.n1) return OrderedTile{1, wb + off / o.n1, off % o.n1};
    const int off2 = off - nb * o.n1;
    return OrderedTile{2, wb + off2 / o.n2, off2 % o.n2};
  }
  const long long l1_total = static_cast<long long>(o.blocks()) * o.n1;
  const int l2_total = o.blocks() * o.n2;
  // c = number of Linear-2 tiles placed before position p (their positions increase with q).
  int lo = 0, hi = l2_total;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (interleaved_position(o, mid, l1_total) < p) lo = mid + 1;
    else hi = mid;
  }
  if (lo < l2_total && interleaved_position(o, lo, l1_total) == p) return OrderedTile{2, lo / o.n2, lo % o.n2};
  const int j = p - lo;
  return OrderedTile{1, j / o.n1, j % o.n1};
}

}  // namespace xstage::moe
