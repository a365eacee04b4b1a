// `xstage probe`: run an X-Stage probe sweep on this node and record it as data.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/run_stamp.hpp"
#include "cli/team_flags.hpp"
#include "xstage/error.hpp"
#include "xstage/ops/probe.hpp"
#include "xstage/ops/probe_sweep.hpp"
#include "xstage/topology.hpp"

namespace xstage::cli {
namespace {

struct ProbeFlags {
  int virtual_ranks = 0;
  std::string sweep_file;
  std::vector<int> producers;
  std::vector<int> threads{512};
  std::vector<std::string> burst_bytes{"16KiB"};
  std::vector<double> gap_us{0.0};
  std::vector<std::string> gap_kind{"idle"}, store{"v4"}, dest{"peer"}, addr{"fresh"};
  std::vector<std::string> warmup_bytes{"0"};
  std::vector<double> pre_wait_us{0.0};
  int bursts = 16;
  int gpus = 0;
  int buffer_mib = 1024;
  int ce_mib = 256;
  double timeout_s = 5.0;
  std::string json_out, csv_out;
};

constexpr char kHeader[] = "#{:>5} {:>5} {:>8} {:>9} {:>7} {:>5} {:>11} {:>9} {:>7} {:>7} | {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}\n";
constexpr char kRow[] = " {:>5} {:>5} {:>8} {:>9} {:>7.2f} {:>5} {:>11} {:>9} {:>7} {:>7} | {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>10.1f} {:>9.2f} {:>9.1f}\n";

void print_header() {
  std::printf("%s", fmt::format(kHeader, "K", "thr", "B", "V", "G(us)", "gap", "store", "dest", "addr", "warmup",
                                "cold(us)", "issue(us)", "p90(us)", "period", "drain GB/s", "done(us)", "dlvr GB/s")
                        .c_str());
}

std::string bytes_str(long long b) {
  if (b % (1 << 20) == 0) return fmt::format("{}MiB", b >> 20);
  if (b % 1024 == 0) return fmt::format("{}KiB", b >> 10);
  return fmt::format("{}", b);
}

void print_row(const ProbePoint& p) {
  std::printf("%s", fmt::format(kRow, p.producers, p.threads, bytes_str(p.burst_bytes), bytes_str(p.total_bytes()),
                                p.gap_us, p.gap_kind, p.store, p.dest, p.addr, bytes_str(p.warmup_bytes), p.cold_issue_us,
                                p.steady_issue_us, p.steady_issue_p90_us, p.period_us, p.drain_gbps, p.completion_us,
                                p.delivered_gbps)
                        .c_str());
  std::fflush(stdout);
}

void write_csv(const ProbeRun& run, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw Error("cannot write " + path);
  f << "producers,threads,burst_bytes,total_bytes,gap_us,gap_kind,store,dest,addr,bursts,role,warmup_bytes,"
       "pre_wait_us,cold_issue_us,steady_issue_us,steady_issue_p10_us,steady_issue_p90_us,period_us,gap_measured_us,"
       "completion_us,drain_gbps,delivered_gbps,aggregate_gbps,producer_skew\n";
  for (const auto& p : run.points)
    f << fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.2f},{:.2f},{:.2f},{:.3f}\n",
        p.producers, p.threads, p.burst_bytes, p.total_bytes(), p.gap_us, p.gap_kind, p.store, p.dest, p.addr,
        p.bursts, p.role, p.warmup_bytes, p.pre_wait_us, p.cold_issue_us, p.steady_issue_us, p.steady_issue_p10_us,
        p.steady_issue_p90_us, p.period_us, p.gap_measured_us, p.completion_us, p.drain_gbps, p.delivered_gbps,
        p.aggregate_gbps, p.producer_skew);
}

