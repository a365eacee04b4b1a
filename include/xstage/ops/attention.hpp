// Attention forward operator: O = softmax(scale * Q K^T) V on one GPU, with the Hopper
// kernel of src/kernels/attention (TMA, wgmma, warp specialisation, persistent tiles).
//
// Layout: BSHD with arbitrary strides in elements (the head-dim stride must be 1), e.g. a
// slice of a packed [B, S, 3, H, D] QKV tensor. bf16 or fp16 in and out, fp32 accumulation,
// head dim 64 or 128, q_len and kv_len independent. Causal masking is aligned top-left by
// default (query i sees keys j <= i, torch's is_causal) or bottom-right (j <= i + kv_len -
// q_len, FlashAttention's; needs kv_len >= q_len). The optional LSE is the natural-log
// log-sum-exp of the scaled scores, fp32 [B, H, Sq].
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "xstage/attention_tile_order.hpp"

namespace xstage::ops {

enum class AttentionDType : int { bf16 = 0, fp16 = 1 };
const char* dtype_name(AttentionDType t);

// Strides of a BSHD tensor, in elements.
struct BSHDStrides {
  int64_t b = 0;
  int64_t s = 0;
  int64_t h = 0;
  int64_t d = 1;
};
// Strides of a dense [B, S, H, D] tensor.
BSHDStrides packed_bshd(int seq, int heads, int head_dim);

// Which compiled tile serves a call (staged is what the Ulysses harness uses, so that attention
// alone, serial and the fused kernels share one mainloop). automatic: the staged tile, or the
// long-key tile from kLongKvThreshold keys on (d = 128, non-causal), or, non-causal and with
// tail_split, the split tile where its key splits won (launches short of a wave; at d = 128 also
// split last waves from 16 key blocks; kernels/attention/tile_rules.hpp split_wins), or the 128-row
// tile for d = 64 where its busiest CTA finishes first, or (partial_tiles) the partial-tiles tile
// where pairing the sequences' partial last tiles shortens the launch (docs/attention.md §Short
// sequences, §Partial tiles); staged: always the staged tile; rows128: the
// 128-row d = 64 tile (other head dims are refused); split: non-causal d = 64 / 128, a 128-row
// mainloop with the registers -> global epilogue, whose tiles split along the keys when the last
// wave would leave most SMs idle or the launch is short of a wave (causal calls are refused);
// long_kv: the 128 x 192 long-key tile (non-causal d = 128, what automatic takes from
// kLongKvThreshold keys) at any key count (other calls are refused). Causal d = 64, automatic: the
// staged, 128-row or 64-row key-groups tile, whichever's modelled busiest CTA finishes first
// (kernels/attention/tile_rules.hpp causal_d64_tile).
// rows64: the 64-row tile whose two warp groups split each tile's key blocks, d = 64 and non-causal
// d = 128 (docs/attention.md §Key groups; causal d = 128 is refused).
// partial: the 192-row d = 64 tile whose warp groups without query rows idle, the sequences' partial
// last tiles dealt last (non-causal d = 64; what automatic takes where those tiles pair up and the
// 128-row tile does not win, with partial_tiles; docs/attention.md §Partial tiles).
enum class AttentionTilePolicy { automatic, staged, rows128, split, long_kv, partial, rows64 };

struct AttentionArgs {
  AttentionDType dtype = AttentionDType::bf16;
  int batch = 0;
  int heads = 0;
  int q_len = 0;
  int kv_len = 0;
  int head_dim = 0;

  const void* q = nullptr;  // device pointers
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  BSHDStrides q_strides, k_strides, v_strides, o_strides;

  bool return_lse = false;
  float* lse = nullptr;      // fp32, element (b, h, s) at b*lse_stride_b + h*lse_stride_h + s
  int64_t lse_stride_b = 0;  // 0 and 0: dense [B, H, Sq]
  int64_t lse_stride_h = 0;

