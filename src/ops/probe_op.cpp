#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/probe/probe_args.hpp"
#include "runtime/check.hpp"
#include "xstage/ops/probe.hpp"

namespace xstage::ops {

using kernels::DestKind;
using kernels::StoreKind;

struct Prober::Impl {
  Team& team;
  SymmetricBuffer* data = nullptr;
  int sm_count = 0;
  double ghz = 0;
  double cycles_per_work_iter = 0;
  uint64_t* rec = nullptr;  // device
  size_t rec_capacity = 0;  // u64 elements
  uint64_t* scratch = nullptr;
  float* sink = nullptr;
  static constexpr uint32_t kBulkChunk = 32 * 1024;
  explicit Impl(Team& t) : team(t) {}
};

namespace {

StoreKind parse_store(const std::string& s) {
  if (s == "v4") return StoreKind::v4;
  if (s == "v4_release") return StoreKind::v4_release;
  if (s == "v4_noalloc") return StoreKind::v4_noalloc;
  if (s == "bulk") return StoreKind::bulk;
  throw InvalidArgument("probe: unknown store '" + s + "' (v4, v4_release, v4_noalloc, bulk)");
}

DestKind parse_dest(const std::string& s) {
  if (s == "peer") return DestKind::peer;
  if (s == "all_peers") return DestKind::all_peers;
  if (s == "local") return DestKind::local;
  throw InvalidArgument("probe: unknown destination '" + s + "' (peer, all_peers, local)");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * (v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

}  // namespace

Prober::Prober(Team& team, size_t buffer_bytes) : impl_(std::make_unique<Impl>(team)) {
  if (team.local_count() != team.world_size())
    throw InvalidArgument("xstage probe drives all GPUs from one process; run it without a launcher");
  auto& I = *impl_;
  XS_CUDA(cudaSetDevice(team.device(0)), "selecting GPU 0");
  I.sm_count = team.sm_count(0);  // the whole GPU, or rank 0's virtual partition
  I.data = &team.alloc_symmetric(buffer_bytes);
  XS_CUDA(cudaSetDevice(team.device(0)), "selecting GPU 0");  // records live on the sender
  I.rec_capacity = 1 << 20;
  XS_CUDA(cudaMalloc(&I.rec, I.rec_capacity * sizeof(uint64_t)), "allocating probe records");
  XS_CUDA(cudaMalloc(&I.scratch, 4096 * sizeof(uint64_t)), "allocating probe scratch");
  XS_CUDA(cudaMalloc(&I.sink, 4096 * sizeof(float)), "allocating probe sink");
  // SM clock against the global timer (2 ms spin, after a warm-up spin so clocks ramp).
  uint64_t h[2] = {0, 0};
  for (int rep = 0; rep < 2; ++rep) {
    XS_CUDA(kernels::launch_probe_clock(rep == 0 ? 20'000'000ull : 2'000'000ull, I.scratch, nullptr),
            "launching the clock probe");
    XS_CUDA(cudaMemcpy(h, I.scratch, sizeof h, cudaMemcpyDeviceToHost), "reading the clock probe");
  }
  I.ghz = double(h[1]) / double(h[0]);
  // FMA work rate, one CTA of 256 threads (a producer's gap work runs alone on its SM).
  const uint64_t iters = 200000;
  XS_CUDA(kernels::launch_probe_work_calibrate(iters, 256, I.scratch, I.sink, nullptr), "launching work calibration");
  uint64_t cyc = 0;
  XS_CUDA(cudaMemcpy(&cyc, I.scratch, sizeof cyc, cudaMemcpyDeviceToHost), "reading work calibration");
  I.cycles_per_work_iter = double(cyc) / double(iters);
}

Prober::~Prober() {
  if (!impl_) return;
  cudaSetDevice(impl_->team.device(0));
  cudaFree(impl_->rec);
  cudaFree(impl_->scratch);
  cudaFree(impl_->sink);
}

double Prober::clock_ghz() const { return impl_->ghz; }
int Prober::sm_count() const { return impl_->sm_count; }

void Prober::validate(const ProbePoint& c) const {
  const auto& I = *impl_;
  if (c.producers < 1 || c.producers > I.sm_count)
    throw InvalidArgument(fmt::format("probe: producers K={} must be in [1, {}] (one CTA per SM on this GPU)",
                                      c.producers, I.sm_count));
  if (c.threads < 32 || c.threads > 1024 || c.threads % 32)
    throw InvalidArgument(fmt::format("probe: threads per producer {} must be a multiple of 32 in [32, 1024]",
                                      c.threads));
  if (c.burst_bytes <= 0 || c.burst_bytes % 16)
    throw InvalidArgument(fmt::format("probe: burst bytes B={} must be a positive multiple of 16 (the store width)",
                                      c.burst_bytes));
  if (!(c.gap_us >= 0) || !std::isfinite(c.gap_us))
    throw InvalidArgument(fmt::format("probe: gap {} us must be a finite number >= 0", c.gap_us));
  if (c.gap_kind != "idle" && c.gap_kind != "work")
    throw InvalidArgument("probe: gap kind '" + c.gap_kind + "' must be idle or work");
  if (c.addr != "fresh" && c.addr != "rewrite")
    throw InvalidArgument("probe: address pattern '" + c.addr + "' must be fresh or rewrite");
  if (c.bursts < 2 || c.bursts > kernels::kMaxProbeBursts)
    throw InvalidArgument(fmt::format("probe: bursts {} must be in [2, {}] (the first one is the cold burst)",
                                      c.bursts, kernels::kMaxProbeBursts));
  if (c.warmup_bytes < 0 || c.warmup_bytes % 16)
    throw InvalidArgument(fmt::format("probe: warm-up bytes {} must be a multiple of 16 >= 0", c.warmup_bytes));
  if (!(c.pre_wait_us >= 0) || !std::isfinite(c.pre_wait_us))
    throw InvalidArgument(fmt::format("probe: pre-wait {} us must be a finite number >= 0", c.pre_wait_us));
  parse_store(c.store);
  DestKind d = parse_dest(c.dest);
  if (I.team.world_size() > kernels::kMaxProbeRanks)
    throw InvalidArgument(fmt::format("probe: at most {} GPUs are addressed, the team has {}",
                                      kernels::kMaxProbeRanks, I.team.world_size()));
  if (d != DestKind::local && I.team.world_size() < 2)
    throw InvalidArgument("probe: destination '" + c.dest + "' needs at least 2 GPUs with peer access; use --dest local "
                          "on one GPU");
  const uint64_t need =
      uint64_t(c.producers) * (c.burst_bytes * (c.addr == "fresh" ? c.bursts : 1) + c.warmup_bytes);
  if (need > I.data->bytes)
    throw InvalidArgument(fmt::format("probe: K*B*bursts = {} bytes exceeds the probe buffer ({} bytes); use fewer "
                                      "bursts, 'rewrite' addresses, or a larger --buffer-mib",
                                      need, I.data->bytes));
  if (uint64_t(c.bursts) * c.producers * 2 > I.rec_capacity)
    throw InvalidArgument("probe: bursts x producers too large for the record buffer");
}

ProbePoint Prober::measure(const ProbePoint& c) {
  validate(c);
  auto& I = *impl_;
  Team& team = I.team;
  const int K = c.producers;
  kernels::ProbeArgs a{};
  a.team = team.device_view(0);
  a.dst = I.data->peers[0];
  a.dest = parse_dest(c.dest);
  a.peer = team.world_size() > 1 ? 1 : 0;
  a.store = parse_store(c.store);
  a.fresh = c.addr == "fresh";
  a.burst_bytes = static_cast<uint64_t>(c.burst_bytes);
  a.bursts = c.bursts;
  const double gap_cycles = c.gap_us * 1e3 * I.ghz;
  a.gap_cycles = static_cast<uint64_t>(gap_cycles);
  a.work_iters = c.gap_kind == "work" ? static_cast<uint64_t>(gap_cycles / I.cycles_per_work_iter) : 0;
  a.bulk_chunk = static_cast<uint32_t>(std::min<uint64_t>(Impl::kBulkChunk, a.burst_bytes));
  a.warmup_bytes = static_cast<uint64_t>(c.warmup_bytes);
  a.warmup_offset = uint64_t(K) * c.burst_bytes * (a.fresh ? c.bursts : 1);
  a.pre_wait_cycles = static_cast<uint64_t>(c.pre_wait_us * 1e3 * I.ghz);
  a.rec = I.rec;
  a.done_cycles = I.scratch;
  a.gtime = I.scratch + 8;
  a.counter_offset = CtrlLayout::kUserFlags;
  a.counter_target = static_cast<uint64_t>(K);
  a.sink = I.sink;
  // Completion counters start at zero on every rank (single-process mode: the host reaches
  // every rank's copy of the control window).
  for (int i = 0; i < team.local_count(); ++i) {
    XS_CUDA(cudaSetDevice(team.device(i)), "selecting GPU");
    char* ctrl = static_cast<char*>(team.ctrl().local[i]);
    XS_CUDA(cudaMemset(ctrl + a.counter_offset, 0, sizeof(uint64_t) * team.world_size()), "clearing counters");
    XS_CUDA(cudaDeviceSynchronize(), "clearing completion counters");
  }
  XS_CUDA(cudaSetDevice(team.device(0)), "selecting GPU 0");
  XS_CUDA(cudaMemset(I.rec, 0, sizeof(uint64_t) * 2 * K * c.bursts), "clearing probe records");
  XS_CUDA(kernels::launch_probe(a, K, c.threads, team.stream(0)),
          fmt::format("launching the probe kernel (K={}, threads={}, B={})", K, c.threads, c.burst_bytes));
  cudaStream_t s = team.stream(0);
  XS_CUDA(cudaStreamSynchronize(s), "running the probe kernel");
  team.check_device_status(0);
  std::vector<uint64_t> rec(2 * size_t(K) * c.bursts);
  uint64_t done = 0;
  XS_CUDA(cudaMemcpy(rec.data(), I.rec, rec.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "reading records");
  XS_CUDA(cudaMemcpy(&done, I.scratch, sizeof done, cudaMemcpyDeviceToHost), "reading completion time");
  std::vector<uint64_t> gt(2 * size_t(K));
  XS_CUDA(cudaMemcpy(gt.data(), I.scratch + 8, gt.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost),
          "reading producer run times");

  // Turn cycles into microseconds.
  const double us_per_cycle = 1e-3 / I.ghz;
  auto start = [&](int b, int k) { return rec[(size_t(b) * K + k) * 2]; };
  auto end = [&](int b, int k) { return rec[(size_t(b) * K + k) * 2 + 1]; };
  ProbePoint p = c;
  p.issue_us_per_burst.assign(c.bursts, 0);
  // Steady window: the middle half of the bursts (see ProbePoint::steady_issue_us).
  const int lo = std::max(1, c.bursts / 4), hi = std::max(lo + 1, c.bursts - c.bursts / 4);
  // Per burst: the median over producers of its issue span, of the time to the next burst's
  // start (period) and of the idle time in between (gap); then medians over the window.
  std::vector<double> steady, periods, gaps, span(K), per(K), gap(K);
  for (int b = 0; b < c.bursts; ++b) {
    for (int k = 0; k < K; ++k) span[k] = double(end(b, k) - start(b, k)) * us_per_cycle;
    p.issue_us_per_burst[b] = median(span);
    if (b < lo || b >= hi) continue;
    steady.push_back(p.issue_us_per_burst[b]);
    if (b + 1 < c.bursts) {
      for (int k = 0; k < K; ++k) {
        per[k] = double(start(b + 1, k) - start(b, k)) * us_per_cycle;
        gap[k] = double(start(b + 1, k) - end(b, k)) * us_per_cycle;
      }
      periods.push_back(median(per));
      gaps.push_back(median(gap));
    }
  }
  p.cold_issue_us = p.issue_us_per_burst[0];
  p.steady_issue_us = median(steady);
  p.steady_issue_p10_us = quantile(steady, 0.1);
  p.steady_issue_p90_us = quantile(steady, 0.9);
  p.period_us = median(periods);
  p.gap_measured_us = median(gaps);
  p.completion_us = double(done) * us_per_cycle;
  p.drain_gbps = p.period_us > 0 ? double(p.total_bytes()) / (p.period_us * 1e3) : 0;
  // Whole-launch view on the GPU-wide timer: all producers' bytes over first start to last
  // end, and how unevenly the producers were served (slowest over fastest run time).
  uint64_t g0 = ~0ull, g1 = 0;
  double run_min = 1e300, run_max = 0;
  for (int k = 0; k < K; ++k) {
    g0 = std::min(g0, gt[2 * k]);
    g1 = std::max(g1, gt[2 * k + 1]);
    const double r = double(gt[2 * k + 1] - gt[2 * k]);
    run_min = std::min(run_min, r);
    run_max = std::max(run_max, r);
  }
  p.aggregate_gbps = g1 > g0 ? double(p.total_bytes()) * c.bursts / double(g1 - g0) : 0;
  p.producer_skew = run_min > 0 ? run_max / run_min : 0;
  p.delivered_gbps =
      p.completion_us > 0 ? double(p.total_bytes()) * c.bursts / (p.completion_us * 1e3) : 0;
  return p;
}

double Prober::copy_engine_peer_gbps(size_t bytes, int reps) {
  Team& team = impl_->team;
  if (team.world_size() < 2 || team.is_virtual()) return 0;  // no second GPU to copy to
  void *src = nullptr, *dst = nullptr;
  XS_CUDA(cudaSetDevice(team.device(1)), "selecting GPU 1");
  XS_CUDA(cudaMalloc(&dst, bytes), "allocating the copy-engine destination");
  XS_CUDA(cudaSetDevice(team.device(0)), "selecting GPU 0");
  XS_CUDA(cudaMalloc(&src, bytes), "allocating the copy-engine source");
  cudaError_t pe = cudaDeviceEnablePeerAccess(team.device(1), 0);
  if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) XS_CUDA(pe, "enabling peer access 0->1");
  cudaGetLastError();
  cudaEvent_t e0, e1;
  XS_CUDA(cudaEventCreate(&e0), "creating events");
  XS_CUDA(cudaEventCreate(&e1), "creating events");
  cudaStream_t s = team.stream(0);
  std::vector<double> gbps;
  for (int r = 0; r < reps + 3; ++r) {
    XS_CUDA(cudaEventRecord(e0, s), "recording an event");
    XS_CUDA(cudaMemcpyPeerAsync(dst, team.device(1), src, team.device(0), bytes, s), "copy-engine peer copy");
    XS_CUDA(cudaEventRecord(e1, s), "recording an event");
    XS_CUDA(cudaEventSynchronize(e1), "timing the peer copy");
    float ms = 0;
    XS_CUDA(cudaEventElapsedTime(&ms, e0, e1), "reading the peer copy time");
    if (r >= 3) gbps.push_back(double(bytes) / (ms * 1e6));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(src);
  cudaSetDevice(team.device(1));
  cudaFree(dst);
  cudaSetDevice(team.device(0));
  return median(gbps);
}

}  // namespace xstage::ops
