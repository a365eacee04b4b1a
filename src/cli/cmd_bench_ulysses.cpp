// `xstage bench ulysses`: Ulysses attention with the post-attention All-to-All on every
// GPU of the node (one process, a thread per GPU): median times of the attention alone and
// of the serial, comm-sm, fused and fused-shaped variants, the ratios, a bitwise check of
// every variant's output against serial's, and per-slice store spans of the fused variants
// next to the Burst-Gap model's prediction. JSON schema xstage.bench.ulysses.v1 (read by
// python/compare_ulysses.py and python/plot_ulysses.py together with the PyTorch baseline
// python/bench_ulysses_torch.py).
//
// Output checks (cli/bench_check.hpp, docs/measurement.md "Output checks of the benches"):
// every variant's untimed call on input set 0 runs on a NaN-poisoned output and is compared
// with serial's bit for bit (mismatch_vs_serial) and, on --check-rows seeded output rows of
// every rank, with an fp64 host softmax(scale q k^T) v over the head's whole sequence (q, k, v
// rebuilt from the random pattern exactly as uploaded), plus a full non-finite scan. The
// output is poisoned again before the timed calls; after them the last timed call's output is
// checked the same way ("after_timing"). A point that fails is FAILED in the table and the
// JSON, and the command exits 1 after the sweep.
//
// Timing: the variants are interleaved (every iteration runs each once, so clock and power
// drift hit all alike); before every timed call the ranks meet in a device-side barrier
// (untimed), then each rank's CUDA events bracket the call on its stream; a call ends on a
// rank when its shard is complete (the receive wait). Per variant: the median over
// iterations of each rank, the maximum over ranks.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_check.hpp"
#include "cli/bench_util.hpp"
#include "cli/team_flags.hpp"
#include "cli/commands.hpp"
#include "cli/model_source.hpp"
#include "cli/run_stamp.hpp"
#include "kernels/probe/probe_args.hpp"
#include "kernels/selftest/exchange.hpp"
#include "runtime/check.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/ulysses.hpp"
#include "xstage/team.hpp"