void run_probe(const ProbeFlags& fl) {
  // Everything that can be checked without a GPU is checked first.
  std::vector<ops::SweepAxes> groups;
  if (!fl.sweep_file.empty()) {
    groups = ops::load_sweep_file(fl.sweep_file);
  } else {
    ops::SweepAxes a;
    a.producers = fl.producers;
    a.threads = fl.threads;
    a.burst_bytes.clear();
    for (const auto& b : fl.burst_bytes) a.burst_bytes.push_back(ops::parse_bytes(b));
    a.gap_us = fl.gap_us;
    a.gap_kind = fl.gap_kind;
    a.store = fl.store;
    a.dest = fl.dest;
    a.addr = fl.addr;
    a.bursts = fl.bursts;
    a.warmup_bytes.clear();
    for (const auto& w : fl.warmup_bytes) a.warmup_bytes.push_back(ops::parse_bytes(w));
    a.pre_wait_us = fl.pre_wait_us;
    groups.push_back(a);
  }
  for (const auto& g : groups) ops::expand_sweep(g, 1);
  if (fl.buffer_mib < 1) throw InvalidArgument("--buffer-mib must be >= 1");

  check_virtual_flag("probe", fl.virtual_ranks);
  Topology topo = discover_topology();
  TeamOptions to;
  to.gpus = fl.gpus;
  to.wait_timeout_s = fl.timeout_s;
  auto team = make_team(to, fl.virtual_ranks);
  ops::Prober prober(*team, size_t(fl.buffer_mib) << 20);
  std::vector<ProbePoint> configs;
  for (const auto& g : groups) {
    auto v = ops::expand_sweep(g, prober.sm_count());
    configs.insert(configs.end(), v.begin(), v.end());
  }
  for (const auto& c : configs) prober.validate(c);  // fail before measuring anything

  ProbeRun run;
  run.device = team->is_virtual() ? fmt::format("{} virtual ranks of 1x {}", team->world_size(), topo.gpus.at(0).name)
                                  : fmt::format("{}x {}", team->world_size(), topo.gpus.at(0).name);
  run.team = team->kind();
  if (team->is_virtual()) run.team_note = std::string(kVirtualNote) + " (" + team->partition_story() + ")";
  print_team_banner(*team);
  run.commit = commit_id();
  run.date = now_iso();
  run.sm_count = prober.sm_count();
  run.clock_ghz = prober.clock_ghz();
  run.ce_peer_gbps = prober.copy_engine_peer_gbps(size_t(fl.ce_mib) << 20, 20);
  std::printf("# xstage probe on %s, %d SMs, SM clock %.3f GHz (measured), copy-engine peer %.1f GB/s, %zu points\n",
              run.device.c_str(), run.sm_count, run.clock_ghz, run.ce_peer_gbps, configs.size());
  print_header();
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < configs.size(); ++i) {
    ProbePoint p = prober.measure(configs[i]);
    run.points.push_back(p);
    print_row(p);
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\r[probe %zu/%zu, %.0f s elapsed, ~%.0f s left]   ", i + 1, configs.size(), el,
                 el / double(i + 1) * double(configs.size() - i - 1));
  }
  std::fprintf(stderr, "\n");
  if (!fl.json_out.empty()) save_probe_run(run, fl.json_out);
  if (!fl.csv_out.empty()) write_csv(run, fl.csv_out);
}

}  // namespace

void add_probe_command(CLI::App& app) {
  auto fl = std::make_shared<ProbeFlags>();
  auto* cmd = app.add_subcommand(
      "probe",
      "Measure the X-Stage: K producer CTAs issue B bytes of remote stores per burst, then a gap G, repeated.\n"
      "Reports per configuration the cold (first) burst's issue span, the steady issue span, the period, the\n"
      "sustained drain rate and the completion time. Needs >= 2 GPUs with peer access (or --dest local).\n"
      "Comma-separated lists on any axis form a Cartesian sweep; --sweep FILE reads groups of axes (bench/).");
  cmd->add_option("--sweep", fl->sweep_file, "Sweep file (JSON, see bench/probe-h200.json); overrides axis flags")
      ->check(CLI::ExistingFile);
  cmd->add_option("--producers,-K", fl->producers, "Producer CTAs K (default: all SMs)")->delimiter(',');
  cmd->add_option("--threads", fl->threads, "Threads per producer (multiple of 32)")->delimiter(',')->capture_default_str();
  cmd->add_option("--burst-bytes,-B", fl->burst_bytes, "Bytes per producer per burst (16KiB, 65536, ...)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--gap-us,-G", fl->gap_us, "Gap between bursts in microseconds")->delimiter(',')->capture_default_str();
  cmd->add_option("--gap-kind", fl->gap_kind, "idle (spin) or work (FMA work of that duration)")->delimiter(',');
  cmd->add_option("--store", fl->store, "v4, v4_release, v4_noalloc, bulk (TMA bulk copy)")->delimiter(',');
  cmd->add_option("--dest", fl->dest, "peer (rank 1), all_peers (round robin), local (control)")->delimiter(',');
  cmd->add_option("--addr", fl->addr, "fresh (new addresses per burst) or rewrite (one region)")->delimiter(',');
  cmd->add_option("--bursts", fl->bursts, "Bursts per launch (first = cold; at most 1024)")->capture_default_str();
  cmd->add_option("--warmup-bytes", fl->warmup_bytes, "Remote stores per producer before burst 0 (cold study)")
      ->delimiter(',');
  cmd->add_option("--pre-wait-us", fl->pre_wait_us, "Idle time between the warm-up and burst 0")->delimiter(',');
  cmd->add_option("--gpus", fl->gpus, "GPUs to use (0 = all)")->capture_default_str();
  cmd->add_option("--virtual-ranks", fl->virtual_ranks,
                  "P ranks on one GPU, each on its own SM partition (2..8; 0: real GPUs): tests the peer and\n"
                  "all-peer destinations on one GPU. Labelled virtual: HBM-local stores, not NVLink; `fit` refuses it")
      ->capture_default_str();
  cmd->add_option("--buffer-mib", fl->buffer_mib, "Symmetric destination buffer per GPU (MiB)")->capture_default_str();
  cmd->add_option("--ce-mib", fl->ce_mib, "Copy-engine reference copy size (MiB)")->capture_default_str();
  cmd->add_option("--timeout-s", fl->timeout_s, "Bound on every device-side wait")->capture_default_str();
  cmd->add_option("--json", fl->json_out, "Write results as JSON (xstage.probe.v1)");
  cmd->add_option("--csv", fl->csv_out, "Write results as CSV");
  cmd->callback([fl] { run_probe(*fl); });
}

}  // namespace xstage::cli
