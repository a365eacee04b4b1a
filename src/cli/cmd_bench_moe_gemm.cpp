// `xstage bench moe-gemm`: TFLOP/s of the MoE grouped-GEMM kernels for the expert shapes of
// the Mega-MoE models (docs/MOE.md in the shared docs) at several tokens per expert: Linear-1
// (gate/up fused, SwiGLU + fp8 requantisation epilogue, and the plain bf16 form) and Linear-2
// (bf16 epilogue), for W8A8 and the W4A8 weight formats (--weights; the formats of one cell
// run back to back, so python/compare_moe_w4a8.py can set W4A8 against W8A8). Balanced routing: every benchmarked expert gets the same token count. Timed
// with CUDA events (warm-up, then the median of >= 20 individually timed launches, inputs
// rotating over enough buffer sets to exceed 2 x L2; a large memset queued first keeps the GPU
// busy while the host enqueues). JSON schema xstage.bench.moe_gemm.v1, the shape that
// python/bench_moe_gemm_torch.py writes for cuBLASLt, so python/compare_moe_gemm.py can put
// the two side by side. Every cell checks its output (cli/bench_check.hpp): the outputs (and
// SwiGLU's output scales) are poisoned with NaN before the timed launches; afterwards the last
// launch's output is scanned in full for non-finite values and --check-rows seeded rows (the
// first and last, rows on expert and tile borders) are compared with an fp64 host GEMM of the
// same quantised inputs, every weight format dequantised as the kernel reads it
// (cli/bench_moe_check.hpp); SwiGLU rows as tests/gpu/test_moe_gemm.cpp compares them (the
// dequantised fp8 output against the reference h requantised with the reference scale, and
// every output scale within 2e-3 of amax / 448). A cell out of tolerance is FAILED in the
// table and the JSON, and the command exits 1 after the whole sweep.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench_check.hpp"
#include "cli/bench_moe_check.hpp"
#include "cli/bench_timing.hpp"
#include "cli/bench_util.hpp"
#include "cli/commands.hpp"
#include "cli/run_stamp.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/moe_routing.hpp"
#include "xstage/ops/moe_gemm.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"