  float softmax_scale = 0.f;  // 0: 1/sqrt(head_dim)
  bool causal = false;
  // Causal only. Alignment of the mask (bottom_right needs kv_len >= q_len, so that every query
  // sees a key) and the persistent tile order (xstage/attention_tile_order.hpp, docs/attention.md
  // §Persistent scheduler): longest_first balances the triangular work over the CTAs (measured
  // 1.32x head_major, geomean of 40 shapes); grouped does so within planned groups
  // of heads, so fewer heads' K/V are in flight on long many-head shapes (the only shapes where
  // its plan differs from longest_first; measured 40 of 40 acceptance points vs 37); claimed runs
  // the grouped list with greedy claiming through a per-stream counter and groups of 1-2 heads at
  // long S (fewer DRAM re-reads of K/V; staged tiles only, so not with tile policy rows128 or rows64);
  // automatic (the default) takes claimed or grouped by the shape (causal_order_for).
  causal::Align causal_align = causal::Align::top_left;
  causal::TileOrder causal_order = causal::TileOrder::automatic;
  // automatic / grouped / claimed only: (batch, head) pairs per group; 0: planned (causal::plan_group /
  // plan_claimed_group), else 1..heads*batch.
  int causal_group = 0;
  int num_ctas = 0;  // persistent grid; 0: one CTA per SM
  AttentionTilePolicy tile_policy = AttentionTilePolicy::automatic;
  // Long-key and split tiles only: when the last wave of tiles would leave most SMs idle, split those
  // tiles along the keys over the idle SMs, and when the launch is short of a wave, split every
  // tile, then merge the parts (uses a workspace of ~66 KiB per SM, allocated once per (device,
  // stream) on first use). false also keeps the automatic policy off the split tile.
  bool tail_split = true;
  // Automatic policy, non-causal d = 64: where each sequence's last 192-row q tile keeps one warp
  // group busy and the launch has 2-8 rounds, the partial-tiles kernel (tile policy partial) may
  // run, whose partial tiles pair up on CTAs. false: the rule and kernels before it (A/B runs).
  bool partial_tiles = true;
};

// Throws xstage::InvalidArgument with one line naming the first problem: unsupported dtype
// or head dim, non-positive sizes, null or misaligned pointers (16 B; 4 B for the LSE),
// strides (head-dim stride 1; the others positive multiples of 8 elements, i.e. 16 bytes),
// a bad softmax scale, LSE requested without a buffer, a problem too large for the kernel.
void validate(const AttentionArgs& a);

// The compiled kernel that serves a configuration.
struct AttentionInstantiation {
  std::string name;  // e.g. "bf16_d128_noncausal"
  int block_m = 0;
  int block_n = 0;
  int stages = 0;
  int consumer_warpgroups = 0;
  int threads = 0;
  int smem_bytes = 0;
  int producer_regs = 0;
  int consumer_regs = 0;
  bool intra_wg_overlap = false;
  bool pingpong = false;
  int lazy_rescale = 0;  // kernels::attention::AttentionTraits::kLazyRescale
  int q_stages = 0;      // Q buffers: 2 where the next tile's Q loads during this tile
};
// Throws InvalidArgument for a dtype/head-dim pair that is not shipped. The first form is the
// staged tile (short key sets); the second what attention_forward launches for a call.
AttentionInstantiation select_instantiation(AttentionDType dtype, int head_dim, bool causal);
AttentionInstantiation select_instantiation(AttentionDType dtype, int head_dim, bool causal, int kv_len,
                                            AttentionTilePolicy policy = AttentionTilePolicy::automatic);
// What attention_forward launches for this call (tile policy and head dim checked), including the rules that depend on
// the whole shape and the grid (reads the SM count unless num_ctas > 0): non-causal d = 64 gets
// the 128-row tile or the partial-tiles tile where they finish first (tile_rules.hpp).
AttentionInstantiation select_instantiation(const AttentionArgs& a);

// Names on the command line and in JSON: "top-left" / "bottom-right", "auto" / "head-major" /
// "longest-first" / "grouped" / "claimed"; parse_* throw InvalidArgument (one line) for anything else.
const char* causal_align_name(causal::Align a);
const char* causal_order_name(causal::TileOrder o);
causal::Align parse_causal_align(const std::string& s);
causal::TileOrder parse_causal_order(const std::string& s);
// Query i sees keys j <= i + this (0 unless causal bottom-right).
int causal_key_offset(const AttentionArgs& a);
// The causal tile order the call runs: causal_order, with automatic resolved to grouped or claimed
// (docs/attention.md §Persistent scheduler, "auto"). Validates the call first. On a stream that is
// capturing a CUDA graph, automatic runs grouped instead of claimed and an explicit claimed is
// refused (InvalidArgument): the claimed order's counters are per stream, looked up by its id.
causal::TileOrder causal_order_for(const AttentionArgs& a);
// (batch, head) pairs per group of the causal tile order the call runs (automatic resolved): 0 for
// head_major and non-causal calls, all pairs for longest_first, the planned group for grouped and
// claimed (reads the SM count).
int causal_group_for(const AttentionArgs& a);

// Validates, then launches on `stream` (asynchronous; launch errors throw xstage::Error).
void attention_forward(const AttentionArgs& a, cudaStream_t stream);
// Validates, then allocates (or grows) the key-split workspace and, for a call that runs the claimed
// causal order (automatic included: causal d = 128 from 8192 keys, not under capture), the
// stream's claim counters that attention_forward uses for this call, so that a later call (e.g.
// under CUDA graph capture) allocates nothing; nothing happens where the call needs neither. Not
// capture-safe itself when it has to allocate: call it before capturing such calls (the Python op
// does, in relaxed capture mode). Graphs captured on one stream share its workspace: replay them
// one at a time.
void reserve_split_workspace(const AttentionArgs& a, cudaStream_t stream);

// Floating-point operations of the two GEMMs (4 * B * H * d * #visible (query, key) pairs):
// 4 B H Sq Skv d without a mask, the exact visible count when causal.
double attention_flops(const AttentionArgs& a);

// fp32 reference on the host, for small problems (tests): q, k, v are float arrays laid out
// with a's strides; writes O with a.o_strides into o and, if lse != nullptr, a dense
// [B, H, Sq] LSE. Same semantics as the kernel (scale, causal mask of either alignment).
void attention_reference_host(const AttentionArgs& a, const float* q, const float* k, const float* v, float* o,
                              float* lse);

}  // namespace xstage::ops
