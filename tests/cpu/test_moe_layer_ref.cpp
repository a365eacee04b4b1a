// The host reference of the whole expert-parallel MoE layer (the Mega-MoE kernel's future
// oracle): dispatch/combine bookkeeping against a token-by-token recomputation, exact
// invariances of the quantised math, W4A8 weights against W8A8 weights holding the same values,
// shape validation, and (issue 33) tiny experts whose outputs are written out as literal
// numbers computed by hand: SwiGLU (silu(gate) * up), the router weighting and the top-k sum,
// the per-128-channel fp8 e4m3 requantisation (scale = amax / 448, round to nearest even, ties
// included), the MXFP4 flush rule and the fused per-token kernel's h (bf16, then one scale per
// row) -- none of them through the library's own expert_row or quantisation helpers.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <cstdint>
#include <cstring>
#include <vector>

#include "xstage/error.hpp"
#include "xstage/moe_routing.hpp"
#include "xstage/ops/moe_layer_ref.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"

#include <random>

using namespace xstage;

namespace {

moe::ModelShape tiny() { return moe::ModelShape{"tiny", 256, 256, 8, 3, 0, 0}; }

moe::Routing routing(int ranks, int tokens, moe::RoutingKind kind = moe::RoutingKind::skewed) {
  moe::RoutingConfig c;
  c.kind = kind;
  return moe::make_routing(tiny(), ranks, tokens, c);
}

}  // namespace

TEST(MoeLayerRef, EqualsATokenByTokenRecomputation) {
  const auto r = routing(2, 24);
  const auto w = ops::make_moe_layer_weights(8, 256, 256, 7);
  const auto in = ops::make_moe_layer_inputs(r, 8);
  const auto out = ops::moe_layer_reference(r, w, in);
  ASSERT_EQ(out.size(), 2u);
  std::vector<float> y(256), xs(2);
  double norm = 0;
  for (int src = 0; src < 2; ++src)
    for (int t = 0; t < 24; ++t) {
      std::vector<float> want(256, 0.f);
      for (int j = 0; j < 3; ++j) {
        xs[0] = in[src].x_scales[t];
        xs[1] = in[src].x_scales[24 + t];
        ops::moe_expert_row(w, r.per_rank[src].experts[t * 3 + j], r.per_rank[src].weights[t * 3 + j],
                            in[src].x.data() + t * 256, xs.data(), y.data());
        for (int n = 0; n < 256; ++n) want[n] += y[n];
      }
      for (int n = 0; n < 256; ++n) {
        const float got = out[src][t * 256 + n];
        ASSERT_TRUE(std::isfinite(got));
        EXPECT_NEAR(got, want[n], 1e-6f * (1.f + std::fabs(want[n]))) << "rank " << src << " token " << t << " n " << n;
        norm += double(got) * got;
      }
    }
  EXPECT_GT(norm, 1.0) << "the layer produced (almost) nothing";
}

TEST(MoeLayerRef, ScalingEveryRouterWeightScalesTheOutputExactly) {
  // h scales by 2, its per-128 fp8 requantisation is scale-invariant (amax and scale double,
  // the codes stay), Linear-2 doubles, bf16 rounding commutes with x2: out doubles bit for bit.
  auto r = routing(2, 16, moe::RoutingKind::balanced);
  const auto w = ops::make_moe_layer_weights(8, 256, 256, 11);
  const auto in = ops::make_moe_layer_inputs(r, 12);
  const auto a = ops::moe_layer_reference(r, w, in);
  for (auto& pr : r.per_rank)
    for (auto& x : pr.weights) x *= 2.f;
  const auto b = ops::moe_layer_reference(r, w, in);
  for (int src = 0; src < 2; ++src)
    for (size_t i = 0; i < a[src].size(); ++i) ASSERT_EQ(b[src][i], 2.f * a[src][i]) << i;
}

TEST(MoeLayerRef, ATokenSentNowhereElseIsUnchangedByOtherRanksTokens) {
  // Output rows are per token: changing rank 1's activations leaves rank 0's output alone.
  const auto r = routing(2, 8);
  const auto w = ops::make_moe_layer_weights(8, 256, 256, 3);
  auto in = ops::make_moe_layer_inputs(r, 4);
  const auto a = ops::moe_layer_reference(r, w, in);
  for (auto& v : in[1].x) v ^= 0x01;  // perturb every fp8 code of rank 1
  const auto b = ops::moe_layer_reference(r, w, in);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
}

TEST(MoeLayerRef, Bf16RoundingIsNearestEven) {
  EXPECT_EQ(ops::bf16_round(1.0f), 1.0f);
  EXPECT_EQ(ops::bf16_round(1.0f + 1.0f / 256), 1.0f);             // tie -> even (1.0)
  EXPECT_EQ(ops::bf16_round(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);  // tie -> even (1 + 2^-6)
  EXPECT_EQ(ops::bf16_round(1.0f + 1.5f / 256), 1.0f + 2.0f / 256);  // above the tie: up
  EXPECT_TRUE(std::isnan(ops::bf16_round(NAN)));
}

TEST(MoeLayerRef, ShapeMismatchesAreClearErrors) {
  const auto r = routing(2, 4);
  const auto in = ops::make_moe_layer_inputs(r, 1);
  EXPECT_THROW(ops::moe_layer_reference(r, ops::make_moe_layer_weights(4, 256, 256, 1), in), InvalidArgument);
  EXPECT_THROW(ops::moe_layer_reference(r, ops::make_moe_layer_weights(8, 128, 256, 1), in), InvalidArgument);
  const auto w = ops::make_moe_layer_weights(8, 256, 256, 1);
  EXPECT_THROW(ops::moe_layer_reference(r, w, {in[0]}), InvalidArgument);
  EXPECT_THROW(ops::make_moe_layer_weights(8, 200, 256, 1), InvalidArgument);
}

namespace {

// W4A8 weights whose values W8A8 represents exactly, and those W8A8 weights: every 4-bit code
// random; INT4 group scales / MXFP4 exponents constant over each 128 x 128 block and powers of
// two, so code x scale is exact in both formats.
std::pair<ops::MoeLayerWeights, ops::MoeLayerWeights> twin_weights(ops::MoeQuant q, int E, int H, int I) {
  ops::MoeLayerWeights w4, w8;
  for (auto* w : {&w4, &w8}) {
    w->experts = E;
    w->hidden = H;
    w->intermediate = I;
  }
  w4.quant = q;
  std::mt19937 g(5);
  auto make = [&](int rows, int cols, std::vector<uint8_t>& p4, std::vector<float>& s4, std::vector<uint8_t>& e8,
                  std::vector<uint8_t>& c8, std::vector<float>& s8) {
    for (int e = 0; e < E; ++e) {
      std::vector<float> block(size_t(rows / 128) * (cols / 128));
      for (auto& b : block) b = std::ldexp(1.f, -5 - int(g() % 4));  // 2^-5 .. 2^-8
      std::vector<uint8_t> packed(size_t(rows) * cols / 2, 0);
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
          const uint8_t nib = static_cast<uint8_t>(g() % 16);
          packed[(size_t(r) * cols + c) / 2] |= static_cast<uint8_t>(nib << ((c & 1) * 4));
          const float v = q == ops::MoeQuant::w4a8_int4 ? float(ops::int4_decode(nib)) : ops::e2m1_decode(nib);
          c8.push_back(ops::fp8_e4m3_encode(v));  // exact: |v| <= 8
        }
      p4.insert(p4.end(), packed.begin(), packed.end());
      s8.insert(s8.end(), block.begin(), block.end());
      if (q == ops::MoeQuant::w4a8_int4) {
        for (int kg = 0; kg < cols / 128; ++kg)
          for (int r = 0; r < rows; ++r) s4.push_back(block[(r / 128) * (cols / 128) + kg]);
      } else {
        // E8M0 byte for 2^x is 127 + x; every 32-column sub-block of a row shares its block's.
        for (int sb = 0; sb < cols / 32; ++sb)
          for (int r = 0; r < rows; ++r)
            e8.push_back(static_cast<uint8_t>(127 + std::ilogb(block[(r / 128) * (cols / 128) + sb / 4])));
      }
    }
  };
  make(2 * I, H, w4.w1, w4.w1_scales, w4.w1_e8m0, w8.w1, w8.w1_scales);
  make(H, I, w4.w2, w4.w2_scales, w4.w2_e8m0, w8.w2, w8.w2_scales);
  return {w4, w8};
}

}  // namespace