namespace xstage::cli {
namespace {

// The models (and their order) are moe::model_shapes(): bench/moe-models.json. The bench uses
// hidden / routed-expert intermediate / routed experts.
using Model = moe::ModelShape;

struct BenchFlags {
  std::vector<int> tokens{16, 128, 1024, 8192};
  std::vector<std::string> models;  // empty: all
  std::vector<std::string> ops{"l1_swiglu", "l1_bf16", "l2_bf16"};
  int warmup = 5;
  double warmup_ms = 200;  // then keep launching until this much time has passed (power-capped clocks)
  int iters = 30;
  double rotate_mib = 0;         // 0: 2 x L2
  double expert_bytes_mib = 256;  // benchmark enough experts to move at least this much weight
  int num_ctas = 0;
  int block_m = 0;
  std::vector<int> block_ns{0};                  // bf16 tile widths to run (0: planned)
  std::vector<std::string> clusters{"planned"};  // planned, 1x1, 2x1, 1x2, 2x2
  std::vector<int> schedules{-1};                // consumer schedule override (-1: default)
  // w8a8, w4a8-int4, w4a8-int4-lut-rs, w4a8-int4-lut-rs-tok[-glu], w4a8-mxfp4, w4a8-mxfp4-rs-tok[-glu]
  std::vector<std::string> weights{"w8a8"};
  std::string json_out;
  bool plan = false;  // print the planned kernels and exit (no GPU needed)
  int check_rows = kDefaultCheckRows;  // output rows compared with the host reference per cell
  uint64_t check_seed = 20261203u;
};

// Tolerances of tests/gpu/test_moe_gemm.cpp, applied per checked row. bf16 epilogue: relative
// L2 error 1e-2 against the fp32 reference of the same quantised math; the largest element
// error of a row within 2e-2 of the row's largest reference value. SwiGLU + fp8: the
// dequantised output against the requantised reference h (relative L2 2e-2 per row: a few fp8
// roundings flip by one step where h sits on a rounding border; largest element error within
// 0.1 of the row's largest value, i.e. at most one fp8 step of the top binade, 32 / 448), and
// every output scale within 2e-3 of amax / 448 (the GPU test's bound).
constexpr RowTolerance kMoeBf16Tolerance{1e-2, 2e-2, 1e-6};
constexpr RowTolerance kMoeSwigluTolerance{2e-2, 0.1, 1e-6};
constexpr double kMoeScaleTolerance = 2e-3;

// "2x1" -> {2, 1}; "planned" -> {0, 0}.
std::pair<int, int> parse_cluster(const std::string& c) {
  if (c == "planned") return {0, 0};
  if (c.size() == 3 && c[1] == 'x' && (c[0] == '1' || c[0] == '2') && (c[2] == '1' || c[2] == '2'))
    return {c[0] - '0', c[2] - '0'};
  throw InvalidArgument("bench moe-gemm: --cluster takes planned, 1x1, 2x1, 1x2 or 2x2; got '" + c + "'");
}

// A weight format and its layout in memory (*-rs: prepacked for the register-operand kernels).
struct Weights {
  ops::MoeQuant quant;
  ops::MoeWeightLayout layout;
  std::string name;  // the JSON "weights" value
  ops::MoeActScales act = ops::MoeActScales::per_128;  // -tok: per-token activation scales
};

Weights parse_weights(const std::string& w) {
  using L = ops::MoeWeightLayout;
  if (w == "w8a8") return {ops::MoeQuant::w8a8, L::rows, "w8a8"};
  if (w == "w4a8-int4") return {ops::MoeQuant::w4a8_int4, L::rows, "w4a8_int4"};
  if (w == "w4a8-int4-lut-rs") return {ops::MoeQuant::w4a8_int4, L::int4_rs_lut, "w4a8_int4_lut_rs"};
  if (w == "w4a8-int4-lut-rs-tok")
    return {ops::MoeQuant::w4a8_int4, L::int4_rs_lut, "w4a8_int4_lut_rs_tok", ops::MoeActScales::per_token};
  if (w == "w4a8-int4-lut-rs-tok-glu")  // Linear-1 (l1_swiglu) only: gate/up-interleaved rows
    return {ops::MoeQuant::w4a8_int4, L::int4_rs_lut_glu, "w4a8_int4_lut_rs_tok_glu", ops::MoeActScales::per_token};
  if (w == "w4a8-mxfp4") return {ops::MoeQuant::w4a8_mxfp4, L::rows, "w4a8_mxfp4"};
  if (w == "w4a8-mxfp4-rs-tok")
    return {ops::MoeQuant::w4a8_mxfp4, L::mxfp4_rs, "w4a8_mxfp4_rs_tok", ops::MoeActScales::per_token};
  if (w == "w4a8-mxfp4-rs-tok-glu")  // Linear-1 (l1_swiglu) only: gate/up-interleaved rows
    return {ops::MoeQuant::w4a8_mxfp4, L::mxfp4_rs_glu, "w4a8_mxfp4_rs_tok_glu", ops::MoeActScales::per_token};
  throw InvalidArgument(
      "bench moe-gemm: --weights takes w8a8, w4a8-int4, w4a8-int4-lut-rs, w4a8-int4-lut-rs-tok, w4a8-int4-lut-rs-tok-glu, "
      "w4a8-mxfp4, w4a8-mxfp4-rs-tok, w4a8-mxfp4-rs-tok-glu; "
      "got '" + w + "'");
}

// Experts benchmarked: enough that the weights exceed `weight_bytes` (so they stream from
// HBM, as in a real layer), at most the model's count, and at most what keeps the activations
// under 4 GiB. python/bench_moe_gemm_torch.py does not need it (dense shapes).
int bench_experts(const Model& m, int tokens, double weight_bytes) {
  const double per_expert = 3.0 * m.intermediate * m.hidden;  // fp8 Linear-1 (2I x H) + Linear-2 (H x I)
  int e = static_cast<int>(std::ceil(weight_bytes / per_expert));
  e = std::max(1, std::min(e, m.experts));
  const double act = static_cast<double>(tokens) * (m.hidden + 2.0 * m.intermediate) * 2;
  while (e > 1 && e * act > 4.0 * (1ull << 30)) --e;
  return e;
}

constexpr size_t kPatternBytes = size_t(1) << 22;
constexpr size_t kPatternPad = 8192;

// Fills `bytes` of device memory by tiling a host pattern from a shifting start.
void upload_pattern(void* dst, size_t bytes, const std::vector<uint8_t>& pattern, size_t shift, cudaStream_t s) {
  shift = (shift * 16) % kPatternPad;  // keep 16-byte alignment of the source for fp32 patterns
  for (size_t off = 0; off < bytes; off += kPatternBytes) {
    const size_t n = std::min(kPatternBytes, bytes - off);
    XS_CUDA(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + off, pattern.data() + shift, n, cudaMemcpyHostToDevice, s),
            "uploading bench inputs");
  }
}

// Fills `bytes` (a whole number of prepacked chunks) by tiling whole chunks of `pattern`;
// buffer set `shift` starts at chunk (7 * shift) mod kMxRsChunks, so the sets differ.
constexpr int kMxRsChunks = 64;
void upload_chunks(void* dst, size_t bytes, const std::vector<uint8_t>& pattern, size_t shift, cudaStream_t s) {
  const size_t chunk = pattern.size() / kMxRsChunks;
  size_t start = (shift * 7 % kMxRsChunks) * chunk;
  for (size_t off = 0; off < bytes;) {
    const size_t n = std::min(pattern.size() - start, bytes - off);
    XS_CUDA(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + off, pattern.data() + start, n, cudaMemcpyHostToDevice, s),
            "uploading bench inputs");
    off += n;
    start = 0;
  }
}

struct Problem {
  std::string op;
  int n, k;
  ops::MoeEpilogue epilogue;
};

Problem problem(const Model& m, const std::string& op) {
  if (op == "l1_swiglu") return {op, 2 * m.intermediate, m.hidden, ops::MoeEpilogue::swiglu_fp8};
  if (op == "l1_bf16") return {op, 2 * m.intermediate, m.hidden, ops::MoeEpilogue::bf16};
  if (op == "l2_bf16") return {op, m.hidden, m.intermediate, ops::MoeEpilogue::bf16};
  throw InvalidArgument("bench moe-gemm: --ops takes l1_swiglu, l1_bf16, l2_bf16; got '" + op + "'");
}

// One line of the bench: a problem, a weight format and the forced tile settings.
struct Cell {
  const Model* md;
  Problem pb;
  Weights wt;
  int tokens;
  std::pair<int, int> cluster;  // {0, 0}: planned
  int schedule;                 // -1: default
  int block_n;                  // 0: planned
};

