// `xstage bench moe-gemm`: TFLOP/s of the MoE grouped-GEMM kernels for the expert shapes of
// the Mega-MoE models (docs/MOE.md in the shared docs) at several tokens per expert: Linear-1
// (gate/up fused, SwiGLU + fp8 requantisation epilogue, and the plain bf16 form) and Linear-2
// (bf16 epilogue), for W8A8 and the W4A8 weight formats (--weights; the formats of one cell
// run back to back, so python/compare_moe_w4a8.py can set W4A8 against W8A8). Balanced routing: every benchmarked expert gets the same token count. Timed
// with CUDA events (warm-up, then the median of >= 20 individually timed launches, inputs
// rotating over enough buffer sets to exceed 2 x L2; a large memset queued first keeps the GPU
// busy while the host enqueues). JSON schema xstage.bench.moe_gemm.v1, the shape that
// python/bench_moe_gemm_torch.py writes for cuBLASLt, so python/compare_moe_gemm.py can put
// the two side by side.
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

#include "cli/bench_util.hpp"
#include "cli/commands.hpp"
#include "cli/run_stamp.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/moe_gemm.hpp"
#include "xstage/ops/moe_quant.hpp"
#include "xstage/ops/moe_quant4.hpp"

namespace xstage::cli {
namespace {

struct Model {
  const char* name;
  int hidden;
  int intermediate;
  int experts;
};

// docs/MOE.md (shared): hidden / routed-expert intermediate / routed experts.
const Model kModels[] = {
    {"DiT-MoE-G", 1408, 5632, 16},        {"Qwen3.5-397B-A17B", 4096, 1024, 512}, {"Hy3", 4096, 1536, 192},
    {"MiMo-V2.5", 4096, 2048, 256},       {"GLM-5.2", 6144, 2048, 256},          {"DSv4-Flash", 4096, 2048, 256},
    {"DSv4-Pro", 7168, 3072, 384},
};

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
  // w8a8, w4a8-int4, w4a8-int4-rs, w4a8-int4-lut-rs, w4a8-int4-lut-rs-tok[-glu], w4a8-mxfp4, w4a8-mxfp4-rs[-tok[-glu]]
  std::vector<std::string> weights{"w8a8"};
  std::string json_out;
  bool plan = false;  // print the planned kernels and exit (no GPU needed)
};

// "2x1" -> {2, 1}; "planned" -> {0, 0}.
std::pair<int, int> parse_cluster(const std::string& c) {
  if (c == "planned") return {0, 0};
  if (c.size() == 3 && c[1] == 'x' && (c[0] == '1' || c[0] == '2') && (c[2] == '1' || c[2] == '2'))
    return {c[0] - '0', c[2] - '0'};
  throw InvalidArgument("bench moe-gemm: --cluster takes planned, 1x1, 2x1, 1x2 or 2x2; got '" + c + "'");
}

// A weight format and its layout in memory (w4a8-int4-rs / w4a8-mxfp4-rs: prepacked for the
// register-operand kernels).
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
  if (w == "w4a8-int4-rs") return {ops::MoeQuant::w4a8_int4, L::int4_rs, "w4a8_int4_rs"};
  if (w == "w4a8-int4-lut-rs") return {ops::MoeQuant::w4a8_int4, L::int4_rs_lut, "w4a8_int4_lut_rs"};
  if (w == "w4a8-int4-lut-rs-tok")
    return {ops::MoeQuant::w4a8_int4, L::int4_rs_lut, "w4a8_int4_lut_rs_tok", ops::MoeActScales::per_token};
  if (w == "w4a8-int4-lut-rs-tok-glu")  // Linear-1 (l1_swiglu) only: gate/up-interleaved rows
    return {ops::MoeQuant::w4a8_int4, L::int4_rs_lut_glu, "w4a8_int4_lut_rs_tok_glu", ops::MoeActScales::per_token};
  if (w == "w4a8-mxfp4") return {ops::MoeQuant::w4a8_mxfp4, L::rows, "w4a8_mxfp4"};
  if (w == "w4a8-mxfp4-rs") return {ops::MoeQuant::w4a8_mxfp4, L::mxfp4_rs, "w4a8_mxfp4_rs"};
  if (w == "w4a8-mxfp4-rs-tok")
    return {ops::MoeQuant::w4a8_mxfp4, L::mxfp4_rs, "w4a8_mxfp4_rs_tok", ops::MoeActScales::per_token};
  if (w == "w4a8-mxfp4-rs-tok-glu")  // Linear-1 (l1_swiglu) only: gate/up-interleaved rows
    return {ops::MoeQuant::w4a8_mxfp4, L::mxfp4_rs_glu, "w4a8_mxfp4_rs_tok_glu", ops::MoeActScales::per_token};
  throw InvalidArgument(
      "bench moe-gemm: --weights takes w8a8, w4a8-int4, w4a8-int4-rs, w4a8-int4-lut-rs, w4a8-int4-lut-rs-tok, w4a8-int4-lut-rs-tok-glu, "
      "w4a8-mxfp4, w4a8-mxfp4-rs, w4a8-mxfp4-rs-tok, w4a8-mxfp4-rs-tok-glu; "
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

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) {
    XS_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 16)), fmt::format("allocating {} bytes", bytes));
  }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

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
  double median_us, min_us, max_us, p10_us, p90_us, tflops, tflops_best;
  int iters, sets;
  unsigned long long nonfinite;
};

