// MoE grouped GEMM on the GPU against a naive fp32 reference of the same quantised math:
// fresh random fp8 inputs and scales per case (W4A8: random packed 4-bit weights and scales,
// dequantised on the host by the reference helpers of moe_quant4.hpp), outputs poisoned with
// NaN first. Rows of an expert must be finite with ||out - ref|| / ||ref|| < 1e-2 over the whole
// output AND every row within its own tolerance (moe_reference.hpp: kMoeBf16RowTolerance,
// kMoeSwigluRowTolerance; one zeroed or negated row fails); rows outside every expert's segment
// (gaps) must keep the poison. Experts with zero, one and uneven token counts;
// hidden/intermediate 1408/5632 (DiT-MoE-G) and 4096/2048 (DSv4-Flash class). The tests force
// tiles, clusters and schedules to cover every kernel, but never assert which one the planner
// picks: that is tests/cpu/test_moe_gemm_cpu.cpp's (MoeGemmPlan.*).
#ifdef XSTAGE_HAVE_MOE
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_check.hpp"
#include "gpu_env.hpp"
#include "moe_reference.hpp"
#include "runtime/check.hpp"
#include "runtime/parallel_for.hpp"
#include "xstage/ops/moe_gemm.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"

namespace xstage::gputest {
namespace {

using ops::MoeEpilogue;
using ops::MoeQuant;

struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t bytes) { XS_CUDA(cudaMalloc(&p, bytes == 0 ? 16 : bytes), "test allocation"); }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

struct Case {
  std::string name;
  MoeEpilogue epilogue;
  int n;  // weight rows (2 * intermediate for swiglu)
  int k;
  std::vector<int> counts;
  std::vector<int> gaps;  // rows left out before each expert (and one trailing entry); empty: none
  int block_m = 0;
  int num_ctas = 0;
  int cluster_m = 0;  // 0: planned
  int cluster_n = 0;
  int schedule = -1;  // -1: default
  MoeQuant quant = MoeQuant::w8a8;
  // mxfp4 exponents: 0 = random in [124, 130] per 32 values; 1 = per row and 128-K block one
  // sub-block of zero codes holds the block's largest exponent, the other three sit g = 0..20
  // below it (every fp8 conversion shift, and the flush to zero past 14, dominate the result).
  int mx_pattern = 0;
  // B prepacked for the register-operand kernels (MoeWeightLayout::int4_rs or mxfp4_rs).
  bool rs = false;
  int block_n = 0;  // 0: planned
  // With rs and INT4: two-level scales (quantize_int4_lut, MoeWeightLayout::int4_rs_lut).
  bool lut = false;
  // Per-token activation scales (MoeActScales::per_token, a_scales [m]); the reference reads
  // them replicated over every 128-K block, i.e. the same math through the per-128 path.
  bool per_token = false;
  // With per_token, SwiGLU and lut or mxfp4: gate/up-interleaved rows (prepack_int4_lut_rs_glu /
  // prepack_mxfp4_rs_glu, MoeWeightLayout::int4_rs_lut_glu / mxfp4_rs_glu); the reference reads
  // the unpermuted weights.
  bool glu = false;
};

// Random 4-bit weights for W4A8 on the host: packed [experts, n, k/2] and the scales
// (int4: fp32 [experts, k/128, n]; mxfp4: E8M0 [experts, k/32, n]; int4 two-level: e4m3 group
// scales [experts, k/128, n] in e8m0's place and fp32 channel scales [experts, n]).
struct W4Weights {
  std::vector<uint8_t> packed;
  std::vector<float> scales;
  std::vector<uint8_t> e8m0;
};

W4Weights make_w4_weights(const Case& c, int experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  W4Weights w;
  w.packed.resize(size_t(experts) * c.n * c.k / 2);
  if (c.lut) {
    // Uniform weights through the real quantiser (cheap to draw: these tests quantise up to
    // ~50M values per case); rows 1-8x and groups 1-4x apart in magnitude, and every 7th row's
    // first group all zero (its group scale is the smallest the rule makes).
    // Experts on host threads, each with its own generator (deterministic in seed).
    w.e8m0.resize(size_t(experts) * (c.k / 128) * c.n);
    w.scales.resize(size_t(experts) * c.n);
    parallel_for(size_t(experts), [&](size_t e) {
      std::mt19937_64 erng(seed ^ (0x9E3779B97F4A7C15ull * (e + 1)));
      std::uniform_real_distribution<float> nd(-1.f, 1.f);
      std::vector<float> x(size_t(c.n) * c.k);
      for (int r = 0; r < c.n; ++r) {
        const float row_mag = std::ldexp(1.f, -static_cast<int>(erng() % 4));
        for (int g = 0; g < c.k / 128; ++g) {
          const float mag = (r % 7 == 0 && g == 0) ? 0.f : row_mag * std::ldexp(1.f, -static_cast<int>(erng() % 3));
          for (int i = 0; i < 128; ++i) x[size_t(r) * c.k + 128 * g + i] = nd(erng) * mag;
        }
      }
      ops::quantize_int4_lut(x.data(), c.n, c.k, w.packed.data() + e * c.n * c.k / 2,
                             w.e8m0.data() + e * (c.k / 128) * c.n, w.scales.data() + e * c.n);
    });
    return w;
  }
  for (auto& b : w.packed) b = static_cast<uint8_t>(rng());
  if (c.quant == MoeQuant::w4a8_int4) {
    // The register-operand layout holds symmetric INT4: every code but -8 (nibble 0x8).
    if (c.rs)
      for (auto& b : w.packed) {
        if ((b & 0x0F) == 0x08) b ^= 0x01;
        if ((b & 0xF0) == 0x80) b ^= 0x10;
      }
    std::uniform_real_distribution<float> u(0.5f / 7, 1.5f / 7);
    w.scales.resize(size_t(experts) * (c.k / 128) * c.n);
    for (auto& x : w.scales) x = u(rng);
    return w;
  }
  const int subs = c.k / 32;
  w.e8m0.resize(size_t(experts) * subs * c.n);
  for (int e = 0; e < experts; ++e)
    for (int j = 0; j < c.n; ++j)
      for (int g = 0; g < c.k / 128; ++g) {
        uint8_t* ex = w.e8m0.data() + size_t(e) * subs * c.n + j;  // ex[sub * n]
        if (c.mx_pattern == 0) {
          for (int i = 0; i < 4; ++i) ex[size_t(4 * g + i) * c.n] = static_cast<uint8_t>(124 + rng() % 7);
          continue;
        }
        const int base = 118 + static_cast<int>(rng() % 8);
        const int gap = static_cast<int>(rng() % 21);
        const int top = static_cast<int>(rng() % 4);
        for (int i = 0; i < 4; ++i) ex[size_t(4 * g + i) * c.n] = static_cast<uint8_t>(i == top ? base + gap : base);
        // The top sub-block's 32 values are +-0 (16 bytes).
        uint8_t* row = w.packed.data() + (size_t(e) * c.n + j) * (c.k / 2) + g * 64 + top * 16;
        for (int i = 0; i < 16; ++i) row[i] = (rng() & 1) ? 0x88 : 0x00;
      }
  return w;
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float silu(float x) { return x / (1.f + std::exp(-x)); }

// raw (optional): the output bytes, then the output scales' bytes (swiglu), for bitwise comparisons.
void run_case(const Case& c, uint64_t seed, std::vector<uint8_t>* raw = nullptr) {
  const int experts = static_cast<int>(c.counts.size());
  std::vector<int> offsets(experts);
  int m = 0;
  for (int e = 0; e < experts; ++e) {
    if (!c.gaps.empty()) m += c.gaps[e];
    offsets[e] = m;
    m += c.counts[e];
  }
  if (!c.gaps.empty()) m += c.gaps[experts];
  std::vector<int> row_valid(m, 0);
  for (int e = 0; e < experts; ++e)
    for (int r = 0; r < c.counts[e]; ++r) row_valid[offsets[e] + r] = 1;

  const bool swiglu = c.epilogue == MoeEpilogue::swiglu_fp8;
  const int out_cols = swiglu ? c.n / 2 : c.n;
  const size_t out_elem = swiglu ? 1 : 2;
  cudaStream_t s = nullptr;
  const bool w4 = ops::moe_is_w4a8(c.quant);
  const bool mx = c.quant == MoeQuant::w4a8_mxfp4;
  const ops::MoeWeightLayout layout = !c.rs  ? ops::MoeWeightLayout::rows
                                      : mx    ? (c.glu ? ops::MoeWeightLayout::mxfp4_rs_glu : ops::MoeWeightLayout::mxfp4_rs)
                                      : c.glu ? ops::MoeWeightLayout::int4_rs_lut_glu
                                      : c.lut ? ops::MoeWeightLayout::int4_rs_lut
                                              : ops::MoeWeightLayout::int4_rs;
  DeviceBuf a(size_t(m) * c.k), sa(sizeof(float) * (c.k / 128) * size_t(m)),
      b(size_t(ops::moe_weight_bytes(c.quant, layout, experts, c.n, c.k))),
      sb(size_t(ops::moe_weight_scale_bytes(c.quant, layout, experts, c.n, c.k))), counts(sizeof(int) * experts),
      offs(sizeof(int) * experts), out(size_t(m) * out_cols * out_elem),
      out_scales(sizeof(float) * (out_cols / 128) * size_t(m)), roww(sizeof(float) * size_t(m)),
      ref(sizeof(float) * size_t(m) * c.n);
  fill_fp8_random(a.as<uint8_t>(), size_t(m) * c.k, seed, 448.f, s);
  W4Weights w4w;
  if (!w4) {
    fill_fp8_random(b.as<uint8_t>(), size_t(experts) * c.n * c.k, seed + 1, 448.f, s);
    fill_float_random(sb.as<float>(), size_t(experts) * (c.n / 128) * (c.k / 128), seed + 3, 0.5f / 448, 1.5f / 448,
                      s);
  } else {
    w4w = make_w4_weights(c, experts, seed + 1);
    std::vector<uint8_t> upload = w4w.packed;
    std::vector<float> glu_scales;  // glu: the permuted channel scales (b_scales)
    const size_t per = size_t(c.n) * c.k / 2;
    if (c.rs && c.lut) {
      // Codes + per-row conversion tables; b_scales are the channel scales.
      const size_t per_pre = size_t(ops::prepacked_int4_lut_rs_bytes(c.n, c.k));
      upload.assign(per_pre * experts, 0);
      for (int e = 0; e < experts; ++e) {
        const uint8_t* gs = w4w.e8m0.data() + size_t(e) * (c.k / 128) * c.n;
        if (c.glu) {
          glu_scales.resize(w4w.scales.size());
          ops::prepack_int4_lut_rs_glu(w4w.packed.data() + e * per, gs, w4w.scales.data() + size_t(e) * c.n, c.n, c.k,
                                       upload.data() + e * per_pre, glu_scales.data() + size_t(e) * c.n);
        } else {
          ops::prepack_int4_lut_rs(w4w.packed.data() + e * per, gs, c.n, c.k, upload.data() + e * per_pre);
        }
      }
    } else if (c.rs && !mx) {
      for (int e = 0; e < experts; ++e)
        ops::prepack_int4_rs(w4w.packed.data() + e * per, c.n, c.k, upload.data() + e * per);
    } else if (c.rs) {
      // MXFP4 prepacked: codes + exponent gaps, and fp32 block scales in place of the exponents.
      const size_t per_pre = size_t(ops::prepacked_mxfp4_rs_bytes(c.n, c.k)), per_s = size_t(c.k / 128) * c.n;
      upload.assign(per_pre * experts, 0);
      w4w.scales.assign(per_s * experts, 0.f);
      // glu: the gate/up-interleaved rows, their block scales permuted with them.
      for (int e = 0; e < experts; ++e)
        (c.glu ? ops::prepack_mxfp4_rs_glu : ops::prepack_mxfp4_rs)(
            w4w.packed.data() + e * per, w4w.e8m0.data() + size_t(e) * (c.k / 32) * c.n, c.n, c.k,
            upload.data() + e * per_pre, w4w.scales.data() + e * per_s);
    }
    XS_CUDA(cudaMemcpy(b.p, upload.data(), upload.size(), cudaMemcpyHostToDevice), "packed weights");
    if (c.quant == MoeQuant::w4a8_int4 || c.rs) {
      // Read after prepacking: prepack_mxfp4_rs writes its block scales into w4w.scales above.
      const std::vector<float>& sc = c.glu && !mx ? glu_scales : w4w.scales;
      XS_CUDA(cudaMemcpy(sb.p, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice), "int4 scales");
    } else {
      XS_CUDA(cudaMemcpy(sb.p, w4w.e8m0.data(), w4w.e8m0.size(), cudaMemcpyHostToDevice), "mxfp4 scales");
    }
  }
  fill_float_random(sa.as<float>(), (c.k / 128) * size_t(m), seed + 2, 0.5f / 448, 1.5f / 448, s);
  DeviceBuf tok_scales(sizeof(float) * std::max(m, 1));
  if (c.per_token) {
    fill_float_random(tok_scales.as<float>(), size_t(m), seed + 5, 0.5f / 448, 1.5f / 448, s);
    std::vector<float> t(m), rep(size_t(c.k / 128) * m);
    XS_CUDA(cudaMemcpy(t.data(), tok_scales.p, sizeof(float) * m, cudaMemcpyDeviceToHost), "token scales to host");
    for (int kb = 0; kb < c.k / 128; ++kb) std::copy(t.begin(), t.end(), rep.begin() + size_t(kb) * m);
    XS_CUDA(cudaMemcpy(sa.p, rep.data(), sizeof(float) * rep.size(), cudaMemcpyHostToDevice), "replicated scales");
  }
  fill_float_random(roww.as<float>(), m, seed + 4, 0.1f, 1.f, s);
  XS_CUDA(cudaMemcpy(counts.p, c.counts.data(), sizeof(int) * experts, cudaMemcpyHostToDevice), "counts");
  XS_CUDA(cudaMemcpy(offs.p, offsets.data(), sizeof(int) * experts, cudaMemcpyHostToDevice), "offsets");
  poison(out.p, size_t(m) * out_cols * out_elem, s);
  poison(out_scales.p, sizeof(float) * (out_cols / 128) * size_t(m), s);
  XS_CUDA(cudaMemset(ref.p, 0, sizeof(float) * size_t(m) * c.n), "ref");

  ops::MoeGemmArgs args;
  args.quant = c.quant;
  args.epilogue = c.epilogue;
  args.experts = experts;
  args.m_total = m;
  args.n = c.n;
  args.k = c.k;
  args.a = a.p;
  args.a_scales = c.per_token ? tok_scales.as<float>() : sa.as<float>();
  args.a_scale_granularity = c.per_token ? ops::MoeActScales::per_token : ops::MoeActScales::per_128;
  args.b = b.p;
  args.b_layout = layout;
  args.b_scales = mx && !c.rs ? nullptr : sb.as<float>();
  args.b_e8m0 = mx && !c.rs ? sb.as<uint8_t>() : nullptr;
  args.counts = counts.as<int>();
  args.offsets = offs.as<int>();
  args.out = out.p;
  args.out_scales = swiglu ? out_scales.as<float>() : nullptr;
  args.row_weights = swiglu ? roww.as<float>() : nullptr;
  args.host_counts = c.counts.data();
  args.host_offsets = offsets.data();
  args.block_m = c.block_m;
  args.block_n = c.block_n;
  args.num_ctas = c.num_ctas;
  args.cluster_m = c.cluster_m;
  args.cluster_n = c.cluster_n;
  args.schedule = c.schedule;
  ops::moe_gemm(args, s);
  XS_CUDA(cudaDeviceSynchronize(), "running the moe gemm " + c.name);
  if (!w4) {
    reference_grouped_gemm(a.as<uint8_t>(), sa.as<float>(), b.as<uint8_t>(), sb.as<float>(), c.counts, offsets, m, c.n,
                           c.k, ref.as<float>(), s);
  } else {
    // The host dequantises (the kernel's math, moe_quant4.hpp), up to 8 experts at a time on
    // host threads; the device multiplies in fp32, one expert at a time.
    constexpr int kBatch = 8;
    std::vector<std::vector<float>> wb(kBatch);
    DeviceBuf wd(sizeof(float) * size_t(c.n) * c.k);
    int loaded = -1;  // the batch of experts wb holds
    for (int e = 0; e < experts; ++e) {
      if (c.counts[e] == 0) continue;
      if (e / kBatch != loaded) {
        loaded = e / kBatch;
        const int e0 = loaded * kBatch;
        parallel_for(size_t(std::min(kBatch, experts - e0)), [&](size_t j) {
          const int ex = e0 + static_cast<int>(j);
          std::vector<float>& w = wb[j];
          if (c.counts[ex] == 0) {
            w.clear();
            return;
          }
          w.resize(size_t(c.n) * c.k);
          const uint8_t* pk = w4w.packed.data() + size_t(ex) * c.n * c.k / 2;
          if (c.lut)
            ops::dequantize_int4_lut(pk, w4w.e8m0.data() + size_t(ex) * (c.k / 128) * c.n,
                                     w4w.scales.data() + size_t(ex) * c.n, c.n, c.k, w.data());
          else if (c.quant == MoeQuant::w4a8_int4)
            ops::dequantize_int4_g128(pk, w4w.scales.data() + size_t(ex) * (c.k / 128) * c.n, c.n, c.k, w.data());
          else
            ops::dequantize_mxfp4_w4a8(pk, w4w.e8m0.data() + size_t(ex) * (c.k / 32) * c.n, c.n, c.k, w.data(),
                                       c.rs ? ops::kMxfp4RsMaxExponentGap : ops::kMxfp4MaxExponentGap);
        });
      }
      const std::vector<float>& w = wb[e % kBatch];
      XS_CUDA(cudaMemcpy(wd.p, w.data(), sizeof(float) * w.size(), cudaMemcpyHostToDevice), "dequantised weights");
      reference_expert_gemm_f32w(a.as<uint8_t>(), sa.as<float>(), wd.as<float>(), offsets[e], c.counts[e], m, c.n, c.k,
                                 ref.as<float>(), s);
      XS_CUDA(cudaDeviceSynchronize(), "running the w4a8 reference");
    }
  }
  XS_CUDA(cudaDeviceSynchronize(), "running the reference");

  std::vector<float> ref_h(size_t(m) * c.n);
  XS_CUDA(cudaMemcpy(ref_h.data(), ref.p, sizeof(float) * ref_h.size(), cudaMemcpyDeviceToHost), "ref to host");
  double err_sq = 0, ref_sq = 0, scale_err_max = -1;  // scale_err_max: SwiGLU output scales
  unsigned long long nonfinite = 0, touched = 0;
  // Every expert row on its own (one wrong row fails however long the output).
  cli::RowChecker rows(swiglu ? kMoeSwigluRowTolerance : kMoeBf16RowTolerance);
  if (!swiglu) {
    std::vector<uint16_t> o(size_t(m) * c.n);
    XS_CUDA(cudaMemcpy(o.data(), out.p, o.size() * 2, cudaMemcpyDeviceToHost), "out to host");
    std::vector<float> got(c.n);
    for (int r = 0; r < m; ++r) {
      for (int j = 0; j < c.n; ++j) {
        const uint16_t v = o[size_t(r) * c.n + j];
        if (!row_valid[r]) {
          touched += v != 0xFFFFu;
          continue;
        }
        const float f = bf16_to_float(v);
        const float rf = ref_h[size_t(r) * c.n + j];
        got[j] = f;
        if (!std::isfinite(f)) ++nonfinite;
        err_sq += double(f - rf) * (f - rf);
        ref_sq += double(rf) * rf;
      }
      if (row_valid[r]) rows.add_row(r, got.data(), ref_h.data() + size_t(r) * c.n, size_t(c.n));
    }
  } else {
    const int inter = c.n / 2;
    std::vector<uint8_t> o(size_t(m) * inter);
    std::vector<float> os(size_t(inter / 128) * m), w(m);
    XS_CUDA(cudaMemcpy(o.data(), out.p, o.size(), cudaMemcpyDeviceToHost), "out to host");
    XS_CUDA(cudaMemcpy(os.data(), out_scales.p, os.size() * 4, cudaMemcpyDeviceToHost), "scales to host");
    XS_CUDA(cudaMemcpy(w.data(), roww.p, w.size() * 4, cudaMemcpyDeviceToHost), "weights to host");
    double qerr_sq = 0, scale_err = 0;
    std::vector<float> h(128), row_dq(inter), row_h(inter);
    for (int r = 0; r < m; ++r) {
      for (int jb = 0; jb < inter / 128; ++jb) {
        const float sc = os[size_t(jb) * m + r];
        if (!row_valid[r]) {
          for (int i = 0; i < 128; ++i) touched += o[size_t(r) * inter + jb * 128 + i] != 0xFFu;
          touched += !std::isnan(sc);
          continue;
        }
        float amax = 0.f;
        for (int i = 0; i < 128; ++i) {
          const int j = jb * 128 + i;
          h[i] = silu(ref_h[size_t(r) * c.n + j]) * ref_h[size_t(r) * c.n + inter + j] * w[r];
          amax = std::max(amax, std::fabs(h[i]));
        }
        const ops::Fp8Scale rs = ops::fp8_scale_for_amax(amax);
        if (!std::isfinite(sc)) ++nonfinite;
        scale_err = std::max(scale_err, std::fabs(double(sc) - rs.scale) / rs.scale);
        for (int i = 0; i < 128; ++i) {
          const float dq_ref = ops::fp8_e4m3_decode(ops::fp8_e4m3_encode(h[i] * rs.inv)) * rs.scale;
          const float dq = ops::fp8_e4m3_decode(o[size_t(r) * inter + jb * 128 + i]) * sc;
          if (!std::isfinite(dq)) ++nonfinite;
          err_sq += double(dq - dq_ref) * (dq - dq_ref);
          qerr_sq += double(dq - h[i]) * (dq - h[i]);
          ref_sq += double(dq_ref) * dq_ref;
          row_dq[jb * 128 + i] = dq;
          row_h[jb * 128 + i] = h[i];
        }
      }
      // The row's dequantised fp8 output against the exact h (kMoeSwigluRowTolerance).
      if (row_valid[r]) rows.add_row(r, row_dq.data(), row_h.data(), size_t(inter));
    }
    // The largest relative scale error over every (row, 128-channel group): ~3e4 groups in the
    // big cases, each amax read off fp32 sums of FP8 wgmmas, whose in-core accumulation keeps
    // fewer bits than fp32. Typical 3e-4 to 9e-4, with rare tails of 1.1e-3 to 1.5e-3 on draws
    // whose element errors were as usual (docs/moe-gemm.md, "Tests": the SwiGLU output-scale
    // bound). A wrong group, row weight or missing requantisation is off by far more than 2e-3.
    EXPECT_LT(scale_err, 2e-3) << c.name << ": output scales differ from the reference amax / 448";
    scale_err_max = scale_err;
    // Quantisation itself: fp8 e4m3 keeps 3 mantissa bits (relative rounding <= 1/16).
    EXPECT_LT(std::sqrt(qerr_sq / std::max(ref_sq, 1e-30)), 0.06) << c.name << ": fp8 output far from the exact h";
  }
  if (raw) {
    const size_t ob = size_t(m) * out_cols * out_elem, sb_bytes = swiglu ? sizeof(float) * (out_cols / 128) * size_t(m) : 0;
    raw->resize(ob + sb_bytes);
    XS_CUDA(cudaMemcpy(raw->data(), out.p, ob, cudaMemcpyDeviceToHost), "raw output");
    if (sb_bytes) XS_CUDA(cudaMemcpy(raw->data() + ob, out_scales.p, sb_bytes, cudaMemcpyDeviceToHost), "raw scales");
  }
  const double rel = std::sqrt(err_sq / std::max(ref_sq, 1e-30));
  const cli::CheckRecord rec = rows.finish(nonfinite, "fp32 reference of the same quantised math");
  EXPECT_EQ(nonfinite, 0u) << c.name << ": non-finite values in expert rows";
  EXPECT_EQ(touched, 0u) << c.name << ": rows outside every expert were written";
  EXPECT_GT(ref_sq, 0.0) << c.name << ": empty reference (nothing compared)";
  EXPECT_LT(rel, 1e-2) << c.name << ": ||out - ref|| / ||ref|| = " << rel;
  long long expert_rows = 0;
  for (int cnt : c.counts) expert_rows += cnt;
  EXPECT_EQ(rec.rows_checked, expert_rows) << c.name << ": every expert row is compared";
  EXPECT_EQ(rec.rows_failed, 0) << c.name << ": " << rec.rows_failed << " of " << rec.rows_checked
                                << " rows out of the per-row tolerance, first row " << rec.first_failed_row
                                << " (worst row " << rec.worst_row << ": relative error " << rec.rel_err << ")";
  char scale_note[48] = "";
  if (scale_err_max >= 0) std::snprintf(scale_note, sizeof scale_note, ", scale err %.3e", scale_err_max);
  std::printf("[ moe ] %-28s %-10s m_total %5d n %5d k %5d %-20s rel err %.3e, worst row %.3e%s\n", c.name.c_str(),
              ops::moe_quant_name(c.quant), m, c.n, c.k, ops::select_moe_instantiation(args).name.c_str(), rel,
              rec.rel_err, scale_note);
}

const std::vector<int> kUneven{0, 1, 37, 200, 0, 129, 64, 300};

TEST(MoeGemmGpu, DitLinear2Bf16Block128) {
  XS_REQUIRE_GPUS(1);
  run_case({"dit_l2_bf16_m128", MoeEpilogue::bf16, 1408, 5632, kUneven, {}, 128, 0}, 101);
}
TEST(MoeGemmGpu, DitLinear2Bf16Block64HalfTile) {
  XS_REQUIRE_GPUS(1);
  run_case({"dit_l2_bf16_m64", MoeEpilogue::bf16, 1408, 5632, kUneven, {}, 64, 0}, 102);
}
TEST(MoeGemmGpu, DitLinear1SwiGlu) {
  XS_REQUIRE_GPUS(1);
  run_case({"dit_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, kUneven, {}, 0, 0}, 103);
}
TEST(MoeGemmGpu, Ds4096Linear1SwiGlu) {
  XS_REQUIRE_GPUS(1);
  run_case({"ds_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 2048, 4096, {5, 0, 130, 257, 64, 1, 0, 90}, {}, 0, 0}, 104);
}
TEST(MoeGemmGpu, Ds4096Linear1Bf16) {
  XS_REQUIRE_GPUS(1);
  run_case({"ds_l1_bf16", MoeEpilogue::bf16, 2 * 2048, 4096, {5, 0, 130, 257, 64, 1, 0, 90}, {}, 0, 0}, 105);
}
TEST(MoeGemmGpu, Ds4096Linear2Bf16BothTiles) {
  XS_REQUIRE_GPUS(1);
  run_case({"ds_l2_bf16_m128", MoeEpilogue::bf16, 4096, 2048, kUneven, {}, 128, 0}, 106);
  run_case({"ds_l2_bf16_m64", MoeEpilogue::bf16, 4096, 2048, kUneven, {}, 64, 0}, 107);
}
TEST(MoeGemmGpu, GapsAndFewCtas) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 70, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  run_case({"gaps_3ctas_m128", MoeEpilogue::bf16, 512, 1024, counts, gaps, 128, 3}, 108);
  run_case({"gaps_2ctas_m64", MoeEpilogue::bf16, 640, 1024, counts, gaps, 64, 2}, 109);
  run_case({"gaps_1cta_swiglu", MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 1}, 110);
}
TEST(MoeGemmGpu, OneTokenPerExpert) {
  XS_REQUIRE_GPUS(1);
  run_case({"one_token_x32", MoeEpilogue::bf16, 1408, 1024, std::vector<int>(32, 1), {}, 0, 0}, 111);
  run_case({"one_token_x32_swiglu", MoeEpilogue::swiglu_fp8, 1024, 1408, std::vector<int>(32, 1), {}, 0, 0}, 112);
}
TEST(MoeGemmGpu, ManyTokensOneExpertBands) {
  XS_REQUIRE_GPUS(1);
  // 3000 rows: more m-blocks than one scheduler band (2048 rows), a partial last block.
  run_case({"one_expert_3000", MoeEpilogue::bf16, 1024, 768, {3000}, {}, 0, 0}, 113);
  run_case({"one_expert_3000_sw", MoeEpilogue::swiglu_fp8, 512, 768, {0, 3000}, {}, 0, 0}, 114);
}
// Clusters: odd m-block counts per expert and n = 1408 (11 n-blocks) leave partners with dummy
// tiles that must load and compute but store nothing; few clusters walk many tiles.
TEST(MoeGemmGpu, ClustersMulticastWithDummyTiles) {
  XS_REQUIRE_GPUS(1);
  for (auto [cm, cn] : {std::pair{2, 1}}) {  // the shipped bf16 clusters: 128 x 192 and 128 x 256 in 2 x 1
    const std::string tag = "_c" + std::to_string(cm) + "x" + std::to_string(cn);
    run_case({"dit_l2_bf16" + tag, MoeEpilogue::bf16, 1408, 5632, kUneven, {}, 128, 0, cm, cn}, 200 + cm * 10 + cn);
    run_case({"gaps_4ctas" + tag, MoeEpilogue::bf16, 1408, 1024, {3, 270, 0, 140}, {5, 0, 17, 3, 9}, 128, 4, cm, cn},
             300 + cm * 10 + cn);
    run_case({"ds_l1_bf16" + tag, MoeEpilogue::bf16, 4096, 4096, {5, 0, 130, 257, 64, 1, 0, 90}, {}, 128, 0, cm, cn},
             400 + cm * 10 + cn);
  }
  run_case({"dit_l1_swiglu_c2x1", MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, kUneven, {}, 64, 0, 2, 1}, 501);
  run_case({"ds_l1_swiglu_c2x1", MoeEpilogue::swiglu_fp8, 2 * 2048, 4096, {5, 0, 130, 257, 64, 1, 0, 90}, {}, 64, 0, 2,
            1},
           502);
  run_case({"gaps_2ctas_swiglu_c2x1", MoeEpilogue::swiglu_fp8, 512, 1024, {3, 270, 0, 140}, {5, 0, 17, 3, 9}, 64, 2, 2,
            1},
           503);
}

// Every consumer schedule (overlap on/off x ping-pong on/off), odd K-block counts included
// (k = 1408: 11 blocks; k = 640: 5), plain, clustered and SwiGLU tiles.
TEST(MoeGemmGpu, EveryConsumerSchedule) {
  XS_REQUIRE_GPUS(1);
  for (int sch = 0; sch < 4; ++sch) {
    const std::string tag = "_s" + std::to_string(sch);
    run_case({"l2_m128" + tag, MoeEpilogue::bf16, 1408, 640, kUneven, {}, 128, 0, 1, 1, sch}, 600 + sch);
    run_case({"l2_m64" + tag, MoeEpilogue::bf16, 1408, 1408, kUneven, {}, 64, 3, 1, 1, sch}, 610 + sch);
    run_case({"l1_swiglu_c2x1" + tag, MoeEpilogue::swiglu_fp8, 1024, 1408, kUneven, {}, 64, 0, 2, 1, sch}, 630 + sch);
    run_case({"l1_swiglu" + tag, MoeEpilogue::swiglu_fp8, 512, 128, {1, 0, 65, 3}, {}, 64, 1, 1, 1, sch}, 640 + sch);
    // 2 and 4 K blocks: the overlap schedule's peeled tail (two blocks left) with and without a
    // loop iteration before it.
    run_case({"k256_m128" + tag, MoeEpilogue::bf16, 512, 256, {3, 0, 130}, {}, 128, 2, 1, 1, sch}, 650 + sch);
    run_case({"k512_swiglu" + tag, MoeEpilogue::swiglu_fp8, 512, 512, {70, 1}, {}, 64, 1, 1, 1, sch}, 660 + sch);
  }
}

// The 128 x 192 tile (m64n192 wgmmas, schedules 0 and 2) in its 2 x 1 clusters: n a multiple of
// 192 and not (last tile 64 or 128 columns wide: its other parts must stay unwritten), one
// cluster walking many tiles, each schedule.
Case wide(Case c) {
  c.block_n = 192;
  return c;
}

TEST(MoeGemmGpu, WideTileN192) {
  XS_REQUIRE_GPUS(1);
  for (int sch : {-1, 0, 2}) {
    const std::string tag = "_s" + std::to_string(sch);
    // 2 x 1 clusters (B multicast to two m-blocks): odd m-block counts give partners dummy
    // tiles; 2 clusters walk many tiles.
    run_case(wide({"n192_c2x1_dit" + tag, MoeEpilogue::bf16, 1408, 5632, kUneven, {}, 0, 0, 2, 1, sch}), 730 + sch);
    run_case(wide({"n192_c2x1_896_2cl" + tag, MoeEpilogue::bf16, 896, 640, {3, 270, 0, 140}, {5, 0, 17, 3, 9}, 0, 4, 2, 1,
                   sch}),
             740 + sch);
  }
}

// The 128 x 256 gate/up tile (each warp group runs the gate and the up piece of a stage one
// after the other): uneven experts, gaps with one CTA walking every tile, 1, 2 and an odd number
// of K blocks, one expert with 3000 tokens, 32 one-token experts; schedules 0 and 2.
Case dual(Case c) {
  c.block_m = 128;
  c.block_n = 256;
  return c;
}

TEST(MoeGemmGpu, SwiGluDualTile) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 70, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  for (int sch : {-1, 0, 2}) {
    const std::string tag = "_dual_s" + std::to_string(sch);
    run_case(dual({"dit_l1_swiglu" + tag, MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, kUneven, {}, 0, 0, 1, 1, sch}),
             1200 + sch);
    run_case(dual({"gaps_1cta_swiglu" + tag, MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 1, 1, 1, sch}),
             1210 + sch);
    run_case(dual({"k128_swiglu" + tag, MoeEpilogue::swiglu_fp8, 512, 128, {1, 0, 65, 3}, {}, 0, 1, 1, 1, sch}),
             1220 + sch);
    run_case(dual({"k256_swiglu" + tag, MoeEpilogue::swiglu_fp8, 768, 256, {130, 2, 0, 64}, {}, 0, 2, 1, 1, sch}),
             1230 + sch);
  }
  run_case(dual({"ds_l1_swiglu_dual", MoeEpilogue::swiglu_fp8, 2 * 2048, 4096, {5, 0, 130, 257, 64, 1, 0, 90}, {}}),
           1240);
  run_case(dual({"one_token_x32_swiglu_dual", MoeEpilogue::swiglu_fp8, 1024, 1408, std::vector<int>(32, 1), {}}), 1241);
  run_case(dual({"one_expert_3000_sw_dual", MoeEpilogue::swiglu_fp8, 512, 768, {0, 3000}, {}, 0, 2}), 1242);
  run_case(dual({"k640_swiglu_dual", MoeEpilogue::swiglu_fp8, 768, 640, {129, 7, 256}, {}, 0, 3}), 1243);
}

// Both 128 x 256 tiles in 2 x 1 clusters (B chunks multicast to two m-blocks): odd m-block
// counts per expert give the partner a dummy tile, one cluster (2 CTAs) walks every tile with
// gaps, n = 1408 leaves the last bf16 column half past n, 3000 rows in one expert; schedules -1,
// 0, 2.
TEST(MoeGemmGpu, DualTilesInClusters) {
  XS_REQUIRE_GPUS(1);
  auto c2x1 = [](Case c) {
    c.block_m = 128;
    c.block_n = 256;
    c.cluster_m = 2;
    c.cluster_n = 1;
    return c;
  };
  const std::vector<int> counts{3, 270, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  for (int sch : {-1, 0, 2}) {
    const std::string tag = "_s" + std::to_string(sch);
    run_case(c2x1({"c2x1_bf16_l2_dit" + tag, MoeEpilogue::bf16, 1408, 5632, kUneven, {}, 0, 0, 0, 0, sch}),
             1400 + sch);
    run_case(c2x1({"c2x1_bf16_gaps_1cl" + tag, MoeEpilogue::bf16, 768, 1024, counts, gaps, 0, 2, 0, 0, sch}),
             1410 + sch);
    run_case(c2x1({"c2x1_swiglu_dit" + tag, MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, kUneven, {}, 0, 0, 0, 0, sch}),
             1420 + sch);
    run_case(c2x1({"c2x1_swiglu_gaps_1cl" + tag, MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 2, 0, 0, sch}),
             1430 + sch);
  }
  run_case(c2x1({"c2x1_bf16_3000_rows", MoeEpilogue::bf16, 512, 768, {0, 3000}, {}, 0, 4}), 1440);
  run_case(c2x1({"c2x1_swiglu_3000_rows", MoeEpilogue::swiglu_fp8, 512, 768, {0, 3000}, {}, 0, 4}), 1441);
}

// ---- W4A8: 4-bit weights converted to fp8 in the mainloop --------------------------------
Case w4(Case c, MoeQuant q, int pattern = 0) {
  c.name += q == MoeQuant::w4a8_int4 ? "_int4" : (pattern ? "_mxgap" : "_mx");
  c.quant = q;
  c.mx_pattern = pattern;
  return c;
}
constexpr MoeQuant kInt4 = MoeQuant::w4a8_int4;
constexpr MoeQuant kMx = MoeQuant::w4a8_mxfp4;

TEST(MoeGemmGpu, W4A8DitShapes) {
  XS_REQUIRE_GPUS(1);
  for (MoeQuant q : {kInt4, kMx}) {
    run_case(w4({"dit_l2", MoeEpilogue::bf16, 1408, 5632, kUneven, {}}, q), 801 + int(q));
    run_case(w4({"dit_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, kUneven, {}}, q), 803 + int(q));
  }
}
TEST(MoeGemmGpu, W4A8Ds4096Shapes) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{5, 0, 130, 257, 64, 1, 0, 90};
  for (MoeQuant q : {kInt4, kMx}) {
    run_case(w4({"ds_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 2048, 4096, counts, {}}, q), 811 + int(q));
    run_case(w4({"ds_l1_bf16", MoeEpilogue::bf16, 2 * 2048, 4096, counts, {}}, q), 813 + int(q));
    run_case(w4({"ds_l2_m64", MoeEpilogue::bf16, 4096, 2048, kUneven, {}, 64}, q), 815 + int(q));
    run_case(w4({"ds_l2_m192", MoeEpilogue::bf16, 4096, 2048, kUneven, {}, 192}, q), 817 + int(q));
  }
}
// Few CTAs (many tiles each: the 3-stage ring wraps, the end marker lands on any stage), gaps
// between experts, one token per expert, 3000 tokens in one expert, 1 and 5 K blocks.
TEST(MoeGemmGpu, W4A8GapsFewCtasAndEdges) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 70, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  for (MoeQuant q : {kInt4, kMx}) {
    const int s = 830 + 20 * int(q);
    run_case(w4({"gaps_3ctas_m192", MoeEpilogue::bf16, 512, 1024, counts, gaps, 192, 3}, q), s + 0);
    run_case(w4({"gaps_2ctas_m64", MoeEpilogue::bf16, 640, 1024, counts, gaps, 64, 2}, q), s + 1);
    run_case(w4({"gaps_1cta_swiglu", MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 1}, q), s + 2);
    run_case(w4({"one_token_x32", MoeEpilogue::bf16, 1408, 1024, std::vector<int>(32, 1), {}}, q), s + 3);
    run_case(w4({"one_token_x32_swiglu", MoeEpilogue::swiglu_fp8, 1024, 1408, std::vector<int>(32, 1), {}}, q), s + 4);
    run_case(w4({"one_expert_3000", MoeEpilogue::bf16, 1024, 768, {3000}, {}}, q), s + 5);
    run_case(w4({"one_expert_3000_sw", MoeEpilogue::swiglu_fp8, 512, 768, {0, 3000}, {}}, q), s + 6);
    run_case(w4({"k128_m192_1cta", MoeEpilogue::bf16, 256, 128, {100, 0, 250}, {}, 192, 1}, q), s + 7);
    run_case(w4({"k640_m64", MoeEpilogue::bf16, 1408, 640, kUneven, {}, 64, 0}, q), s + 8);
    run_case(w4({"k640_m192_2ctas", MoeEpilogue::bf16, 1408, 640, kUneven, {}, 192, 2}, q), s + 9);
    run_case(w4({"k128_swiglu", MoeEpilogue::swiglu_fp8, 512, 128, {1, 0, 65, 3}, {}, 0, 1}, q), s + 10);
  }
}
// The register-operand INT4 kernels for two-level scales (prepack_int4_lut_rs: the e4m3 group
// scale in each row's conversion table, fp32 channel scales in the epilogue): all four tiles
// (128 and 256 tokens bf16, 64 and 128 tokens SwiGLU) over DiT / DSv4-class shapes, uneven and empty experts,
// counts not multiples of the tile, gaps on 1-3 CTAs, one token per expert, 3000 tokens in one
// expert, one K block; weights from quantize_int4_lut with rows and groups of different
// magnitude and all-zero groups.
Case rs_lut(Case c, int block_m) {
  c.name += "_lut" + std::to_string(block_m);
  c.quant = kInt4;
  c.rs = true;
  c.lut = true;
  c.block_m = block_m;
  return c;
}
TEST(MoeGemmGpu, W4A8RegisterOperandLut) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 200, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  // The big DiT / DSv4 shapes on the two-piece tiles only, with five and four experts (the host
  // generates and quantises ~1.5 s per expert of them; the one-piece tiles run the same code
  // minus the second piece).
  const std::vector<int> uneven5{0, 37, 300, 129, 1}, uneven4{130, 0, 257, 1};
  for (int bm : {128, 256}) {
    const uint64_t s = 970 + 10 * (bm / 128);
    if (bm == 256) {
      run_case(rs_lut({"dit_l2", MoeEpilogue::bf16, 1408, 5632, uneven5, {}}, bm), s);
      run_case(rs_lut({"ds_l1_bf16", MoeEpilogue::bf16, 2 * 2048, 4096, uneven4, {}}, bm), s + 1);
    }
    run_case(rs_lut({"gaps_3ctas", MoeEpilogue::bf16, 512, 1024, counts, gaps, 0, 3}, bm), s + 2);
    run_case(rs_lut({"gaps_1cta", MoeEpilogue::bf16, 384, 640, counts, gaps, 0, 1}, bm), s + 3);
    run_case(rs_lut({"one_token_x32", MoeEpilogue::bf16, 1408, 1024, std::vector<int>(32, 1), {}}, bm), s + 4);
    run_case(rs_lut({"one_expert_3000", MoeEpilogue::bf16, 1024, 768, {3000}, {}}, bm), s + 5);
    run_case(rs_lut({"k128_1cta", MoeEpilogue::bf16, 256, 128, {100, 0, 250}, {}, 0, 1}, bm), s + 6);
  }
  // SwiGLU: 64-token tiles, and 128-token tiles of two pieces (the second piece partly or wholly
  // past the expert's tokens in the uneven cases).
  for (int bm : {64, 128}) {
    const uint64_t s = 991 + 10 * (bm / 64);
    if (bm == 128) {
      run_case(rs_lut({"dit_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, uneven5, {}}, bm), s);
      run_case(rs_lut({"ds_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 2048, 4096, uneven4, {}}, bm), s + 1);
    }
    run_case(rs_lut({"gaps_1cta_swiglu", MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 1}, bm), s + 2);
    run_case(rs_lut({"one_token_x32_sw", MoeEpilogue::swiglu_fp8, 1024, 1408, std::vector<int>(32, 1), {}}, bm), s + 3);
    run_case(rs_lut({"one_expert_3000_sw", MoeEpilogue::swiglu_fp8, 512, 768, {0, 3000}, {}, 0, 2}, bm), s + 4);
    run_case(rs_lut({"k128_swiglu", MoeEpilogue::swiglu_fp8, 512, 128, {1, 0, 65, 3}, {}, 0, 1}, bm), s + 5);
  }
}

// Per-token activation scales on the two-level INT4 layout: the two-piece kernels whose
// promotion is a plain add (w4a8rs_lut_tok_*), the INT4 two-level cases' shapes (K up to 5632),
// planned at every token count; the thresholds are the other kernels'.
TEST(MoeGemmGpu, W4A8RegisterOperandLutPerToken) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 200, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  const std::vector<int> uneven5{0, 37, 300, 129, 1}, uneven4{130, 0, 257, 1};
  auto tok = [](Case c) {
    c.name += "_lut_tok";
    c.quant = kInt4;
    c.rs = true;
    c.lut = true;
    c.per_token = true;
    return c;
  };
  const uint64_t s = 1210;
  run_case(tok({"dit_l2", MoeEpilogue::bf16, 1408, 5632, uneven5, {}}), s);
  run_case(tok({"ds_l1_bf16", MoeEpilogue::bf16, 2 * 2048, 4096, uneven4, {}}), s + 1);
  run_case(tok({"gaps_3ctas", MoeEpilogue::bf16, 512, 1024, counts, gaps, 0, 3}), s + 2);
  run_case(tok({"one_token_x32", MoeEpilogue::bf16, 1408, 1024, std::vector<int>(32, 1), {}}), s + 3);
  run_case(tok({"k128_1cta", MoeEpilogue::bf16, 256, 128, {100, 0, 250}, {}, 0, 1}), s + 4);
  run_case(tok({"dit_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, uneven5, {}}), s + 5);
  run_case(tok({"ds_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 2048, 4096, uneven4, {}}), s + 9);
  run_case(tok({"gaps_1cta_swiglu", MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 1}), s + 6);
  run_case(tok({"one_expert_3000_sw", MoeEpilogue::swiglu_fp8, 512, 768, {0, 3000}, {}, 0, 2}), s + 7);
  run_case(tok({"k128_swiglu", MoeEpilogue::swiglu_fp8, 512, 128, {1, 0, 65, 3}, {}, 0, 1}), s + 8);
}

// Linear-1 with per-token scales on gate/up-interleaved rows (w4a8rs_lut_tok_glu_m256n128: the
// bf16 256-token main loop, 64 channels per tile, the token amax shared by a 1 x 2 cluster): the
// per-token SwiGLU cases, plus uneven counts on a grid of 2 and 6 CTAs (clusters that take many
// tiles in turn: the exchange buffers' parity and phases) and DiT's K.
TEST(MoeGemmGpu, W4A8RegisterOperandLutPerTokenGlu) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 200, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  const std::vector<int> uneven5{0, 37, 300, 129, 1}, uneven4{130, 0, 257, 1};
  auto glu = [](Case c) {
    c.name += "_lut_tok_glu";
    c.quant = kInt4;
    c.rs = true;
    c.lut = true;
    c.per_token = true;
    c.glu = true;
    return c;
  };
  const uint64_t s = 1250;
  run_case(glu({"dit_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, uneven5, {}}), s);
  run_case(glu({"ds_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 2048, 4096, uneven4, {}}), s + 1);
  run_case(glu({"gaps_2ctas", MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 2}), s + 2);
  run_case(glu({"one_expert_3000_6ctas", MoeEpilogue::swiglu_fp8, 512, 768, {0, 3000}, {}, 0, 6}), s + 3);
  run_case(glu({"k128", MoeEpilogue::swiglu_fp8, 512, 128, {1, 0, 65, 3}, {}, 0, 2}), s + 4);
  run_case(glu({"one_token_x32", MoeEpilogue::swiglu_fp8, 256, 1024, std::vector<int>(32, 1), {}}), s + 5);
}

// MXFP4 with per-token activation scales: the 256-token bf16 tile (the block scale per row and K
// block in the promotion, the token scale in the epilogue) and Linear-1 on gate/up-interleaved
// rows (prepack_mxfp4_rs_glu, 1 x 2 clusters, the epilogue on the producer warps), over the INT4
// per-token cases' shapes, random exponents and the gap pattern of mx_pattern 1.
TEST(MoeGemmGpu, W4A8RegisterOperandMxfp4PerToken) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 200, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  const std::vector<int> uneven5{0, 37, 300, 129, 1}, uneven4{130, 0, 257, 1};
  auto tok = [](Case c, int pattern, bool glu) {
    c.name += glu ? "_mx_tok_glu" : "_mx_tok";
    if (pattern) c.name += "gaps";
    c.quant = MoeQuant::w4a8_mxfp4;
    c.rs = true;
    c.per_token = true;
    c.glu = glu;
    c.mx_pattern = pattern;
    return c;
  };
  const uint64_t s = 1310;
  run_case(tok({"dit_l2", MoeEpilogue::bf16, 1408, 5632, uneven5, {}}, 0, false), s);
  run_case(tok({"ds_l1_bf16", MoeEpilogue::bf16, 4096, 4096, uneven4, {}}, 1, false), s + 1);
  run_case(tok({"gaps_3ctas", MoeEpilogue::bf16, 512, 1024, counts, gaps, 0, 3}, 0, false), s + 2);
  run_case(tok({"k128_1cta", MoeEpilogue::bf16, 256, 128, {1, 0, 300, 49}, {}, 0, 1}, 0, false), s + 3);
  run_case(tok({"dit_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, uneven5, {}}, 0, true), s + 4);
  run_case(tok({"ds_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 2048, 4096, uneven4, {}}, 1, true), s + 5);
  run_case(tok({"gaps_2ctas", MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 2}, 0, true), s + 6);
  run_case(tok({"one_expert_3000_6ctas", MoeEpilogue::swiglu_fp8, 512, 768, {0, 3000}, {}, 0, 6}, 0, true), s + 7);
  run_case(tok({"one_token_x32", MoeEpilogue::swiglu_fp8, 256, 1024, std::vector<int>(32, 1), {}}, 0, true), s + 8);
}

// The ping-pong issue order (schedule 2) of the W4A8 kernels: the three tile shapes, few CTAs
// (the token wraps across tiles), gaps, one K block, an odd K-block count, both formats. Each
// problem runs with schedule 0 and 2 on the same inputs: both match the reference, and the
// outputs are bit-identical (the order only moves when a warp group issues, not the math).
// Seeds are those of the same problems in the tests above.
TEST(MoeGemmGpu, W4A8PingPong) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 70, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  for (MoeQuant q : {kInt4, kMx}) {
    const int s = 830 + 20 * int(q);
    auto both = [](Case c, uint64_t seed) {
      std::vector<uint8_t> s0, s2;
      c.schedule = 0;
      run_case(c, seed, &s0);
      c.name += "_pp";
      c.schedule = 2;
      run_case(c, seed, &s2);
      ASSERT_EQ(s0.size(), s2.size());
      size_t diff = 0;
      for (size_t i = 0; i < s0.size(); ++i) diff += s0[i] != s2[i];
      EXPECT_EQ(diff, 0u) << c.name << ": ping-pong output differs from schedule 0 in " << diff << " bytes";
    };
    both(w4({"gaps_3ctas_m192", MoeEpilogue::bf16, 512, 1024, counts, gaps, 192, 3}, q), s + 0);
    both(w4({"gaps_2ctas_m64", MoeEpilogue::bf16, 640, 1024, counts, gaps, 64, 2}, q), s + 1);
    both(w4({"gaps_1cta_swiglu", MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 1}, q), s + 2);
    both(w4({"k128_m192_1cta", MoeEpilogue::bf16, 256, 128, {100, 0, 250}, {}, 192, 1}, q), s + 7);
    both(w4({"k640_m192_2ctas", MoeEpilogue::bf16, 1408, 640, kUneven, {}, 192, 2}, q), s + 9);
    both(w4({"dit_l1_swiglu", MoeEpilogue::swiglu_fp8, 2 * 5632, 1408, kUneven, {}}, q), 803 + int(q));
  }
}
// Who converts which units (XSTAGE_W4A8_CONVERTER_UNITS, read by the launcher; the default
// split, none to the converter warps, and all of them where the consumers convert at all)
// must not change a bit: every split matches the reference and the default's output.
#ifdef XSTAGE_MOE_STUDY  // the override is a measurement-build switch (src/kernels/moe/study.hpp)
TEST(MoeGemmGpu, W4A8ConverterSplit) {
  XS_REQUIRE_GPUS(1);
  const std::vector<int> counts{3, 70, 0, 140};
  const std::vector<int> gaps{5, 0, 17, 3, 9};
  struct EnvGuard {
    ~EnvGuard() { unsetenv("XSTAGE_W4A8_CONVERTER_UNITS"); }
  } guard;
  for (MoeQuant q : {kInt4, kMx}) {
    const int s = 830 + 20 * int(q);
    auto splits = [](Case c, uint64_t seed) {
      std::vector<uint8_t> ref;
      unsetenv("XSTAGE_W4A8_CONVERTER_UNITS");
      run_case(c, seed, &ref);
      for (const char* units : {"0", "11"}) {
        std::vector<uint8_t> out;
        setenv("XSTAGE_W4A8_CONVERTER_UNITS", units, 1);
        Case cu = c;
        cu.name += std::string("_units") + units;
        run_case(cu, seed, &out);
        ASSERT_EQ(ref.size(), out.size());
        size_t diff = 0;
        for (size_t i = 0; i < ref.size(); ++i) diff += ref[i] != out[i];
        EXPECT_EQ(diff, 0u) << cu.name << ": output differs from the default split in " << diff << " bytes";
      }
      unsetenv("XSTAGE_W4A8_CONVERTER_UNITS");
    };
    splits(w4({"gaps_3ctas_m192", MoeEpilogue::bf16, 512, 1024, counts, gaps, 192, 3}, q), s + 0);
    splits(w4({"gaps_2ctas_m64", MoeEpilogue::bf16, 640, 1024, counts, gaps, 64, 2}, q), s + 1);
    splits(w4({"gaps_1cta_swiglu", MoeEpilogue::swiglu_fp8, 512, 1024, counts, gaps, 0, 1}, q), s + 2);
  }
}
#endif
// mxfp4 exponent gaps 0..20 inside a 128-K block dominate the result: every conversion shift
// and the flush past a gap of 14 are checked against dequantize_mxfp4_w4a8.
TEST(MoeGemmGpu, W4A8Mxfp4ExponentGaps) {
  XS_REQUIRE_GPUS(1);
  run_case(w4({"gap_m192", MoeEpilogue::bf16, 512, 1024, kUneven, {}, 192}, kMx, 1), 901);
  run_case(w4({"gap_m64", MoeEpilogue::bf16, 512, 1024, kUneven, {}, 64}, kMx, 1), 902);
  run_case(w4({"gap_swiglu", MoeEpilogue::swiglu_fp8, 1024, 1024, kUneven, {}}, kMx, 1), 903);
}

// m_total = 0: nothing is launched (a stream capture of the call records no node) and the
// poisoned output, with bytes enough for the shape's first rows, keeps every poison byte.
TEST(MoeGemmGpu, NoRowsLaunchesNothing) {
  XS_REQUIRE_GPUS(1);
  ops::MoeGemmArgs a;
  a.experts = 4;
  a.m_total = 0;
  a.n = 256;
  a.k = 256;
  const size_t out_bytes = size_t(64) * a.n * 2;  // 64 bf16 rows: what a stray launch would write first
  DeviceBuf buf(1 << 20), out(out_bytes), counts(sizeof(int) * a.experts);
  XS_CUDA(cudaMemset(buf.p, 0, 1 << 20), "inputs");
  XS_CUDA(cudaMemset(counts.p, 0, sizeof(int) * a.experts), "counts");
  XS_CUDA(cudaMemset(out.p, 0xFF, out_bytes), "poisoning the output");
  XS_CUDA(cudaDeviceSynchronize(), "setup");
  a.a = a.b = buf.p;
  a.out = out.p;
  a.a_scales = a.b_scales = buf.as<float>();
  a.counts = a.offsets = counts.as<int>();
  cudaStream_t s = nullptr;
  XS_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (MoeQuant q : {MoeQuant::w8a8, MoeQuant::w4a8_mxfp4}) {
    a.quant = q;
    a.b_e8m0 = q == MoeQuant::w4a8_mxfp4 ? buf.as<uint8_t>() : nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    EXPECT_NO_THROW(ops::moe_gemm(a, s)) << ops::moe_quant_name(q);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess) << ops::moe_quant_name(q);
    size_t nodes = 0;
    EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
    EXPECT_EQ(nodes, 0u) << ops::moe_quant_name(q) << ": m_total 0 launched something";
    cudaGraphDestroy(graph);
    // And outside a capture: nothing reaches the output.
    EXPECT_NO_THROW(ops::moe_gemm(a, s)) << ops::moe_quant_name(q);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(s);
  std::vector<uint8_t> o(out_bytes);
  XS_CUDA(cudaMemcpy(o.data(), out.p, out_bytes, cudaMemcpyDeviceToHost), "output to host");
  size_t touched = 0;
  for (uint8_t b : o) touched += b != 0xFF;
  EXPECT_EQ(touched, 0u) << "m_total 0 wrote into the output";
}

}  // namespace
}  // namespace xstage::gputest
#endif  // XSTAGE_HAVE_MOE