// A cell's call without its buffers: what the planner sees (balanced routing over the
// benchmarked experts).
ops::MoeGemmArgs cell_args(const BenchFlags& fl, const Cell& c) {
  ops::MoeGemmArgs a;
  a.quant = c.wt.quant;
  a.b_layout = c.wt.layout;
  a.a_scale_granularity = c.wt.act;
  a.epilogue = c.pb.epilogue;
  a.experts = bench_experts(*c.md, c.tokens, fl.expert_bytes_mib * 1048576.0);
  a.m_total = a.experts * c.tokens;
  a.n = c.pb.n;
  a.k = c.pb.k;
  a.tokens_per_expert_hint = c.tokens;
  a.block_m = fl.block_m;
  a.block_n = c.block_n;
  a.num_ctas = fl.num_ctas;
  a.cluster_m = c.cluster.first;
  a.cluster_n = c.cluster.second;
  a.schedule = c.schedule;
  return a;
}

struct Result {
  std::string model, op, weights, instantiation, cluster;
  int schedule;
  int hidden, intermediate, experts, tokens, m, n, k;
  TimingStats t;
  int iters, sets;
  unsigned long long nonfinite;
  CheckRecord check;
};

struct Patterns {
  std::vector<uint8_t> fp8, scales, e8m0;  // e8m0: exponents 120..130 (scales 2^-7 .. 2^3)
  // mxfp4_rs: whole prepacked 128 x 128 chunks (random codes, exponent gaps 0..3), so that
  // every tiling of it is valid prepacked weights; int4_rs_lut the same (codes and tables of
  // random weights through quantize_int4_lut).
  std::vector<uint8_t> mx_rs, lut_rs;
};

// Output rows to check: --check-rows of them, seeded per cell, always the first and the last
// row and, for the first, second, middle and last expert, the expert's first two rows, the rows
// on both sides of its first tile border (block_m) and its last two rows.
std::vector<size_t> moe_check_rows(const BenchFlags& fl, const Cell& c, int experts, int tokens, int block_m) {
  std::vector<size_t> must;
  const int bm = std::max(block_m, 1);
  for (int e : {0, 1, experts / 2, experts - 1})
    if (e >= 0 && e < experts)
      for (int t : {0, 1, bm - 1, bm, tokens - 2, tokens - 1})
        if (t >= 0 && t < tokens) must.push_back(size_t(e) * tokens + t);
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the cell's name: a seed per cell
  for (char ch : std::string(c.md->name) + "/" + c.pb.op + "/" + c.wt.name + "/" + std::to_string(tokens))
    h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return sample_rows(size_t(experts) * tokens, size_t(std::max(fl.check_rows, 2)), fl.check_seed ^ h, must);
}