struct Patterns {
  std::vector<uint8_t> fp8, scales, e8m0;  // e8m0: exponents 120..130 (scales 2^-7 .. 2^3)
  // mxfp4_rs: whole prepacked 128 x 128 chunks (random codes, exponent gaps 0..3), so that
  // every tiling of it is valid prepacked weights; int4_rs_lut the same (codes and tables of
  // random weights through quantize_int4_lut).
  std::vector<uint8_t> mx_rs, lut_rs;
};

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
  // Sustained load first: under FP8 tensor work the H200 leaves its boost clock for the
  // power-capped one within ~0.1-0.3 s (nvidia-smi, run 42), so a short burst measures a
  // clock that no real layer loop sees. Both this bench and the cuBLASLt one do the same.
  const auto t_warm = std::chrono::steady_clock::now();
  for (int w = 0; std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_warm).count() <
                  fl.warmup_ms;) {
    for (int j = 0; j < 16; ++j, ++w) {
      set_args(w % sets);
      ops::moe_gemm(a, stream);
    }
    XS_CUDA(cudaStreamSynchronize(stream), "warming up");
  }
  std::vector<cudaEvent_t> ev(2 * fl.iters);
  for (auto& e : ev) XS_CUDA(cudaEventCreate(&e), "creating timing events");
  if (backlog.p != nullptr) XS_CUDA(cudaMemsetAsync(backlog.p, 0, backlog_bytes, stream), "queueing the backlog");
  for (int it = 0; it < fl.iters; ++it) {
    set_args(it % sets);
    XS_CUDA(cudaEventRecord(ev[2 * it], stream), "recording a start event");
    ops::moe_gemm(a, stream);
    XS_CUDA(cudaEventRecord(ev[2 * it + 1], stream), "recording a stop event");
  }
  XS_CUDA(cudaStreamSynchronize(stream),
          fmt::format("running moe gemm {} {} tokens/expert {}", md.name, pb.op, tokens));
  std::vector<double> us(fl.iters);
  for (int it = 0; it < fl.iters; ++it) {
    float ms = 0;
    XS_CUDA(cudaEventElapsedTime(&ms, ev[2 * it], ev[2 * it + 1]), "reading timing events");
    us[it] = ms * 1e3;
  }
  for (auto& e : ev) cudaEventDestroy(e);

  // #wrong: non-finite values in the last output (bf16) or its scales (fp8).
  unsigned long long bad = 0;
  const Set& last = bufs[(fl.iters - 1) % sets];
  if (!swiglu) {
    std::vector<uint16_t> host(out_bytes / 2);
    XS_CUDA(cudaMemcpy(host.data(), last.out->p, out_bytes, cudaMemcpyDeviceToHost), "reading the output");
    for (uint16_t x : host) bad += (x & 0x7F80u) == 0x7F80u;
  } else {
    std::vector<uint8_t> host(out_bytes);
    std::vector<float> sc(os_bytes / 4);
    XS_CUDA(cudaMemcpy(host.data(), last.out->p, out_bytes, cudaMemcpyDeviceToHost), "reading the output");
    XS_CUDA(cudaMemcpy(sc.data(), last.os->p, os_bytes, cudaMemcpyDeviceToHost), "reading the output scales");
    for (uint8_t x : host) bad += (x & 0x7Fu) == 0x7Fu;
    for (float f : sc) bad += !std::isfinite(f);
  }

  Result r;
  r.model = md.name;
  r.op = pb.op;
  r.weights = wt.name;
  const auto inst = ops::select_moe_instantiation(a);
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
  r.median_us = quantile(us, 0.5);
  r.min_us = *std::min_element(us.begin(), us.end());
  r.max_us = *std::max_element(us.begin(), us.end());
  r.p10_us = quantile(us, 0.1);
  r.p90_us = quantile(us, 0.9);
  const double flops = ops::moe_gemm_flops(a, m);
  r.tflops = flops / (r.median_us * 1e-6) / 1e12;
  r.tflops_best = flops / (r.min_us * 1e-6) / 1e12;
  r.iters = fl.iters;
  r.sets = sets;
  r.nonfinite = bad;
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
  for (const Model& m : kModels)
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

  int dev = 0;
  XS_CUDA(cudaGetDevice(&dev), "selecting the GPU");
  cudaDeviceProp prop{};
  XS_CUDA(cudaGetDeviceProperties(&prop, dev), "reading device properties");
  if (prop.major != 9 || prop.minor != 0)
    throw InvalidArgument(fmt::format("bench moe-gemm: needs an sm_90 (Hopper) GPU, found {} (sm_{}{})", prop.name,
                                      prop.major, prop.minor));
  const size_t rotate_bytes =
      fl.rotate_mib > 0 ? static_cast<size_t>(fl.rotate_mib * 1048576.0) : 2 * static_cast<size_t>(prop.l2CacheSize);
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
  std::printf("%s", fmt::format("#{:>17} {:>10} {:>10} {:>6} {:>4} {:>6} {:>6} {:>6} {:>28} {:>10} {:>9} {:>9} {:>6}\n",
                                "model", "op", "weights", "tokens", "E", "n", "k", "sets", "instantiation", "time(us)",
                                "TFLOP/s", "best", "#wrong")
                        .c_str());
  std::vector<Result> results;
  for (const Cell& c : cells) {
    Result r = bench_one(fl, c, rotate_bytes, pat, backlog, backlog_bytes, stream);
    results.push_back(r);
    std::printf("%s", fmt::format(" {:>17} {:>10} {:>10} {:>6} {:>4} {:>6} {:>6} {:>6} {:>28} {:>10.1f} {:>9.1f} "
                                  "{:>9.1f} {:>6}\n",
                                  r.model, r.op, r.weights, r.tokens, r.experts, r.n, r.k, r.sets,
                                  r.instantiation + "/s" + std::to_string(r.schedule), r.median_us, r.tflops,
                                  r.tflops_best, r.nonfinite)
                          .c_str());
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);

  if (!fl.json_out.empty()) {
    nlohmann::json j;
    j["schema"] = "xstage.bench.moe_gemm.v1";
    j["tool"] = "xstage";
    j["device"] = prop.name;
    j["sm_count"] = prop.multiProcessorCount;
    j["l2_bytes"] = prop.l2CacheSize;
    j["commit"] = commit_id();
    j["date"] = now_iso();
    j["config"] = {{"quant",
                    "a: fp8 e4m3 with 1x128 scales; b: w8a8 fp8 e4m3 with 128x128 scales, w4a8_int4 int4 with "
                    "1x128 fp32 scales, w4a8_mxfp4 e2m1 with 1x32 e8m0 scales (exponents 120..130)"},
                   {"routing", "balanced (every benchmarked expert gets `tokens`)"},
                   {"warmup", fl.warmup},
                   {"warmup_ms", fl.warmup_ms},
                   {"iters", fl.iters},
                   {"rotate_bytes", rotate_bytes},
                   {"num_ctas", fl.num_ctas},
                   {"flops", "2*experts*tokens*n*k"}};
    nlohmann::json rs = nlohmann::json::array();
    for (const Result& r : results)
      rs.push_back({{"backend", "xstage"},       {"model", r.model},
                    {"op", r.op},                {"weights", r.weights},
                    {"hidden", r.hidden},
                    {"intermediate", r.intermediate}, {"experts", r.experts},
                    {"tokens_per_expert", r.tokens}, {"m", r.m},
                    {"n", r.n},                  {"k", r.k},
                    {"instantiation", r.instantiation}, {"cluster", r.cluster}, {"schedule", r.schedule},
                    {"median_us", r.median_us},
                    {"min_us", r.min_us},        {"max_us", r.max_us},
                    {"p10_us", r.p10_us},        {"p90_us", r.p90_us},
                    {"tflops", r.tflops},        {"tflops_best", r.tflops_best},
                    {"iters", r.iters},          {"rotating_sets", r.sets},
                    {"nonfinite", r.nonfinite}});
    j["results"] = rs;
    write_json_file(j, fl.json_out);
  }
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
                  "Tile widths (weight rows per stage) to run, each a line (0: planned; 128, 192 or 256; w8a8 bf16 ships "
                  "64 x 256, 128 x 128, 128 x 192 (schedules 0 and 2) and 192 x 128, SwiGLU 64 x 256, 128 x 128 (two "
                  "passes) and 128 x 256 (schedules 0 and 2); unshipped ones skipped)")
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
                  "Weight formats to run, each cell back to back: w8a8, w4a8-int4, w4a8-int4-rs, w4a8-int4-lut-rs, "
                  "w4a8-int4-lut-rs-tok, w4a8-int4-lut-rs-tok-glu, w4a8-mxfp4, w4a8-mxfp4-rs, w4a8-mxfp4-rs-tok, "
                  "w4a8-mxfp4-rs-tok-glu (w4a8: 64 and 192-row "
                  "tiles, schedules 0 and 2 "
                  "(ping-pong); *-rs: prepacked for the register-operand kernels (128 x 128 and 256 x 128 bf16, "
                  "64 x 256 SwiGLU tiles); int4-lut: INT4 with e4m3 group scales folded into conversion tables and "
                  "fp32 channel scales; -tok: the same weights with per-token activation scales (one per token for "
                  "all K, so the INT4 two-level promotion per 128 K is a plain add and MXFP4's one FFMA with the "
                  "row's block scale; the others read per token per 128 channels; mxfp4-rs-tok: bf16 ops only); "
                  "-tok-glu: the same with gate/up-interleaved rows, l1_swiglu only (256 tokens x 64 channels "
                  "per tile in 1 x 2 clusters); "
                  "unshipped forced settings are skipped)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--num-ctas", fl->num_ctas, "Persistent grid size (0: one CTA per SM)")->capture_default_str();
  cmd->add_option("--json", fl->json_out, "Write results as JSON (xstage.bench.moe_gemm.v1)");
  cmd->add_flag("--plan", fl->plan,
                "Print the kernel each line would run (instantiation, cluster, schedule, stages, shared memory) and "
                "exit; needs no GPU (the grid is --num-ctas, else the GPU's SM count, else 132)");
  cmd->callback([fl] { run_bench(*fl); });
}

}  // namespace xstage::cli
