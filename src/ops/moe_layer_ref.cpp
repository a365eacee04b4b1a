// Host reference of the expert-parallel MoE layer (include/xstage/ops/moe_layer_ref.hpp).
#include "xstage/ops/moe_layer_ref.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "xstage/error.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"
#include "runtime/parallel_for.hpp"

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

MoeLayerWeights make_moe_layer_weights(int experts, int hidden, int intermediate, uint64_t seed, MoeQuant quant,
                                       bool int4_two_level) {
  if (experts < 1 || hidden < 128 || hidden % 128 || intermediate < 128 || intermediate % 128)
    throw InvalidArgument(fmt::format("moe layer: experts {} >= 1, hidden {} and intermediate {} multiples of 128",
                                      experts, hidden, intermediate));
  MoeLayerWeights w;
  w.experts = experts;
  w.hidden = hidden;
  w.intermediate = intermediate;
  w.quant = quant;
  w.int4_two_level = int4_two_level && quant == MoeQuant::w4a8_int4;
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  const int H = hidden, I = intermediate;
  std::vector<float> tmp;
  // One matrix [rows, cols] per expert, in the format of `quant`.
  auto fill = [&](int rows, int cols, std::vector<uint8_t>& q, std::vector<float>& s, std::vector<uint8_t>& e8,
                  std::vector<uint8_t>& groups, float sd) {
    const size_t per = size_t(rows) * cols;
    tmp.resize(per);
    if (quant == MoeQuant::w8a8) {
      const size_t per_s = size_t(rows / 128) * (cols / 128);
      q.resize(per * experts);
      s.resize(per_s * experts);
      for (int e = 0; e < experts; ++e) {
        for (auto& v : tmp) v = n(g) * sd;
        quantize_blocks_128x128(tmp.data(), rows, cols, q.data() + e * per, s.data() + e * per_s);
      }
      return;
    }
    q.resize(per / 2 * experts);
    if (w.int4_two_level) {
      const size_t per_g = size_t(cols / 128) * rows;
      s.resize(size_t(rows) * experts);
      groups.resize(per_g * experts);
      for (int e = 0; e < experts; ++e) {
        for (auto& v : tmp) v = n(g) * sd;
        quantize_int4_lut(tmp.data(), rows, cols, q.data() + e * per / 2, groups.data() + e * per_g,
                          s.data() + size_t(e) * rows);
      }
    } else if (quant == MoeQuant::w4a8_int4) {
      const size_t per_s = size_t(cols / kInt4Group) * rows;
      s.resize(per_s * experts);
      for (int e = 0; e < experts; ++e) {
        for (auto& v : tmp) v = n(g) * sd;
        quantize_int4_g128(tmp.data(), rows, cols, q.data() + e * per / 2, s.data() + e * per_s);
      }
    } else {
      const size_t per_s = size_t(cols / kMxfp4Block) * rows;
      e8.resize(per_s * experts);
      for (int e = 0; e < experts; ++e) {
        for (auto& v : tmp) v = n(g) * sd;
        quantize_mxfp4(tmp.data(), rows, cols, q.data() + e * per / 2, e8.data() + e * per_s);
      }
    }
  };
  fill(2 * I, H, w.w1, w.w1_scales, w.w1_e8m0, w.w1_groups, 1.f / std::sqrt(float(H)));
  fill(H, I, w.w2, w.w2_scales, w.w2_e8m0, w.w2_groups, 1.f / std::sqrt(float(I)));
  return w;
}

std::vector<MoeLayerRankInput> make_moe_layer_inputs(const moe::Routing& r, uint64_t seed, bool per_token) {
  std::vector<MoeLayerRankInput> in(r.ranks);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  const int T = r.tokens_per_rank, H = r.shape.hidden;
  std::vector<float> x(size_t(T) * H);
  for (auto& ri : in) {
    for (auto& v : x) v = n(g);
    ri.x.resize(x.size());
    ri.x_scales.resize(size_t(H / 128) * T);
    if (per_token) {
      quantize_fp8_per_token(x.data(), T, H, ri.x.data(), ri.x_scales.data());  // [T] first
      for (int g = H / 128 - 1; g >= 0; --g)
        for (int t = 0; t < T; ++t) ri.x_scales[size_t(g) * T + t] = ri.x_scales[t];
    } else {
      quantize_per_token_128(x.data(), T, H, ri.x.data(), ri.x_scales.data());
    }
  }
  return in;
}