// The output check of one cell, after its timed launches: `a` holds the device buffers of the
// checked (last) launch; balanced routing (expert e owns rows [e * tokens, (e + 1) * tokens)).
CheckRecord check_moe(const BenchFlags& fl, const Cell& cell, const ops::MoeGemmArgs& a, int block_m) {
  const int m = a.m_total, n = a.n, k = a.k, experts = a.experts, tokens = cell.tokens;
  const bool swiglu = a.epilogue == ops::MoeEpilogue::swiglu_fp8;
  const int out_cols = swiglu ? n / 2 : n;
  const RowTolerance tol = swiglu ? kMoeSwigluTolerance : kMoeBf16Tolerance;
  // The whole output (and SwiGLU's scales): the non-finite scan.
  std::vector<uint16_t> out16;
  std::vector<uint8_t> out8;
  std::vector<float> out_sc;
  unsigned long long nonfinite = 0;
  if (!swiglu) {
    out16.resize(size_t(m) * n);
    XS_CUDA(cudaMemcpy(out16.data(), a.out, out16.size() * 2, cudaMemcpyDeviceToHost), "reading the output");
    nonfinite = count_nonfinite_16(out16.data(), out16.size(), true);
  } else {
    out8.resize(size_t(m) * out_cols);
    out_sc.resize(size_t(out_cols / 128) * m);
    XS_CUDA(cudaMemcpy(out8.data(), a.out, out8.size(), cudaMemcpyDeviceToHost), "reading the output");
    XS_CUDA(cudaMemcpy(out_sc.data(), a.out_scales, out_sc.size() * 4, cudaMemcpyDeviceToHost),
            "reading the output scales");
    nonfinite = count_nonfinite_fp8(out8.data(), out8.size()) + count_nonfinite_f32(out_sc.data(), out_sc.size());
  }
  // The inputs of the checked rows and all weights.
  const std::vector<size_t> rows = moe_check_rows(fl, cell, experts, tokens, block_m);
  const bool per_token = a.a_scale_granularity == ops::MoeActScales::per_token;
  std::vector<float> sa(per_token ? size_t(m) : size_t(k / 128) * m), rw(swiglu ? m : 0);
  XS_CUDA(cudaMemcpy(sa.data(), a.a_scales, sa.size() * 4, cudaMemcpyDeviceToHost), "reading the activation scales");
  if (swiglu)
    XS_CUDA(cudaMemcpy(rw.data(), a.row_weights, rw.size() * 4, cudaMemcpyDeviceToHost), "reading the row weights");
  std::vector<uint8_t> b(size_t(ops::moe_weight_bytes(a.quant, a.b_layout, experts, n, k)));
  std::vector<uint8_t> bs(size_t(ops::moe_weight_scale_bytes(a.quant, a.b_layout, experts, n, k)));
  XS_CUDA(cudaMemcpy(b.data(), a.b, b.size(), cudaMemcpyDeviceToHost), "reading the weights");
  XS_CUDA(cudaMemcpy(bs.data(), a.b_e8m0 != nullptr ? static_cast<const void*>(a.b_e8m0) : a.b_scales, bs.size(),
                     cudaMemcpyDeviceToHost),
          "reading the weight scales");
  std::vector<float> arow(rows.size() * size_t(k));
  std::vector<uint8_t> q(k);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t r = rows[i];
    XS_CUDA(cudaMemcpy(q.data(), static_cast<const uint8_t*>(a.a) + r * k, k, cudaMemcpyDeviceToHost),
            "reading the activations");
    for (int c = 0; c < k; ++c)
      arow[i * k + c] = ops::fp8_e4m3_decode(q[c]) * (per_token ? sa[r] : sa[size_t(c / 128) * m + r]);
  }
  // Checked rows by expert.
  std::vector<std::vector<size_t>> by_expert(experts);
  for (size_t i = 0; i < rows.size(); ++i) by_expert[rows[i] / tokens].push_back(i);
  const size_t b_per_expert = b.size() / experts, s_per_expert = bs.size() / experts;
  // ref[i * n + j]: the fp64 GEMM of checked row i with logical weight row j, column blocks in parallel.
  std::vector<double> ref(rows.size() * size_t(n));
  constexpr int kColBlock = 32;
  parallel_for(size_t((n + kColBlock - 1) / kColBlock), [&](size_t blk) {
    std::vector<float> wrow(k);
    std::vector<uint8_t> scratch;
    for (int e = 0; e < experts; ++e) {
      if (by_expert[e].empty()) continue;
      MoeExpertWeights w;
      w.quant = a.quant;
      w.layout = a.b_layout;
      w.n = n;
      w.k = k;
      w.b = b.data() + e * b_per_expert;
      if (a.b_e8m0 != nullptr) w.e8m0 = bs.data() + e * s_per_expert;
      else w.scales = reinterpret_cast<const float*>(bs.data() + e * s_per_expert);
      for (int j = int(blk) * kColBlock; j < std::min(n, int(blk + 1) * kColBlock); ++j) {
        moe_weight_row(w, j, wrow.data(), scratch);
        for (size_t i : by_expert[e]) {
          const float* x = arow.data() + i * k;
          double acc = 0;
          for (int c = 0; c < k; ++c) acc += double(x[c]) * wrow[c];
          ref[i * n + j] = acc;
        }
      }
    }
  });
  RowChecker rc(tol);
  std::vector<float> got(out_cols), want(out_cols);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t r = rows[i];
    const double* rr = ref.data() + i * n;
    if (!swiglu) {
      for (int j = 0; j < n; ++j) got[j] = bf16_bits_to_float(out16[r * n + j]);
      rc.add_row(static_cast<long long>(r), got.data(), rr, n);
      continue;
    }
    // h = silu(gate) * up * row weight, requantised per 128 channels as the epilogue does.
    bool scale_ok = true;
    for (int jb = 0; jb < out_cols / 128; ++jb) {
      float h[128], amax = 0.f;
      for (int t = 0; t < 128; ++t) {
        const int j = jb * 128 + t;
        const double g = rr[j], u = rr[out_cols + j];
        h[t] = static_cast<float>(g / (1.0 + std::exp(-g)) * u * rw[r]);
        amax = std::max(amax, std::fabs(h[t]));
      }
      const ops::Fp8Scale rs = ops::fp8_scale_for_amax(amax);
      const float sc = out_sc[size_t(jb) * m + r];
      if (!(std::fabs(double(sc) - rs.scale) <= kMoeScaleTolerance * rs.scale)) scale_ok = false;
      for (int t = 0; t < 128; ++t) {
        const int j = jb * 128 + t;
        want[j] = ops::fp8_e4m3_decode(ops::fp8_e4m3_encode(h[t] * rs.inv)) * rs.scale;
        got[j] = ops::fp8_e4m3_decode(out8[r * out_cols + j]) * sc;
      }
    }
    rc.add_row(static_cast<long long>(r), got.data(), want.data(), out_cols);
    if (!scale_ok) rc.fail_row(static_cast<long long>(r));
  }
  return rc.finish(nonfinite, swiglu ? "fp64 host GEMM of the same quantised inputs (weights as the kernel reads them), "
                                       "silu(gate) * up * row weight requantised per 128 channels; seeded rows"
                                     : "fp64 host GEMM of the same quantised inputs (weights as the kernel reads "
                                       "them); seeded rows");
}