namespace xstage::cli {
namespace {

struct Flags {
  int virtual_ranks = 0;
  std::vector<int> seqlens{1024, 4096, 4608, 8192, 16384, 32768, 65536};
  std::vector<std::string> configs{"24x128", "40x128", "30x64"};
  int batch = 1;
  int gpus = 2;
  std::string dtype = "bf16";
  int warmup = 5;
  int iters = 30;
  double rotate_mib = 0;  // 0: 2 x L2 per rank
  std::string params;
  int comm_ctas = 0;
  int chunk_vecs = 0;
  std::string tile = "staged";
  bool variants_given = false;  // --variants on the command line (else the default list)
  bool spans = true;
  std::vector<std::string> variants{"attention", "serial", "fused", "fused-shaped", "comm-sm"};
  double timeout_s = 10;
  std::string json_out;
  int check_rows = kDefaultCheckRows;  // output rows per rank compared with the host reference
  uint64_t check_seed = 20261203u;
};

// The attention bench's per-row tolerances (tests/gpu/test_attention.cpp's 1e-2 relative L2,
// per row; largest element error within 2e-2 of the row's largest reference value).
constexpr RowTolerance kUlyssesTolerance{1e-2, 2e-2, 1e-6};

// Inputs: element e of rank `rank`'s q, k and v of input set `set` is
// pattern[input_shift(set, rank) + e % kPatternChunk] (the three tensors of a set share the start;
// the pattern holds kPatternChunk + kPatternPad random 16-bit values).
constexpr size_t kPatternChunk = size_t(1) << 22;
constexpr size_t kPatternPad = 8192;
size_t input_shift(int set, int rank) {
  return (size_t(set + 1) * 7919 + size_t(set) * 104729 + size_t(rank) * 1237) % kPatternPad;
}

struct HeadConfig {
  int heads, head_dim;
};

HeadConfig parse_config(const std::string& s) {
  HeadConfig c{};
  char x = 0;
  int used = 0;
  if (std::sscanf(s.c_str(), "%d%c%d%n", &c.heads, &x, &c.head_dim, &used) != 3 || x != 'x' || c.heads < 1 ||
      used != static_cast<int>(s.size()))
    throw InvalidArgument(fmt::format("bench ulysses: config '{}' must be HEADSxHEAD_DIM, e.g. 24x128", s));
  return c;
}

struct RankInputs {
  std::vector<void*> q, k, v;  // rotating sets
  ~RankInputs() {
    for (auto* vec : {&q, &k, &v})
      for (void* p : *vec) cudaFree(p);
  }
};

struct Stats {
  double median = 0, p10 = 0, p90 = 0;
};

// "attention" = attention alone; the rest are variants.
const std::vector<std::string> kRows = {"attention", "serial", "fused", "fused-shaped", "comm-sm"};

// Checked rows of rank r's output [B, S/P, H, D], as indices of its [B, S/P, H] row space
// (row (b, s', h) = (b * S/P + s') * H + h): --check-rows of them, seeded per (point, rank),
// always the first and the last row and, for the first and last batch, heads 0, H/P - 1, H/P
// and H - 1 (the borders between the heads of two source ranks) at shard rows 0, 1, 63, 64, the
// middle, the last two and the two around the first 64-row slice border of the source's tiles.
std::vector<size_t> ulysses_check_rows(const Flags& fl, const ops::UlyssesConfig& c, int world, int r) {
  const int sp = c.seq_len / world, hl = c.heads / world, H = c.heads;
  const int slice = int((64 - (size_t(r) * sp) % 64) % 64);  // first shard row starting a 64-row slice
  std::vector<size_t> must;
  for (int b : {0, c.batch - 1})
    for (int h : {0, hl - 1, hl, H - 1})
      for (int s : {0, 1, 63, 64, slice - 1, slice, sp / 2, sp - 2, sp - 1})
        if (h >= 0 && h < H && s >= 0 && s < sp) must.push_back((size_t(b) * sp + s) * H + h);
  return sample_rows(size_t(c.batch) * sp * H, size_t(std::max(fl.check_rows, 2)),
                     fl.check_seed ^ (uint64_t(c.seq_len) << 20) ^ (uint64_t(H) << 8) ^ (uint64_t(c.head_dim) << 2) ^
                         (uint64_t(r) << 44) ^ uint64_t(c.batch),
                     must);
}

// The row's label in the JSON: its index in the [B, S, H] row space of the whole sequence,
// (b * S + r * S/P + s') * H + h, unique over the ranks.
long long global_row(const ops::UlyssesConfig& c, int world, int r, size_t row) {
  const size_t sp = c.seq_len / world, H = c.heads;
  const size_t h = row % H, s = (row / H) % sp, b = row / (H * sp);
  return static_cast<long long>((b * c.seq_len + size_t(r) * sp + s) * H + h);
}

// fp64 host reference of the checked rows of rank r's output for input set `set`: row (b, s', h)
// is softmax(scale q k^T) v of query row r * S/P + s' of head h over the whole sequence, q, k and
// v read from the pattern (patf: the pattern decoded to floats) as head h's owner (source rank
// h / (H/P), local head h % (H/P), inputs [B, S, H/P, D]) uploaded them. Returns rows x D values.
std::vector<double> ulysses_reference(const ops::UlyssesConfig& c, int world, int r, int set,
                                      const std::vector<size_t>& rows, const std::vector<float>& patf) {
  const int S = c.seq_len, H = c.heads, D = c.head_dim, sp = S / world, hl = H / world;
  if (kPatternChunk % size_t(D) != 0 || patf.size() < kPatternChunk + kPatternPad)
    throw Error(fmt::format("bench ulysses: head dim {} does not divide the input pattern's period", D));
  const double scale = c.softmax_scale > 0 ? c.softmax_scale : 1.0 / std::sqrt(double(D));
  std::vector<double> ref(rows.size() * D);
  parallel_for(rows.size(), [&](size_t i) {
    const size_t row = rows[i];
    const int h = int(row % H), sl = int((row / H) % sp), b = int(row / (size_t(H) * sp));
    const int owner = h / hl, hloc = h % hl;
    const float* base = patf.data() + input_shift(set, owner);
    // Element e of the owner's inputs is base[e % kPatternChunk]; a head row (D values from a
    // multiple of D) never wraps, as kPatternChunk is a multiple of D.
    auto head_row = [&](int s) { return base + (((size_t(b) * S + s) * hl + hloc) * D) % kPatternChunk; };
    std::vector<double> q(D), sc(S), acc(D, 0.0);
    const float* qr = head_row(r * sp + sl);
    for (int d = 0; d < D; ++d) q[d] = qr[d];
    double m = -INFINITY;
    for (int j = 0; j < S; ++j) {
      const float* kj = head_row(j);
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += q[d] * kj[d];
      sc[j] = dot * scale;
      m = std::max(m, sc[j]);
    }
    double sum = 0;
    for (int j = 0; j < S; ++j) {
      const double p = std::exp(sc[j] - m);
      sum += p;
      const float* vj = head_row(j);
      for (int d = 0; d < D; ++d) acc[d] += p * vj[d];
    }
    for (int d = 0; d < D; ++d) ref[i * D + d] = acc[d] / sum;
  });
  return ref;
}

// The checked rows of every local rank: rows (ulysses_check_rows of its global rank) and their
// reference for one input set.
struct RankCheck {
  int rank = 0;
  std::vector<size_t> rows;
  std::vector<double> ref;
};
std::vector<RankCheck> ulysses_references(Team& team, const Flags& fl, const ops::UlyssesConfig& c, int set,
                                          const std::vector<float>& patf) {
  std::vector<RankCheck> out(team.local_count());
  for (int i = 0; i < team.local_count(); ++i) {
    out[i].rank = team.rank(i);
    out[i].rows = ulysses_check_rows(fl, c, team.world_size(), out[i].rank);
    out[i].ref = ulysses_reference(c, team.world_size(), out[i].rank, set, out[i].rows, patf);
  }
  return out;
}

// What a rank's host copy of one output gives the check: its non-finite count (full scan) and
// the checked rows' values.
struct RankGot {
  unsigned long long nonfinite = 0;
  std::vector<float> rows;  // rows x D
};
RankGot extract_rows(const std::vector<uint16_t>& out, const RankCheck& rc, int D, bool bf16) {
  RankGot g;
  g.nonfinite = count_nonfinite_16(out.data(), out.size(), bf16);
  g.rows.resize(rc.rows.size() * D);
  for (size_t j = 0; j < rc.rows.size(); ++j)
    for (int d = 0; d < D; ++d) g.rows[j * D + d] = half_bits_to_float(out[rc.rows[j] * D + d], bf16);
  return g;
}

// The record of one output (every local rank's rows against the reference).
CheckRecord ulysses_record(const ops::UlyssesConfig& c, int world, const std::vector<RankCheck>& chk,
                           const std::vector<RankGot>& got) {
  RowChecker rc(kUlyssesTolerance);
  unsigned long long nonfinite = 0;
  const int D = c.head_dim;
  for (size_t i = 0; i < chk.size(); ++i) {
    nonfinite += got[i].nonfinite;
    for (size_t j = 0; j < chk[i].rows.size(); ++j)
      rc.add_row(global_row(c, world, chk[i].rank, chk[i].rows[j]), got[i].rows.data() + j * D,
                 chk[i].ref.data() + j * D, D);
  }
  return rc.finish(nonfinite,
                   "fp64 host softmax(scale q k^T) v over the head's whole sequence, q/k/v rebuilt from the input "
                   "pattern; seeded rows of every rank's output (row = (b*S + s)*H + h, s the global sequence row)");
}

nlohmann::json bench_point(Team& team, const Flags& fl, const model::Params& params, ops::AttentionDType dt,
                           HeadConfig hc, int S, size_t rotate_bytes, const std::vector<uint16_t>& pattern,
                           const std::vector<float>& patf, double clock_ghz) {
  ops::UlyssesConfig cfg;
  cfg.dtype = dt;
  cfg.batch = fl.batch;
  cfg.seq_len = S;
  cfg.heads = hc.heads;
  cfg.head_dim = hc.head_dim;
  ops::UlyssesOptions opts;
  opts.model = params;
  opts.comm_ctas = fl.comm_ctas;
  opts.chunk_vecs = fl.chunk_vecs;
  opts.tile = fl.tile == "long-kv" ? ops::AttentionTilePolicy::long_kv : ops::AttentionTilePolicy::staged;
  ops::UlyssesAttention op(team, cfg, opts);
  const int n = team.local_count();
  const size_t elems = op.input_elems();
  const size_t set_bytes = elems * 2 * 3;
  const int sets = static_cast<int>(std::max<size_t>(1, (rotate_bytes + set_bytes - 1) / set_bytes));
  std::vector<RankInputs> in(n);
  team.run([&](int i) {
    for (int s = 0; s < sets; ++s)
      for (auto* vec : {&in[i].q, &in[i].k, &in[i].v}) {
        void* p = nullptr;
        XS_CUDA(cudaMalloc(&p, elems * 2), "allocating bench inputs");
        vec->push_back(p);
        const size_t shift = input_shift(s, team.rank(i));
        for (size_t off = 0; off < elems; off += kPatternChunk) {
          const size_t m = std::min(kPatternChunk, elems - off);
          XS_CUDA(cudaMemcpy(static_cast<uint16_t*>(p) + off, pattern.data() + shift, m * 2, cudaMemcpyHostToDevice),
                  "uploading bench inputs");
        }
      }
  });

  nlohmann::json point = {{"seq_len", S}, {"heads", hc.heads}, {"head_dim", hc.head_dim}, {"world", team.world_size()},
                          {"batch", fl.batch}, {"rotating_sets", sets}};
  // Plans (the first use times the attention alone once per rank).
  std::vector<model::UlyssesPlan> plans(n);
  team.run([&](int i) { plans[i] = op.plan(i, in[i].q[0], in[i].k[0], in[i].v[0], team.stream(i)); });
  nlohmann::json pj;
  model::to_json(pj, plans[0]);
  point["plan"] = pj;

  // Reference output (serial, input set 0) for the bitwise check of every variant.
  std::vector<std::vector<uint16_t>> ref(n);
  auto run_once = [&](int i, const std::string& row, int set) {
    if (row == "attention")
      op.attention_only(i, in[i].q[set], in[i].k[set], in[i].v[set], team.stream(i));
    else
      op.forward(i, in[i].q[set], in[i].k[set], in[i].v[set], ops::parse_variant(row), team.stream(i));
  };
  nlohmann::json times = nlohmann::json::object();
  nlohmann::json mismatches = nlohmann::json::object();
  auto key_of = [](const std::string& row) {
    return row == "comm-sm" ? std::string("comm_sm") : row == "fused-shaped" ? std::string("fused_shaped") : row;
  };
  // 1. Correctness (input set 0), every variant against serial's output bit for bit and, on
  //    the checked rows, against the host reference (check0). A variant that fails (e.g. a
  //    device timeout) is reported and left out of the timing; after a timeout the ranks'
  //    counters no longer agree, so the point stops there.
  const bool bf16 = dt == ops::AttentionDType::bf16;
  const std::vector<RankCheck> check0 = ulysses_references(team, fl, cfg, 0, patf);
  nlohmann::json correctness = nlohmann::json::object();
  std::vector<CheckRecord> records;  // every record of the point (the verdict)
  auto add_record = [&](const std::string& key, const CheckRecord& rec, nlohmann::json extra = nlohmann::json::object()) {
    nlohmann::json j = rec.to_json();
    j.update(extra);
    correctness[key] = j;
    records.push_back(rec);
  };
  std::vector<std::string> rows;
  bool failed = false;
  auto wanted = [&](const std::string& row) {
    return std::find(fl.variants.begin(), fl.variants.end(), row) != fl.variants.end();
  };
  for (const std::string& row : kRows) {
    if (row == "attention") {
      if (wanted(row)) rows.push_back(row);
      continue;
    }
    // serial always runs here: it is the reference of the bitwise check.
    if (row != "serial" && !wanted(row)) continue;
    if (failed) {
      add_record(key_of(row), failed_check("not run: an earlier variant of this point failed", kUlyssesTolerance, ""));
      continue;
    }
    std::vector<unsigned long long> wrong(n, 0);
    std::vector<RankGot> got(n);
    try {
      team.run([&](int i) {
        cudaStream_t s = team.stream(i);
        XS_CUDA(cudaMemsetAsync(op.output(i), 0xFF, op.output_bytes(), s), "poisoning the output");
        XS_CUDA(kernels::launch_team_barrier(team.device_view(i), team.next_epoch(i), s), "bench barrier");
        run_once(i, row, 0);
        std::vector<uint16_t> host(op.output_bytes() / 2);
        XS_CUDA(cudaMemcpyAsync(host.data(), op.output(i), op.output_bytes(), cudaMemcpyDeviceToHost, s), "reading");
        XS_CUDA(cudaStreamSynchronize(s), fmt::format("running {} S={}", row, S));
        team.check_device_status(i);
        if (row == "serial") ref[i] = host;
        for (size_t e = 0; e < host.size(); ++e) wrong[i] += host[e] != ref[i][e];
        got[i] = extract_rows(host, check0[i], hc.head_dim, bf16);
      });
    } catch (const Error& e) {
      std::fprintf(stderr, "bench ulysses: %s S=%d failed: %s\n", row.c_str(), S, e.what());
      point["errors"][row] = e.what();
      add_record(key_of(row), failed_check(std::string("the call failed: ") + e.what(), kUlyssesTolerance, ""));
      failed = true;
      continue;
    }
    add_record(key_of(row), ulysses_record(cfg, team.world_size(), check0, got), {{"input_set", 0}});
    unsigned long long total = 0;
    for (auto w : wrong) total += w;
    mismatches[key_of(row)] = total;
    if (wanted(row)) rows.push_back(row);
  }
  // 2. Timing, interleaved: every iteration runs each variant once (device barrier, then
  //    CUDA events around the call), so clock and power drift hit all variants alike. The
  //    order rotates by one every iteration: a fixed order would always give a variant the
  //    same predecessor (and its power state).
  std::vector<std::vector<std::vector<double>>> us(rows.size(), std::vector<std::vector<double>>(n));
  if (!failed) {
    team.run([&](int i) {
      cudaStream_t s = team.stream(i);
      const TeamDevice td = team.device_view(i);
      for (int w = 0; w < fl.warmup; ++w)
        for (const auto& row : rows) run_once(i, row, w % sets);
      // Poison the output (NaN) before the timed calls: what the last one leaves unwritten stays
      // NaN. Every rank passes its poison before its first timed barrier, so no peer stores into
      // this output before it.
      XS_CUDA(cudaMemsetAsync(op.output(i), kPoisonByte, op.output_bytes(), s), "poisoning the output");
      std::vector<cudaEvent_t> ev(2 * fl.iters * rows.size());
      for (auto& e : ev) XS_CUDA(cudaEventCreate(&e), "creating events");
      for (int it = 0; it < fl.iters; ++it)
        for (size_t pos = 0; pos < rows.size(); ++pos) {
          const size_t r = (pos + static_cast<size_t>(it)) % rows.size();  // same on every rank
          const size_t k = 2 * (it * rows.size() + r);
          XS_CUDA(kernels::launch_team_barrier(td, team.next_epoch(i), s), "bench barrier");
          XS_CUDA(cudaEventRecord(ev[k], s), "recording");
          run_once(i, rows[r], it % sets);
          XS_CUDA(cudaEventRecord(ev[k + 1], s), "recording");
        }
      XS_CUDA(cudaStreamSynchronize(s), fmt::format("timing S={}", S));
      team.check_device_status(i);
      for (int it = 0; it < fl.iters; ++it)
        for (size_t r = 0; r < rows.size(); ++r) {
          const size_t k = 2 * (it * rows.size() + r);
          float ms = 0;
          XS_CUDA(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]), "reading events");
          us[r][i].push_back(ms * 1e3);
        }
      for (auto& e : ev) cudaEventDestroy(e);
    });
    for (size_t r = 0; r < rows.size(); ++r) {
      Stats st;
      for (int i = 0; i < n; ++i) {
        st.median = std::max(st.median, quantile(us[r][i], 0.5));
        st.p10 = std::max(st.p10, quantile(us[r][i], 0.1));
        st.p90 = std::max(st.p90, quantile(us[r][i], 0.9));
      }
      times[key_of(rows[r])] = {{"median", st.median}, {"p10", st.p10}, {"p90", st.p90}};
    }
    // 3. The output after the timed calls (untimed): that of the last variant that wrote it in
    //    the last iteration, on that iteration's input set, against the host reference.
    std::string last;
    for (size_t pos = rows.size(); pos-- > 0;) {
      const size_t r = (pos + static_cast<size_t>(fl.iters - 1)) % rows.size();
      if (rows[r] != "attention") {
        last = rows[r];
        break;
      }
    }
    if (!last.empty()) {
      const int set = (fl.iters - 1) % sets;
      const std::vector<RankCheck> chk = set == 0 ? check0 : ulysses_references(team, fl, cfg, set, patf);
      std::vector<RankGot> got(n);
      team.run([&](int i) {
        std::vector<uint16_t> host(op.output_bytes() / 2);
        XS_CUDA(cudaMemcpy(host.data(), op.output(i), op.output_bytes(), cudaMemcpyDeviceToHost),
                "reading the output after the timed calls");
        got[i] = extract_rows(host, chk[i], hc.head_dim, bf16);
      });
      add_record("after_timing", ulysses_record(cfg, team.world_size(), chk, got),
                 {{"variant", key_of(last)}, {"input_set", set}});
    }
  }
  point["times_us"] = times;
  point["mismatch_vs_serial"] = mismatches;
  {
    bool ok = !records.empty() && !point.contains("errors");
    unsigned long long nonfinite = 0, mism = 0;
    long long wrong_rows = 0;
    double worst = 0;
    for (const CheckRecord& rec : records) {
      ok = ok && rec.passed;
      nonfinite += rec.nonfinite;
      wrong_rows += rec.rows_failed;
      worst = std::isfinite(rec.rel_err) && std::isfinite(worst) ? std::max(worst, rec.rel_err)
                                                                  : std::numeric_limits<double>::quiet_NaN();
    }
    for (auto& [k, v] : mismatches.items()) mism += v.get<unsigned long long>();
    ok = ok && mism == 0;
    point["correctness"] = correctness;
    point["nonfinite"] = nonfinite;
    point["rows_failed"] = wrong_rows;
    point["rel_err"] = std::isfinite(worst) && !records.empty() ? nlohmann::json(worst) : nlohmann::json(nullptr);
    point["check"] = ok ? "ok" : "FAILED";
  }