TEST(MoeLayerRef, W4A8EqualsW8A8OnWeightsBothHoldExactly) {
  const auto r = routing(2, 12);
  const auto in = ops::make_moe_layer_inputs(r, 21);
  for (auto q : {ops::MoeQuant::w4a8_int4, ops::MoeQuant::w4a8_mxfp4}) {
    const auto [w4, w8] = twin_weights(q, 8, 256, 256);
    const auto a = ops::moe_layer_reference(r, w4, in);
    const auto b = ops::moe_layer_reference(r, w8, in);
    double norm = 0;
    for (int rank = 0; rank < 2; ++rank)
      for (size_t i = 0; i < a[rank].size(); ++i) {
        ASSERT_EQ(a[rank][i], b[rank][i]) << "quant " << int(q) << " rank " << rank << " i " << i;
        norm += double(a[rank][i]) * a[rank][i];
      }
    EXPECT_GT(norm, 0.0) << "a zero layer would pass trivially";
  }
}

TEST(MoeLayerRef, MakesW4A8WeightsOfTheKernelsLayout) {
  const auto i4 = ops::make_moe_layer_weights(3, 256, 384, 2, ops::MoeQuant::w4a8_int4);
  EXPECT_EQ(i4.w1.size(), size_t(3) * 768 * 256 / 2);
  EXPECT_EQ(i4.w1_scales.size(), size_t(3) * (256 / 128) * 768);
  EXPECT_EQ(i4.w2.size(), size_t(3) * 256 * 384 / 2);
  EXPECT_EQ(i4.w2_scales.size(), size_t(3) * (384 / 128) * 256);
  EXPECT_TRUE(i4.w1_e8m0.empty());
  const auto mx = ops::make_moe_layer_weights(3, 256, 384, 2, ops::MoeQuant::w4a8_mxfp4);
  EXPECT_EQ(mx.w1_e8m0.size(), size_t(3) * (256 / 32) * 768);
  EXPECT_EQ(mx.w2_e8m0.size(), size_t(3) * (384 / 32) * 256);
  EXPECT_TRUE(mx.w1_scales.empty());
  // The random W4A8 layer computes something finite and non-zero.
  const moe::Routing r = moe::make_routing(moe::ModelShape{"w4", 256, 384, 3, 2, 0, 0}, 1, 6, {});
  const auto in = ops::make_moe_layer_inputs(r, 3);
  for (const auto* w : {&i4, &mx}) {
    const auto out = ops::moe_layer_reference(r, *w, in);
    double norm = 0;
    for (float v : out[0]) {
      ASSERT_TRUE(std::isfinite(v));
      norm += double(v) * v;
    }
    EXPECT_GT(norm, 0.0);
  }
}

TEST(MoeLayerRef, WeightArraysOfTheWrongFormatAreClearErrors) {
  const auto r = routing(2, 4);
  const auto in = ops::make_moe_layer_inputs(r, 1);
  auto w = ops::make_moe_layer_weights(8, 256, 256, 1);  // w8a8 arrays
  w.quant = ops::MoeQuant::w4a8_int4;
  EXPECT_THROW(ops::moe_layer_reference(r, w, in), InvalidArgument);
  w.quant = ops::MoeQuant::w4a8_mxfp4;
  EXPECT_THROW(ops::moe_layer_reference(r, w, in), InvalidArgument);
  auto m = ops::make_moe_layer_weights(8, 256, 256, 1, ops::MoeQuant::w4a8_mxfp4);
  m.w2_e8m0.pop_back();
  EXPECT_THROW(ops::moe_layer_reference(r, m, in), InvalidArgument);
}
// ---- hand-computed cases (issue 33) -------------------------------------------------------
namespace {

// fp8 e4m3 from the format's definition (bias 7, 3 mantissa bits, subnormals m * 2^-9, 0x7F
// and 0xFF NaN), and the code of a value it holds exactly: written here, not the library's.
float e4m3_value(uint8_t v) {
  const int e = (v >> 3) & 0xF, m = v & 7;
  const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.f + m / 8.f, e - 7);
  return (v & 0x80) ? -mag : mag;
}
uint8_t e4m3_code(float x) {
  for (int v = 0; v < 256; ++v)
    if ((v & 0x7F) != 0x7F && e4m3_value(static_cast<uint8_t>(v)) == x && !(x == 0.f && v != 0))
      return static_cast<uint8_t>(v);
  ADD_FAILURE() << x << " is not an fp8 e4m3 value";
  return 0;
}

// A W8A8 layer of `experts` experts, hidden H, intermediate I, all weights zero (code 0x00) with
// unit block scales, one rank, one token routed to experts {0, 1, ...} with `weights`.
struct HandLayer {
  moe::Routing r;
  ops::MoeLayerWeights w;
  std::vector<ops::MoeLayerRankInput> in;
  HandLayer(int experts, int H, int I, std::vector<float> weights) {
    const int k = static_cast<int>(weights.size());
    r.shape = moe::ModelShape{"hand", H, I, experts, k, 0, 0};
    r.ranks = 1;
    r.tokens_per_rank = 1;
    r.experts_per_rank = experts;
    moe::RankRouting rr;
    for (int j = 0; j < k; ++j) rr.experts.push_back(j);
    rr.weights = weights;
    r.per_rank = {rr};
    w.experts = experts;
    w.hidden = H;
    w.intermediate = I;
    w.quant = ops::MoeQuant::w8a8;
    w.w1.assign(size_t(experts) * 2 * I * H, 0);
    w.w2.assign(size_t(experts) * H * I, 0);
    w.w1_scales.assign(size_t(experts) * (2 * I / 128) * (H / 128), 1.f);
    w.w2_scales.assign(size_t(experts) * (H / 128) * (I / 128), 1.f);
    in.resize(1);
    in[0].x.assign(H, 0);
    in[0].x_scales.assign(H / 128, 1.f);
  }
  void w1(int e, int row, int col, float v) {
    w.w1[(size_t(e) * 2 * w.intermediate + row) * w.hidden + col] = e4m3_code(v);
  }
  void w2(int e, int row, int col, float v) {
    w.w2[(size_t(e) * w.hidden + row) * w.intermediate + col] = e4m3_code(v);
  }
  std::vector<float> run() const { return ops::moe_layer_reference(r, w, in)[0]; }
};

}  // namespace

