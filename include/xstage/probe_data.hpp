// Probe results as data: one ProbePoint per measured configuration. The probe operator
// (src/ops) produces them on the GPU machine; the fitter and validation (src/model) and the
// CLI consume them; JSON is the interchange format ("xstage.probe.v1").
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xstage {

// One probe configuration and what was measured for it. Times are microseconds, sizes bytes.
struct ProbePoint {
  // ---- configuration ----
  int producers = 0;          // K: producer CTAs
  int threads = 0;            // threads per producer CTA
  long long burst_bytes = 0;  // B: bytes per producer per burst (V = K*B)
  double gap_us = 0;          // G: requested gap between bursts
  std::string gap_kind = "idle";   // "idle" (spin on the clock) | "work" (FMA work of that duration)
  std::string store = "v4";        // "v4" | "v4_release" | "v4_noalloc" | "bulk"
  std::string dest = "peer";       // "peer" (one peer) | "all_peers" (round robin) | "local"
  std::string addr = "fresh";      // "fresh" (new addresses every burst) | "rewrite" (one region)
  int bursts = 0;                  // bursts per producer in the launch
  long long warmup_bytes = 0;      // per producer, remote stores before burst 0 (cold-burst study)
  double pre_wait_us = 0;          // idle time between the warm-up and burst 0
  std::string role = "fit";        // "fit" (used for calibration) | "validate" (held out)

  // ---- measurements ----
  double cold_issue_us = 0;    // issue span of the first burst after launch (median over producers)
  // Steady state = the middle half of the bursts, [n/4, n - n/4) (at least burst 1 on):
  // leaves out the warm-up of the path after launch and the tail, where producers that
  // finished early stop competing.
  double steady_issue_us = 0;  // median over the steady bursts of the per-burst issue span
  double steady_issue_p10_us = 0, steady_issue_p90_us = 0;
  double period_us = 0;        // median start-to-start time of consecutive bursts (steady)
  double gap_measured_us = 0;  // median measured gap (end of issue to next start)
  double completion_us = 0;    // first burst start -> receiver saw all data (flag, acq/rel); 0 if n/a
  double drain_gbps = 0;       // V / period_us, in GB/s (1e9 B/s): the sender-visible rate
  double delivered_gbps = 0;   // K*B*bursts / completion_us: the rate data actually landed
  double aggregate_gbps = 0;   // K*B*bursts / (last producer's end - first producer's start)
  double producer_skew = 0;    // slowest producer's run time / fastest's (1 = evenly served)
  std::vector<double> issue_us_per_burst;  // per burst: median over producers of the issue span

  long long total_bytes() const { return static_cast<long long>(producers) * burst_bytes; }
};

// A whole probe run: points plus the facts needed to read them.
struct ProbeRun {
  std::string device;          // e.g. "2x NVIDIA H200"
  std::string commit;          // git commit of the code that measured
  std::string date;            // ISO-8601 UTC
  int sm_count = 0;
  double clock_ghz = 0;        // SM clock measured during the run (clock64 vs globaltimer)
  double ce_peer_gbps = 0;     // copy-engine peer bandwidth measured in the same run (0 if n/a)
  std::string team = "gpus";   // "gpus", or "virtual": SM partitions of one GPU (HBM-local stores)
  std::string team_note;       // for virtual runs: why these are not NVLink figures
  std::vector<ProbePoint> points;
};

// Which points a calibration or validation step uses: exactly these labels, and no
// cold-study warm-up (those runs are about the first burst only).
struct PointFilter {
  std::string role = "fit";
  std::string dest = "peer";
  std::string store = "v4";
  std::string addr = "fresh";
  std::string gap_kind = "idle";
  bool matches(const ProbePoint& p) const;
  std::string describe() const;
};

void to_json(nlohmann::json& j, const ProbePoint& p);
void from_json(const nlohmann::json& j, ProbePoint& p);
void to_json(nlohmann::json& j, const ProbeRun& r);
void from_json(const nlohmann::json& j, ProbeRun& r);

// Reads a probe JSON file ("xstage.probe.v1"); throws xstage::Error naming the file and the
// problem (unreadable, not JSON, wrong schema, missing field, invalid value).
ProbeRun load_probe_run(const std::string& path);
void save_probe_run(const ProbeRun& run, const std::string& path);

}  // namespace xstage