  if (fl.spans && !failed) {
    nlohmann::json spans = nlohmann::json::object();
    for (auto v : {ops::UlyssesVariant::fused, ops::UlyssesVariant::fused_shaped}) {
      if (!wanted(ops::variant_name(v))) continue;
      op.set_record_spans(true);
      std::vector<std::vector<ops::SliceSpan>> rec(n);
      team.run([&](int i) {
        cudaStream_t s = team.stream(i);
        XS_CUDA(kernels::launch_team_barrier(team.device_view(i), team.next_epoch(i), s), "bench barrier");
        op.forward(i, in[i].q[0], in[i].k[0], in[i].v[0], v, s);
        XS_CUDA(cudaStreamSynchronize(s), "span pass");
        team.check_device_status(i);
        rec[i] = op.read_spans(i);
      });
      op.set_record_spans(false);
      std::vector<double> remote, local;
      for (int i = 0; i < n; ++i)
        for (const auto& sp : rec[i])
          (sp.dest_rank == team.rank(i) ? local : remote).push_back(sp.cycles / (clock_ghz * 1e3));
      const bool shaped = v == ops::UlyssesVariant::fused_shaped;
      nlohmann::json sj = {{"count", remote.size()},
                           {"predicted_us", shaped ? plans[0].predicted_shaped_span_us : plans[0].predicted_fused_span_us}};
      if (!remote.empty()) {
        sj["median_us"] = quantile(remote, 0.5);
        sj["p90_us"] = quantile(remote, 0.9);
      }
      if (!local.empty()) {
        sj["local_median_us"] = quantile(local, 0.5);
        sj["local_p90_us"] = quantile(local, 0.9);
      }
      if (!shaped) sj["predicted_cold_us"] = plans[0].predicted_fused_cold_span_us;
      spans[shaped ? "fused_shaped" : "fused"] = sj;
    }
    point["spans"] = spans;
  }
  team.run([&](int i) { in[i] = RankInputs{}; });
  return point;
}

