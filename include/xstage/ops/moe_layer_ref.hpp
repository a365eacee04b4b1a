// Host fp32 reference of one whole expert-parallel MoE layer (W8A8 or W4A8), the oracle for the
// Mega-MoE kernel's GPU tests (issue 8, docs/megamoe.md). It computes exactly the quantised
// math the kernel is meant to run, organised the way the kernel moves data: rows dispatched to
// their experts' owner, grouped per expert, Linear-1 + SwiGLU x router weight + fp8
// requantisation, Linear-2 rounded to bf16, and the top-k rows summed on the token's owner.
//
// Per (rank r, token t, choice j) with expert e and router weight w:
//   a      = x_r[t] * x_scale (per 128 channels)                        fp8 activations
//   gate_c = sum_k a_k W1[e, c, k] s1[e, c/128, k/128],  up_c with row I + c   c < I
//   h_c    = silu(gate_c) * up_c * w, quantised per 128 channels with the device arithmetic
//            (moe_quant.hpp: scale = max(amax, 1e-4) / 448)
//   y_n    = bf16( sum_c h_c W2[e, n, c] s2[e, n/128, c/128] )
//   out_r[t, n] = sum_j y_n        (fp32 sum of the bf16 rows)
// W4A8 weights (INT4 group-128 or MXFP4, moe_quant4.hpp) enter as the fp32 weights the W4A8
// kernels compute with: dequantize_int4_g128 / dequantize_mxfp4_w4a8 (sub-blocks more than 14
// exponents below their 128-K block's largest flushed to zero), in place of W1 x s1 / W2 x s2;
// INT4 in the two-level format (int4_two_level) as dequantize_int4_lut, MXFP4 for the
// register-operand kernels (mxfp4_max_gap = kMxfp4RsMaxExponentGap) with that flush bound.
// Plain host code, O(rows * 3 * H * I): meant for test-sized shapes.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "xstage/moe_routing.hpp"
#include "xstage/ops/moe_quant_kind.hpp"