Result bench_one(const BenchFlags& fl, const Cell& cell, size_t rotate_bytes, const Patterns& pat,
                 const DeviceMem& backlog, size_t backlog_bytes, cudaStream_t stream) {
  const Model& md = *cell.md;
  const Problem& pb = cell.pb;
  const Weights& wt = cell.wt;
  const int tokens = cell.tokens;
  ops::MoeGemmArgs a = cell_args(fl, cell);
  const ops::MoeQuant quant = wt.quant;
  const int experts = a.experts;
  const int m = a.m_total;
  const bool swiglu = pb.epilogue == ops::MoeEpilogue::swiglu_fp8;
  const int out_cols = swiglu ? pb.n / 2 : pb.n;
  const size_t a_bytes = size_t(m) * pb.k, sa_bytes = 4 * size_t(pb.k / 128) * m;
  // The glu layouts: the same chunks (random rows, so interleaving them changes nothing measured).
  const bool mx_rs = ops::moe_layout_is_mxfp4_rs(wt.layout);
  const bool lut_rs = ops::moe_layout_is_int4_lut(wt.layout);
  const bool e8m0 = quant == ops::MoeQuant::w4a8_mxfp4 && !mx_rs;
  const size_t b_bytes = size_t(ops::moe_weight_bytes(quant, wt.layout, experts, pb.n, pb.k));
  const size_t sb_bytes = size_t(ops::moe_weight_scale_bytes(quant, wt.layout, experts, pb.n, pb.k));
  const size_t out_bytes = size_t(m) * out_cols * (swiglu ? 1 : 2), os_bytes = 4 * size_t(out_cols / 128) * m;
  const size_t set_bytes = a_bytes + sa_bytes + b_bytes + sb_bytes + out_bytes + os_bytes;
  const int sets = static_cast<int>(std::max<size_t>(1, (rotate_bytes + set_bytes - 1) / set_bytes));

  struct Set {
    std::unique_ptr<DeviceMem> a, sa, b, sb, out, os;
  };
  std::vector<Set> bufs(sets);
  for (int i = 0; i < sets; ++i) {
    Set& s = bufs[i];
    s.a = std::make_unique<DeviceMem>(a_bytes);
    s.sa = std::make_unique<DeviceMem>(sa_bytes);
    s.b = std::make_unique<DeviceMem>(b_bytes);
    s.sb = std::make_unique<DeviceMem>(sb_bytes);
    s.out = std::make_unique<DeviceMem>(out_bytes);
    s.os = std::make_unique<DeviceMem>(os_bytes);
    upload_pattern(s.a->p, a_bytes, pat.fp8, 3 * i + 1, stream);
    if (mx_rs) upload_chunks(s.b->p, b_bytes, pat.mx_rs, i, stream);
    else if (lut_rs) upload_chunks(s.b->p, b_bytes, pat.lut_rs, i, stream);
    else upload_pattern(s.b->p, b_bytes, pat.fp8, 3 * i + 2, stream);
    upload_pattern(s.sa->p, sa_bytes, pat.scales, 3 * i + 3, stream);
    upload_pattern(s.sb->p, sb_bytes, e8m0 ? pat.e8m0 : pat.scales, 3 * i + 4, stream);
  }
  std::vector<int> counts(experts, tokens), offsets(experts);
  for (int e = 0; e < experts; ++e) offsets[e] = e * tokens;
  DeviceMem d_counts(4 * experts), d_offsets(4 * experts), d_weights(4 * size_t(m));
  XS_CUDA(cudaMemcpyAsync(d_counts.p, counts.data(), 4 * experts, cudaMemcpyHostToDevice, stream), "counts");
  XS_CUDA(cudaMemcpyAsync(d_offsets.p, offsets.data(), 4 * experts, cudaMemcpyHostToDevice, stream), "offsets");
  upload_pattern(d_weights.p, 4 * size_t(m), pat.scales, 7, stream);  // any positive weights

  a.counts = static_cast<const int*>(d_counts.p);
  a.offsets = static_cast<const int*>(d_offsets.p);
  a.row_weights = swiglu ? static_cast<const float*>(d_weights.p) : nullptr;
  a.host_counts = counts.data();
  a.host_offsets = offsets.data();
  auto set_args = [&](int i) {
    a.a = bufs[i].a->p;
    a.a_scales = static_cast<const float*>(bufs[i].sa->p);
    a.b = bufs[i].b->p;
    a.b_scales = e8m0 ? nullptr : static_cast<const float*>(bufs[i].sb->p);
    a.b_e8m0 = e8m0 ? static_cast<const uint8_t*>(bufs[i].sb->p) : nullptr;
    a.out = bufs[i].out->p;
    a.out_scales = swiglu ? static_cast<float*>(bufs[i].os->p) : nullptr;
  };
  for (int w = 0; w < fl.warmup; ++w) {
    set_args(w % sets);
    ops::moe_gemm(a, stream);
  }
  // Sustained load first (both this bench and the cuBLASLt one do the same).
  sustain_clock(
      fl.warmup_ms, 0,
      [&](int w) {
        set_args(w % sets);
        ops::moe_gemm(a, stream);
      },
      [&] { XS_CUDA(cudaStreamSynchronize(stream), "warming up"); });
  // Poison every output (NaN) before the timed launches: what they leave unwritten stays NaN.
  for (int i = 0; i < sets; ++i) {
    XS_CUDA(cudaMemsetAsync(bufs[i].out->p, kPoisonByte, out_bytes, stream), "poisoning the outputs");
    if (swiglu) XS_CUDA(cudaMemsetAsync(bufs[i].os->p, kPoisonByte, os_bytes, stream), "poisoning the output scales");
  }
  const std::vector<double> us = timed_launches(
      fl.iters, stream, backlog, backlog_bytes, [&](int it) { set_args(it % sets); }, [&] { ops::moe_gemm(a, stream); },
      fmt::format("running moe gemm {} {} tokens/expert {}", md.name, pb.op, tokens));

  // The output check, after the timed launches: the last launch's output and inputs.
  set_args((fl.iters - 1) % sets);
  const auto inst = ops::select_moe_instantiation(a);
  CheckRecord check = check_moe(fl, cell, a, inst.block_m);

  Result r;
  r.model = md.name;
  r.op = pb.op;
  r.weights = wt.name;
  r.instantiation = inst.name;
  r.cluster = std::to_string(inst.cluster_m) + "x" + std::to_string(inst.cluster_n);
  r.schedule = inst.schedule;
  r.hidden = md.hidden;
  r.intermediate = md.intermediate;
  r.experts = experts;
  r.tokens = tokens;
  r.m = m;
  r.n = pb.n;
  r.k = pb.k;
  r.t = TimingStats::of(us, ops::moe_gemm_flops(a, m));
  r.iters = fl.iters;
  r.sets = sets;
  r.nonfinite = check.nonfinite;
  r.check = std::move(check);
  return r;
}