void run(Flags fl) {
  ops::AttentionDType dt;
  if (fl.dtype == "bf16")
    dt = ops::AttentionDType::bf16;
  else if (fl.dtype == "fp16")
    dt = ops::AttentionDType::fp16;
  else
    throw InvalidArgument("bench ulysses: --dtype must be bf16 or fp16, got '" + fl.dtype + "'");
  if (fl.iters < 20) throw InvalidArgument(fmt::format("bench ulysses: --iters {} must be >= 20", fl.iters));
  check_virtual_flag("bench ulysses", fl.virtual_ranks);
  if (fl.warmup < 0) throw InvalidArgument("bench ulysses: --warmup must be >= 0");
  if (fl.check_rows < 2) throw InvalidArgument("bench ulysses: --check-rows must be >= 2");
  if (fl.variants.empty()) throw InvalidArgument("bench ulysses: --variants needs at least one variant");
  if (fl.tile != "staged" && fl.tile != "long-kv")
    throw InvalidArgument("bench ulysses: --tile must be staged or long-kv, got '" + fl.tile + "'");
  if (fl.tile == "long-kv") {
    auto shaped = std::find(fl.variants.begin(), fl.variants.end(), "fused-shaped");
    if (shaped != fl.variants.end()) {
      if (fl.variants_given)
        throw InvalidArgument("bench ulysses: --tile long-kv runs attention, serial, fused and comm-sm (no fused-shaped)");
      fl.variants.erase(shaped);  // the default list, on the long-key tile
    }
  }
  for (const auto& v : fl.variants)
    if (std::find(kRows.begin(), kRows.end(), v) == kRows.end())
      throw InvalidArgument(fmt::format("bench ulysses: unknown variant '{}' (attention, serial, fused, fused-shaped, comm-sm)", v));
  std::vector<HeadConfig> configs;
  for (const auto& c : fl.configs) configs.push_back(parse_config(c));
  if (fl.tile == "long-kv")
    for (const HeadConfig& hc : configs)
      if (hc.head_dim != 128)
        throw InvalidArgument(fmt::format("bench ulysses: --tile long-kv is a d = 128 tile, config {}x{}", hc.heads, hc.head_dim));
  // Every point must be valid before any GPU work starts.
  for (const auto& c : configs)
    for (int s : fl.seqlens) {
      ops::UlyssesConfig u;
      u.dtype = dt;
      u.batch = fl.batch;
      u.seq_len = s;
      u.heads = c.heads;
      u.head_dim = c.head_dim;
      ops::validate_ulysses(u, team_ranks(fl.gpus, fl.virtual_ranks));
    }
  std::string params_used;
  const model::Params params = load_model_params(fl.params, &params_used);

  TeamOptions to;
  to.gpus = fl.gpus;
  to.min_gpus = 2;
  to.wait_timeout_s = fl.timeout_s;
  auto team = make_team(to, fl.virtual_ranks);
  cudaDeviceProp prop{};
  XS_CUDA(cudaGetDeviceProperties(&prop, team->device(0)), "reading device properties");
  if (prop.major != 9 || prop.minor != 0)
    throw InvalidArgument(fmt::format("bench ulysses: needs sm_90 (Hopper) GPUs, found {}", prop.name));
  const size_t rotate_bytes =
      fl.rotate_mib > 0 ? static_cast<size_t>(fl.rotate_mib * 1048576.0) : 2 * static_cast<size_t>(prop.l2CacheSize);
  // SM clock against the global timer, to turn span cycles into microseconds.
  double ghz = 0;
  {
    XS_CUDA(cudaSetDevice(team->device(0)), "selecting GPU 0");
    uint64_t* scratch = nullptr;
    XS_CUDA(cudaMalloc(&scratch, 64), "allocating clock scratch");
    uint64_t h[2] = {0, 0};
    for (int rep = 0; rep < 2; ++rep) {
      XS_CUDA(kernels::launch_probe_clock(rep == 0 ? 20'000'000ull : 2'000'000ull, scratch, nullptr), "clock probe");
      XS_CUDA(cudaMemcpy(h, scratch, sizeof h, cudaMemcpyDeviceToHost), "reading the clock probe");
    }
    cudaFree(scratch);
    ghz = double(h[1]) / double(h[0]);
  }
  const bool bf16 = dt == ops::AttentionDType::bf16;
  const std::vector<uint16_t> pattern = random_halves(bf16, kPatternChunk + kPatternPad, 20261130u);
  std::vector<float> patf(pattern.size());  // the pattern decoded, for the host reference
  for (size_t e = 0; e < pattern.size(); ++e) patf[e] = half_bits_to_float(pattern[e], bf16);

  print_team_banner(*team);
  std::printf("# xstage bench ulysses on %d x %s, %s, batch %d, median of %d runs (max over ranks), model %s\n",
              team->world_size(), prop.name, fl.dtype.c_str(), fl.batch, fl.iters, params_used.c_str());
  std::printf("# check: every variant's output (untimed, input set 0) and the last timed call's: %d seeded rows per "
              "rank vs an fp64 host reference (per row: rel L2 <= %g, max abs <= %g x max|ref|), full non-finite scan "
              "of the NaN-poisoned output; #bad = elements differing from serial, #wrong = rows out of tolerance\n",
              fl.check_rows, kUlyssesTolerance.rel_tol, kUlyssesTolerance.max_abs_rel);
  std::printf("#%6s %4s %4s %10s %10s %10s %10s %10s %8s %8s %6s %6s %6s %9s %6s\n", "S", "H", "D", "attn(us)", "serial",
              "comm-sm", "fused", "shaped", "shp/att", "ser/fus", "#bad", "#wrong", "nonfin", "rel_err", "check");
  nlohmann::json results = nlohmann::json::array();
  for (const auto& c : configs)
    for (int s : fl.seqlens) {
      std::fprintf(stderr, "bench ulysses: S=%d H=%d D=%d ...\n", s, c.heads, c.head_dim);
      nlohmann::json p = bench_point(*team, fl, params, dt, c, s, rotate_bytes, pattern, patf, ghz);
      const auto& t = p["times_us"];
      auto med = [&](const char* k) { return t.contains(k) ? t[k]["median"].get<double>() : std::nan(""); };
      const double att = med("attention"), ser = med("serial"), fus = med("fused"), shp = med("fused_shaped");
      unsigned long long bad = 0;
      for (auto& [k, v] : p["mismatch_vs_serial"].items()) bad += v.get<unsigned long long>();
      const double rel = p["rel_err"].is_number() ? p["rel_err"].get<double>() : std::nan("");
      std::printf(" %6d %4d %4d %10.1f %10.1f %10.1f %10.1f %10.1f %8.3f %8.3f %6llu %6lld %6llu %9.2e %6s%s\n", s,
                  c.heads, c.head_dim, att, ser, med("comm_sm"), fus, shp, shp / att, ser / std::min(fus, shp), bad,
                  p["rows_failed"].get<long long>(), p["nonfinite"].get<unsigned long long>(), rel,
                  p["check"].get<std::string>().c_str(), p.contains("errors") ? "  (errors: see JSON)" : "");
      std::fflush(stdout);
      results.push_back(p);
    }
  int failed = 0;
  for (const auto& p : results) failed += p["check"] != "ok";
  std::printf("# correctness: %s\n", correctness_summary(failed, results.size(), "points").c_str());
  nlohmann::json j;
  if (!fl.json_out.empty()) {
    j = bench_json_header("xstage.bench.ulysses.v1", prop);
    j["world"] = team->world_size();
    j["team"] = team_label(*team);
    j["batch"] = fl.batch;
    j["dtype"] = fl.dtype;
    j["sm_clock_ghz"] = ghz;
    j["model_params"] = params_used;
    j["config"] = {{"warmup", fl.warmup}, {"iters", fl.iters}, {"rotate_bytes", rotate_bytes}, {"tile", fl.tile},
                   {"timing", "variants interleaved per iteration, order rotated by one each iteration; device barrier, then CUDA events around one call per rank; median per rank, max over ranks"},
                   {"check_rows", fl.check_rows}, {"check_seed", fl.check_seed},
                   {"check", "per point, correctness[variant]: the variant's untimed call on input set 0 (NaN-poisoned "
                             "output), bitwise vs serial (mismatch_vs_serial) and seeded rows of every rank vs an fp64 "
                             "host reference, full non-finite scan; correctness.after_timing: the same check of the "
                             "output the last timed call left (output poisoned before the timed calls)"}};
  }
  const size_t points = results.size();
  finish_bench(j, std::move(results), failed, points, fl.json_out, "ulysses", "points");
}

}  // namespace