namespace {

// One expert's weights as the kernels compute with them (scales applied): W1 [2I, H], W2 [H, I];
// per_token: the per-token activation recipe (MoeLayerWeights::per_token_activations).
struct ExpertMatrices {
  std::vector<double> w1, w2;
  bool per_token = false;
  bool h_from_bf16 = false;  // MoeLayerWeights::per_token_h_from_bf16
};

// Matrix [rows, cols] of expert e in the layer's format, dequantised into out (doubles).
void expert_matrix(const MoeLayerWeights& w, int e, int rows, int cols, const std::vector<uint8_t>& q,
                   const std::vector<float>& s, const std::vector<uint8_t>& e8, const std::vector<uint8_t>& groups,
                   std::vector<double>& out) {
  const size_t per = size_t(rows) * cols;
  out.resize(per);
  if (w.quant == MoeQuant::w8a8) {
    const uint8_t* m = q.data() + e * per;
    const float* sc = s.data() + size_t(e) * (rows / 128) * (cols / 128);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        out[size_t(r) * cols + c] =
            double(fp8_e4m3_decode(m[size_t(r) * cols + c])) * sc[(r / 128) * (cols / 128) + c / 128];
    return;
  }
  std::vector<float> f(per);
  if (w.int4_two_level)
    dequantize_int4_lut(q.data() + e * per / 2, groups.data() + size_t(e) * (cols / 128) * rows,
                        s.data() + size_t(e) * rows, rows, cols, f.data());
  else if (w.quant == MoeQuant::w4a8_int4)
    dequantize_int4_g128(q.data() + e * per / 2, s.data() + size_t(e) * (cols / kInt4Group) * rows, rows, cols,
                         f.data());
  else
    dequantize_mxfp4_w4a8(q.data() + e * per / 2, e8.data() + size_t(e) * (cols / kMxfp4Block) * rows, rows, cols,
                          f.data(), w.mxfp4_max_gap);
  for (size_t i = 0; i < per; ++i) out[i] = f[i];
}

ExpertMatrices expert_matrices(const MoeLayerWeights& w, int e) {
  ExpertMatrices m;
  expert_matrix(w, e, 2 * w.intermediate, w.hidden, w.w1, w.w1_scales, w.w1_e8m0, w.w1_groups, m.w1);
  expert_matrix(w, e, w.hidden, w.intermediate, w.w2, w.w2_scales, w.w2_e8m0, w.w2_groups, m.w2);
  m.per_token = w.per_token_activations;
  m.h_from_bf16 = w.per_token_activations && w.per_token_h_from_bf16;
  return m;
}

// The bf16 values v with lo <= v <= hi other than `except` (both bounds bf16 values, >= 0; with
// the slack at most 1/64 a handful; an infinite hi ends at inf, whose successor is NaN).
std::vector<float> bf16_values_between(float lo, float hi, float except) {
  std::vector<float> out;
  uint32_t u;
  std::memcpy(&u, &lo, 4);
  for (float v = lo; v <= hi; u += 0x10000u, std::memcpy(&v, &u, 4))
    if (v != except) out.push_back(v);
  return out;
}

// The ambiguous h codes (MoeExpertReference::row, code_alternates): h0 the fp32 h before any
// rounding, hd what Linear-2 reads, read_as(c, v) what it would read for channel c had h been v
// (the row's recipe, its scales fixed), y the row.
template <class ReadAs>
void h_code_alternates(const ExpertMatrices& m, int H, int I, const std::vector<float>& h0,
                       const std::vector<float>& hd, ReadAs&& read_as, const float* y, double slack,
                       std::vector<HCodeAlternatives>& out) {
  double y2 = 0;
  for (int n = 0; n < H; ++n) y2 += double(y[n]) * y[n];
  const double min2 = y2 * kHCodeMinShare * kHCodeMinShare;
  for (int c = 0; c < I; ++c) {
    const double v = h0[c], d = std::fabs(v) * slack;
    HCodeAlternatives alt;
    alt.channel = c;
    float last = hd[c];
    for (const double end : {v - d, v + d}) {
      const float q = read_as(c, static_cast<float>(end));
      if (q == hd[c] || q == last) continue;
      last = q;
      const double dh = double(q) - double(hd[c]);
      std::vector<float> delta(H);
      double n2 = 0;
      for (int n = 0; n < H; ++n) {
        const double e = dh * m.w2[size_t(n) * I + c];
        delta[n] = static_cast<float>(e);
        n2 += e * e;
      }
      if (n2 >= min2) alt.deltas.push_back(std::move(delta));
    }
    if (!alt.deltas.empty()) out.push_back(std::move(alt));
  }
}

void expert_row(const ExpertMatrices& m, int H, int I, float router_weight, const uint8_t* x_row,
                const float* x_row_scales, float* y, std::vector<std::vector<float>>* alternates, double slack,
                std::vector<HCodeAlternatives>* code_alternates) {
  if (alternates != nullptr) alternates->clear();
  if (code_alternates != nullptr) code_alternates->clear();
  std::vector<double> a(H);
  std::vector<float> h(I), hd(I);
  for (int k = 0; k < H; ++k) a[k] = double(fp8_e4m3_decode(x_row[k])) * x_row_scales[k / 128];
  auto dot1 = [&](int row) {
    const double* wr = m.w1.data() + size_t(row) * H;
    double acc = 0;
    for (int k = 0; k < H; ++k) acc += a[k] * wr[k];
    return acc;
  };
  for (int c = 0; c < I; ++c) {
    const double gate = dot1(c), up = dot1(I + c);
    h[c] = static_cast<float>(gate / (1.0 + std::exp(-gate)) * up * router_weight);
  }
  // What Linear-2 reads for channel c had h been v, in the row's recipe, its scales fixed:
  // * fused per-token (h_from_bf16): bf16 h, one scale per token from the largest bf16 |h|. The
  //   kernel's h is within `slack` (kPerTokenHSlack) of this one, so where the largest lies that
  //   close to a bf16 rounding midpoint the kernel may round it to the neighbour: those scales are
  //   the alternates;
  // * otherwise fp8 per 128 channels, and with per-token activations those codes rescaled to one
  //   scale per token (S, the largest 128-channel scale): each block's codes times s / S.
  std::vector<float> alt_amax;
  Fp8Scale tok{};
  std::vector<Fp8Scale> sc128(I / 128);
  float S = 0.f;
  if (m.h_from_bf16) {
    float amax = 0, lo = 0, hi = 0;
    for (int c = 0; c < I; ++c) {
      const double a = std::fabs(double(h[c]));
      lo = std::max(lo, bf16_round(static_cast<float>(a * (1.0 - slack))));
      hi = std::max(hi, bf16_round(static_cast<float>(a * (1.0 + slack))));
      amax = std::max(amax, std::fabs(bf16_round(h[c])));
    }
    tok = fp8_scale_for_amax(amax);
    if (alternates != nullptr && lo != hi) alt_amax = bf16_values_between(lo, hi, amax);
  } else {
    for (int c0 = 0; c0 < I; c0 += 128) {
      float amax = 0;
      for (int c = c0; c < c0 + 128; ++c) amax = std::max(amax, std::fabs(h[c]));
      sc128[c0 / 128] = fp8_scale_for_amax(amax);
      S = std::max(S, sc128[c0 / 128].scale);
    }
  }
  auto read_as = [&](int c, float v) {
    if (m.h_from_bf16) return fp8_e4m3_decode(fp8_e4m3_encode(bf16_round(v) * tok.inv)) * tok.scale;
    const Fp8Scale& b = sc128[c / 128];
    const uint8_t code = fp8_e4m3_encode(v * b.inv);
    return m.per_token ? fp8_e4m3_decode(fp8_e4m3_encode(fp8_e4m3_decode(code) * (b.scale / S))) * S
                       : fp8_e4m3_decode(code) * b.scale;
  };
  for (int c = 0; c < I; ++c) hd[c] = read_as(c, h[c]);
  auto linear2 = [&](const std::vector<float>& hq, float* out) {
    for (int n = 0; n < H; ++n) {
      const double* wr = m.w2.data() + size_t(n) * I;
      double acc = 0;
      for (int c = 0; c < I; ++c) acc += double(hq[c]) * wr[c];
      out[n] = bf16_round(static_cast<float>(acc));
    }
  };
  linear2(hd, y);
  if (code_alternates != nullptr) h_code_alternates(m, H, I, h, hd, read_as, y, slack, *code_alternates);
  for (const float a : alt_amax) {
    tok = fp8_scale_for_amax(a);  // read_as now reads under this scale
    for (int c = 0; c < I; ++c) hd[c] = read_as(c, h[c]);
    alternates->emplace_back(H);
    linear2(hd, alternates->back().data());
  }
}

// Every array of the weights has the size its format needs.
void check_weights(const MoeLayerWeights& w) {
  const size_t E = w.experts, H = w.hidden, I = w.intermediate;
  const size_t m1 = 2 * I * H, m2 = H * I;
  bool ok = true;
  if (w.quant == MoeQuant::w8a8)
    ok = w.w1.size() == E * m1 && w.w2.size() == E * m2 && w.w1_scales.size() == E * m1 / (128 * 128) &&
         w.w2_scales.size() == E * m2 / (128 * 128);
  else if (w.int4_two_level)
    ok = w.w1.size() == E * m1 / 2 && w.w2.size() == E * m2 / 2 && w.w1_scales.size() == E * 2 * I &&
         w.w2_scales.size() == E * H && w.w1_groups.size() == E * m1 / 128 && w.w2_groups.size() == E * m2 / 128;
  else if (w.quant == MoeQuant::w4a8_int4)
    ok = w.w1.size() == E * m1 / 2 && w.w2.size() == E * m2 / 2 && w.w1_scales.size() == E * m1 / kInt4Group &&
         w.w2_scales.size() == E * m2 / kInt4Group;
  else
    ok = w.w1.size() == E * m1 / 2 && w.w2.size() == E * m2 / 2 && w.w1_e8m0.size() == E * m1 / kMxfp4Block &&
         w.w2_e8m0.size() == E * m2 / kMxfp4Block;
  if (!ok)
    throw InvalidArgument(fmt::format("moe layer reference: weight arrays do not match {} experts {}x{} ({})",
                                      w.experts, w.hidden, w.intermediate, static_cast<int>(w.quant)));
}

}  // namespace