Patterns make_patterns() {
  Patterns p;
  std::mt19937 rng(20261130u);
  std::uniform_real_distribution<float> u(-1.f, 1.f), s(0.5f / 448.f, 1.5f / 448.f);
  p.fp8.resize(kPatternBytes + kPatternPad);
  for (auto& b : p.fp8) b = ops::fp8_e4m3_encode(448.f * u(rng));
  p.scales.resize(kPatternBytes + kPatternPad);
  for (size_t i = 0; i + 4 <= p.scales.size(); i += 4) {
    const float f = s(rng);
    std::memcpy(p.scales.data() + i, &f, 4);
  }
  p.e8m0.resize(kPatternBytes + kPatternPad);
  for (auto& b : p.e8m0) b = static_cast<uint8_t>(120 + rng() % 11);
  // 128 x (128 * kMxRsChunks) MXFP4 weights through the real prepacking.
  constexpr int kCols = 128 * kMxRsChunks;
  std::vector<uint8_t> packed(size_t(128) * kCols / 2), ex(size_t(kCols / 32) * 128);
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  for (auto& b : ex) b = static_cast<uint8_t>(124 + rng() % 4);
  std::vector<float> block_scales(size_t(kCols / 128) * 128);
  p.mx_rs.resize(size_t(ops::prepacked_mxfp4_rs_bytes(128, kCols)));
  ops::prepack_mxfp4_rs(packed.data(), ex.data(), 128, kCols, p.mx_rs.data(), block_scales.data());
  // The same number of INT4 two-level chunks, from random weights whose rows and groups differ
  // in magnitude (group scales over ~3 binades).
  std::vector<float> w(size_t(128) * kCols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = u(rng) * std::ldexp(1.f, -int((i / 128) % 4));
  std::vector<uint8_t> gs(size_t(kCols / 128) * 128);
  std::vector<float> cs(128);
  ops::quantize_int4_lut(w.data(), 128, kCols, packed.data(), gs.data(), cs.data());
  p.lut_rs.resize(size_t(ops::prepacked_int4_lut_rs_bytes(128, kCols)));
  ops::prepack_int4_lut_rs(packed.data(), gs.data(), 128, kCols, p.lut_rs.data());
  return p;
}

// The flags' Cartesian product, without the cells whose forced cluster, tile or schedule no
// kernel ships for that op and weight format.
std::vector<Cell> bench_cells(const BenchFlags& fl, const std::vector<const Model*>& models,
                              const std::vector<Weights>& weights) {
  std::vector<Cell> cells;
  for (const Model* md : models)
    for (const auto& op : fl.ops)
      for (int t : fl.tokens)
        for (const auto& cs : fl.clusters)
          for (int sch : fl.schedules)
            for (int bn : fl.block_ns)
              for (const Weights& wt : weights) {
                const Cell c{md, problem(*md, op), wt, t, parse_cluster(cs), sch, bn};
                if (sch >= 0 && !ops::moe_schedule_shipped(wt.quant, wt.layout, sch)) continue;
                try {
                  ops::select_moe_instantiation(cell_args(fl, c));
                } catch (const InvalidArgument&) {
                  continue;
                }
                cells.push_back(c);
              }
  return cells;
}

// --plan: the kernel each cell would run, without a GPU (grid: --num-ctas, else the GPU's SM
// count, else 132).
void print_plan(const BenchFlags& fl, const std::vector<Cell>& cells) {
  std::printf("# xstage bench moe-gemm --plan: planned kernels, nothing launched\n");
  std::printf("%s", fmt::format("#{:>17} {:>10} {:>13} {:>6} {:>4} {:>6} {:>6} {:>28} {:>7} {:>8} {:>6} {:>8}\n", "model",
                                "op", "weights", "tokens", "E", "n", "k", "instantiation", "cluster", "schedule",
                                "stages", "smem")
                        .c_str());
  for (const Cell& c : cells) {
    const ops::MoeGemmArgs a = cell_args(fl, c);
    const auto inst = ops::select_moe_instantiation(a);
    std::printf("%s", fmt::format(" {:>17} {:>10} {:>13} {:>6} {:>4} {:>6} {:>6} {:>28} {:>7} {:>8} {:>6} {:>8}\n",
                                  c.md->name, c.pb.op, c.wt.name, c.tokens, a.experts, a.n, a.k, inst.name,
                                  fmt::format("{}x{}", inst.cluster_m, inst.cluster_n), inst.schedule, inst.stages,
                                  inst.smem_bytes)
                          .c_str());
  }
}

void run_bench(const BenchFlags& fl) {
  if (fl.iters < 20) throw InvalidArgument(fmt::format("bench moe-gemm: --iters {} must be >= 20", fl.iters));
  if (fl.warmup < 0) throw InvalidArgument("bench moe-gemm: --warmup must be >= 0");
  if (fl.check_rows < 2) throw InvalidArgument("bench moe-gemm: --check-rows must be >= 2");
  if (!(fl.warmup_ms >= 0 && fl.warmup_ms <= 60000))
    throw InvalidArgument("bench moe-gemm: --warmup-ms must be in [0, 60000]");
  for (int t : fl.tokens)
    if (t < 1) throw InvalidArgument(fmt::format("bench moe-gemm: tokens per expert {} must be >= 1", t));
  if (fl.block_m != 0 && fl.block_m != 64 && fl.block_m != 128 && fl.block_m != 192 && fl.block_m != 256)
    throw InvalidArgument(fmt::format("bench moe-gemm: --block-m {} must be 0, 64, 128, 192 or 256", fl.block_m));
  if (fl.block_ns.empty()) throw InvalidArgument("bench moe-gemm: --block-n is empty");
  for (int bn : fl.block_ns)
    if (bn != 0 && bn != 128 && bn != 192 && bn != 256)
      throw InvalidArgument(fmt::format("bench moe-gemm: --block-n {} must be 0, 128, 192 or 256", bn));
  std::vector<const Model*> models;
  for (const Model& m : moe::model_shapes())
    if (fl.models.empty() || std::find(fl.models.begin(), fl.models.end(), m.name) != fl.models.end())
      models.push_back(&m);
  if (models.empty()) throw InvalidArgument("bench moe-gemm: --models matched none of the seven models");
  for (const auto& op : fl.ops) problem(*models.front(), op);  // throws for unknown ops
  for (const auto& c : fl.clusters) parse_cluster(c);
  std::vector<Weights> weights;
  for (const auto& w : fl.weights) weights.push_back(parse_weights(w));
  if (weights.empty()) throw InvalidArgument("bench moe-gemm: --weights is empty");
  for (int sch : fl.schedules)
    if (sch < -1 || sch > 3) throw InvalidArgument(fmt::format("bench moe-gemm: --schedule {} must be -1..3", sch));
  const std::vector<Cell> cells = bench_cells(fl, models, weights);
  if (fl.plan) {
    print_plan(fl, cells);
    return;
  }

  const cudaDeviceProp prop = hopper_device("moe-gemm");
  const size_t rotate_bytes = rotate_bytes_for(fl.rotate_mib, prop);
  cudaStream_t stream = nullptr;
  XS_CUDA(cudaStreamCreate(&stream), "creating the bench stream");
  const Patterns pat = make_patterns();
  size_t free_b = 0, total_b = 0;
  XS_CUDA(cudaMemGetInfo(&free_b, &total_b), "reading free device memory");
  const size_t backlog_bytes = std::min<size_t>(size_t(2) << 30, free_b / 16);
  DeviceMem backlog(backlog_bytes);

  std::printf("# xstage bench moe-gemm on %s (%d SMs, L2 %.0f MiB), fp8 e4m3 activations, balanced routing, median of %d "
              "runs after %d warm-up launches and %.0f ms of warm-up, inputs rotate over >= %.0f MiB\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, fl.iters, fl.warmup, fl.warmup_ms,
              rotate_bytes / 1048576.0);
  std::printf("# check: %d seeded rows per cell vs an fp64 host GEMM of the same quantised inputs (per row: bf16 rel "
              "L2 <= %g, max abs <= %g x max|ref|; SwiGLU rel L2 <= %g, max abs <= %g x max|ref|, scales within %g), "
              "full non-finite scan of the NaN-poisoned output; #wrong = rows out of tolerance\n",
              fl.check_rows, kMoeBf16Tolerance.rel_tol, kMoeBf16Tolerance.max_abs_rel, kMoeSwigluTolerance.rel_tol,
              kMoeSwigluTolerance.max_abs_rel, kMoeScaleTolerance);
  std::printf("%s", fmt::format("#{:>17} {:>10} {:>10} {:>6} {:>4} {:>6} {:>6} {:>6} {:>28} {:>10} {:>9} {:>9} {:>6} "
                                "{:>6} {:>9} {:>6}\n",
                                "model", "op", "weights", "tokens", "E", "n", "k", "sets", "instantiation", "time(us)",
                                "TFLOP/s", "best", "#wrong", "nonfin", "rel_err", "check")
                        .c_str());
  std::vector<Result> results;
  for (const Cell& c : cells) {
    Result r = bench_one(fl, c, rotate_bytes, pat, backlog, backlog_bytes, stream);
    results.push_back(r);
    std::printf("%s", fmt::format(" {:>17} {:>10} {:>10} {:>6} {:>4} {:>6} {:>6} {:>6} {:>28} {:>10.1f} {:>9.1f} "
                                  "{:>9.1f} {:>6} {:>6} {:>9.2e} {:>6}\n",
                                  r.model, r.op, r.weights, r.tokens, r.experts, r.n, r.k, r.sets,
                                  r.instantiation + "/s" + std::to_string(r.schedule), r.t.median_us, r.t.tflops,
                                  r.t.tflops_best, r.check.rows_failed, r.nonfinite, r.check.rel_err, r.check.verdict())
                          .c_str());
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  int failed = 0;
  for (const Result& r : results) failed += !r.check.passed;
  std::printf("# correctness: %s\n", correctness_summary(failed, results.size()).c_str());

  nlohmann::json j, rs = nlohmann::json::array();
  if (!fl.json_out.empty()) {
    j = bench_json_header("xstage.bench.moe_gemm.v1", prop);
    j["config"] = {{"quant",
                    "a: fp8 e4m3 with 1x128 scales; b: w8a8 fp8 e4m3 with 128x128 scales, w4a8_int4 int4 with "
                    "1x128 fp32 scales, w4a8_mxfp4 e2m1 with 1x32 e8m0 scales (exponents 120..130)"},
                   {"routing", "balanced (every benchmarked expert gets `tokens`)"},
                   {"warmup", fl.warmup},
                   {"warmup_ms", fl.warmup_ms},
                   {"iters", fl.iters},
                   {"rotate_bytes", rotate_bytes},
                   {"num_ctas", fl.num_ctas},
                   {"flops", "2*experts*tokens*n*k"},
                   {"check_rows", fl.check_rows}, {"check_seed", fl.check_seed},
                   {"check", "outputs NaN-poisoned before the timed launches; the last launch's output: full "
                             "non-finite scan and seeded rows vs an fp64 host GEMM of the same quantised inputs, "
                             "per-row tolerances"}};
    for (const Result& r : results) {
      nlohmann::json rec = {{"backend", "xstage"},       {"model", r.model},
                    {"op", r.op},                {"weights", r.weights},
                    {"hidden", r.hidden},
                    {"intermediate", r.intermediate}, {"experts", r.experts},
                    {"tokens_per_expert", r.tokens}, {"m", r.m},
                    {"n", r.n},                  {"k", r.k},
                    {"instantiation", r.instantiation}, {"cluster", r.cluster}, {"schedule", r.schedule},
                    {"iters", r.iters},          {"rotating_sets", r.sets},
                    {"nonfinite", r.nonfinite},
                    {"check", r.check.verdict()},
                    {"correctness", r.check.to_json()}};
      r.t.put(rec);
      rs.push_back(std::move(rec));
    }
  }
  finish_bench(j, std::move(rs), failed, results.size(), fl.json_out, "moe-gemm");
}

}  // namespace

void add_moe_gemm_bench_command(CLI::App& app) {
  auto fl = std::make_shared<BenchFlags>();
  auto* cmd = bench_group(app)->add_subcommand(  // the `bench` group shared with the other benchmarks
      "moe-gemm",
      "TFLOP/s of the MoE grouped GEMM (W8A8, W4A8) for the expert shapes of the seven Mega-MoE models,\n"
      "Linear-1 (n = 2 x intermediate, k = hidden; SwiGLU+fp8 or bf16 epilogue) and Linear-2 (n = hidden,\n"
      "k = intermediate), one line per (model, op, tokens per expert). TFLOP/s = 2*E*tokens*n*k / median.\n"
      "Compare with cuBLASLt: python/bench_moe_gemm_torch.py and python/compare_moe_gemm.py.");
  cmd->add_option("--tokens,-t", fl->tokens, "Tokens per expert")->delimiter(',')->capture_default_str();
  cmd->add_option("--models", fl->models, "Model names (default: all seven)")->delimiter(',');
  cmd->add_option("--ops", fl->ops, "l1_swiglu, l1_bf16, l2_bf16")->delimiter(',')->capture_default_str();
  cmd->add_option("--warmup", fl->warmup, "Untimed launches first")->capture_default_str();
  cmd->add_option("--warmup-ms", fl->warmup_ms,
                  "Then untimed launches until this many ms have passed, so the timed runs see the sustained "
                  "(power-capped) clock, not the boost clock of a short burst (0: off)")
      ->capture_default_str();
  cmd->add_option("--iters", fl->iters, "Timed launches (>= 20; the median is reported)")->capture_default_str();
  cmd->add_option("--rotate-mib", fl->rotate_mib, "Rotate inputs over at least this much memory (0: 2 x L2)")
      ->capture_default_str();
  cmd->add_option("--expert-mib", fl->expert_bytes_mib,
                  "Benchmark enough experts for this much fp8 weight (at most the model's count)")
      ->capture_default_str();
  cmd->add_option("--block-m", fl->block_m,
                  "Force the tile height (0: planned from tokens per expert; ops whose kernels lack it are skipped: "
                  "SwiGLU ships 64 and 128)")
      ->capture_default_str();
  cmd->add_option("--block-n", fl->block_ns,
                  "Tile widths (weight rows per stage) to run, each a line (0: planned; 128, 192 or 256: the planner "
                  "picks among the shipped kernels of that width, src/kernels/moe/configs.def; unshipped ones "
                  "skipped)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--cluster", fl->clusters, "Cluster shapes to run: planned, 1x1, 2x1, 1x2, 2x2 (unshipped ones skipped)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--schedule", fl->schedules,
                  "Consumer schedules to run (-1: default; bit 0: overlap next K block, bit 1: ping-pong)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--weights", fl->weights,
                  "Weight formats to run, each cell back to back: w8a8, w4a8-int4, w4a8-int4-lut-rs, "
                  "w4a8-int4-lut-rs-tok, w4a8-int4-lut-rs-tok-glu, w4a8-mxfp4, w4a8-mxfp4-rs-tok, "
                  "w4a8-mxfp4-rs-tok-glu (w4a8: rows converted in shared memory, 64 and 192-row "
                  "tiles, schedules 0 and 2 "
                  "(ping-pong); *-rs: prepacked for the register-operand kernels; int4-lut: INT4 with e4m3 group scales folded into conversion tables and "
                  "fp32 channel scales; -tok: the same weights with per-token activation scales (one per token for "
                  "all K, so the INT4 two-level promotion per 128 K is a plain add and MXFP4's one FFMA with the "
                  "row's block scale; the others read per token per 128 channels; mxfp4-rs-tok: bf16 ops only); "
                  "-tok-glu: the same with gate/up-interleaved rows, l1_swiglu only (256 tokens x 64 channels "
                  "per tile in 1 x 2 clusters); "
                  "unshipped forced settings are skipped)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--num-ctas", fl->num_ctas, "Persistent grid size (0: one CTA per SM)")->capture_default_str();
  cmd->add_option("--check-rows", fl->check_rows,
                  "Output rows per cell compared with the fp64 host reference (seeded; always the first and last "
                  "row and rows on expert and tile borders)")
      ->capture_default_str();
  cmd->add_option("--check-seed", fl->check_seed, "Seed of the checked rows")->capture_default_str();
  cmd->add_option("--json", fl->json_out, "Write results as JSON (xstage.bench.moe_gemm.v1)");
  cmd->add_flag("--plan", fl->plan,
                "Print the kernel each line would run (instantiation, cluster, schedule, stages, shared memory) and "
                "exit; needs no GPU (the grid is --num-ctas, else the GPU's SM count, else 132)");
  cmd->callback([fl] { run_bench(*fl); });
}

}  // namespace xstage::cli
