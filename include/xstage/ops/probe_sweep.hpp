// Probe sweeps as data: axes whose Cartesian product is the list of configurations, given
// by CLI flags or by a file under bench/ ({"groups": [ {axes...}, ... ]}).
#pragma once
#include <string>
#include <vector>

#include "xstage/probe_data.hpp"

namespace xstage::ops {

struct SweepAxes {
  std::vector<int> producers;          // empty = all SMs (filled by the caller: 0 means "all")
  std::vector<int> threads{512};
  std::vector<long long> burst_bytes{16384};
  std::vector<double> gap_us{0.0};
  std::vector<std::string> gap_kind{"idle"};
  std::vector<std::string> store{"v4"};
  std::vector<std::string> dest{"peer"};
  std::vector<std::string> addr{"fresh"};
  std::vector<long long> warmup_bytes{0};  // per producer, before burst 0 (cold-burst study)
  std::vector<double> pre_wait_us{0.0};     // idle between warm-up and burst 0
  int bursts = 16;
  std::string role = "fit";
  std::string name;
};

// Cartesian product; producers == 0 is replaced by all_sms. Throws InvalidArgument for an
// empty axis or values that can never be valid (K < 0, B not a multiple of 16, negative
// or non-finite gap, unknown names).
std::vector<ProbePoint> expand_sweep(const SweepAxes& axes, int all_sms);

// Reads a sweep file; errors name the file, the group and the field.
std::vector<SweepAxes> load_sweep_file(const std::string& path);

// "64KiB", "16k", "2MiB", "4096" -> bytes; throws InvalidArgument on junk.
long long parse_bytes(const std::string& text);

}  // namespace xstage::ops
