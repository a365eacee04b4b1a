// Persistent tile scheduler over the experts of a grouped GEMM. The tile list is expert by
// expert; expert e contributes ceil(counts[e] / block_m) m-blocks x n_blocks tiles (none when
// it has no tokens). With clusters of kClusterM x kClusterN CTAs the list holds cluster tiles
// of kClusterM m-blocks x kClusterN n-blocks; CTA (cm, cn) of the cluster takes m-block
// kClusterM * sm + cm and n-block kClusterN * sn + cn (past the expert's rows or past n: a
// dummy tile that loads and computes, so the multicast partners stay in step, and stores
// nothing). Grid = min(#SMs, upper bound of the tile count); cluster i takes cluster tiles
// i, i + #clusters, ... Every role of a CTA (producer, consumer warp groups) runs its own copy of
// the scheduler and sees the same sequence; a copy walks the experts forward only, reading
// counts/offsets from global memory as it goes (the tile index only grows).
//
// Order inside an expert: bands of kBandRows token rows; inside a band the m-block varies
// fastest, then the n-block. The CTAs running together then share one band of activations
// and a few weight slices in L2.
#pragma once
#include <cstdint>

namespace xstage::kernels::moe {

struct WorkTile {
  int expert;
  int m_block;    // inside the expert
  int n_block;    // output tile column index (units of the tile's output width)
  int row_begin;  // first row of the tile in A / the output
  int rows;       // valid rows: min(block_m, counts[e] - m_block * block_m); <= 0: dummy tile
  int tag = 0;    // caller's tile id, handed to the epilogue (the Mega-MoE kernel: its Linear-2 index)
  int half = 0;   // tiles in two passes (kHalves = 2): 0 = first pass (gate rows), 1 = second (up rows)
};

// kHalves = 2: every tile comes twice in a row, half 0 then half 1 (the serial gate/up tile);
// the caller passes the same WorkTile to consecutive calls.
template <int kBlockM, int kClusterM = 1, int kClusterN = 1, int kHalves = 1>
struct GroupedScheduler {
  static_assert(kHalves == 1 || kHalves == 2);
  static constexpr int kBandRows = 2048;
  static constexpr int kBandBlocks = kBandRows / (kBlockM * kClusterM);  // in cluster m-blocks
  static constexpr int kClusterSize = kClusterM * kClusterN;

  const int* counts;
  const int* offsets;
  int experts;
  int n_blocks;
  // Walk state: the expert holding the current tile, its first global tile index, tile count.
  int expert = -1;
  int expert_first = 0;
  int expert_tiles = 0;
  int expert_count = 0;
  int idx;
  int stride;
  int cm, cn;  // this CTA's place in its cluster

  __device__ GroupedScheduler(const int* counts_, const int* offsets_, int experts_, int n_blocks_, int cta_rank)
      : counts(counts_), offsets(offsets_), experts(experts_), n_blocks((n_blocks_ + kClusterN - 1) / kClusterN),
        stride(static_cast<int>(gridDim.x) / kClusterSize), cm(cta_rank % kClusterM), cn(cta_rank / kClusterM) {
    idx = static_cast<int>(blockIdx.x) / kClusterSize - stride;
  }

  // Advances to this CTA's next tile; false when there is none left.
  __device__ bool next(WorkTile& t) {
    if constexpr (kHalves == 2) {
      if (second_half_) {
        second_half_ = false;
        t.half = 1;
        return true;
      }
    }
    idx += stride;
    while (idx >= expert_first + expert_tiles) {
      expert_first += expert_tiles;
      if (++expert >= experts) {
        expert_tiles = 1 << 30;  // stays past the end for any further call
        return false;
      }
      expert_count = __ldg(counts + expert);
      expert_tiles = (expert_count + kBlockM * kClusterM - 1) / (kBlockM * kClusterM) * n_blocks;
    }
    if (expert >= experts) return false;
    const int m_blocks = (expert_count + kBlockM * kClusterM - 1) / (kBlockM * kClusterM);  // cluster m-blocks
    const int local = idx - expert_first;
    const int band = local / (kBandBlocks * n_blocks);
    const int in_band = local - band * kBandBlocks * n_blocks;
    const int band_m = min(kBandBlocks, m_blocks - band * kBandBlocks);
    t.expert = expert;
    t.m_block = (band * kBandBlocks + in_band % band_m) * kClusterM + cm;
    t.n_block = (in_band / band_m) * kClusterN + cn;
    t.row_begin = __ldg(offsets + expert) + t.m_block * kBlockM;
    t.rows = min(kBlockM, expert_count - t.m_block * kBlockM);
    t.tag = 0;
    t.half = 0;
    if constexpr (kHalves == 2) second_half_ = true;
    return true;
  }

 private:
  bool second_half_ = false;
};

}  // namespace xstage::kernels::moe
