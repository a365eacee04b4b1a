// Arguments of the expert-parallel MoE transport kernels (src/kernels/moe/ep_transport.cu):
// routing counts, dispatch of activation rows to the experts' owners, combine of the expert
// outputs back to the tokens' owners, and the top-k sum. Plain pointers filled by the host
// operator (src/ops/ep_moe_op.cpp); no CUDA types. Protocol in docs/megamoe.md ("Unfused
// expert-parallel layer").
#pragma once
#include <cstdint>

#include "xstage/device_status.hpp"

namespace xstage::kernels::moe {

inline constexpr int kEpMaxRanks = 8;
inline constexpr int kEpMaxExperts = 1024;  // the counts kernel's shared-memory histogram

struct EpMoeArgs {
  int rank = 0, world = 1;
  int tokens = 0;            // T, tokens of this rank
  int top_k = 0;
  int experts = 0;           // E, all ranks
  int experts_per_rank = 0;  // E / P
  int hidden = 0;            // H
  int cap = 0;               // receive rows per rank (P * T * k)
  uint64_t epoch = 0;        // 1, 2, ... per call

  // This rank's routing and activations (device).
  const int32_t* topk_experts = nullptr;  // [T * k]
  const float* topk_weights = nullptr;    // [T * k]
  const uint8_t* x = nullptr;             // [T, H] fp8
  const float* x_scales = nullptr;        // [H/128, T]
  int32_t* row_slot = nullptr;            // [T * k] scratch: the row's index among this rank's rows of its expert

  // Every rank's symmetric buffers, mapped here (index = rank).
  int32_t* counts_at[kEpMaxRanks] = {};     // [2][P][E]: slot (parity, src) = src's rows per expert
  uint8_t* recv_x_at[kEpMaxRanks] = {};     // [cap, H] fp8
  float* recv_xs_at[kEpMaxRanks] = {};      // [H/128, cap]
  float* recv_w_at[kEpMaxRanks] = {};       // [cap] router weight of the row
  int32_t* recv_src_at[kEpMaxRanks] = {};   // [cap] ep_origin(src, t * k + j) (ep_device.cuh)
  uint16_t* combine_at[kEpMaxRanks] = {};   // [T, k, H] bf16, written by the experts' owners
  uint64_t* ready_at_peer[kEpMaxRanks] = {};  // slot `rank` of each rank's ready array
  uint64_t* counts_flag_at[kEpMaxRanks] = {};
  uint64_t* rows_flag_at[kEpMaxRanks] = {};
  uint64_t* combine_flag_at[kEpMaxRanks] = {};
  const uint64_t* ready = nullptr;        // this rank's ready array [P]

  // This rank's local state (device).
  int32_t* expert_counts = nullptr;   // [E/P] rows of each local expert (the GEMMs' counts)
  int32_t* expert_offsets = nullptr;  // [E/P]
  uint64_t* rows_expected = nullptr;  // running total of rows this rank must receive
  const uint16_t* y = nullptr;        // [cap, H] bf16: Linear-2 output of the received rows
  uint16_t* out = nullptr;            // [T, H] bf16: the layer's output

  DeviceStatus* status = nullptr;
  uint64_t timeout_ns = 0;
};

}  // namespace xstage::kernels::moe