// One token, x = e_0 (so gate_c = W1[c, 0], up_c = W1[I + c, 0]), routed to expert 0 with
// weight 0.75 and expert 1 with 0.25. Expert 0's Linear-2 copies channel c to output c (c < 4),
// expert 1's to output 4 + c, and both send channel 4 to output 8 (the top-k sum). Per expert:
//   h_c = silu(gate_c) * up_c * w,  silu(g) = g / (1 + e^-g),
//   scale = amax / 448, code = e4m3(h_c / scale) (nearest), y = bf16(code * scale).
// Expert 0 (w 0.75), silu(1) = 0.7310586, silu(-2) = -0.2384058, silu(0.5) = 0.3112297,
// silu(3) = 2.8577223:
//   c0 (1, 2):     h = 1.0965879 = amax, scale = 0.0024477409, code 448 -> y = bf16(1.0965879) = 1.09375
//   c1 (-2, 1):    h = -0.1788044, h / scale = -73.05 -> -72 -> -0.1762373 -> -0.17578125
//   c2 (0.5, -4):  h = -0.9336890, -381.45 -> -384 -> -0.9399325 -> -0.94140625
//   c3 (3, 0.5):   h = 1.0716459, 437.81 -> 448 -> 1.0965879 -> 1.09375
//   c4 (1, 1):     h = 0.5482939, 224 -> 224 -> 0.5482939 -> 0.546875
// Expert 1 (w 0.25), silu(2) = 1.7615942, silu(-1) = -0.2689414, silu(4) = 3.9280552,
// silu(-0.5) = -0.1887703:
//   c0 (2, 1):     h = 0.4403985 = amax, scale = 0.00098303251, code 448 -> 0.4403986 -> 0.439453125
//   c1 (-1, -1):   h = 0.0672354, 68.40 -> 72 -> 0.0707783 -> 0.07080078125
//   c2 (4, -0.25): h = -0.2455034, -249.74 -> -256 -> -0.2516563 -> -0.251953125
//   c3 (-0.5, 2):  h = -0.0943852, -96.01 -> -96 -> -0.0943711 -> -0.09423828125
//   c4 (1, 1):     h = 0.1827646, 185.92 -> 192 -> 0.1887423 -> 0.1884765625
// Output 8 = 0.546875 + 0.1884765625 = 0.7353515625; every other output 0.
TEST(MoeLayerRefByHand, SwiGluRouterWeightsAndTopKSum) {
  HandLayer L(2, 128, 128, {0.75f, 0.25f});
  const float gate_up[2][5][2] = {{{1, 2}, {-2, 1}, {0.5f, -4}, {3, 0.5f}, {1, 1}},
                                  {{2, 1}, {-1, -1}, {4, -0.25f}, {-0.5f, 2}, {1, 1}}};
  for (int e = 0; e < 2; ++e) {
    for (int c = 0; c < 5; ++c) {
      L.w1(e, c, 0, gate_up[e][c][0]);
      L.w1(e, 128 + c, 0, gate_up[e][c][1]);
    }
    for (int c = 0; c < 4; ++c) L.w2(e, 4 * e + c, c, 1.f);
    L.w2(e, 8, 4, 1.f);
  }
  L.in[0].x[0] = e4m3_code(1.f);
  const std::vector<float> want = {1.09375f,     -0.17578125f,    -0.94140625f,    1.09375f,     0.439453125f,
                                   0.0708007812f, -0.251953125f,  -0.0942382812f, 0.7353515625f};
  const std::vector<float> out = L.run();
  ASSERT_EQ(out.size(), 128u);
  for (int n = 0; n < 128; ++n) EXPECT_EQ(out[n], n < 9 ? want[n] : 0.f) << "output " << n;
}

// The requantisation's rounding and its per-128-channel scale. x = 1 in columns 0..3 (gate and
// up are sums of four weights), weight 1, gates of 64 or more (silu(g) = g in fp32), up weights'
// block scale 1/64. Block 0 (channels 0..127): amax 448, scale exactly 1, so h / scale = h and
// the e4m3 rounding is seen directly, ties to even included:
//   c0: 224 * 2 = 448 -> 448          c1: 68 * 0.25 = 17 -> 16 (tie 16|18)   c2: 76 * 0.25 = 19 -> 20 (tie)
//   c3: 108 * 0.125 = 13.5 -> 14 (tie) c4: 92 * 0.125 = 11.5 -> 12 (tie)      c5: 68 * -0.25 = -17 -> -16
//   c6: 100 * 0.25 = 25 -> 24 (tie)   c7: 96 * 2^-15 = 1.5 * 2^-9 -> 2^-8 (subnormal tie)
//   c8: 160 * 2^-15 = 2.5 * 2^-9 -> 2^-8 (tie)   c9: 68 / 64 = 1.0625 -> 1 (tie)
//   c10: 76 / 64 = 1.1875 -> 1.25 (tie)   c11: 72 / 64 = 1.125 (exact)
// Block 1 (channels 128..255) has its own amax 6, scale 6 / 448 = 0.013392857:
//   c128: 96 / 16 = 6 -> code 448 -> 6      c129: 64 / 64 = 1, h / scale = 74.67 -> 72 -> 0.9642857
//   -> bf16 0.96484375 (with block 0's scale it would stay 1)   c130: 80 * -1/32 = -2.5, -186.67 ->
//   -192 -> -2.5714285 -> bf16 -2.578125.
// Linear-2 copies channel c to output c (c < 12) and channel 128 + i to output 12 + i.
TEST(MoeLayerRefByHand, Fp8RequantisationRoundsToNearestEvenPerBlock) {
  HandLayer L(1, 128, 256, {1.f});
  L.w.w1_scales = {1.f, 1.f, 1.f / 64, 1.f / 64};  // [2I / 128 = 4 row blocks][H / 128 = 1]
  // gate = sum of the listed weights of row c; up = the code (x 1/64) in row 256 + c, column 0.
  struct Ch {
    int c;
    std::vector<float> gate;
    float up_code;
  };
  const float sub = std::ldexp(1.f, -9);  // the smallest e4m3 subnormal: up = 2^-9 / 64 = 2^-15
  const Ch chans[] = {{0, {224}, 128},      {1, {64, 4}, 16},  {2, {64, 12}, 16},   {3, {96, 12}, 8},
                      {4, {80, 12}, 8},     {5, {64, 4}, -16}, {6, {96, 4}, 16},    {7, {96}, sub},
                      {8, {128, 32}, sub},  {9, {64, 4}, 1},   {10, {64, 12}, 1},   {11, {64, 8}, 1},
                      {128, {96}, 4},       {129, {64}, 1},    {130, {64, 16}, -2}};
  for (const Ch& ch : chans) {
    for (size_t i = 0; i < ch.gate.size(); ++i) L.w1(0, ch.c, static_cast<int>(i), ch.gate[i]);
    L.w1(0, 256 + ch.c, 0, ch.up_code);
    L.w2(0, ch.c < 128 ? ch.c : 12 + (ch.c - 128), ch.c, 1.f);
  }
  for (int k = 0; k < 4; ++k) L.in[0].x[k] = e4m3_code(1.f);
  const std::vector<float> want = {448.f, 16.f, 20.f, 14.f, 12.f, -16.f, 24.f, std::ldexp(1.f, -8), std::ldexp(1.f, -8),
                                   1.f,   1.25f, 1.125f, 6.f, 0.96484375f, -2.578125f};
  const std::vector<float> out = L.run();
  ASSERT_EQ(out.size(), 128u);
  for (int n = 0; n < 128; ++n) EXPECT_EQ(out[n], n < 15 ? want[n] : 0.f) << "output " << n;
}