void add_ulysses_bench_command(CLI::App& app) {
  auto fl = std::make_shared<Flags>();
  auto* cmd = bench_group(app)->add_subcommand(
      "ulysses",
      "Ulysses attention + post-attention All-to-All on --gpus GPUs: attention alone, serial (attention,\n"
      "ncclAlltoAll, permute), comm-sm, fused and fused-shaped, per (heads x head dim, S). Each variant's\n"
      "output is checked bit for bit against serial's and, on seeded rows of every rank, against an fp64 host\n"
      "reference (also after the timed calls); a failed point exits 1. Compare with PyTorch:\n"
      "python/bench_ulysses_torch.py.");
  cmd->add_option("--seqlens,-S", fl->seqlens, "Sequence lengths (divisible by --gpus)")->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--configs", fl->configs, "HEADSxHEAD_DIM list")->delimiter(',')->capture_default_str();
  cmd->add_option("--batch,-B", fl->batch, "Batch size")->capture_default_str();
  cmd->add_option("--gpus", fl->gpus, "Ranks (GPUs), >= 2")->capture_default_str();
  cmd->add_option("--virtual-ranks", fl->virtual_ranks,
                  "Run P ranks on one GPU, each on its own SM partition (2..8; 0: real GPUs). Tests the multi-rank\n"
                  "paths on one GPU; its timings are of HBM-local stores, labelled virtual, never multi-GPU figures")
      ->capture_default_str();
  cmd->add_option("--dtype", fl->dtype, "bf16 or fp16")->capture_default_str();
  cmd->add_option("--warmup", fl->warmup, "Untimed calls per variant")->capture_default_str();
  cmd->add_option("--iters", fl->iters, "Timed calls per variant (>= 20)")->capture_default_str();
  cmd->add_option("--rotate-mib", fl->rotate_mib, "Inputs per rank rotate over at least this much (0: 2 x L2)")
      ->capture_default_str();
  cmd->add_option("--params", fl->params, "Burst-Gap parameters (default: the shipped H200 preset)");
  cmd->add_option("--comm-ctas", fl->comm_ctas, "comm-sm copier CTAs (0: from the model plan)")->capture_default_str();
  cmd->add_option("--tile", fl->tile,
                  "Attention tile of every variant: staged (128 keys, staged epilogue) or long-kv (d = 128: the "
                  "128 x 192 tile storing O from registers to each row's owner; fused-shaped is left out)")
      ->capture_default_str();
  cmd->add_option("--chunk-vecs", fl->chunk_vecs, "fused-shaped stores per thread per step (0: from the model plan)")
      ->capture_default_str();
  cmd->add_option("--variants", fl->variants,
                  "Variants to time (serial also runs once as the correctness reference)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--timeout", fl->timeout_s, "Device wait bound in seconds")->capture_default_str();
  cmd->add_flag("--spans,!--no-spans", fl->spans, "Record per-slice store spans of fused / fused-shaped")
      ->capture_default_str();
  cmd->add_option("--check-rows", fl->check_rows,
                  "Output rows per rank compared with the fp64 host reference (seeded; always the first and last row "
                  "and rows on head and slice borders)")
      ->capture_default_str();
  cmd->add_option("--check-seed", fl->check_seed, "Seed of the checked rows")->capture_default_str();
  cmd->add_option("--json", fl->json_out, "Write results as JSON (xstage.bench.ulysses.v1)");
  cmd->callback([fl, cmd] {
    fl->variants_given = cmd->count("--variants") > 0;
    run(*fl);
  });
}

}  // namespace xstage::cli
