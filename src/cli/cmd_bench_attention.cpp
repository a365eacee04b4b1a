// `xstage bench attention`: TFLOP/s of the attention forward kernel over a sweep of shapes,
// timed with CUDA events (warm-up, then the median of >= 20 individually timed launches, the
// inputs rotating over enough buffer sets to exceed the L2 cache; a large memset queued
// first keeps the GPU busy while the host enqueues, so no launch overhead is timed). Prints an nccl-tests
// style table and optionally writes JSON (schema xstage.bench.attention.v1), the same shape
// python/bench_attention_torch.py writes for PyTorch SDPA, so python/compare_attention.py
// can put the two side by side. Every cell checks its output (cli/bench_check.hpp): the
// outputs are poisoned with NaN before the timed launches; afterwards the last launch's output
// is scanned in full for non-finite values and --check-rows seeded query rows (the first and
// last, rows on tile borders) are compared with an fp64 host softmax(scale q k^T) v of the
// same 16-bit inputs. A cell out of tolerance is FAILED in the table and the JSON, and the
// command exits 1 after the whole sweep.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_check.hpp"
#include "cli/bench_timing.hpp"
#include "cli/bench_util.hpp"
#include "cli/commands.hpp"
#include "cli/run_stamp.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/attention.hpp"

namespace xstage::cli {
namespace {

struct BenchFlags {
  std::vector<int> seqlens{1024, 4096, 4608, 8192, 16384, 32768, 65536};
  std::vector<int> heads{12, 24};
  std::vector<int> head_dims{64, 128};
  int batch = 1;
  std::string dtype = "bf16";
  bool causal = false;
  std::string causal_align = "top-left";          // ops::parse_causal_align
  std::vector<std::string> causal_orders{"auto"};  // one row per order and shape (same-run A/B)
  int q_len = 0;                                  // > 0: queries per cell (kv_len = S); 0: q_len = S
  int warmup = 5;
  double warmup_ms = 0;  // then untimed launches for this long (0: off; python -m xstage.bench uses it)
  int iters = 30;
  double rotate_mib = 0;  // 0: 2 x the device's L2
  int num_ctas = 0;
  std::string json_out;
  std::string tile = "auto";  // auto | staged | rows128 | rows64 | split | long-kv | partial (ops::AttentionTilePolicy)
  bool no_key_split = false;  // AttentionArgs::tail_split = false
  bool no_partial_tiles = false;  // AttentionArgs::partial_tiles = false
  int check_rows = kDefaultCheckRows;  // query rows compared with the host reference per cell
  uint64_t check_seed = 20261203u;
};

// Tolerances of tests/gpu/test_attention.cpp (relative L2 error 1e-2 against the fp32
// reference), applied per checked row; the largest element error of a row must stay within
// 2e-2 of the row's largest reference value (16-bit output rounding is 2^-9 / 2^-11).
constexpr RowTolerance kAttentionTolerance{1e-2, 2e-2, 1e-6};

ops::AttentionTilePolicy tile_policy(const BenchFlags& fl) {
  if (fl.tile == "auto") return ops::AttentionTilePolicy::automatic;
  if (fl.tile == "staged") return ops::AttentionTilePolicy::staged;
  if (fl.tile == "rows128") {
    for (int d : fl.head_dims)
      if (d != 64) throw InvalidArgument("bench attention: --tile rows128 is a d = 64 tile (use -d 64)");
    return ops::AttentionTilePolicy::rows128;
  }
  if (fl.tile == "rows64") {
    for (int d : fl.head_dims)
      if (d != 64 && !(d == 128 && !fl.causal))
        throw InvalidArgument("bench attention: --tile rows64 ships for d = 64 and non-causal d = 128");
    return ops::AttentionTilePolicy::rows64;
  }
  if (fl.tile == "split") {
    if (fl.causal) throw InvalidArgument("bench attention: --tile split is a non-causal tile");
    return ops::AttentionTilePolicy::split;
  }
  if (fl.tile == "partial") {
    for (int d : fl.head_dims)
      if (d != 64) throw InvalidArgument("bench attention: --tile partial is a d = 64 tile (use -d 64)");
    if (fl.causal) throw InvalidArgument("bench attention: --tile partial is a non-causal tile");
    return ops::AttentionTilePolicy::partial;
  }
  if (fl.tile == "long-kv") {
    for (int d : fl.head_dims)
      if (d != 128) throw InvalidArgument("bench attention: --tile long-kv is a d = 128 tile (use -d 128)");
    if (fl.causal) throw InvalidArgument("bench attention: --tile long-kv is a non-causal tile");
    return ops::AttentionTilePolicy::long_kv;
  }
  throw InvalidArgument("bench attention: --tile must be auto, staged, rows128, rows64, split, long-kv or partial, got '" +
                        fl.tile + "'");
}

constexpr size_t kPatternChunk = size_t(1) << 22;  // elements copied per upload
constexpr size_t kPatternPad = 8192;               // start offsets vary within this

struct Result {
  int batch, seqlen, q_len, heads, head_dim;
  std::string dtype;
  bool causal;
  std::string causal_align, causal_order;
  std::string causal_order_run;  // the order that ran (auto resolved; ops::causal_order_for)
  int causal_group = 0;  // (batch, head) pairs per group of the order (ops::causal_group_for)
  std::string instantiation;
  int block_m = 0, block_n = 0, stages = 0, q_stages = 0;  // its tile
  TimingStats t;
  int iters, rotating_sets;
  unsigned long long nonfinite;
  CheckRecord check;
};

// Query rows of the output to check, as row indices of the [B, S, H] row space (row
// (b, s, h) = (b * S + s) * H + h): --check-rows of them, seeded, always with the first and
// the last row and, for the first and last head of the first and last batch, the query rows at
// the borders of the kernel's row tiles (first tile's first two rows, the 64-row warp-group
// slice border, the first tile border, the middle tile border, the last two rows).
std::vector<size_t> attention_check_rows(const BenchFlags& fl, int s, int h, int block_m) {
  std::vector<size_t> must;
  const int bm = std::max(block_m, 1);
  const int mid = (s / 2) / bm * bm;
  for (int b : {0, fl.batch - 1})
    for (int hh : {0, h - 1})
      for (int q : {0, 1, 63, 64, bm - 1, bm, mid - 1, mid, s - 2, s - 1})
        if (q >= 0 && q < s) must.push_back((size_t(b) * s + q) * h + hh);
  return sample_rows(size_t(fl.batch) * s * h, size_t(std::max(fl.check_rows, 2)),
                     fl.check_seed ^ (uint64_t(s) << 20) ^ (uint64_t(h) << 8) ^ uint64_t(fl.batch), must);
}

// The output check of one cell: o, q, k, v are the host copies of the checked launch's
// tensors (packed BSHD, 16-bit; q and o have a.q_len rows per head, k and v a.kv_len).
CheckRecord check_attention(const BenchFlags& fl, const ops::AttentionArgs& a, int block_m,
                            const std::vector<uint16_t>& o, const std::vector<uint16_t>& q,
                            const std::vector<uint16_t>& k, const std::vector<uint16_t>& v) {
  const bool bf16 = a.dtype == ops::AttentionDType::bf16;
  const int S = a.q_len, Skv = a.kv_len, H = a.heads, D = a.head_dim;
  const int key_offset = ops::causal_key_offset(a);
  const double scale = a.softmax_scale > 0 ? a.softmax_scale : 1.0 / std::sqrt(double(D));
  const std::vector<size_t> rows = attention_check_rows(fl, S, H, block_m);
  // Reference rows, one task per checked row: scores over the head's keys (causal: query i
  // sees keys j <= i + key_offset), softmax, weighted sum of the values, in fp64 on the exact
  // 16-bit inputs.
  std::vector<double> ref(rows.size() * D);
  parallel_for(rows.size(), [&](size_t i) {
    const size_t r = rows[i];
    const int hh = int(r % H), qs = int((r / H) % S), b = int(r / (size_t(H) * S));
    const size_t row_stride = size_t(H) * D;
    const size_t head0 = size_t(b) * S * row_stride + size_t(hh) * D;     // in q (and o)
    const size_t head0_kv = size_t(b) * Skv * row_stride + size_t(hh) * D;  // in k and v
    std::vector<double> qi(D), sc(Skv);
    for (int d = 0; d < D; ++d) qi[d] = half_bits_to_float(q[head0 + size_t(qs) * row_stride + d], bf16);
    const int nk = a.causal ? std::min(qs + 1 + key_offset, a.kv_len) : a.kv_len;
    double m = -INFINITY;
    for (int j = 0; j < nk; ++j) {
      const uint16_t* kj = k.data() + head0_kv + size_t(j) * row_stride;
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += qi[d] * half_bits_to_float(kj[d], bf16);
      sc[j] = dot * scale;
      m = std::max(m, sc[j]);
    }
    double sum = 0;
    std::vector<double> acc(D, 0.0);
    for (int j = 0; j < nk; ++j) {
      const double p = std::exp(sc[j] - m);
      sum += p;
      const uint16_t* vj = v.data() + head0_kv + size_t(j) * row_stride;
      for (int d = 0; d < D; ++d) acc[d] += p * half_bits_to_float(vj[d], bf16);
    }
    for (int d = 0; d < D; ++d) ref[i * D + d] = sum > 0 ? acc[d] / sum : 0.0;
  });
  RowChecker rc(kAttentionTolerance);
  std::vector<float> got(D);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t r = rows[i];  // packed BSHD: row r's D values are contiguous at r * D
    for (int d = 0; d < D; ++d) got[d] = half_bits_to_float(o[r * D + d], bf16);
    rc.add_row(static_cast<long long>(r), got.data(), ref.data() + i * D, D);
  }
  return rc.finish(count_nonfinite_16(o.data(), o.size(), bf16),
                   "fp64 host softmax(scale q k^T) v of the same 16-bit inputs, seeded query rows (row = (b*S + s)*H + h)");
}

// One cell: kv_len = s keys, q_len = fl.q_len (or s) queries; causal cells use `order`.
Result bench_one(const BenchFlags& fl, ops::AttentionDType dt, int s, int h, int d, const std::string& order,
                 size_t rotate_bytes, const std::vector<uint16_t>& pattern, const DeviceMem& backlog,
                 size_t backlog_bytes, cudaStream_t stream) {
  const int sq = fl.q_len > 0 ? fl.q_len : s;
  const size_t elems = size_t(fl.batch) * s * h * d;     // k, v
  const size_t q_elems = size_t(fl.batch) * sq * h * d;  // q, o
  const size_t set_bytes = (2 * elems + 2 * q_elems) * 2;
  const int sets = static_cast<int>(std::max<size_t>(1, (rotate_bytes + set_bytes - 1) / set_bytes));
  std::vector<std::unique_ptr<DeviceMem>> q, k, v, o;
  for (int i = 0; i < sets; ++i) {
    q.push_back(std::make_unique<DeviceMem>(q_elems * 2));
    k.push_back(std::make_unique<DeviceMem>(elems * 2));
    v.push_back(std::make_unique<DeviceMem>(elems * 2));
    o.push_back(std::make_unique<DeviceMem>(q_elems * 2));
    size_t shift = static_cast<size_t>(i) * 4099;
    for (void* p : {q.back()->p, k.back()->p, v.back()->p}) {
      // Tile the random block over the tensor, from a different start for each tensor.
      shift = (shift + 1237) % kPatternPad;
      const size_t n_elems = p == q.back()->p ? q_elems : elems;
      for (size_t off = 0; off < n_elems; off += kPatternChunk) {
        const size_t n = std::min(kPatternChunk, n_elems - off);
        XS_CUDA(cudaMemcpyAsync(static_cast<uint16_t*>(p) + off, pattern.data() + shift, n * 2, cudaMemcpyHostToDevice,
                                stream),
                "uploading bench inputs");
      }
    }
  }
  ops::AttentionArgs a;
  a.dtype = dt;
  a.batch = fl.batch;
  a.heads = h;
  a.q_len = sq;
  a.kv_len = s;
  a.head_dim = d;
  a.causal = fl.causal;
  a.causal_align = ops::parse_causal_align(fl.causal_align);
  a.causal_order = ops::parse_causal_order(order);
  a.num_ctas = fl.num_ctas;
  a.tile_policy = tile_policy(fl);
  a.tail_split = !fl.no_key_split;
  a.partial_tiles = !fl.no_partial_tiles;
  a.q_strides = a.o_strides = ops::packed_bshd(sq, h, d);
  a.k_strides = a.v_strides = ops::packed_bshd(s, h, d);
  auto set_args = [&](int i) {
    a.q = q[i]->p;
    a.k = k[i]->p;
    a.v = v[i]->p;
    a.o = o[i]->p;
  };
  set_args(0);
  ops::validate(a);  // a bad shape or option ends here (one line), before any launch
  for (int w = 0; w < fl.warmup; ++w) {
    set_args(w % sets);
    ops::attention_forward(a, stream);
  }
  sustain_clock(
      fl.warmup_ms, 0,
      [&](int w) {
        set_args(w % sets);
        ops::attention_forward(a, stream);
      },
      [&] { XS_CUDA(cudaStreamSynchronize(stream), "warming up"); });
  // Poison every output (NaN) before the timed launches: what they leave unwritten stays NaN.
  for (int i = 0; i < sets; ++i)
    XS_CUDA(cudaMemsetAsync(o[i]->p, kPoisonByte, q_elems * 2, stream), "poisoning the outputs");
  const std::vector<double> us = timed_launches(
      fl.iters, stream, backlog, backlog_bytes, [&](int it) { set_args(it % sets); },
      [&] { ops::attention_forward(a, stream); }, fmt::format("running attention S={} H={} d={}", s, h, d));

  // The output check, after the timed launches: the last launch's output (and its inputs).
  const int ck = (fl.iters - 1) % sets;
  std::vector<uint16_t> ho(q_elems), hq(q_elems), hk(elems), hv(elems);
  XS_CUDA(cudaMemcpy(ho.data(), o[ck]->p, q_elems * 2, cudaMemcpyDeviceToHost), "reading the output");
  XS_CUDA(cudaMemcpy(hq.data(), q[ck]->p, q_elems * 2, cudaMemcpyDeviceToHost), "reading the inputs");
  XS_CUDA(cudaMemcpy(hk.data(), k[ck]->p, elems * 2, cudaMemcpyDeviceToHost), "reading the inputs");
  XS_CUDA(cudaMemcpy(hv.data(), v[ck]->p, elems * 2, cudaMemcpyDeviceToHost), "reading the inputs");
  const auto inst = ops::select_instantiation(a);  // what attention_forward launched for this shape
  set_args(ck);
  CheckRecord check = check_attention(fl, a, inst.block_m, ho, hq, hk, hv);

  Result r;
  r.batch = fl.batch;
  r.seqlen = s;
  r.q_len = sq;
  r.heads = h;
  r.head_dim = d;
  r.dtype = ops::dtype_name(dt);
  r.causal = fl.causal;
  r.causal_align = fl.causal ? ops::causal_align_name(a.causal_align) : "";
  r.causal_order = fl.causal ? ops::causal_order_name(a.causal_order) : "";
  r.causal_order_run = fl.causal ? ops::causal_order_name(ops::causal_order_for(a)) : "";
  r.causal_group = fl.causal ? ops::causal_group_for(a) : 0;
  r.instantiation = inst.name;
  r.block_m = inst.block_m;
  r.block_n = inst.block_n;
  r.stages = inst.stages;
  r.q_stages = inst.q_stages;
  r.t = TimingStats::of(us, ops::attention_flops(a));
  r.iters = fl.iters;
  r.rotating_sets = sets;
  r.nonfinite = check.nonfinite;
  r.check = std::move(check);
  return r;
}

void run_bench(const BenchFlags& fl) {
  ops::AttentionDType dt;
  if (fl.dtype == "bf16")
    dt = ops::AttentionDType::bf16;
  else if (fl.dtype == "fp16")
    dt = ops::AttentionDType::fp16;
  else
    throw InvalidArgument("bench attention: --dtype must be bf16 or fp16, got '" + fl.dtype + "'");
  if (fl.iters < 20) throw InvalidArgument(fmt::format("bench attention: --iters {} must be >= 20", fl.iters));
  tile_policy(fl);  // rejects an unknown --tile before any GPU work
  if (fl.warmup < 0) throw InvalidArgument("bench attention: --warmup must be >= 0");
  if (!(fl.warmup_ms >= 0 && fl.warmup_ms <= 60000))
    throw InvalidArgument("bench attention: --warmup-ms must be in [0, 60000]");
  if (fl.check_rows < 2) throw InvalidArgument("bench attention: --check-rows must be >= 2");
  if (fl.batch < 1) throw InvalidArgument("bench attention: --batch must be >= 1");
  for (int s : fl.seqlens)
    if (s < 1) throw InvalidArgument(fmt::format("bench attention: sequence length {} must be >= 1", s));
  for (int h : fl.heads)
    if (h < 1) throw InvalidArgument(fmt::format("bench attention: head count {} must be >= 1", h));
  for (int d : fl.head_dims) ops::select_instantiation(dt, d, fl.causal);  // throws for unsupported dims
  // The causal options, before any GPU work (one line each).
  const causal::Align align = ops::parse_causal_align(fl.causal_align);
  if (fl.causal_orders.empty()) throw InvalidArgument("bench attention: --causal-order needs at least one order");
  for (const std::string& o : fl.causal_orders) ops::parse_causal_order(o);
  if (!fl.causal && (align != causal::Align::top_left || fl.causal_orders != std::vector<std::string>{"auto"}))
    throw InvalidArgument("bench attention: --causal-align and --causal-order need --causal");
  if (fl.q_len < 0) throw InvalidArgument("bench attention: --q-len must be >= 0 (0: q_len = S)");
  if (align == causal::Align::bottom_right)
    for (int s : fl.seqlens)
      if (fl.q_len > s)
        throw InvalidArgument(fmt::format(
            "bench attention: bottom-right causal with --q-len {} > S = {} leaves query rows without a visible key",
            fl.q_len, s));

  const cudaDeviceProp prop = hopper_device("attention");
  const size_t rotate_bytes = rotate_bytes_for(fl.rotate_mib, prop);
  cudaStream_t stream = nullptr;
  XS_CUDA(cudaStreamCreate(&stream), "creating the bench stream");
  const std::vector<uint16_t> pattern = random_halves(dt == ops::AttentionDType::bf16, kPatternChunk + kPatternPad, 20261130u);
  size_t free_b = 0, total_b = 0;
  XS_CUDA(cudaMemGetInfo(&free_b, &total_b), "reading free device memory");
  const size_t backlog_bytes = std::min<size_t>(size_t(4) << 30, free_b / 8);
  DeviceMem backlog(backlog_bytes);

  const std::string mask = fl.causal ? "causal " + fl.causal_align : std::string("non-causal");
  std::printf("# xstage bench attention on %s (%d SMs, L2 %.0f MiB), %s, %s, batch %d, q_len %s, median of %d runs "
              "after %d warm-up, inputs rotate over >= %.0f MiB\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, fl.dtype.c_str(), mask.c_str(),
              fl.batch, fl.q_len > 0 ? std::to_string(fl.q_len).c_str() : "S", fl.iters, fl.warmup,
              rotate_bytes / 1048576.0);
  std::printf("# check: %d seeded query rows per cell vs an fp64 host reference (per row: rel L2 <= %g, max abs <= "
              "%g x max|ref|), full non-finite scan of the NaN-poisoned output; #wrong = rows out of tolerance\n",
              fl.check_rows, kAttentionTolerance.rel_tol, kAttentionTolerance.max_abs_rel);
  std::printf("%s", fmt::format("#{:>7} {:>5} {:>4} {:>6} {:>13} {:>5} {:>10} {:>10} {:>10} {:>9} {:>9} {:>6} {:>6} "
                                "{:>9} {:>6}\n",
                                "seqlen", "heads", "d", "dtype", "order", "sets", "time(us)", "min(us)", "max(us)",
                                "TFLOP/s", "best", "#wrong", "nonfin", "rel_err", "check")
                        .c_str());
  std::vector<Result> results;
  for (int d : fl.head_dims)
    for (int h : fl.heads)
      for (int s : fl.seqlens)
        // The orders of one shape run back to back (a same-run A/B sees one machine state).
        for (const std::string& order : fl.causal_orders) {
          Result r = bench_one(fl, dt, s, h, d, order, rotate_bytes, pattern, backlog, backlog_bytes, stream);
          results.push_back(r);
          std::printf("%s", fmt::format(" {:>7} {:>5} {:>4} {:>6} {:>13} {:>5} {:>10.1f} {:>10.1f} {:>10.1f} {:>9.1f} "
                                        "{:>9.1f} {:>6} {:>6} {:>9.2e} {:>6}\n",
                                        s, h, d, r.dtype, fl.causal ? r.causal_order : "-", r.rotating_sets,
                                        r.t.median_us, r.t.min_us, r.t.max_us, r.t.tflops, r.t.tflops_best, r.check.rows_failed,
                                        r.nonfinite, r.check.rel_err, r.check.verdict())
                                .c_str());
          std::fflush(stdout);
        }
  cudaStreamDestroy(stream);
  int failed = 0;
  for (const Result& r : results) failed += !r.check.passed;
  std::printf("# correctness: %s\n", correctness_summary(failed, results.size()).c_str());

  nlohmann::json j, rs = nlohmann::json::array();
  if (!fl.json_out.empty()) {
    j = bench_json_header("xstage.bench.attention.v1", prop);
    j["config"] = {{"batch", fl.batch},       {"dtype", fl.dtype},   {"causal", fl.causal},
                   {"causal_align", fl.causal_align}, {"causal_orders", fl.causal_orders}, {"q_len", fl.q_len},
                   {"layout", "BSHD"},        {"warmup", fl.warmup}, {"warmup_ms", fl.warmup_ms}, {"iters", fl.iters},
                   {"rotate_bytes", rotate_bytes}, {"num_ctas", fl.num_ctas}, {"tile", fl.tile}, {"key_split", !fl.no_key_split},
                   {"partial_tiles", !fl.no_partial_tiles},
                   {"flops", "4*B*H*Sq*Skv*d (visible pairs if causal)"},
                   {"check_rows", fl.check_rows}, {"check_seed", fl.check_seed},
                   {"check", "outputs NaN-poisoned before the timed launches; the last launch's output: full "
                             "non-finite scan and seeded query rows vs an fp64 host reference, per-row tolerances"}};
    for (const Result& r : results) {
      nlohmann::json rec = {{"backend", "xstage"},
                    {"batch", r.batch},
                    {"seqlen", r.seqlen},
                    {"heads", r.heads},
                    {"head_dim", r.head_dim},
                    {"dtype", r.dtype},
                    {"causal", r.causal},
                    {"q_len", r.q_len},
                    {"causal_align", r.causal_align},
                    {"causal_order", r.causal_order},
                    {"causal_order_run", r.causal_order_run},
                    {"causal_group", r.causal_group},
                    {"instantiation", r.instantiation},
                    {"tile", {{"block_m", r.block_m}, {"block_n", r.block_n}, {"stages", r.stages}, {"q_stages", r.q_stages}}},
                    {"iters", r.iters},
                    {"rotating_sets", r.rotating_sets},
                    {"nonfinite", r.nonfinite},
                    {"check", r.check.verdict()},
                    {"correctness", r.check.to_json()}};
      r.t.put(rec);
      rs.push_back(std::move(rec));
    }
  }
  finish_bench(j, std::move(rs), failed, results.size(), fl.json_out, "attention");
}

}  // namespace