// W4A8's flush rule in the layer (MXFP4, dequantize_mxfp4_w4a8 with kMxfp4MaxExponentGap = 14):
// a 32-value sub-block whose E8M0 exponent is more than 14 below the largest of its row's
// 128-column block is zero; 14 below is kept exactly. x = 1 in column 32 (sub-block 1). Gate
// row 0: sub-block 0 exponent 137 (codes all zero), sub-block 1 exponent 122 (gap 15) holding
// 4.0 in column 32 -> exact value 4 * 2^-5 = 0.125, flushed to 0. Gate row 1: the same with
// exponent 123 (gap 14) -> 4 * 2^-4 = 0.25, kept. Up rows 128, 129: 1.0 in column 32. Linear-2
// copies channel c to output c (c < 2). So h0 = silu(0) = 0 -> output 0 exactly (exact
// dequantisation would give silu(0.125) = 0.0664 -> ~0.065), h1 = silu(0.25) = 0.1405441 = amax
// -> code 448 -> bf16 0.140625.
TEST(MoeLayerRefByHand, Mxfp4SubBlocksFarBelowTheBlockMaximumAreFlushed) {
  ASSERT_EQ(ops::kMxfp4MaxExponentGap, 14);
  const int H = 128, I = 128;
  HandLayer L(1, H, I, {1.f});
  ops::MoeLayerWeights& w = L.w;
  w.quant = ops::MoeQuant::w4a8_mxfp4;
  w.w1.assign(size_t(2 * I) * H / 2, 0);
  w.w2.assign(size_t(H) * I / 2, 0);
  w.w1_scales.clear();
  w.w2_scales.clear();
  w.w1_e8m0.assign(size_t(H / 32) * 2 * I, 127);  // [H / 32][2I]: 2^0
  w.w2_e8m0.assign(size_t(I / 32) * H, 127);      // [I / 32][H]
  auto nib = [](std::vector<uint8_t>& p, int cols, int row, int col, uint8_t v) {  // even column: low nibble
    p[(size_t(row) * cols + col) / 2] |= static_cast<uint8_t>(v << ((col & 1) * 4));
  };
  // E2M1 nibbles: 0x2 = 1.0, 0x6 = 4.0.
  for (int row : {0, 1}) {
    w.w1_e8m0[size_t(0) * 2 * I + row] = 137;
    w.w1_e8m0[size_t(1) * 2 * I + row] = row == 0 ? 122 : 123;
    nib(w.w1, H, row, 32, 0x6);
    nib(w.w1, H, I + row, 32, 0x2);
    nib(w.w2, I, row, row, 0x2);
  }
  L.in[0].x[32] = e4m3_code(1.f);
  const std::vector<float> out = L.run();
  ASSERT_EQ(out.size(), size_t(H));
  EXPECT_EQ(out[0], 0.f) << "gap 15: flushed";
  EXPECT_EQ(out[1], 0.140625f) << "gap 14: kept";
  for (int n = 2; n < H; ++n) EXPECT_EQ(out[n], 0.f) << n;
}

// The expert handle the benches use (weights dequantised once) gives exactly moe_expert_row's
// rows, for every weight format, and refuses an expert out of range.
TEST(MoeLayerRef, ExpertReferenceRowsEqualMoeExpertRow) {
  for (auto quant : {xstage::ops::MoeQuant::w8a8, xstage::ops::MoeQuant::w4a8_int4, xstage::ops::MoeQuant::w4a8_mxfp4}) {
    const auto w = xstage::ops::make_moe_layer_weights(3, 256, 128, 7, quant);
    const xstage::ops::MoeExpertReference ref(w, 2);
    std::vector<uint8_t> x(256);
    std::vector<float> xs{0.01f, 0.02f}, a(256), b(256);
    for (int t = 0; t < 4; ++t) {
      for (int c = 0; c < 256; ++c) x[c] = static_cast<uint8_t>((c * 37 + t * 11) % 0x7E);
      ref.row(0.25f + t, x.data(), xs.data(), a.data());
      xstage::ops::moe_expert_row(w, 2, 0.25f + t, x.data(), xs.data(), b.data());
      EXPECT_EQ(a, b) << "format " << static_cast<int>(quant) << " row " << t;
      double mag = 0;
      for (float v : a) mag += std::fabs(v);
      EXPECT_GT(mag, 0.0);
    }
    EXPECT_THROW(xstage::ops::MoeExpertReference(w, 3), xstage::InvalidArgument);
  }
}

// Two-level INT4 weights (the register-operand kernels' int4_rs_lut format): the reference row
// equals one recomputed here from dequantize_int4_lut's weights (fp8 activations, SwiGLU x
// router weight, per-128 fp8 requantisation, bf16 rows), and the MXFP4 flush bound is the
// weights' own (mxfp4_max_gap).
TEST(MoeLayerRef, TwoLevelInt4RowsRecomputedFromDequantizeInt4Lut) {
  namespace ops = xstage::ops;
  const int H = 256, I = 128, E = 2, e = 1;
  const auto w = ops::make_moe_layer_weights(E, H, I, 9, ops::MoeQuant::w4a8_int4, true);
  ASSERT_TRUE(w.int4_two_level);
  EXPECT_EQ(w.w1_scales.size(), size_t(E) * 2 * I);
  EXPECT_EQ(w.w1_groups.size(), size_t(E) * (H / 128) * 2 * I);
  EXPECT_EQ(w.w2_scales.size(), size_t(E) * H);
  EXPECT_EQ(w.w2_groups.size(), size_t(E) * (I / 128) * H);
  std::vector<float> w1(size_t(2 * I) * H), w2(size_t(H) * I);
  ops::dequantize_int4_lut(w.w1.data() + size_t(e) * 2 * I * H / 2, w.w1_groups.data() + size_t(e) * (H / 128) * 2 * I,
                           w.w1_scales.data() + size_t(e) * 2 * I, 2 * I, H, w1.data());
  ops::dequantize_int4_lut(w.w2.data() + size_t(e) * H * I / 2, w.w2_groups.data() + size_t(e) * (I / 128) * H,
                           w.w2_scales.data() + size_t(e) * H, H, I, w2.data());
  std::vector<uint8_t> x(H);
  for (int c = 0; c < H; ++c) x[c] = static_cast<uint8_t>((c * 29 + 5) % 0x7E);
  const std::vector<float> xs{0.05f, 0.03f};
  const float rw = 0.75f;
  std::vector<float> got(H);
  ops::moe_expert_row(w, e, rw, x.data(), xs.data(), got.data());
  std::vector<double> a(H);
  for (int k = 0; k < H; ++k) a[k] = double(ops::fp8_e4m3_decode(x[k])) * xs[k / 128];
  std::vector<float> h(I);
  for (int c = 0; c < I; ++c) {
    double g = 0, u = 0;
    for (int k = 0; k < H; ++k) {
      g += a[k] * w1[size_t(c) * H + k];
      u += a[k] * w1[size_t(I + c) * H + k];
    }
    h[c] = static_cast<float>(g / (1.0 + std::exp(-g)) * u * rw);
  }
  float amax = 0;
  for (float v : h) amax = std::max(amax, std::fabs(v));
  const ops::Fp8Scale q = ops::fp8_scale_for_amax(amax);
  double mag = 0;
  for (int n = 0; n < H; ++n) {
    double y = 0;
    for (int c = 0; c < I; ++c) y += double(ops::fp8_e4m3_decode(ops::fp8_e4m3_encode(h[c] * q.inv)) * q.scale) * w2[size_t(n) * I + c];
    EXPECT_NEAR(got[n], ops::bf16_round(static_cast<float>(y)), 1e-6f + 1e-2f * std::fabs(got[n])) << n;
    mag += std::fabs(got[n]);
  }
  EXPECT_GT(mag, 0.0);
  // The same codes read as group-128 INT4 would be another layer: the flag decides.
  ops::MoeLayerWeights g128 = w;
  g128.int4_two_level = false;
  EXPECT_THROW(ops::moe_expert_row(g128, e, rw, x.data(), xs.data(), got.data()), xstage::InvalidArgument);
}

