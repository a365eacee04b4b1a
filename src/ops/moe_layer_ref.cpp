// Host reference of the expert-parallel MoE layer (include/xstage/ops/moe_layer_ref.hpp).
#include "xstage/ops/moe_layer_ref.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

#include "xstage/error.hpp"
#include "xstage/ops/moe_quant.hpp"

namespace xstage::ops {

float bf16_round(float x) {
  if (std::isnan(x)) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

MoeLayerWeights make_moe_layer_weights(int experts, int hidden, int intermediate, uint64_t seed) {
  if (experts < 1 || hidden < 128 || hidden % 128 || intermediate < 128 || intermediate % 128)
    throw InvalidArgument(fmt::format("moe layer: experts {} >= 1, hidden {} and intermediate {} multiples of 128",
                                      experts, hidden, intermediate));
  MoeLayerWeights w;
  w.experts = experts;
  w.hidden = hidden;
  w.intermediate = intermediate;
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  const int H = hidden, I = intermediate;
  std::vector<float> tmp;
  auto fill = [&](int rows, int cols, std::vector<uint8_t>& q, std::vector<float>& s, float sd) {
    const size_t per = size_t(rows) * cols, per_s = size_t(rows / 128) * (cols / 128);
    q.resize(per * experts);
    s.resize(per_s * experts);
    tmp.resize(per);
    for (int e = 0; e < experts; ++e) {
      for (auto& v : tmp) v = n(g) * sd;
      quantize_blocks_128x128(tmp.data(), rows, cols, q.data() + e * per, s.data() + e * per_s);
    }
  };
  fill(2 * I, H, w.w1, w.w1_scales, 1.f / std::sqrt(float(H)));
  fill(H, I, w.w2, w.w2_scales, 1.f / std::sqrt(float(I)));
  return w;
}

std::vector<MoeLayerRankInput> make_moe_layer_inputs(const moe::Routing& r, uint64_t seed) {
  std::vector<MoeLayerRankInput> in(r.ranks);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  const int T = r.tokens_per_rank, H = r.shape.hidden;
  std::vector<float> x(size_t(T) * H);
  for (auto& ri : in) {
    for (auto& v : x) v = n(g);
    ri.x.resize(x.size());
    ri.x_scales.resize(size_t(H / 128) * T);
    quantize_per_token_128(x.data(), T, H, ri.x.data(), ri.x_scales.data());
  }
  return in;
}

void moe_expert_row(const MoeLayerWeights& w, int e, float router_weight, const uint8_t* x_row,
                    const float* x_row_scales, float* y) {
  const int H = w.hidden, I = w.intermediate;
  std::vector<float> a(H), h(I), hd(I);
  for (int k = 0; k < H; ++k) a[k] = fp8_e4m3_decode(x_row[k]) * x_row_scales[k / 128];
  const uint8_t* w1 = w.w1.data() + size_t(e) * 2 * I * H;
  const float* s1 = w.w1_scales.data() + size_t(e) * (2 * I / 128) * (H / 128);
  auto dot1 = [&](int row) {
    double acc = 0;
    for (int k = 0; k < H; ++k)
      acc += double(a[k]) * fp8_e4m3_decode(w1[size_t(row) * H + k]) * s1[(row / 128) * (H / 128) + k / 128];
    return acc;
  };
  for (int c = 0; c < I; ++c) {
    const double gate = dot1(c), up = dot1(I + c);
    h[c] = static_cast<float>(gate / (1.0 + std::exp(-gate)) * up * router_weight);
  }
  // fp8 requantisation per 128 channels, then dequantised: what Linear-2 reads.
  for (int c0 = 0; c0 < I; c0 += 128) {
    float amax = 0;
    for (int c = c0; c < c0 + 128; ++c) amax = std::max(amax, std::fabs(h[c]));
    const Fp8Scale s = fp8_scale_for_amax(amax);
    for (int c = c0; c < c0 + 128; ++c) hd[c] = fp8_e4m3_decode(fp8_e4m3_encode(h[c] * s.inv)) * s.scale;
  }
  const uint8_t* w2 = w.w2.data() + size_t(e) * H * I;
  const float* s2 = w.w2_scales.data() + size_t(e) * (H / 128) * (I / 128);
  for (int n = 0; n < H; ++n) {
    double acc = 0;
    for (int c = 0; c < I; ++c)
      acc += double(hd[c]) * fp8_e4m3_decode(w2[size_t(n) * I + c]) * s2[(n / 128) * (I / 128) + c / 128];
    y[n] = bf16_round(static_cast<float>(acc));
  }
}

std::vector<std::vector<float>> moe_layer_reference(const moe::Routing& r, const MoeLayerWeights& w,
                                                    const std::vector<MoeLayerRankInput>& in) {
  const int T = r.tokens_per_rank, H = w.hidden, k = r.shape.top_k;
  auto bad = [](const std::string& m) { throw InvalidArgument("moe layer reference: " + m); };
  if (w.experts != r.shape.experts || H != r.shape.hidden || w.intermediate != r.shape.intermediate)
    bad(fmt::format("weights {}x{}x{} do not match the routing's shape {}x{}x{}", w.experts, H, w.intermediate,
                    r.shape.experts, r.shape.hidden, r.shape.intermediate));
  if (static_cast<int>(in.size()) != r.ranks) bad(fmt::format("{} rank inputs for {} ranks", in.size(), r.ranks));
  for (const auto& ri : in)
    if (ri.x.size() != size_t(T) * H || ri.x_scales.size() != size_t(H / 128) * T) bad("rank input of the wrong size");

  // Dispatch: each owner's local experts receive (source rank, token, choice) rows.
  struct Row {
    int src, token, choice;
  };
  std::vector<std::vector<Row>> rows_of(r.shape.experts);
  for (int src = 0; src < r.ranks; ++src)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) rows_of[r.per_rank[src].experts[size_t(t) * k + j]].push_back({src, t, j});

  // Compute per expert (grouped, as the owner would), combine onto the token owners.
  std::vector<std::vector<float>> out(r.ranks, std::vector<float>(size_t(T) * H, 0.f));
  std::vector<float> xs(H / 128), y(H);
  for (int e = 0; e < r.shape.experts; ++e)
    for (const Row& row : rows_of[e]) {
      const MoeLayerRankInput& ri = in[row.src];
      for (int b = 0; b < H / 128; ++b) xs[b] = ri.x_scales[size_t(b) * T + row.token];
      const float wgt = r.per_rank[row.src].weights[size_t(row.token) * k + row.choice];
      moe_expert_row(w, e, wgt, ri.x.data() + size_t(row.token) * H, xs.data(), y.data());
      float* o = out[row.src].data() + size_t(row.token) * H;
      for (int n = 0; n < H; ++n) o[n] += y[n];
    }
  return out;
}

}  // namespace xstage::ops