void add_attention_bench_command(CLI::App& app) {
  auto fl = std::make_shared<BenchFlags>();
  auto* cmd = bench_group(app)->add_subcommand(
      "attention",
      "TFLOP/s of the Hopper attention forward kernel (BSHD, batch B, kv_len = S, q_len = S or --q-len), one\n"
      "line per (head dim, heads, S, causal order). TFLOP/s = 4*B*H*q_len*S*d / median time (visible pairs when\n"
      "--causal).\n"
      "Compare with PyTorch SDPA: python/bench_attention_torch.py and python/compare_attention.py.");
  cmd->add_option("--seqlens,-S", fl->seqlens, "Sequence lengths")->delimiter(',')->capture_default_str();
  cmd->add_option("--heads,-H", fl->heads, "Head counts")->delimiter(',')->capture_default_str();
  cmd->add_option("--head-dims,-d", fl->head_dims, "Head dims (64, 128)")->delimiter(',')->capture_default_str();
  cmd->add_option("--batch,-B", fl->batch, "Batch size")->capture_default_str();
  cmd->add_option("--dtype", fl->dtype, "bf16 or fp16")->capture_default_str();
  cmd->add_flag("--causal", fl->causal, "Causal mask (top-left aligned unless --causal-align)");
  cmd->add_option("--causal-align", fl->causal_align,
                  "top-left (query i sees keys j <= i) or bottom-right (j <= i + S - q_len; needs --q-len <= S)")
      ->capture_default_str();
  cmd->add_option("--causal-order", fl->causal_orders,
                  "Causal persistent tile orders, one row each per shape, run back to back: auto (the default: "
                  "claimed or grouped by the shape), grouped (longest-first within planned head groups), "
                  "longest-first, head-major and/or claimed (the grouped list claimed through a counter, groups of "
                  "1-2 heads at long S) (docs/attention.md §Persistent scheduler)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--q-len", fl->q_len, "Queries per cell (kv_len = S); 0: q_len = S")->capture_default_str();
  cmd->add_option("--warmup", fl->warmup, "Untimed launches first")->capture_default_str();
  cmd->add_option("--warmup-ms", fl->warmup_ms,
                  "Then untimed launches until this many ms have passed, so the timed ones see the sustained "
                  "(power-capped) clock (0: off)")
      ->capture_default_str();
  cmd->add_option("--iters", fl->iters, "Timed launches (>= 20; the median is reported)")->capture_default_str();
  cmd->add_option("--rotate-mib", fl->rotate_mib, "Rotate inputs over at least this much memory (0: 2 x L2)")
      ->capture_default_str();
  cmd->add_option("--num-ctas", fl->num_ctas, "Persistent grid size (0: one CTA per SM)")->capture_default_str();
  cmd->add_option("--tile", fl->tile,
                  "auto: the 128x192 register-store tile for d=128 non-causal from 8192 keys, else the staged "
                  "tile (d=64 non-causal: the 128-row or the partial-tiles tile where it finishes first); staged: always the "
                  "staged tile (what the Ulysses kernels use); rows128: the 128-row d=64 tile; rows64: the 64-row "
                  "tile whose two warp groups split each tile's keys, d=64 / non-causal d=128 (docs/attention.md "
                  "§Key groups); split: "
                  "non-causal d=64/128, a 128-row mainloop whose tiles split along the keys when the last wave or the "
                  "whole launch is short of a wave (auto picks it for launches short of a wave; docs/attention.md "
                  "§Short sequences; causal d=64: the 128-row tile where the busiest CTA finishes first with it); long-kv: "
                  "the 128x192 register-store tile at any key count (d=128 non-causal); partial: the 192-row d=64 "
                  "tile whose warp groups without query rows idle, partial tiles dealt last (auto takes it where "
                  "they pair up; docs/attention.md §Partial tiles)")
      ->capture_default_str();
  cmd->add_flag("--no-key-split", fl->no_key_split,
                "Never split tiles along the keys (the long-key and split tiles then run whole tiles, and auto does "
                "not pick the split tile; docs/attention.md §Tail split)");
  cmd->add_flag("--no-partial-tiles", fl->no_partial_tiles,
                "auto never takes the partial-tiles tile and weighs the d=64 tiles by whole waves (the rule before it; "
                "for A/B runs; docs/attention.md §Partial tiles)");
  cmd->add_option("--check-rows", fl->check_rows,
                  "Query rows per cell compared with the fp64 host reference (seeded; always the first and last row "
                  "and rows on tile borders)")
      ->capture_default_str();
  cmd->add_option("--check-seed", fl->check_seed, "Seed of the checked rows")->capture_default_str();
  cmd->add_option("--json", fl->json_out, "Write results as JSON (xstage.bench.attention.v1)");
  cmd->callback([fl] { run_bench(*fl); });
}

}  // namespace xstage::cli
