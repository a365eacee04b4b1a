// Expert-parallel MoE layer, unfused (issue 8's first step; docs/megamoe.md): the routing
// counts, dispatch and combine run as transport kernels over NCCL symmetric memory (remote
// stores, release/acquire counters, bounded waits) around the W8A8 grouped GEMMs of issue 7.
// The same data movement and math as the planned single persistent Mega-MoE kernel, in five
// kernels per call; it is the correctness reference for that kernel on the GPU and a third
// baseline next to it.
//
// Per rank: T tokens, x fp8 [T, H] with scales [H/128, T] (per-token: [T], EpMoeRankInputs::act); routing topk_experts / topk_weights
// [T * k]; this rank's experts e in [rank * E/P, (rank + 1) * E/P): W1 fp8 [E/P, 2I, H] (gate rows
// then up rows) with 128 x 128 block scales [E/P, 2I/128, H/128], W2 fp8 [E/P, H, I] with scales
// [E/P, H/128, I/128]; or W4A8 weights (quant, formats of moe_gemm.hpp: packed 4-bit with INT4
// group-128 scales or MXFP4 E8M0 exponents; the fused MegaMoeLayer takes them too). Output bf16 [T, H] = sum
// over the token's k choices of
// bf16(Linear-2(fp8(silu(gate) * up * weight))) — ops::moe_layer_reference's math.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "xstage/ops/moe_gemm.hpp"
#include "xstage/ops/moe_quant_kind.hpp"
#include "xstage/team.hpp"

namespace xstage::ops {

struct EpMoeConfig {
  int hidden = 0;        // multiple of 128
  int intermediate = 0;  // multiple of 128
  int experts = 0;       // divisible by the team size, at most 1024
  int top_k = 0;         // 1 .. experts
  int tokens = 0;        // tokens per rank (>= 1)
};

struct EpMoeRankInputs {
  const int32_t* topk_experts = nullptr;  // [T * k] device, values in [0, E); an id outside is
                                          // reported by Team::check_device_status
  const float* topk_weights = nullptr;    // [T * k] device
  const void* x = nullptr;                // [T, H] fp8 e4m3, 16-byte aligned
  const float* x_scales = nullptr;        // [H/128, T]
  MoeQuant quant = MoeQuant::w8a8;       // weights' format
  const void* w1 = nullptr;               // this rank's experts, see above
  const float* w1_scales = nullptr;       // w8a8 block scales or w4a8_int4 group scales
  const void* w2 = nullptr;
  const float* w2_scales = nullptr;
  const uint8_t* w1_e8m0 = nullptr;       // w4a8_mxfp4 only
  const uint8_t* w2_e8m0 = nullptr;
  // W4A8 weights prepacked for the register-operand kernels (moe_gemm.hpp, moe_quant4.hpp), W1 and
  // W2 alike: int4_rs_lut (w4a8_int4 in the two-level format: w1/w2 the prepacked chunks,
  // w1_scales/w2_scales the fp32 channel scales [E/P, 2I] / [E/P, H]) or mxfp4_rs (w4a8_mxfp4:
  // the prepacked chunks, w1_scales/w2_scales the fp32 block scales [E/P, H/128, 2I] /
  // [E/P, I/128, H]; no e8m0 arrays). The unfused layer runs the per-128 register-operand grouped
  // GEMMs on them (INT4 two-level only), the fused layer its register-operand kernel (built with
  // XSTAGE_MEGA_W4A8_RS). rows: the formats above.
  MoeWeightLayout w_layout = MoeWeightLayout::rows;
  // Activation scales. per_128 (default): x_scales [H/128, T]. per_token (the unfused layer, with
  // w_layout int4_rs_lut or mxfp4_rs; docs/megamoe.md "Per-token activations in the unfused
  // layer"): x_scales [T], one per token (quantize_fp8_per_token); W1 then comes in that layout's
  // gate/up-interleaved form (int4_rs_lut_glu: prepack_int4_lut_rs_glu and its permuted channel
  // scales; mxfp4_rs_glu: prepack_mxfp4_rs_glu and its block scales); h is requantised to one
  // scale per token between the GEMMs, which run their per-token kernels.
  MoeActScales act = MoeActScales::per_128;
  void* out = nullptr;                    // [T, H] bf16, 16-byte aligned
};

// The stage boundaries of one unfused call, for its phase breakdown (docs/megamoe.md "Phase
// breakdown"): events recorded on the call's stream before the counts, after the layout
// (dispatch: counts, dispatch, layout), after Linear-1, after Linear-2, after the combine and
// after the reduce. The caller creates them (on the rank's device) and owns them.
struct EpMoePhaseEvents {
  cudaEvent_t at[6] = {};
};
struct EpMoePhaseTimes {
  double dispatch_us = 0, l1_us = 0, l2_us = 0, combine_us = 0, reduce_us = 0;
};
// After the call's stream synchronised; throws xstage::Error if an event was never recorded.
EpMoePhaseTimes ep_moe_phase_times(const EpMoePhaseEvents& ev);

// Throws InvalidArgument naming the first problem (sizes, divisibility, world of 1..8; one rank
// holds every expert and moves rows within its GPU).
void validate_ep_moe(const EpMoeConfig& c, int world);

class EpMoeLayer {
 public:
  // Collective (allocates symmetric buffers): every rank of the team constructs it.
  EpMoeLayer(Team& team, const EpMoeConfig& cfg);
  ~EpMoeLayer();
  EpMoeLayer(const EpMoeLayer&) = delete;
  EpMoeLayer& operator=(const EpMoeLayer&) = delete;

  // One call of local rank i on stream s (asynchronous). Every rank must call it the same
  // number of times; a rank that does not makes the others' waits time out into the team's
  // DeviceStatus (Team::check_device_status turns it into an error).
  void forward(int i, const EpMoeRankInputs& in, cudaStream_t s);
  // The same call with its stage boundaries recorded into `phases` (six event records more).
  void forward(int i, const EpMoeRankInputs& in, cudaStream_t s, const EpMoePhaseEvents& phases);

 private:
  void run(int i, const EpMoeRankInputs& in, cudaStream_t s, const EpMoePhaseEvents* phases);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage::ops
