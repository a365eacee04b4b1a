// The device poly_exp2 (FMA pipe, docs/attention.md §Exponentials off the SFU) gives bit for bit
// what the host copy gives, so the CPU test's error bound (tests/cpu/test_poly_exp2.cpp) holds
// for the kernel's probabilities.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gpu/gpu_env.hpp"
#include "kernels/attention/poly_exp2.hpp"

namespace {

__global__ void poly_exp2_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = xstage::kernels::attention::poly_exp2(x[i]);
}

TEST(PolyExp2Gpu, DeviceMatchesHostBitwise) {
  XS_REQUIRE_GPUS(1);
  std::vector<float> x;
  for (int i = 0; i <= 1'000'000; ++i) x.push_back(-130.f + 142.f * static_cast<float>(i) / 1'000'000.f);
  for (float v : {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -0.f, 0.5f, -0.5f})
    x.push_back(v);
  const int n = static_cast<int>(x.size());
  float *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dy, 0xff, n * sizeof(float)), cudaSuccess);  // NaN poison
  poly_exp2_kernel<<<(n + 255) / 256, 256>>>(dx, dy, n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y(n);
  ASSERT_EQ(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dx);
  cudaFree(dy);
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    const float h = xstage::kernels::attention::poly_exp2(x[i]);
    const bool same = std::isnan(h) ? std::isnan(y[i]) : std::memcmp(&h, &y[i], sizeof h) == 0;
    if (!same && ++mismatches <= 5) ADD_FAILURE() << "x = " << x[i] << ": device " << y[i] << ", host " << h;
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