// The per-token activation recipe: h quantised per 128 channels, then its codes requantised to
// the row's largest scale (the layer's requantisation kernel), recomputed here by hand; and the
// per-token inputs hold one scale per token in every 128-column group.
TEST(MoeLayerRef, PerTokenActivationsRequantiseHToOneScalePerToken) {
  namespace ops = xstage::ops;
  const int H = 256, I = 384;
  auto w = ops::make_moe_layer_weights(1, H, I, 17);  // W8A8: the recipe is about activations
  std::vector<uint8_t> x(H);
  for (int c = 0; c < H; ++c) x[c] = static_cast<uint8_t>((c * 41 + 3) % 0x7E);
  const std::vector<float> xs{0.04f, 0.04f};  // one scale per token
  const float rw = 0.5f;
  std::vector<float> per128(H), per_token(H);
  ops::moe_expert_row(w, 0, rw, x.data(), xs.data(), per128.data());
  w.per_token_activations = true;
  ops::moe_expert_row(w, 0, rw, x.data(), xs.data(), per_token.data());
  EXPECT_NE(per128, per_token) << "the three 128-channel blocks of h have different scales";
  // By hand: W8A8 weights are fp8 codes x 128 x 128 block scales.
  auto w1 = [&](int r, int c) {
    return double(ops::fp8_e4m3_decode(w.w1[size_t(r) * H + c])) * w.w1_scales[(r / 128) * (H / 128) + c / 128];
  };
  auto w2 = [&](int r, int c) {
    return double(ops::fp8_e4m3_decode(w.w2[size_t(r) * I + c])) * w.w2_scales[(r / 128) * (I / 128) + c / 128];
  };
  std::vector<float> h(I);
  for (int c = 0; c < I; ++c) {
    double g = 0, u = 0;
    for (int k = 0; k < H; ++k) {
      const double a = double(ops::fp8_e4m3_decode(x[k])) * xs[k / 128];
      g += a * w1(c, k);
      u += a * w1(I + c, k);
    }
    h[c] = static_cast<float>(g / (1.0 + std::exp(-g)) * u * rw);
  }
  std::vector<uint8_t> q(I);
  std::vector<float> sc(I / 128);
  for (int b = 0; b < I / 128; ++b) {
    float amax = 0;
    for (int c = 128 * b; c < 128 * b + 128; ++c) amax = std::max(amax, std::fabs(h[c]));
    const ops::Fp8Scale f = ops::fp8_scale_for_amax(amax);
    sc[b] = f.scale;
    for (int c = 128 * b; c < 128 * b + 128; ++c) q[c] = ops::fp8_e4m3_encode(h[c] * f.inv);
  }
  const float S = *std::max_element(sc.begin(), sc.end());
  ASSERT_NE(*std::min_element(sc.begin(), sc.end()), S);
  std::vector<double> hd(I);
  for (int c = 0; c < I; ++c)
    hd[c] = double(ops::fp8_e4m3_decode(ops::fp8_e4m3_encode(ops::fp8_e4m3_decode(q[c]) * (sc[c / 128] / S)))) * S;
  for (int n = 0; n < H; ++n) {
    double y = 0;
    for (int c = 0; c < I; ++c) y += hd[c] * w2(n, c);
    EXPECT_NEAR(per_token[n], ops::bf16_round(static_cast<float>(y)), 1e-6f + 1e-2f * std::fabs(per_token[n])) << n;
  }
  // Per-token inputs: every 128-column group of a token carries its one scale.
  const moe::Routing r = moe::make_routing(moe::ModelShape{"t", H, I, 2, 1, 0, 0}, 1, 5, {});
  const auto in = ops::make_moe_layer_inputs(r, 3, true);
  for (int t = 0; t < 5; ++t) {
    EXPECT_GT(in[0].x_scales[t], 0.f);
    EXPECT_EQ(in[0].x_scales[size_t(H / 128 - 1) * 5 + t], in[0].x_scales[t]) << t;
  }
}

TEST(MoeLayerRef, Mxfp4FlushBoundIsTheWeights) {
  namespace ops = xstage::ops;
  const int H = 128, I = 128;
  auto w = ops::make_moe_layer_weights(1, H, I, 3, ops::MoeQuant::w4a8_mxfp4);
  // Every W1 row: sub-block 1 at 2^-12, the others at 2^0 (gap 12: kept with 14, flushed with 11).
  for (int kb = 0; kb < H / 32; ++kb)
    for (int r = 0; r < 2 * I; ++r) w.w1_e8m0[size_t(kb) * 2 * I + r] = kb == 1 ? 115 : 127;
  std::vector<float> d14(size_t(2 * I) * H), d11(d14.size());
  ops::dequantize_mxfp4_w4a8(w.w1.data(), w.w1_e8m0.data(), 2 * I, H, d14.data(), 14);
  ops::dequantize_mxfp4_w4a8(w.w1.data(), w.w1_e8m0.data(), 2 * I, H, d11.data(), ops::kMxfp4RsMaxExponentGap);
  ASSERT_NE(d14, d11) << "the pattern must put a sub-block between the two bounds";
  std::vector<uint8_t> x(H, 0);
  const std::vector<float> xs{1.f};
  for (int k = 32; k < 64; ++k) x[k] = 0x38;  // 1.0: only sub-block 1 of each row contributes
  std::vector<float> y14(H), y11(H);
  ops::moe_expert_row(w, 0, 1.f, x.data(), xs.data(), y14.data());
  w.mxfp4_max_gap = ops::kMxfp4RsMaxExponentGap;
  ops::moe_expert_row(w, 0, 1.f, x.data(), xs.data(), y11.data());
  double m14 = 0, m11 = 0;
  for (int n = 0; n < H; ++n) {
    m14 += std::fabs(y14[n]);
    m11 += std::fabs(y11[n]);
  }
  EXPECT_GT(m14, 0.0) << "gap 12 kept under the row-layout bound";
  EXPECT_EQ(m11, 0.0) << "gap 12 flushed under the register-operand bound: nothing else reaches the output";
}

