// Destinations of the Mega-MoE kernel's two epilogues (the Destination interface of
// epilogue.cuh):
//   * HDestination (Linear-1): fp8 h rows and their scales in this GPU's memory; after a tile
//     it counts the tile into its block's Linear-1 counter (release), which the block's
//     Linear-2 tiles wait on before their TMA reads h;
//   * CombineDestination (Linear-2): each bf16 output row goes straight to its token's owner
//     (combine buffer [T, k, H] of the rank that sent the row; remote for rows of other
//     ranks), and the warp group's sender-visible store span is recorded when asked.
#pragma once
#include <cstdint>

#include "kernels/common/flags.cuh"
#include "kernels/common/store.cuh"
#include "kernels/moe/ep_device.cuh"
#include "kernels/moe/epilogue.cuh"

namespace xstage::kernels::moe {

struct HDestination {
  uint8_t* h;
  int64_t ld;          // intermediate
  float* scales;       // [I/128, cap]
  int cap;
  uint32_t* l1_done;   // this call's half: [max_blocks]
  uint32_t* hook;      // null or [3][grid]: the store tail's cycles, then the clocks of marks 0, 1 (tile trace)
  static constexpr bool kNeedsTileStoredHook = true;
  // The SwiGLU epilogue's phases (0: up values staged, 1: fp8 rows staged), thread 0 of the group.
  __device__ void mark(int k, int wt) const {
    if (hook != nullptr && wt == 0) hook[(1 + k) * gridDim.x + blockIdx.x] = static_cast<uint32_t>(clock64());
  }
  __device__ void* row_ptr(EpilogueTile const& t, int row) const { return h + row * ld + t.col_begin; }
  __device__ float* scale_ptr(EpilogueTile const& t, int row) const {
    return scales + static_cast<int64_t>(t.col_begin / 128) * cap + row;
  }
  // h is read next by TMA (the async proxy) in other CTAs: every writer orders its generic
  // stores before the async proxy, then one thread releases the count.
  __device__ void writer_fence() const { dev::fence_proxy_async_global(); }
  // cycles < 0: a piece that is not recorded (the second warp group of a 128-row tile).
  __device__ void tile_stored(EpilogueTile const& t, long long cycles) const {
    dev::add_release_gpu(l1_done + t.tag, 1u);
    if (hook != nullptr && cycles >= 0) hook[blockIdx.x] = static_cast<uint32_t>(cycles);
  }
};

struct CombineDestination {
  uint16_t* at[kEpMaxRanks];  // combine buffer of each rank (all = this rank's in the local control)
  const int32_t* recv_src;    // [cap] ep_origin(src, t * k + j)
  int hidden;
  uint32_t* spans;            // null or [tags * 2]
  uint32_t* hook;             // null or [grid] (tile trace)
  static constexpr bool kNeedsTileStoredHook = true;
  __device__ void* row_ptr(EpilogueTile const& t, int row) const {
    const int32_t origin = __ldcg(recv_src + row);
    return at[ep_origin_rank(origin)] + static_cast<int64_t>(ep_origin_row(origin)) * hidden + t.col_begin;
  }
  __device__ void writer_fence() const {}
  // cycles < 0: not recorded. (The 128 x 256 tile's pieces are stored and recorded by its store
  // warps, one span per (128-row block, 128 columns), mega_store.cuh.)
  __device__ void tile_stored(EpilogueTile const& t, long long cycles) const {
    if (cycles < 0) return;
    if (spans != nullptr) spans[t.tag * 2 + ((t.col_begin / 128) & 1)] = static_cast<uint32_t>(cycles);
    if (hook != nullptr) hook[blockIdx.x] = static_cast<uint32_t>(cycles);
  }
};

}  // namespace xstage::kernels::moe
