// How GPU tests decide to skip: they need N visible GPUs (with peer access between them
// when N > 1) and say exactly what was missing.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

namespace xstage::gputest {

inline int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

inline std::string missing_gpus(int need) {
  int n = visible_gpus();
  if (n < need)
    return "needs " + std::to_string(need) + " GPU(s), found " + std::to_string(n) + " (CI has none: skipped)";
  for (int a = 0; a < need; ++a)
    for (int b = 0; b < need; ++b) {
      int can = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can))
        return "GPUs " + std::to_string(a) + " and " + std::to_string(b) + " have no peer access";
    }
  return {};
}

}  // namespace xstage::gputest

#define XS_REQUIRE_GPUS(n)                                               \
  do {                                                                   \
    std::string why_ = ::xstage::gputest::missing_gpus(n);               \
    if (!why_.empty()) GTEST_SKIP() << why_;                             \
  } while (0)
