// Host-side entry points of the attention forward kernels (no device code here): one
// launcher per shipped instantiation {bf16, fp16} x {d64, d128} x {causal, non-causal},
// defined in launch_<dtype>_d<dim>.cu, plus what each instantiation looks like.
//
// Launchers assume the host operator (src/ops/attention_op.cpp) already validated the
// params; they return the first CUDA error (attribute setting or launch), never throw.
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/params.hpp"
#include "kernels/attention/split_plan.hpp"
#include "kernels/common/persistent_grid.hpp"

namespace xstage::kernels::attention {

// Tile shape per head dim: a CTA computes block_m query rows (block_m / 64 consumer warp
// groups, 64 rows each) against block_n keys per step, with `stages` K/V buffers in flight.
// lazy_rescale: AttentionTraits::kLazyRescale (2 everywhere: +3-5% measured, docs/attention.md).
struct TileConfig {
  int block_m;
  int block_n;
  int stages;
  int consumer_warpgroups;
  int lazy_rescale = 2;
  int q_stages = 1;  // Q buffers: what KernelInfo reports (the configs above leave it at 1; the
                     // instantiations take kLocalQStages, kernel.cuh; docs/attention.md §Design "Q buffers")
};

// The staged-epilogue tiles: every instantiation has one, and the Ulysses kernels use them.
constexpr TileConfig tile_config(int head_dim) {
  return head_dim == 64 ? TileConfig{192, 128, 4, 3} : TileConfig{128, 128, 2, 2};
}

// Long key sets (d = 128, non-causal, local output): 192 keys per step, O stored straight
// from registers (no room for the staging buffer next to 2 x 48 KiB K/V stages). Chosen by
// the operator from kLongKvThreshold keys on: 1.02-1.04x the staged tile at 8192-65536 keys,
// 0.90x at 1024 (tools/attn_study; docs/attention.md §Measured).
constexpr TileConfig long_kv_tile_config() { return TileConfig{128, 192, 2, 2}; }
constexpr int kLongKvThreshold = 8192;

// A 128-row tile for d = 64 (tile policy rows128): with 192-row tiles a short sequence leaves
// SMs idle (S = 1024, 12 heads: 72 tiles on 132 SMs; 24 heads: 144 tiles, a second wave of 12),
// 128 rows give 96 and 192 tiles. The automatic policy serves it to non-causal d = 64 calls
// by tile_rules.hpp noncausal_d64_tile (docs/attention.md §Short sequences).
constexpr TileConfig rows128_d64_tile_config() { return TileConfig{128, 128, 4, 2}; }

// The 64-row key-group tiles (tile policy rows64): two consumer warp groups share the 64 query rows
// and split each tile's key blocks (kernels/attention/key_groups.cuh), so the longest work item is
// half a 128-row tile's (docs/attention.md §Key groups). d = 128: 64-key blocks in four K/V stages,
// so each group has two in flight as at d = 64 (128-key blocks leave room for two stages only, next
// to the groups' exchange buffer: 0.93-0.99x the 64-key blocks, tools/attn_study).
constexpr TileConfig rows64_tile_config(int head_dim) {
  return head_dim == 64 ? TileConfig{64, 128, 4, 2} : TileConfig{64, 64, 4, 2};
}
// The key-group kernels run the overlapped step only: a build with XSTAGE_ATTN_INTRA_WG_OVERLAP=OFF
// ships them as launchers that return cudaErrorNotSupported, and the operator neither picks nor
// accepts them there.
#ifndef XSTAGE_ATTN_INTRA_WG_OVERLAP
#define XSTAGE_ATTN_INTRA_WG_OVERLAP 1
#endif
inline constexpr bool kKeyGroupsBuilt = XSTAGE_ATTN_INTRA_WG_OVERLAP != 0;

// Split tiles (non-causal; tile policy split): a 128-row mainloop with the long-key tile's
// registers -> global epilogue, whose parts let a launch split tiles along the keys
// (tile_scheduler.cuh tail_split_plan): the last wave when it leaves most SMs idle (S = 1024,
// 24 heads, d = 128: 192 tiles, 1.45 waves), every tile when the launch is short of a wave
// (S = 1024, 4 heads: 32 tiles). d = 128: the staged tile's 128 x 128 mainloop; d = 64:
// the 128-row tile's (rows128_d64_tile_config). docs/attention.md §Short sequences.
constexpr TileConfig split_tile_config(int head_dim) {
  return head_dim == 64 ? rows128_d64_tile_config() : tile_config(128);
}

// What one instantiation is, for logs, benchmarks and tests.
struct KernelInfo {
  TileConfig tile;
  int threads;            // per CTA: 128 producer + 128 per consumer warp group
  int smem_bytes;         // dynamic shared memory per CTA
  int producer_regs;      // setmaxnreg of the producer warp group
  int consumer_regs;      // setmaxnreg of the consumer warp groups
  bool intra_wg_overlap;  // softmax of block j overlaps the QK^T GEMM of block j+1
  bool pingpong;          // consumer warp groups take turns issuing GEMMs
};

cudaError_t attention_fwd_bf16_d64_causal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d64_noncausal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d128_causal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d128_noncausal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_causal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_noncausal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_causal(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_noncausal(const AttentionParams& p, cudaStream_t stream);

// d = 64, non-causal: the staged 192-row tile with idle groups, partial tiles dealt last
// (PartialTilesKernel; tile policy partial, or automatic where tile_rules.hpp partial_tiles_pay).
cudaError_t attention_fwd_bf16_d64_noncausal_partial(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_noncausal_partial(const AttentionParams& p, cudaStream_t stream);

// d = 64, rows128_d64_tile_config() (staged epilogue).
cudaError_t attention_fwd_bf16_d64_causal_rows128(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d64_noncausal_rows128(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_causal_rows128(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_noncausal_rows128(const AttentionParams& p, cudaStream_t stream);
KernelInfo attention_fwd_bf16_d64_rows128_info();
KernelInfo attention_fwd_fp16_d64_rows128_info();

// rows64_tile_config(d) (key groups, staged epilogue): d = 64 causal and non-causal, non-causal d = 128.
cudaError_t attention_fwd_bf16_d64_causal_rows64(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_causal_rows64(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_bf16_d64_noncausal_rows64(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_noncausal_rows64(const AttentionParams& p, cudaStream_t stream);
KernelInfo attention_fwd_bf16_d64_rows64_info();
KernelInfo attention_fwd_fp16_d64_rows64_info();
cudaError_t attention_fwd_bf16_d128_noncausal_rows64(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_noncausal_rows64(const AttentionParams& p, cudaStream_t stream);
KernelInfo attention_fwd_bf16_d128_rows64_info();
KernelInfo attention_fwd_fp16_d128_rows64_info();

// d = 128, non-causal, long_kv_tile_config() (registers -> global epilogue).
cudaError_t attention_fwd_bf16_d128_noncausal_longkv(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_noncausal_longkv(const AttentionParams& p, cudaStream_t stream);

// non-causal, split_tile_config(d) (registers -> global epilogue, key splits).
cudaError_t attention_fwd_bf16_d128_noncausal_split(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d128_noncausal_split(const AttentionParams& p, cudaStream_t stream);
KernelInfo attention_fwd_bf16_d128_split_info();
KernelInfo attention_fwd_fp16_d128_split_info();
cudaError_t attention_fwd_bf16_d64_noncausal_split(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_fwd_fp16_d64_noncausal_split(const AttentionParams& p, cudaStream_t stream);
KernelInfo attention_fwd_bf16_d64_split_info();
KernelInfo attention_fwd_fp16_d64_split_info();

KernelInfo attention_fwd_bf16_d128_longkv_info();
KernelInfo attention_fwd_fp16_d128_longkv_info();
KernelInfo attention_fwd_bf16_d64_info();
KernelInfo attention_fwd_bf16_d128_info();
KernelInfo attention_fwd_fp16_d64_info();
KernelInfo attention_fwd_fp16_d128_info();

// Tiles of one launch (q tiles of block_m rows x heads x batch): the persistent grid never
// exceeds it. Without block_m: the head dim's staged tile (tile_config).
inline long long attention_num_tiles(const AttentionParams& p, int block_m) {
  return static_cast<long long>((p.q_len + block_m - 1) / block_m) * p.heads * p.batch;
}
inline long long attention_num_tiles(const AttentionParams& p) {
  return attention_num_tiles(p, tile_config(p.head_dim).block_m);
}

// The persistent grid of a launch: p.num_ctas, or (0) one CTA per SM of the current device;
// never more CTAs than tiles. The launcher and the tail-split workspace both size by it.
inline cudaError_t attention_grid(const AttentionParams& p, int block_m, int& ctas) {
  return persistent_grid(p.num_ctas, attention_num_tiles(p, block_m), ctas);
}
inline cudaError_t attention_grid(const AttentionParams& p, int& ctas) {
  return attention_grid(p, tile_config(p.head_dim).block_m, ctas);
}

}  // namespace xstage::kernels::attention