namespace xstage::ops {

// The layouts are the GEMM operator's B operands (moe_gemm.hpp), so a test uploads them as is.
struct MoeLayerWeights {
  int experts = 0, hidden = 0, intermediate = 0;
  MoeQuant quant = MoeQuant::w8a8;
  // w8a8: fp8 e4m3 [E, 2I, H] (rows [0, I) gate, [I, 2I) up) and [E, H, I];
  // w4a8: packed 4-bit [E, 2I, H/2] and [E, H, I/2] (even K column in the low nibble).
  std::vector<uint8_t> w1, w2;
  // w8a8: 128 x 128 block scales [E, 2I/128, H/128] and [E, H/128, I/128];
  // w4a8_int4: group-128 scales [E, H/128, 2I] and [E, I/128, H]; w4a8_mxfp4: empty.
  std::vector<float> w1_scales, w2_scales;
  // w4a8_mxfp4 only: E8M0 exponents [E, H/32, 2I] and [E, I/32, H].
  std::vector<uint8_t> w1_e8m0, w2_e8m0;
  // w4a8_int4 in the two-level format (ops::quantize_int4_lut; the register-operand kernels'
  // int4_rs_lut layout prepacks it): w1/w2 hold the codes as above, w1_scales/w2_scales the fp32
  // channel scales [E, 2I] and [E, H], w1_groups/w2_groups the e4m3 group scales [E, H/128, 2I]
  // and [E, I/128, H].
  bool int4_two_level = false;
  std::vector<uint8_t> w1_groups, w2_groups;
  // w4a8_mxfp4: sub-blocks more than this many exponents below their 128-K block's largest are
  // zero (14: the row-layout kernels; kMxfp4RsMaxExponentGap = 11: the register-operand ones).
  int mxfp4_max_gap = 14;
  // The per-token activation recipe of the register-operand kernels (EpMoeRankInputs::act): x with
  // one scale per token (its per-128 scales all equal, as make_moe_layer_inputs(..., true) makes
  // them), and h quantised per 128 channels as Linear-1's epilogue does, then requantised to one
  // scale per token S = max over the row's 128-channel scales s: q' = e4m3(e4m3^-1(q) * (s / S)),
  // the arithmetic of the layer's requantisation kernel (kernels/moe/ep_per_token.hpp).
  bool per_token_activations = false;
  // With per_token_activations, h as the fused per-token kernel makes it
  // (kernels/moe/mega_w4a8_tok_kernel.cuh) instead: rounded to bf16, then quantised once with one
  // scale per token from the bf16 row's |h| maximum a: q = e4m3(bf16(h) * (448 / a)), scale a / 448
  // (fp8_scale_for_amax; the kernel multiplies by the same float).
  bool per_token_h_from_bf16 = false;
};

// How far (relative) the fused per-token kernel's fp32 h may lie from the reference's fp64 h:
// fp8 tensor-core accumulation keeps ~14 bits per partial sum (DeepSeek-V3 report §3.3.2), the
// rest (scales, silu to ~1e-7) is fp32. Where a token's largest |h| lies within this of a bf16
// rounding midpoint, the kernel's bf16 value, and so the token's scale, may be the neighbour's:
// one scale step re-rounds a few % of the token's e4m3 codes, ~1-4 % of the expert row
// (docs/megamoe.md §Per-token activations in the fused kernel, "Checking it").
inline constexpr double kPerTokenHSlack = 1.0 / 2048;

struct MoeLayerRankInput {
  std::vector<uint8_t> x;       // [T, H] fp8 e4m3
  std::vector<float> x_scales;  // [H/128, T] (token-contiguous, as the GEMM's a_scales)
};

// Random weights (normal, sd 1/sqrt(K), quantised to `quant`) and inputs of the right sizes.
// int4_two_level: w4a8_int4 weights in the two-level format (quantize_int4_lut) instead of
// quantize_int4_g128's.
MoeLayerWeights make_moe_layer_weights(int experts, int hidden, int intermediate, uint64_t seed,
                                       MoeQuant quant = MoeQuant::w8a8, bool int4_two_level = false);
// per_token: x quantised with one scale per token (quantize_fp8_per_token), written [H/128, T]
// with every 128-column group of a token holding that scale.
std::vector<MoeLayerRankInput> make_moe_layer_inputs(const moe::Routing& r, uint64_t seed, bool per_token = false);

// One (token, expert) row: a = x[t] (fp8 + scales), output y (bf16-rounded, as floats) of
// length hidden. Exposed so tests can recompute the layer token by token.
void moe_expert_row(const MoeLayerWeights& w, int expert, float router_weight, const uint8_t* x_row,
                    const float* x_row_scales /* [H/128], this token's */, float* y);

// One h element whose e4m3 code is ambiguous: h within `slack` (relative) of its value takes
// another code in the row's recipe, its scales fixed (the fused per-token recipe: through bf16
// under the token's scale; the requantisation recipes: under the block's 128-channel scale, then
// rescaled to the token's). Each
// delta is what one other code adds to the expert row (fp32; the row's bf16 rounding is not
// redone, the check's tolerance covers it). Only deltas of at least kHCodeMinShare of the row
// (L2) are kept: smaller ones are within the check's noise.
struct HCodeAlternatives {
  int channel = 0;
  std::vector<std::vector<float>> deltas;  // one per other code: 1, or 2 when both sides differ
};
inline constexpr double kHCodeMinShare = 1.0 / 512;

// The same rows for one expert, its weights dequantised once (moe_expert_row dequantises them
// at every call): for references that check many rows of one expert.
class MoeExpertReference {
 public:
  MoeExpertReference(const MoeLayerWeights& w, int expert);
  ~MoeExpertReference();
  MoeExpertReference(const MoeExpertReference&) = delete;
  MoeExpertReference& operator=(const MoeExpertReference&) = delete;
  // alternates (optional; cleared): with per_token_h_from_bf16, the row under each other
  // per-token scale the fused kernel may take, its h within `slack` of this one (relative; default
  // kPerTokenHSlack, at most 1/64: InvalidArgument otherwise); usually none.
  // code_alternates (optional; cleared): the h elements whose e4m3 code the same slack makes
  // ambiguous (under the primary scales), in any recipe; a few per row.
  void row(float router_weight, const uint8_t* x_row, const float* x_row_scales, float* y,
           std::vector<std::vector<float>>* alternates = nullptr, double slack = kPerTokenHSlack,
           std::vector<HCodeAlternatives>* code_alternates = nullptr) const;

 private:
  struct Matrices;
  std::unique_ptr<Matrices> m_;
  int hidden_ = 0, intermediate_ = 0;
};

// The layer: out[r] is [T, H] fp32 for rank r. Throws InvalidArgument when the routing and the
// weights or inputs disagree in shape.
std::vector<std::vector<float>> moe_layer_reference(const moe::Routing& r, const MoeLayerWeights& w,
                                                    const std::vector<MoeLayerRankInput>& in);

float bf16_round(float x);  // round to nearest even, as the kernel's bf16 stores

}  // namespace xstage::ops
