// The unfused layer's per-token activation kernels (src/kernels/moe/ep_per_token.cu) against the
// host arithmetic the layer reference uses (ops::fp8_e4m3_encode / decode): every code and
// scale, rows past the experts' untouched.
#ifdef XSTAGE_HAVE_MOE
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <vector>

#include "gpu/gpu_env.hpp"
#include "kernels/moe/ep_per_token.hpp"
#include "xstage/ops/moe_quant.hpp"

using namespace xstage;
namespace km = xstage::kernels::moe;

namespace {
template <class T>
T* to_device(const std::vector<T>& h) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, sizeof(T) * h.size()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
}  // namespace

TEST(EpPerToken, RequantisesEveryCodeAsTheHostDoes) {
  XS_REQUIRE_GPUS(1);
  const int I = 384, cap = 320, experts = 3;
  const std::vector<int> counts{100, 0, 200}, offsets{0, 100, 100};  // 300 rows; 20 past them
  const int rows = 300;
  std::mt19937 rng(5);
  std::vector<uint8_t> h(size_t(cap) * I);
  for (auto& b : h) {
    b = static_cast<uint8_t>(rng());
    if ((b & 0x7F) == 0x7F) b &= 0xFE;  // no NaN codes (the epilogue saturates)
  }
  std::vector<float> hs(size_t(I / 128) * cap);
  for (int r = 0; r < cap; ++r)
    for (int g = 0; g < I / 128; ++g)  // row 7: all equal (nothing moves); others over ~6 binades
      hs[size_t(g) * cap + r] = r == 7 ? 0.5f : std::ldexp(1.f + float(rng() % 1000) / 1000.f, -int(rng() % 6));
  uint8_t* dh = to_device(h);
  float* dhs = to_device(hs);
  float* dtok = to_device(std::vector<float>(cap, -1.f));
  int* dc = to_device(counts);
  int* doff = to_device(offsets);
  ASSERT_EQ(km::ep_launch_requant_per_token(dh, dhs, dtok, dc, doff, experts, cap, I, nullptr), cudaSuccess);
  std::vector<uint8_t> got(h.size());
  std::vector<float> tok(cap);
  ASSERT_EQ(cudaMemcpy(got.data(), dh, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(tok.data(), dtok, sizeof(float) * cap, cudaMemcpyDeviceToHost), cudaSuccess);
  long wrong = 0, moved = 0;
  for (int r = 0; r < cap; ++r) {
    float S = 0;
    for (int g = 0; g < I / 128; ++g) S = std::max(S, hs[size_t(g) * cap + r]);
    if (r >= rows) {
      EXPECT_EQ(tok[r], -1.f) << "row " << r << " is past the experts' rows";
    } else {
      EXPECT_EQ(tok[r], S) << r;
    }
    for (int c = 0; c < I; ++c) {
      const uint8_t q = h[size_t(r) * I + c];
      const uint8_t want =
          r >= rows ? q : ops::fp8_e4m3_encode(ops::fp8_e4m3_decode(q) * (hs[size_t(c / 128) * cap + r] / S));
      wrong += got[size_t(r) * I + c] != want;
      moved += want != q;
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(moved, 1000) << "the scales must differ enough to move codes";
  for (void* p : {static_cast<void*>(dh), static_cast<void*>(dhs), static_cast<void*>(dtok), static_cast<void*>(dc),
                  static_cast<void*>(doff)})
    cudaFree(p);
}

TEST(EpPerToken, RequantisationRefusesBadArguments) {
  XS_REQUIRE_GPUS(1);
  float* ds = to_device(std::vector<float>(4, 1.f));
  EXPECT_EQ(km::ep_launch_requant_per_token(nullptr, ds, ds, nullptr, nullptr, 1, 1, 128, nullptr),
            cudaErrorInvalidValue);
  cudaFree(ds);
}
#endif  // XSTAGE_HAVE_MOE