struct MoeExpertReference::Matrices : ExpertMatrices {};

MoeExpertReference::MoeExpertReference(const MoeLayerWeights& w, int e)
    : hidden_(w.hidden), intermediate_(w.intermediate) {
  check_weights(w);
  if (e < 0 || e >= w.experts) throw InvalidArgument(fmt::format("moe layer reference: expert {} out of range", e));
  m_ = std::make_unique<Matrices>();
  static_cast<ExpertMatrices&>(*m_) = expert_matrices(w, e);
}

MoeExpertReference::~MoeExpertReference() = default;

void MoeExpertReference::row(float router_weight, const uint8_t* x_row, const float* x_row_scales, float* y,
                             std::vector<std::vector<float>>* alternates, double slack,
                             std::vector<HCodeAlternatives>* code_alternates) const {
  if (!(slack >= 0 && slack <= 1.0 / 64))
    throw InvalidArgument(fmt::format("moe layer reference: per-token slack {} outside [0, 1/64]", slack));
  expert_row(*m_, hidden_, intermediate_, router_weight, x_row, x_row_scales, y, alternates, slack, code_alternates);
}

void moe_expert_row(const MoeLayerWeights& w, int e, float router_weight, const uint8_t* x_row,
                    const float* x_row_scales, float* y) {
  MoeExpertReference(w, e).row(router_weight, x_row, x_row_scales, y);
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
  check_weights(w);

  // Dispatch: each owner's local experts receive (source rank, token, choice) rows.
  struct Row {
    int src, token, choice;
  };
  std::vector<std::vector<Row>> rows_of(r.shape.experts);
  for (int src = 0; src < r.ranks; ++src)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) rows_of[r.per_rank[src].experts[size_t(t) * k + j]].push_back({src, t, j});

  // Compute per expert (grouped, as the owner would) on host threads, heaviest experts first;
  // each row's y has its own slot, so the combine below adds in the order a serial loop would
  // (results do not depend on the thread count). Threads are capped so that the dequantised
  // experts they hold (doubles) stay within ~4 GiB.
  std::vector<int> order;
  std::vector<size_t> first_slot(r.shape.experts, 0);
  size_t slots = 0;
  for (int e = 0; e < r.shape.experts; ++e) {
    first_slot[e] = slots;
    slots += rows_of[e].size();
    if (!rows_of[e].empty()) order.push_back(e);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return rows_of[a].size() > rows_of[b].size(); });
  std::vector<float> ys(slots * size_t(H));
  const double expert_bytes = 3.0 * double(w.intermediate) * H * sizeof(double);
  const unsigned cap = static_cast<unsigned>(std::clamp(4.0 * (1u << 30) / expert_bytes, 1.0, 64.0));
  parallel_for(
      order.size(),
      [&](size_t oi) {
        const int e = order[oi];
        const ExpertMatrices m = expert_matrices(w, e);  // once per expert
        std::vector<float> xs(H / 128);
        for (size_t j = 0; j < rows_of[e].size(); ++j) {
          const Row& row = rows_of[e][j];
          const MoeLayerRankInput& ri = in[row.src];
          for (int b = 0; b < H / 128; ++b) xs[b] = ri.x_scales[size_t(b) * T + row.token];
          const float wgt = r.per_rank[row.src].weights[size_t(row.token) * k + row.choice];
          expert_row(m, H, w.intermediate, wgt, ri.x.data() + size_t(row.token) * H, xs.data(),
                     ys.data() + (first_slot[e] + j) * H, nullptr, kPerTokenHSlack, nullptr);
        }
      },
      cap);
  std::vector<std::vector<float>> out(r.ranks, std::vector<float>(size_t(T) * H, 0.f));
  for (int e = 0; e < r.shape.experts; ++e)
    for (size_t j = 0; j < rows_of[e].size(); ++j) {
      const Row& row = rows_of[e][j];
      const float* y = ys.data() + (first_slot[e] + j) * H;
      float* o = out[row.src].data() + size_t(row.token) * H;
      for (int n = 0; n < H; ++n) o[n] += y[n];
    }
  return out;
}

}  // namespace xstage::ops