// The fused per-token kernel's h (MoeLayerWeights::per_token_h_from_bf16), by hand: h rounded to
// bf16, one scale per token from the bf16 row's |h| maximum, one e4m3 rounding. x = 1 in columns
// 0..3, weight 1, gates of 64 or more (silu(g) = g), up weights' block scale 1/64 (as above); the
// unfused layer's requantisation recipe (per-128 scales, then codes rescaled to the row's largest)
// on the same layer, and Linear-2 copying channel c to output c (c < 3) and 128 + i to 3 + i:
//   c0: 223.75 * 2 = 447.5 = the row's amax; bf16 448 -> scale exactly 1 (requantisation: block
//       0's scale s0 = 447.5 / 448, the row's S) -> both 448 (bf16(447.5) = 448).
//   c1: 68 * 0.25 = 17 (a bf16 value): 17 * 1 -> 16 (tie 16|18 to even). Requantisation:
//       17 * 448 / 447.5 = 17.019 -> 18 -> 18 * s0 = 17.98 -> bf16 18.
//   c2: 68.25 * 0.25 = 17.0625 -> bf16 17 (tie to even) -> 16. Without the bf16 rounding 18;
//       requantisation 18 as c1.
//   c128: 96 / 16 = 6 (block 1's amax) -> 6; requantisation 448 in block 1, rescaled
//       448 * (6 / 448) / s0 = 6.0067 -> 6 -> 5.9933 -> bf16 6.
//   c129: 68 / 64 = 1.0625 -> 1 (tie 1|1.125 to even). Requantisation: 1.0625 / (6 / 448) = 79.33
//       -> 80, rescaled 80 * (6 / 448) / s0 = 1.0726 -> 1.125 -> 1.1237 -> bf16 1.125. (With a
//       per-128 scale instead of the row's: 80 * 6 / 448 = 1.0714 -> bf16 1.0703125.)
TEST(MoeLayerRefByHand, FusedPerTokenHIsBf16ThenOneScalePerRow) {
  HandLayer L(1, 128, 256, {1.f});
  L.w.w1_scales = {1.f, 1.f, 1.f / 64, 1.f / 64};  // [2I / 128 = 4 row blocks][H / 128 = 1]
  struct Ch {
    int c;
    std::vector<float> gate;
    float up_code;
  };
  const Ch chans[] = {{0, {192, 32, -0.25f}, 128}, {1, {64, 4}, 16}, {2, {64, 4, 0.25f}, 16},
                      {128, {96}, 4},               {129, {64, 4}, 1}};
  for (const Ch& ch : chans) {
    for (size_t i = 0; i < ch.gate.size(); ++i) L.w1(0, ch.c, static_cast<int>(i), ch.gate[i]);
    L.w1(0, 256 + ch.c, 0, ch.up_code);
    L.w2(0, ch.c < 128 ? ch.c : 3 + (ch.c - 128), ch.c, 1.f);
  }
  for (int k = 0; k < 4; ++k) L.in[0].x[k] = e4m3_code(1.f);
  L.w.per_token_activations = true;
  L.w.per_token_h_from_bf16 = true;
  const std::vector<float> fused = L.run();
  L.w.per_token_h_from_bf16 = false;
  const std::vector<float> requant = L.run();
  const std::vector<float> want_fused = {448.f, 16.f, 16.f, 6.f, 1.f};
  const std::vector<float> want_requant = {448.f, 18.f, 18.f, 6.f, 1.125f};
  ASSERT_EQ(fused.size(), 128u);
  ASSERT_EQ(requant.size(), 128u);
  for (int n = 0; n < 128; ++n) {
    EXPECT_EQ(fused[n], n < 5 ? want_fused[n] : 0.f) << "from bf16, output " << n;
    EXPECT_EQ(requant[n], n < 5 ? want_requant[n] : 0.f) << "requantised, output " << n;
  }
}

namespace {

// bf16 and e4m3 rounding from the formats' definitions (nearest, ties to even; e4m3 saturating at
// 448): written here, not the library's.
float bf16_nearest_even(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t low = u & 0xFFFFu, keep = u & 0xFFFF0000u;
  const bool up = low > 0x8000u || (low == 0x8000u && (keep & 0x10000u));
  const uint32_t r = keep + (up ? 0x10000u : 0u);
  float y;
  std::memcpy(&y, &r, 4);
  return y;
}
float e4m3_nearest_even(float x) {
  const float a = std::fmin(std::fabs(x), 448.f);
  float best = 0.f;
  int best_code = 0;
  for (int v = 1; v < 0x7F; ++v) {  // the positive codes (0x7F is NaN)
    const float d = std::fabs(e4m3_value(static_cast<uint8_t>(v)) - a), bd = std::fabs(best - a);
    if (d < bd || (d == bd && (v & 1) == 0 && (best_code & 1) != 0)) {
      best = e4m3_value(static_cast<uint8_t>(v));
      best_code = v;
    }
  }
  return x < 0 ? -best : best;
}


// The fused per-token recipe by hand on one random W8A8 expert (H 128, I 256), with the same
// order of fp64 sums as the reference: h before its bf16 rounding, and a row from bf16 h under
// the scale of a given largest |h|.
struct FusedPerTokenByHand {
  static constexpr int H = 128, I = 256;
  ops::MoeLayerWeights w;
  explicit FusedPerTokenByHand(uint64_t seed) : w(ops::make_moe_layer_weights(1, H, I, seed)) {
    w.per_token_activations = true;
    w.per_token_h_from_bf16 = true;
  }
  double w1(int r, int c) const {
    return double(e4m3_value(w.w1[size_t(r) * H + c])) * w.w1_scales[(r / 128) * (H / 128) + c / 128];
  }
  double w2(int r, int c) const {
    return double(e4m3_value(w.w2[size_t(r) * I + c])) * w.w2_scales[(r / 128) * (I / 128) + c / 128];
  }
  std::vector<float> h(const std::vector<uint8_t>& x, float xs, float rw) const {
    std::vector<float> out(I);
    for (int c = 0; c < I; ++c) {
      double g = 0, u = 0;
      for (int k = 0; k < H; ++k) {
        const double a = double(e4m3_value(x[k])) * xs;
        g += a * w1(c, k);
        u += a * w1(I + c, k);
      }
      out[c] = static_cast<float>(g / (1.0 + std::exp(-g)) * u * rw);
    }
    return out;
  }
  std::vector<float> row(const std::vector<float>& hb, float amax) const {
    const float a = std::max(amax, 1e-4f), scale = a / 448.f, inv = 448.f / a;
    std::vector<float> y(H);
    for (int n = 0; n < H; ++n) {
      double acc = 0;
      for (int c = 0; c < I; ++c) acc += double(e4m3_nearest_even(hb[c] * inv) * scale) * w2(n, c);
      y[n] = bf16_nearest_even(static_cast<float>(acc));
    }
    return y;
  }
  // A random token: finite e4m3 codes (|v| < 448).
  static std::vector<uint8_t> token(std::mt19937& rng) {
    std::vector<uint8_t> x(H);
    for (auto& b : x) b = static_cast<uint8_t>((rng() & 0x80u) | (rng() % 0x78u));
    return x;
  }
};

// The ambiguous h codes by hand (MoeExpertReference::row's code_alternates): per channel, the ends
// h (1 -/+ kPerTokenHSlack) as Linear-2 would read them (read_as(c, v)), each other value's row
// change where it reaches kHCodeMinShare of the row (y2: the row's squared L2 norm).
using CodeDeltas = std::vector<std::pair<int, std::vector<double>>>;
template <class ReadAs>
CodeDeltas hand_code_alternates(const FusedPerTokenByHand& L, const std::vector<float>& h, const std::vector<float>& hd,
                                double y2, ReadAs&& read_as) {
  CodeDeltas want;
  for (int c = 0; c < L.I; ++c) {
    float last = hd[c];
    const double v = h[c], d = std::fabs(v) * ops::kPerTokenHSlack;
    for (double end : {v - d, v + d}) {
      const float q = read_as(c, static_cast<float>(end));
      if (q == hd[c] || q == last) continue;
      last = q;
      std::vector<double> delta(L.H);
      double n2 = 0;
      for (int n = 0; n < L.H; ++n) {
        delta[n] = (double(q) - double(hd[c])) * L.w2(n, c);
        n2 += delta[n] * delta[n];
      }
      if (n2 >= y2 * ops::kHCodeMinShare * ops::kHCodeMinShare) want.emplace_back(c, delta);
    }
  }
  return want;
}

// The reference's code alternates are the hand count's, in order; returns how many.
int expect_code_alternates(const std::vector<ops::HCodeAlternatives>& got, const CodeDeltas& want, int t) {
  size_t k = 0;
  for (const auto& g : got)
    for (const auto& d : g.deltas) {
      if (k >= want.size()) {
        ADD_FAILURE() << "token " << t << ": an alternate code the hand count lacks";
        return static_cast<int>(k);
      }
      EXPECT_EQ(g.channel, want[k].first) << "token " << t;
      for (size_t n = 0; n < d.size(); ++n)
        EXPECT_NEAR(d[n], want[k].second[n], 1e-6 * std::fabs(want[k].second[n]) + 1e-12) << "token " << t;
      ++k;
    }
  EXPECT_EQ(k, want.size()) << "token " << t;
  return static_cast<int>(k);
}

}  // namespace

