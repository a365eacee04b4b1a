// The layer bench's input values (`xstage bench moe`; docs/megamoe.md §Benchmark), shared with the
// CPU tests that replay its checks on dumped rows (tests/cpu/test_bench_moe_replay.cpp): every
// fp8 / packed 4-bit tensor of every rank holds a seeded byte pattern from its start, repeated;
// the scales are constants. The activations start --x-offset bytes in (default 1000003, odd;
// every weight row starts at a multiple of 128 bytes of the pattern): from the same start a
// token's x would equal row t of an expert's W1, making that Linear-1 channel a sum of squares
// that dominates the token's output row (--x-offset 0 reproduces that layout).
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace xstage::cli {

inline constexpr size_t kBenchPatternBytes = size_t(16) << 20;
inline constexpr size_t kBenchXOffset = 1000003;  // the default --x-offset
inline constexpr float kXScale = 1.f / 16, kW8Scale = 1.f / 256, kInt4Scale = 1.f / 64;
inline constexpr uint8_t kMxE8m0 = 121;  // 2^-6

// The pattern: random finite e4m3 codes with |v| <= 2 (exponent field <= 8).
inline std::vector<uint8_t> bench_pattern() {
  std::vector<uint8_t> pat(kBenchPatternBytes);
  std::mt19937 rng(20261130u);
  for (auto& b : pat) b = static_cast<uint8_t>((rng() & 0x80u) | (rng() % 0x40u));
  return pat;
}

// Token `tok`'s x row (H fp8 codes) as the bench uploads it: the pattern from x_offset, repeated.
inline void bench_x_row(const std::vector<uint8_t>& pat, size_t x_offset, size_t tok, int H, uint8_t* x) {
  for (int c = 0; c < H; ++c) x[c] = pat[x_offset + (tok * H + c) % (pat.size() - x_offset)];
}

}  // namespace xstage::cli
