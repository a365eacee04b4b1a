// Arguments of the attention forward kernel: plain pointers, sizes, strides and flags that
// host code (ops) fills and device code reads. No CUDA types, no templates.
//
// Tensors are BSHD: element (b, s, h, d) of Q sits at q + b*q_stride_b + s*q_stride_s +
// h*q_stride_h + d (strides in elements, head-dim stride 1). K and V share kv_len; O has
// Q's shape; the optional LSE is fp32 [B, H, Sq] with stride 1 along Sq.
#pragma once
#include <cstdint>

#include "xstage/attention_tile_order.hpp"

namespace xstage::kernels::attention {

enum class DType : int { bf16 = 0, fp16 = 1 };

struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // nullptr: no log-sum-exp output

  int batch = 0;
  int heads = 0;
  int q_len = 0;
  int kv_len = 0;
  int head_dim = 0;

  int64_t q_stride_b = 0, q_stride_s = 0, q_stride_h = 0;
  int64_t k_stride_b = 0, k_stride_s = 0, k_stride_h = 0;
  int64_t v_stride_b = 0, v_stride_s = 0, v_stride_h = 0;
  int64_t o_stride_b = 0, o_stride_s = 0, o_stride_h = 0;
  int64_t lse_stride_b = 0, lse_stride_h = 0;

  float softmax_scale = 0.f;  // scores = softmax_scale * q.k
  bool causal = false;        // must match the instantiation that is launched
  // Causal only (xstage/attention_tile_order.hpp): query i sees keys j <= i + causal_key_offset
  // (0: top-left; kv_len - q_len: bottom-right; >= 0); the persistent tile order.
  int causal_key_offset = 0;
  causal::TileOrder causal_order = causal::TileOrder::grouped;
  int causal_group = 0;       // grouped / claimed order: (batch, head) pairs per group (causal::plan_group)
  // Claimed order: two ints (the claim counter, the CTAs done), zero before the launch; the
  // launch's last CTA sets them back to zero (kernel.cuh).
  int* claim_counter = nullptr;
  int num_ctas = 0;           // persistent grid size; 0 = one CTA per SM of the current device

  // Tail-split workspace (kernels with a tail-splitting epilogue; see tile_scheduler.cuh):
  // room for split_capacity parts (>= the grid, or nothing is split).
  float* split_workspace = nullptr;  // split_capacity parts of split_part_floats() floats
  int split_capacity = 0;
};

// One part of the tail-split workspace: 128 threads x 2 warp groups x (64 O values + 2 LSE
// values) fp32 (d = 128, block_m = 128).
constexpr long long split_part_floats() { return 2LL * 128 * (64 + 2); }

}  // namespace xstage::kernels::attention
