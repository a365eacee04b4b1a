// Output checks of the `xstage bench ...` commands (issue 33: every bench cell checks its
// output). Header-only and free of CUDA, so tests/cpu/test_bench_check.cpp covers it.
//
// The recipe of a checked cell (docs/measurement.md, "Output checks"):
//   1. the outputs are poisoned (every byte kPoisonByte: NaN in bf16, fp16, fp8 e4m3 and fp32)
//      after the warm-up and before the timed calls, so an element the timed calls never
//      wrote stays NaN;
//   2. after the timed calls (outside the events), the output of the last one is copied back
//      and scanned in full for non-finite values (count_nonfinite_*);
//   3. a seeded sample of rows (sample_rows: always the first and the last row, rows the
//      bench names, e.g. on tile borders, and seeded draws) is compared, row by row, with an
//      fp32/fp64 host reference (RowChecker). A row fails when its relative L2 error exceeds
//      rel_tol or its largest element error exceeds max_abs_rel * max|ref row| + abs_floor (so one
//      wrong row fails, however long the output), or when it holds a non-finite value;
//   4. the cell's JSON gets the record the checkers read (python/xsbench/correctness.py):
//      {"checked": true, "passed": bool, "max_abs_err": float|null, "rel_err": float|null,
//       "rows_checked": int, "nonfinite": int, "rel_tol": float, ...}.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/parallel_for.hpp"

namespace xstage::cli {

// Every output byte is set to this before the timed calls: 0xFFFF is NaN in bf16 and fp16,
// 0xFF NaN in fp8 e4m3 ("fn"), 0xFFFFFFFF NaN in fp32.
inline constexpr uint8_t kPoisonByte = 0xFF;
// Rows compared per cell unless the bench says otherwise.
inline constexpr int kDefaultCheckRows = 64;

// --- 16-bit and 8-bit decoding ---
inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  float f;
  if (exp == 0x1F) {
    f = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);  // subnormal (or zero)
  } else {
    f = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -f : f;
}
inline float half_bits_to_float(uint16_t h, bool bf16) { return bf16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h); }

// --- full finiteness scans ---
inline unsigned long long count_nonfinite_16(const uint16_t* p, size_t n, bool bf16) {
  const uint16_t exp_mask = bf16 ? 0x7F80u : 0x7C00u;
  unsigned long long bad = 0;
  for (size_t i = 0; i < n; ++i) bad += (p[i] & exp_mask) == exp_mask;
  return bad;
}
// fp8 e4m3 "fn": no infinities; S.1111.111 (0x7F, 0xFF) is NaN.
inline unsigned long long count_nonfinite_fp8(const uint8_t* p, size_t n) {
  unsigned long long bad = 0;
  for (size_t i = 0; i < n; ++i) bad += (p[i] & 0x7Fu) == 0x7Fu;
  return bad;
}
inline unsigned long long count_nonfinite_f32(const float* p, size_t n) {
  unsigned long long bad = 0;
  for (size_t i = 0; i < n; ++i) bad += !std::isfinite(p[i]);
  return bad;
}

using xstage::parallel_for;  // src/runtime/parallel_for.hpp

// --- row sample ---
// Sorted, distinct row indices in [0, n): all rows if n <= k; else the first and the last row,
// every row of `must` that is < n, and seeded uniform draws until k rows are chosen (more than
// k only when `must` alone is longer). Deterministic in (n, k, seed, must).
inline std::vector<size_t> sample_rows(size_t n, size_t k, uint64_t seed, const std::vector<size_t>& must = {}) {
  std::vector<size_t> out;
  if (n == 0) return out;
  if (n <= k) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  out.push_back(0);
  out.push_back(n - 1);
  for (size_t r : must)
    if (r < n) out.push_back(r);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  // n > k here, so there are always rows left to draw.
  while (out.size() < k) {
    const size_t r = pick(rng);
    const auto it = std::lower_bound(out.begin(), out.end(), r);
    if (it == out.end() || *it != r) out.insert(it, r);
  }
  return out;
}

// --- per-row comparison ---
struct RowTolerance {
  double rel_tol = 1e-2;      // per-row ||got - ref||_2 / ||ref||_2
  double max_abs_rel = 2e-2;  // per-row max |got - ref| <= max_abs_rel * max |ref row| + abs_floor
  double abs_floor = 1e-6;
};

// The correctness record of one cell.
struct CheckRecord {
  bool checked = false;
  bool passed = false;
  double max_abs_err = std::numeric_limits<double>::quiet_NaN();  // largest element error, checked rows
  double rel_err = std::numeric_limits<double>::quiet_NaN();      // worst per-row relative L2 error
  long long rows_checked = 0;
  long long rows_failed = 0;          // checked rows out of tolerance (the table's #wrong)
  long long worst_row = -1;           // the row of rel_err (-1: none)
  long long first_failed_row = -1;    // the first failing row (-1: none)
  unsigned long long nonfinite = 0;   // non-finite values of the WHOLE output (full scan)
  RowTolerance tol;
  std::string reference;  // what the rows were compared against
  std::string error;      // why the check could not run (then passed = false)