// Several tokens: bit for bit the reference's rows; and on some row the requantisation recipe
// gives another output, so the two references cannot stand in for each other.
TEST(MoeLayerRef, FusedPerTokenHRowsRecomputedByHand) {
  const FusedPerTokenByHand L(29);
  auto w_requant = L.w;
  w_requant.per_token_h_from_bf16 = false;
  std::mt19937 rng(7);
  int rows_that_differ = 0;
  for (int t = 0; t < 8; ++t) {
    const std::vector<uint8_t> x = FusedPerTokenByHand::token(rng);
    const std::vector<float> xs{0.03f + 0.01f * t};  // one scale per token
    const float rw = 0.25f + 0.125f * t;
    std::vector<float> got(L.H), other(L.H);
    ops::moe_expert_row(L.w, 0, rw, x.data(), xs.data(), got.data());
    ops::moe_expert_row(w_requant, 0, rw, x.data(), xs.data(), other.data());
    std::vector<float> hb = L.h(x, xs[0], rw);
    float amax = 0.f;
    for (float& v : hb) {
      v = bf16_nearest_even(v);
      amax = std::max(amax, std::fabs(v));
    }
    const std::vector<float> want = L.row(hb, amax);
    EXPECT_EQ(got, want) << "token " << t;
    rows_that_differ += other != want;
  }
  EXPECT_GT(rows_that_differ, 0) << "the requantisation recipe gave the from-bf16 rows on every token";
}

// The alternates of the fused per-token recipe (MoeExpertReference::row, ops::kPerTokenHSlack),
// recomputed here: the bf16 values between the largest bf16 |h| of h * (1 - slack) and of h *
// (1 + slack), other than the row's own amax, each giving the row under its scale. Over 64 tokens
// some rows have alternates and most have none; the requantisation recipe never has any.
TEST(MoeLayerRef, FusedPerTokenAlternateScalesRecomputedByHand) {
  const FusedPerTokenByHand L(31);
  auto w_requant = L.w;
  w_requant.per_token_h_from_bf16 = false;
  const ops::MoeExpertReference ref(L.w, 0), ref_requant(w_requant, 0);
  std::mt19937 rng(11);
  int with_alternates = 0;
  const int tokens = 64;
  for (int t = 0; t < tokens; ++t) {
    const std::vector<uint8_t> x = FusedPerTokenByHand::token(rng);
    const std::vector<float> xs{0.02f + 0.001f * t};
    const float rw = 0.5f + 0.01f * t;
    std::vector<float> got(L.H), got_requant(L.H);
    std::vector<std::vector<float>> alts{{1.f}}, alts_requant{{1.f}};
    ref.row(rw, x.data(), xs.data(), got.data(), &alts);
    ref_requant.row(rw, x.data(), xs.data(), got_requant.data(), &alts_requant);
    EXPECT_TRUE(alts_requant.empty()) << "token " << t;
    const std::vector<float> h = L.h(x, xs[0], rw);
    std::vector<float> hb(L.I);
    float amax = 0.f, lo = 0.f, hi = 0.f;
    for (int c = 0; c < L.I; ++c) {
      hb[c] = bf16_nearest_even(h[c]);
      amax = std::max(amax, std::fabs(hb[c]));
      lo = std::max(lo, bf16_nearest_even(static_cast<float>(std::fabs(double(h[c])) * (1 - ops::kPerTokenHSlack))));
      hi = std::max(hi, bf16_nearest_even(static_cast<float>(std::fabs(double(h[c])) * (1 + ops::kPerTokenHSlack))));
    }
    ASSERT_EQ(got, L.row(hb, amax)) << "token " << t << ": the primary row";
    std::vector<std::vector<float>> want;
    for (float v = lo; v <= hi; v = std::nextafter(v, 1e30f))
      if (v == bf16_nearest_even(v) && v != amax) want.push_back(L.row(hb, v));
    ASSERT_EQ(alts.size(), want.size()) << "token " << t;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(alts[i], want[i]) << "token " << t << " alternate " << i;
      EXPECT_NE(alts[i], got) << "token " << t << ": an alternate scale that changes nothing";
    }
    with_alternates += !alts.empty();
  }
  EXPECT_GT(with_alternates, 0) << "no token's largest |h| near a bf16 midpoint in " << tokens;
  EXPECT_LT(with_alternates, tokens / 2);
}

