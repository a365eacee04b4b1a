// The softmax's shortcut path against its full path, on the GPU, one warp group of threads
// holding accumulator-shaped score fragments (docs/attention.md §Softmax instruction budget):
// exponentiate_at_reference (kSkipMax) must give the full path's reference, factors, sums and
// probabilities bit for bit wherever it accepts a block, and it must refuse blocks whose scores
// rise past the reference. The blocks are built so that both outcomes occur (the test counts
// them), independent of the build options.
#ifdef XSTAGE_HAVE_ATTENTION
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/gpu_env.hpp"
#include "kernels/attention/softmax.cuh"

// A named namespace: nvcc's kernel stubs cannot name a kernel in an anonymous one here.
namespace softmax_paths_test {

using xstage::kernels::attention::OnlineSoftmax;
using FragLayout = cute::Layout<cute::Shape<cute::Shape<cute::_2, cute::_2, cute::_16>, cute::_1, cute::_1>>;

constexpr int kThreads = 128;  // one warp group
constexpr int kVals = 64;      // a 64 x 128 score block: 64 values per thread
constexpr int kSteps = 12;
// Counters: 0 mismatches of the skip path, 1 blocks skip accepted, 2 refused.
constexpr int kCounters = 3;

using Frag = decltype(cute::make_tensor<float>(FragLayout{}));

__device__ inline bool same(float a, float b) { return __float_as_uint(a) == __float_as_uint(b) || (a != a && b != b); }

__global__ void softmax_paths_kernel(const float* scores, float scale_log2, unsigned* counters) {
  const int t = threadIdx.x;
  OnlineSoftmax<2, 1> full(scale_log2);
  OnlineSoftmax<2, 1> skip(scale_log2);
  Frag sf = cute::make_tensor<float>(FragLayout{}), ss = cute::make_tensor<float>(FragLayout{});
  Frag ps = cute::make_tensor<float>(FragLayout{});
  float rf[2], rs[2];
  for (int step = 0; step < kSteps; ++step) {
    for (int i = 0; i < kVals; ++i) sf(i) = ss(i) = scores[(size_t(step) * kThreads + t) * kVals + i];
    bool accepted = false;
    if (step == 0) {
      full.template update_max<true, true>(sf, rf);
      full.template exponentiate<true, true>(sf);
      skip.template update_max<true, true>(ss, rs);
      skip.template exponentiate<true, true>(ss);
    } else {
      full.template update_max<false, false, true>(sf, rf);
      full.template exponentiate<false, false>(sf);
      accepted = skip.exponentiate_at_reference(ss, ps);
      if (accepted) {
        rs[0] = rs[1] = 1.f;
        for (int i = 0; i < kVals; ++i) ss(i) = ps(i);
      } else {
        skip.template update_max<false, false, true>(ss, rs);
        skip.template exponentiate<false, false>(ss);
      }
    }
    bool skip_ok = true;
    for (int r = 0; r < 2; ++r) {
      skip_ok &= same(full.row_max[r], skip.row_max[r]) && same(rf[r], rs[r]);
      // The skip path adds a block's sum to the row sum in one piece (the same sum: one chain).
      skip_ok &= same(full.row_sum[r], skip.row_sum[r]);
    }
    for (int i = 0; i < kVals; ++i) skip_ok &= same(sf(i), ss(i));
    if (!skip_ok) atomicAdd(&counters[0], 1u);
    if (t % 32 == 0 && step > 0) atomicAdd(&counters[accepted ? 1 : 2], 1u);
  }
}

TEST(SoftmaxPathsGpu, SkipMatchesTheFullPath) {
  XS_REQUIRE_GPUS(1);
  // Scores of a block: N(0, 2) noise, plus per warp a drift so that warp 0 never leaves its
  // first block's reference, warp 1 rises by 3 per block (stays under the 2^8 bound for a few
  // blocks), warp 2 jumps once far above (step 6), warp 3 rises by 20 per block (every block).
  std::mt19937 rng(20261204);
  std::normal_distribution<float> noise(0.f, 2.f);
  std::vector<float> s(size_t(kSteps) * kThreads * kVals);
  for (int step = 0; step < kSteps; ++step)
    for (int t = 0; t < kThreads; ++t) {
      const int w = t / 32;
      const float drift = w == 0 ? 0.f : w == 1 ? 3.f * step : w == 2 ? (step >= 6 ? 60.f : 0.f) : 20.f * step;
      for (int i = 0; i < kVals; ++i) s[(size_t(step) * kThreads + t) * kVals + i] = noise(rng) + drift;
    }
  float* d_s = nullptr;
  unsigned* d_c = nullptr;
  ASSERT_EQ(cudaMalloc(&d_s, s.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_c, kCounters * sizeof(unsigned)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_s, s.data(), s.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_c, 0, kCounters * sizeof(unsigned)), cudaSuccess);
  const float scale_log2 = 0.125f * 1.44269504f;  // 1/sqrt(64) * log2(e)
  softmax_paths_kernel<<<1, kThreads>>>(d_s, scale_log2, d_c);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  unsigned c[kCounters] = {};
  ASSERT_EQ(cudaMemcpy(c, d_c, sizeof c, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_s);
  cudaFree(d_c);
  std::printf("[ softmax paths ] skip: %u accepted, %u refused, %u thread mismatches\n", c[1], c[2], c[0]);
  EXPECT_EQ(c[0], 0u) << "exponentiate_at_reference differs from the full path where it accepted a block";
  EXPECT_GT(c[1], 0u) << "skip accepted no block";
  EXPECT_GT(c[2], 0u) << "skip refused no block: its fallback was not exercised";
}

}  // namespace softmax_paths_test
#endif  // XSTAGE_HAVE_ATTENTION