  // "ok" or "FAILED" (the table's check column and the cell's "check" field).
  const char* verdict() const { return passed ? "ok" : "FAILED"; }

  nlohmann::json to_json() const {
    auto fin = [](double x) -> nlohmann::json { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
    nlohmann::json j = {{"checked", checked},
                        {"passed", passed},
                        {"max_abs_err", fin(max_abs_err)},
                        {"rel_err", fin(rel_err)},
                        {"rows_checked", rows_checked},
                        {"nonfinite", nonfinite},
                        {"rel_tol", tol.rel_tol},
                        {"rows_failed", rows_failed},
                        {"row_max_abs_rule", "per row: max|got - ref| <= " + std::to_string(tol.max_abs_rel) +
                                                 " * max|ref row| + " + std::to_string(tol.abs_floor)},
                        {"poisoned", true},
                        {"reference", reference}};
    if (worst_row >= 0) j["worst_row"] = worst_row;
    if (first_failed_row >= 0) j["first_failed_row"] = first_failed_row;
    if (!error.empty()) j["error"] = error;
    return j;
  }
};

// Accumulates rows (got vs ref) and produces the record.
class RowChecker {
 public:
  explicit RowChecker(RowTolerance tol) : tol_(tol) {}

  // One checked row: got and ref, `cols` values each. Returns whether the row is within
  // tolerance (a non-finite got or ref value fails it).
  template <class G, class R>
  bool add_row(long long row, const G* got, const R* ref, size_t cols) {
    double err_sq = 0, ref_sq = 0, max_err = 0, ref_max = 0;
    bool finite = true;
    for (size_t i = 0; i < cols; ++i) {
      const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
      if (!std::isfinite(g) || !std::isfinite(r)) {
        finite = false;
        continue;
      }
      const double d = g - r;
      err_sq += d * d;
      ref_sq += r * r;
      max_err = std::max(max_err, std::fabs(d));
      ref_max = std::max(ref_max, std::fabs(r));
    }
    Row rw{row, finite, std::sqrt(err_sq), std::sqrt(ref_sq), max_err, ref_max};
    rows_.push_back(rw);
    return finite && max_err <= tol_.max_abs_rel * ref_max + tol_.abs_floor &&
           rw.err_norm <= tol_.rel_tol * std::max(rw.ref_norm, 1e-30);
  }
  // A row whose own check failed for another reason (e.g. an SwiGLU output scale off its
  // reference): counted as failed.
  void fail_row(long long row) { extra_failed_.push_back(row); }

  // The record: nonfinite from the full scan of the output.
  CheckRecord finish(unsigned long long nonfinite, const std::string& reference) const {
    CheckRecord rec;
    rec.checked = true;
    rec.tol = tol_;
    rec.reference = reference;
    rec.nonfinite = nonfinite;
    rec.rows_checked = static_cast<long long>(rows_.size());
    // Relative errors against a floor of 1e-6 x the mean reference row norm (python's
    // xsbench.verify.compare_rows): an all-zero reference row must come out (near) zero.
    double mean_norm = 0;
    for (const Row& r : rows_) mean_norm += r.ref_norm;
    mean_norm = rows_.empty() ? 0 : mean_norm / rows_.size();
    const double floor = std::max(mean_norm * 1e-6, 1e-30);
    bool any_nonfinite_row = false;
    double max_abs = 0, worst = 0;
    std::vector<long long> failed = extra_failed_;
    for (const Row& r : rows_) {
      const double rel = r.err_norm / std::max(r.ref_norm, floor);
      const bool ok = r.finite && r.max_err <= tol_.max_abs_rel * r.ref_max + tol_.abs_floor && rel <= tol_.rel_tol;
      if (!r.finite) any_nonfinite_row = true;
      if (!ok) failed.push_back(r.row);
      max_abs = std::max(max_abs, r.max_err);
      if (rec.worst_row < 0 || rel > worst) {
        worst = rel;
        rec.worst_row = r.row;
      }
    }
    std::sort(failed.begin(), failed.end());
    failed.erase(std::unique(failed.begin(), failed.end()), failed.end());
    rec.rows_failed = static_cast<long long>(failed.size());
    if (!failed.empty()) rec.first_failed_row = failed.front();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    rec.max_abs_err = any_nonfinite_row || rows_.empty() ? nan : max_abs;
    rec.rel_err = any_nonfinite_row || rows_.empty() ? nan : worst;
    rec.passed = !rows_.empty() && failed.empty() && nonfinite == 0;
    return rec;
  }

 private:
  struct Row {
    long long row;
    bool finite;
    double err_norm, ref_norm, max_err, ref_max;
  };
  RowTolerance tol_;
  std::vector<Row> rows_;
  std::vector<long long> extra_failed_;
};

// The record of a cell whose check could not run: failed, with the reason.
inline CheckRecord failed_check(const std::string& why, RowTolerance tol, const std::string& reference) {
  CheckRecord rec;
  rec.checked = true;
  rec.passed = false;
  rec.tol = tol;
  rec.reference = reference;
  rec.error = why;
  return rec;
}

}  // namespace xstage::cli