// The ambiguous h codes (HCodeAlternatives), recomputed by hand: every element whose h within the
// slack rounds (through bf16, under the token's primary scale) to another e4m3 code, with the row
// change that code makes, where it reaches kHCodeMinShare of the row; none without slack.
TEST(MoeLayerRef, FusedPerTokenCodeAlternatesRecomputedByHand) {
  const FusedPerTokenByHand L(37);
  const ops::MoeExpertReference ref(L.w, 0);
  std::mt19937 rng(13);
  int total = 0, rows_with = 0;
  const int tokens = 48;
  for (int t = 0; t < tokens; ++t) {
    const std::vector<uint8_t> x = FusedPerTokenByHand::token(rng);
    const std::vector<float> xs{0.02f + 0.001f * t};
    const float rw = 0.5f + 0.01f * t;
    std::vector<float> y(L.H);
    std::vector<ops::HCodeAlternatives> got, none;
    ref.row(rw, x.data(), xs.data(), y.data(), nullptr, ops::kPerTokenHSlack, &got);
    std::vector<float> y0(L.H);
    ref.row(rw, x.data(), xs.data(), y0.data(), nullptr, 0.0, &none);
    EXPECT_TRUE(none.empty()) << "token " << t;
    const std::vector<float> h = L.h(x, xs[0], rw);
    std::vector<float> hb(L.I);
    float amax = 0.f;
    for (int c = 0; c < L.I; ++c) {
      hb[c] = bf16_nearest_even(h[c]);
      amax = std::max(amax, std::fabs(hb[c]));
    }
    ASSERT_EQ(y, L.row(hb, amax)) << "token " << t;
    const float a = std::max(amax, 1e-4f), scale = a / 448.f, inv = 448.f / a;
    double y2 = 0;
    for (float v : y) y2 += double(v) * v;
    std::vector<float> hd(L.I);
    for (int c = 0; c < L.I; ++c) hd[c] = e4m3_nearest_even(hb[c] * inv) * scale;
    const CodeDeltas want = hand_code_alternates(L, h, hd, y2, [&](int, float v) {
      return e4m3_nearest_even(bf16_nearest_even(v) * inv) * scale;
    });
    const int k = expect_code_alternates(got, want, t);
    total += k;
    rows_with += !got.empty();
  }
  EXPECT_GT(rows_with, 0) << "no ambiguous h code in " << tokens << " tokens";
  EXPECT_LT(total, tokens * L.I / 16) << "most codes ambiguous: the slack or the filter is wrong";
}

// The requantisation recipes by hand: h quantised per 128 channels; per_token: then requantised
// to the token's scale S = the largest 128-channel scale (the unfused per-token layer), else
// read as is (the W8A8 layers). Each element's other codes under its block's scale (rescaled).
void requant_code_alternates_by_hand(uint64_t seed, unsigned rng_seed, bool per_token) {
  FusedPerTokenByHand L(seed);
  L.w.per_token_activations = per_token;
  L.w.per_token_h_from_bf16 = false;
  const ops::MoeExpertReference ref(L.w, 0);
  std::mt19937 rng(rng_seed);
  int total = 0, rows_with = 0;
  const int tokens = 48;
  for (int t = 0; t < tokens; ++t) {
    const std::vector<uint8_t> x = FusedPerTokenByHand::token(rng);
    const std::vector<float> xs{0.02f + 0.001f * t};
    const float rw = 0.5f + 0.01f * t;
    std::vector<float> y(L.H);
    std::vector<ops::HCodeAlternatives> got, none;
    std::vector<std::vector<float>> scale_alts{{1.f}};
    ref.row(rw, x.data(), xs.data(), y.data(), &scale_alts, ops::kPerTokenHSlack, &got);
    EXPECT_TRUE(scale_alts.empty()) << "token " << t << ": a requantisation recipe has no scale alternates";
    ref.row(rw, x.data(), xs.data(), y.data(), nullptr, 0.0, &none);
    EXPECT_TRUE(none.empty()) << "token " << t;
    const std::vector<float> h = L.h(x, xs[0], rw);
    float s[FusedPerTokenByHand::I / 128], inv[FusedPerTokenByHand::I / 128], S = 0.f;
    for (int b = 0; b < L.I / 128; ++b) {
      float amax = 0.f;
      for (int c = 128 * b; c < 128 * b + 128; ++c) amax = std::max(amax, std::fabs(h[c]));
      const float a = std::max(amax, 1e-4f);
      s[b] = a / 448.f;
      inv[b] = 448.f / a;
      S = std::max(S, s[b]);
    }
    auto read_as = [&](int c, float v) {
      const float q = e4m3_nearest_even(v * inv[c / 128]);
      return per_token ? e4m3_nearest_even(q * (s[c / 128] / S)) * S : q * s[c / 128];
    };
    std::vector<float> hd(L.I);
    for (int c = 0; c < L.I; ++c) hd[c] = read_as(c, h[c]);
    std::vector<float> want_y(L.H);
    double y2 = 0;
    for (int n = 0; n < L.H; ++n) {
      double acc = 0;
      for (int c = 0; c < L.I; ++c) acc += double(hd[c]) * L.w2(n, c);
      want_y[n] = bf16_nearest_even(static_cast<float>(acc));
      y2 += double(want_y[n]) * want_y[n];
    }
    ASSERT_EQ(y, want_y) << "token " << t << ": the primary row";
    total += expect_code_alternates(got, hand_code_alternates(L, h, hd, y2, read_as), t);
    rows_with += !got.empty();
  }
  EXPECT_GT(rows_with, 0) << "no ambiguous h code in " << tokens << " tokens";
  EXPECT_LT(total, tokens * L.I / 16);
}

TEST(MoeLayerRef, RequantPerTokenCodeAlternatesRecomputedByHand) { requant_code_alternates_by_hand(41, 17, true); }
TEST(MoeLayerRef, Per128CodeAlternatesRecomputedByHand) { requant_code_alternates_by_hand(43, 19, false); }

// The slack is the reference's parameter: none gives no alternates, a wider one at least as many
// (each set holding the default's), one out of range is an error.
TEST(MoeLayerRef, FusedPerTokenSlackWidensTheAlternates) {
  const FusedPerTokenByHand L(31);
  const ops::MoeExpertReference ref(L.w, 0);
  std::mt19937 rng(11);
  int n_default = 0, n_wide = 0;
  for (int t = 0; t < 64; ++t) {
    const std::vector<uint8_t> x = FusedPerTokenByHand::token(rng);
    const std::vector<float> xs{0.02f + 0.001f * t};
    const float rw = 0.5f + 0.01f * t;
    std::vector<float> y(L.H);
    std::vector<std::vector<float>> none, def, wide;
    ref.row(rw, x.data(), xs.data(), y.data(), &none, 0.0);
    ref.row(rw, x.data(), xs.data(), y.data(), &def);
    ref.row(rw, x.data(), xs.data(), y.data(), &wide, 1.0 / 256);
    EXPECT_TRUE(none.empty()) << "token " << t;
    for (const auto& a : def) EXPECT_NE(std::find(wide.begin(), wide.end(), a), wide.end()) << "token " << t;
    n_default += static_cast<int>(def.size());
    n_wide += static_cast<int>(wide.size());
  }
  EXPECT_GT(n_wide, n_default);
  std::vector<float> y(L.H);
  std::vector<uint8_t> x(L.H, 0x38);
  const std::vector<float> xs{0.02f};
  EXPECT_THROW(ref.row(1.f, x.data(), xs.data(), y.data(), nullptr, 0.1), xstage::InvalidArgument);
  EXPECT_THROW(ref.row(1.f, x.data(), xs.data(), y.data(), nullptr, -1e-3), xstage::InvalidArgument);
}
#endif  // XSTAGE_HAVE_MOE
