// Small pieces every `xstage bench ...` command shares: quantiles of timings, random 16-bit
// inputs, writing the JSON result file.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/run_stamp.hpp"
#include "model/json_file.hpp"
#include "xstage/error.hpp"

namespace xstage::cli {

// Untimed launches until `ms` milliseconds have passed: launch(i) for i = first, first + 1, ...,
// sync() after every 16. Under sustained tensor work the H200 leaves its boost clock for the
// power-capped one within ~0.1-0.3 s, so the timed launches that follow see the clock a real
// layer loop sees, not a short burst's (docs/measurement.md §Comparing kernel variants on a
// power-capped card). Returns the next i.
template <class Launch, class Sync>
int sustain_clock(double ms, int first, Launch&& launch, Sync&& sync) {
  const auto t0 = std::chrono::steady_clock::now();
  int i = first;
  while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() < ms) {
    for (int j = 0; j < 16; ++j) launch(i++);
    sync();
  }
  return i;
}

// Linear-interpolated quantile q in [0, 1] of a non-empty sample.
inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

// n bf16 (bf16 = true) or fp16 encodings of uniform(-1, 1) values, deterministic in seed.
inline std::vector<uint16_t> random_halves(bool bf16, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> out(n);
  for (auto& h : out) {
    const float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if (bf16) {
      h = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);  // round to nearest even
    } else {
      // |f| < 1: normal halves down to 2^-14, smaller ones flush to signed zero (fine for a bench).
      const uint32_t sign = (bits >> 16) & 0x8000u;
      const int exp = static_cast<int>((bits >> 23) & 0xFF) - 127 + 15;
      const uint32_t mant = bits & 0x7FFFFFu;
      h = exp <= 0 ? static_cast<uint16_t>(sign)
                   : static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((mant + 0x1000u) >> 13));
    }
  }
  return out;
}

// Writes j (indented) to path; throws Error naming the file when it cannot be written.
inline void write_json_file(const nlohmann::json& j, const std::string& path) {
  xstage::detail::save_json_file(j, path, "JSON file", 2);
}

// The closing line of a bench's output check: "N cells checked, all pass" or "F of N cells
// FAILED their output check" (unit: what a row of that bench is called).
inline std::string correctness_summary(size_t failed, size_t total, const char* unit = "cells") {
  return failed ? fmt::format("{} of {} {} FAILED their output check", failed, total, unit)
                : fmt::format("{} {} checked, all pass", total, unit);
}

// The fields a bench JSON file of one device opens with: schema, tool, the device (name, SMs,
// L2 bytes), commit and date. Prop: cudaDeviceProp (kept generic so this header needs no CUDA).
template <class Prop>
nlohmann::json bench_json_header(const char* schema, Prop const& prop) {
  return nlohmann::json{{"schema", schema},         {"tool", "xstage"},
                        {"device", prop.name},      {"sm_count", prop.multiProcessorCount},
                        {"l2_bytes", prop.l2CacheSize}, {"commit", commit_id()},
                        {"date", now_iso()}};
}

// Writes the result list and the failed-cell count into the bench JSON (if --json was given),
// then fails the command if any cell (or point) failed its output check.
inline void finish_bench(nlohmann::json& j, nlohmann::json results, size_t failed, size_t cells,
                         const std::string& json_out, const char* name,
                         const char* unit = "cells") {
  if (!json_out.empty()) {
    j["results"] = std::move(results);
    j["cells_failed"] = failed;
    write_json_file(j, json_out);
  }
  if (failed) throw Error(fmt::format("bench {}: {} of {} {} FAILED their output check (exit 1)", name, failed, cells, unit));
}

}  // namespace xstage::cli
