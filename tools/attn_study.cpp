// attn_study: times the bf16 d = 128 non-causal attention variants of
// src/kernels/attention/study_bf16_d128.cu against each other in one run (built only with
// -DXSTAGE_ATTN_STUDY=ON). Variants are interleaved launch by launch (round-robin, the first
// variant rotating every round) so that the power-capped clock treats them alike; every launch
// is timed with its own CUDA events; inputs rotate over sets larger than 2x the L2.
// Correctness first: each variant's output (poisoned before) is compared with an fp64 host
// reference on sampled rows of awkward shapes, and with the shipped kernel at every timed shape.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_util.hpp"
#include "kernels/attention/study.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"

namespace att = xstage::kernels::attention;
using xstage::cli::quantile;

namespace {

constexpr int kDim = 128;

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { XS_CUDA(cudaMalloc(&p, bytes), fmt::format("allocating {} bytes", bytes)); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

float bf16_to_float(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

att::AttentionParams params_for(int s_q, int s_kv, int heads, const void* q, const void* k, const void* v, void* o) {
  att::AttentionParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = o;
  p.batch = 1;
  p.heads = heads;
  p.q_len = s_q;
  p.kv_len = s_kv;
  p.head_dim = kDim;
  p.q_stride_s = p.o_stride_s = int64_t(heads) * kDim;
  p.k_stride_s = p.v_stride_s = int64_t(heads) * kDim;
  p.q_stride_h = p.k_stride_h = p.v_stride_h = p.o_stride_h = kDim;
  p.q_stride_b = int64_t(s_q) * heads * kDim;
  p.o_stride_b = p.q_stride_b;
  p.k_stride_b = p.v_stride_b = int64_t(s_kv) * heads * kDim;
  p.softmax_scale = 1.f / std::sqrt(float(kDim));
  return p;
}

void upload_tiled(void* dst, size_t elems, const std::vector<uint16_t>& pattern, size_t shift) {
  const size_t chunk = pattern.size() - 8192;
  for (size_t off = 0; off < elems; off += chunk) {
    const size_t n = std::min(chunk, elems - off);
    XS_CUDA(cudaMemcpy(static_cast<uint16_t*>(dst) + off, pattern.data() + (shift % 8192), n * 2, cudaMemcpyHostToDevice),
            "uploading inputs");
  }
}

// Relative L2 error of `got` against `ref` (both host bf16) and the count of non-finite values.
std::pair<double, size_t> compare(const std::vector<uint16_t>& got, const std::vector<double>& ref_rows,
                                  const std::vector<size_t>& idx) {
  double num = 0, den = 0;
  size_t bad = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    const float g = bf16_to_float(got[idx[i]]);
    if (!std::isfinite(g)) ++bad;
    num += (g - ref_rows[i]) * (g - ref_rows[i]);
    den += ref_rows[i] * ref_rows[i];
  }
  return {bad ? INFINITY : std::sqrt(num / std::max(den, 1e-30)), bad};
}

// fp64 host attention for the given (row, head) pairs; returns the outputs in idx order.
std::vector<double> host_reference(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                                   const std::vector<uint16_t>& v, int s_kv, int heads,
                                   const std::vector<std::pair<int, int>>& rows, std::vector<size_t>& idx) {
  std::vector<double> out;
  const double scale = 1.0 / std::sqrt(double(kDim));
  std::vector<double> sc(s_kv);
  for (auto [r, h] : rows) {
    double mx = -INFINITY;
    for (int j = 0; j < s_kv; ++j) {
      double acc = 0;
      for (int d = 0; d < kDim; ++d)
        acc += double(bf16_to_float(q[(size_t(r) * heads + h) * kDim + d])) *
               bf16_to_float(k[(size_t(j) * heads + h) * kDim + d]);
      sc[j] = acc * scale;
      mx = std::max(mx, sc[j]);
    }
    double sum = 0;
    for (int j = 0; j < s_kv; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
    for (int d = 0; d < kDim; ++d) {
      double acc = 0;
      for (int j = 0; j < s_kv; ++j) acc += sc[j] * bf16_to_float(v[(size_t(j) * heads + h) * kDim + d]);
      out.push_back(acc / sum);
      idx.push_back((size_t(r) * heads + h) * kDim + d);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times the attention tile-study variants (bf16, d=128, non-causal) against each other in one run."};
  std::vector<int> seqlens{4096, 4608, 8192, 16384, 32768, 65536};
  std::vector<int> heads_list{12, 24};
  int iters = 30, warmup = 3;
  std::string json_out;
  app.add_option("--seqlens", seqlens, "sequence lengths (q = kv)")->delimiter(',');
  app.add_option("--heads", heads_list, "head counts")->delimiter(',');
  app.add_option("--iters", iters, "timed launches per variant and shape (>= 20)");
  app.add_option("--warmup", warmup, "untimed rounds first");
  app.add_option("--json", json_out, "write the results here");
  CLI11_PARSE(app, argc, argv);
  try {
    if (iters < 20) throw xstage::InvalidArgument("--iters must be >= 20");
    if (warmup < 0) throw xstage::InvalidArgument("--warmup must be >= 0");
    for (int s : seqlens)
      if (s < 1) throw xstage::InvalidArgument(fmt::format("sequence length {} must be >= 1", s));
    for (int h : heads_list)
      if (h < 1) throw xstage::InvalidArgument(fmt::format("head count {} must be >= 1", h));
    int count = 0;
    XS_CUDA(cudaGetDeviceCount(&count), "counting GPUs");
    if (count < 1) throw xstage::Error("attn_study needs a GPU");
    cudaDeviceProp prop{};
    XS_CUDA(cudaGetDeviceProperties(&prop, 0), "reading device properties");
    const auto variants = att::attention_study_variants();
    nlohmann::json j;
    j["device"] = prop.name;
    for (const auto& v : variants)
      j["variants"].push_back({{"name", v.name},
                               {"block_m", v.info.tile.block_m},
                               {"block_n", v.info.tile.block_n},
                               {"smem_bytes", v.info.smem_bytes}});
    const std::vector<uint16_t> pattern = xstage::cli::random_halves(true, (size_t(1) << 22) + 8192, 20261130u);

    // 1. Correctness on awkward shapes against the fp64 host reference (sampled rows incl. the tail).
    bool all_ok = true;
    for (auto [sq, skv, h] : std::vector<std::tuple<int, int, int>>{{77, 77, 3}, {4680, 4680, 2}, {300, 1000, 5}}) {
      std::mt19937 rng(sq * 31 + skv);
      std::vector<uint16_t> hq(size_t(sq) * h * kDim), hk(size_t(skv) * h * kDim), hv(hk.size());
      for (auto* t : {&hq, &hk, &hv})
        for (auto& x : *t) x = pattern[rng() % pattern.size()];
      Buf q(hq.size() * 2), k(hk.size() * 2), v(hv.size() * 2), o(hq.size() * 2);
      XS_CUDA(cudaMemcpy(q.p, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice), "upload");
      XS_CUDA(cudaMemcpy(k.p, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice), "upload");
      XS_CUDA(cudaMemcpy(v.p, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice), "upload");
      std::vector<std::pair<int, int>> rows;
      for (int r : {0, 1, 63, 64, 127, 128, sq / 2, sq - 2, sq - 1})
        if (r >= 0 && r < sq) rows.push_back({r, (r * 7) % h});
      std::vector<size_t> idx;
      const std::vector<double> ref = host_reference(hq, hk, hv, skv, h, rows, idx);
      for (const auto& var : variants) {
        XS_CUDA(cudaMemset(o.p, 0xFF, hq.size() * 2), "poisoning O");
        XS_CUDA(var.launch(params_for(sq, skv, h, q.p, k.p, v.p, o.p), nullptr), std::string("launching ") + var.name);
        XS_CUDA(cudaDeviceSynchronize(), std::string("running ") + var.name);
        std::vector<uint16_t> got(hq.size());
        XS_CUDA(cudaMemcpy(got.data(), o.p, got.size() * 2, cudaMemcpyDeviceToHost), "download");
        auto [rel, bad] = compare(got, ref, idx);
        const bool ok = rel < 1e-2 && bad == 0;
        all_ok &= ok;
        std::printf("check %-22s Sq=%5d Skv=%5d H=%d  rel.err %.3e  nonfinite %zu  %s\n", var.name, sq, skv, h, rel, bad,
                    ok ? "ok" : "FAIL");
        j["checks"].push_back({{"variant", var.name}, {"q_len", sq}, {"kv_len", skv}, {"heads", h}, {"rel_err", rel},
                               {"nonfinite", bad}, {"ok", ok}});
      }
    }
    if (!all_ok) throw xstage::Error("a variant failed its correctness check; no timings taken");

    // 2. Timings, interleaved.
    std::printf("\n%7s %4s", "S", "H");
    for (const auto& v : variants) std::printf(" %21s", v.name);
    std::printf("   (median TFLOP/s; ratio to the first)\n");
    cudaStream_t st;
    XS_CUDA(cudaStreamCreate(&st), "stream");
    for (int s : seqlens)
      for (int h : heads_list) {
        const size_t elems = size_t(s) * h * kDim;
        const size_t set_bytes = 4 * elems * 2;
        const int sets = int(std::max<size_t>(1, (2 * size_t(prop.l2CacheSize) + set_bytes - 1) / set_bytes));
        std::vector<std::unique_ptr<Buf>> bq, bk, bv;
        std::vector<std::vector<std::unique_ptr<Buf>>> bo(variants.size());
        for (int i = 0; i < sets; ++i) {
          bq.push_back(std::make_unique<Buf>(elems * 2));
          bk.push_back(std::make_unique<Buf>(elems * 2));
          bv.push_back(std::make_unique<Buf>(elems * 2));
          upload_tiled(bq.back()->p, elems, pattern, 1237 + i * 4099);
          upload_tiled(bk.back()->p, elems, pattern, 2474 + i * 4099);
          upload_tiled(bv.back()->p, elems, pattern, 3711 + i * 4099);
        }
        for (auto& ov : bo) ov.push_back(std::make_unique<Buf>(elems * 2));
        // Every variant against the shipped one on set 0 (poisoned first).
        std::vector<uint16_t> ref(elems), got(elems);
        for (size_t vi = 0; vi < variants.size(); ++vi) {
          XS_CUDA(cudaMemset(bo[vi][0]->p, 0xFF, elems * 2), "poisoning O");
          XS_CUDA(variants[vi].launch(params_for(s, s, h, bq[0]->p, bk[0]->p, bv[0]->p, bo[vi][0]->p), st), "launch");
          XS_CUDA(cudaStreamSynchronize(st), std::string("running ") + variants[vi].name);
          XS_CUDA(cudaMemcpy((vi == 0 ? ref : got).data(), bo[vi][0]->p, elems * 2, cudaMemcpyDeviceToHost), "download");
          if (vi == 0) continue;
          double num = 0, den = 0;
          size_t bad = 0;
          for (size_t e = 0; e < elems; e += 7) {
            const double a = bf16_to_float(got[e]), b = bf16_to_float(ref[e]);
            if (!std::isfinite(a)) ++bad;
            num += (a - b) * (a - b);
            den += b * b;
          }
          const double rel = std::sqrt(num / std::max(den, 1e-30));
          if (bad || !(rel < 1e-2))
            throw xstage::Error(fmt::format("{} differs from the shipped kernel at S={} H={}: rel {:.3e}, {} non-finite",
                                            variants[vi].name, s, h, rel, bad));
        }
        const int nv = int(variants.size());
        std::vector<std::vector<double>> us(nv);
        std::vector<cudaEvent_t> ev(2 * nv);
        for (auto& e : ev) XS_CUDA(cudaEventCreate(&e), "event");
        for (int it = -warmup; it < iters; ++it) {
          for (int r = 0; r < nv; ++r) {
            const int vi = (r + (it < 0 ? 0 : it)) % nv;
            const int set = (it + warmup) % sets;
            XS_CUDA(cudaEventRecord(ev[2 * vi], st), "event");
            XS_CUDA(variants[vi].launch(params_for(s, s, h, bq[set]->p, bk[set]->p, bv[set]->p, bo[vi][0]->p), st),
                    "launch");
            XS_CUDA(cudaEventRecord(ev[2 * vi + 1], st), "event");
          }
          XS_CUDA(cudaStreamSynchronize(st), "timed round");
          if (it < 0) continue;
          for (int vi = 0; vi < nv; ++vi) {
            float ms = 0;
            XS_CUDA(cudaEventElapsedTime(&ms, ev[2 * vi], ev[2 * vi + 1]), "elapsed");
            us[vi].push_back(ms * 1e3);
          }
        }
        for (auto& e : ev) cudaEventDestroy(e);
        const double flops = 4.0 * s * double(s) * kDim * h;
        std::printf("%7d %4d", s, h);
        nlohmann::json row{{"seqlen", s}, {"heads", h}, {"head_dim", kDim}, {"iters", iters}, {"rotating_sets", sets}};
        const double base = quantile(us[0], 0.5);
        for (int vi = 0; vi < nv; ++vi) {
          const double med = quantile(us[vi], 0.5);
          std::printf(" %13.1f (%5.3f)", flops / med / 1e6, base / med);
          row["variants"].push_back({{"name", variants[vi].name},
                                     {"median_us", med},
                                     {"min_us", *std::min_element(us[vi].begin(), us[vi].end())},
                                     {"p10_us", quantile(us[vi], 0.1)},
                                     {"p90_us", quantile(us[vi], 0.9)},
                                     {"tflops", flops / med / 1e6},
                                     {"speedup_vs_first", base / med}});
        }
        std::printf("\n");
        std::fflush(stdout);
        j["results"].push_back(row);
      }
    if (!json_out.empty()) xstage::cli::write_json_file(j, json_out);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn_study: %s\n", e.what());
    return 1;
  }
}
