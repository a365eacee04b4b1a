// The MoE top-k sum (src/kernels/moe/ep_reduce.cuh), both forms in every build: the per-thread
// ep_reduce_tokens and the wide ep_reduce_tokens_wide<k> must write, bit for bit, the host's fp32
// row-order sum rounded to bf16, on every token and channel of outputs poisoned with NaN. Shapes:
// the models' hidden sizes and top-k values, a partial last unit, one token, grids of 1 to 132
// CTAs, and a top-k above 10 (ep_reduce falls back to the per-thread form there).
#ifdef XSTAGE_HAVE_MOE
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/gpu_env.hpp"
#include "kernels/moe/ep_reduce.cuh"

// A named namespace: nvcc's kernel stubs cannot name a kernel in an anonymous one here.
namespace ep_reduce_test {

using xstage::kernels::moe::EpMoeArgs;

constexpr int kThreads = 256;

// form 0: ep_reduce_tokens; 1: ep_reduce_tokens_wide<k>; 2: ep_reduce (what the kernels call).
__global__ void reduce_kernel(EpMoeArgs a, int form) {
  namespace km = xstage::kernels::moe;
  const long long first = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  if (form == 0) return km::ep_reduce_tokens(a, first, stride);
  if (form == 2) return km::ep_reduce(a, first, stride);
  const int lane = static_cast<int>(first & 31);
  const long long w0 = first >> 5, ws = stride >> 5;
  switch (a.top_k) {
    case 1: return km::ep_reduce_tokens_wide<1>(a, lane, w0, ws);
    case 2: return km::ep_reduce_tokens_wide<2>(a, lane, w0, ws);
    case 6: return km::ep_reduce_tokens_wide<6>(a, lane, w0, ws);
    case 8: return km::ep_reduce_tokens_wide<8>(a, lane, w0, ws);
    case 10: return km::ep_reduce_tokens_wide<10>(a, lane, w0, ws);
    default: __trap();
  }
}

float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16_rn(float f) {  // finite inputs: round to nearest, ties to even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

struct Shape {
  int tokens, hidden, k, ctas;
};

TEST(EpReduceGpu, BothFormsWriteTheRowOrderSumBitForBit) {
  XS_REQUIRE_GPUS(1);
  const Shape shapes[] = {
      {1057, 1408, 2, 132},  // DiT-MoE-G: 176 vectors per row, a partial second unit
      {333, 4096, 6, 132},   // DSv4-Flash
      {77, 7168, 10, 3},     // DSv4-Pro width with Qwen3.5's top-k, few CTAs
      {200, 6144, 8, 132},   // GLM-5.2
      {1, 128, 1, 1},        // one token, one vector per lane slot
      {64, 4096, 12, 7},     // top-k above 10: ep_reduce takes the per-thread form
  };
  std::mt19937 rng(20261205);
  std::normal_distribution<float> val(0.f, 1.f);
  std::uniform_real_distribution<float> mag(-6.f, 6.f);
  for (const Shape& s : shapes) {
    const size_t in_n = size_t(s.tokens) * s.k * s.hidden, out_n = size_t(s.tokens) * s.hidden;
    std::vector<uint16_t> comb(in_n);
    // Rows of different magnitudes per token, so the fp32 order of the sum shows in the bf16 result.
    for (size_t i = 0; i < in_n; ++i) comb[i] = float_to_bf16_rn(val(rng) * std::exp2(mag(rng)));
    std::vector<uint16_t> want(out_n);
    for (int t = 0; t < s.tokens; ++t)
      for (int c = 0; c < s.hidden; ++c) {
        float acc = 0.f;
        for (int j = 0; j < s.k; ++j) acc += bf16_to_float(comb[(size_t(t) * s.k + j) * s.hidden + c]);
        want[size_t(t) * s.hidden + c] = float_to_bf16_rn(acc);
      }
    uint16_t *d_comb = nullptr, *d_out = nullptr;
    ASSERT_EQ(cudaMalloc(&d_comb, in_n * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, out_n * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_comb, comb.data(), in_n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EpMoeArgs a;
    a.rank = 0;
    a.tokens = s.tokens;
    a.top_k = s.k;
    a.hidden = s.hidden;
    a.combine_at[0] = d_comb;
    a.out = d_out;
    for (int form = 0; form < 3; ++form) {
      if (form == 1 && s.k > 10) continue;  // no wide form above 10
      ASSERT_EQ(cudaMemset(d_out, 0xff, out_n * 2), cudaSuccess);  // NaN everywhere
      reduce_kernel<<<s.ctas, kThreads>>>(a, form);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint16_t> got(out_n);
      ASSERT_EQ(cudaMemcpy(got.data(), d_out, out_n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      size_t bad = 0, first_bad = 0;
      for (size_t i = 0; i < out_n; ++i)
        if (got[i] != want[i] && bad++ == 0) first_bad = i;
      EXPECT_EQ(bad, 0u) << "form " << form << ", tokens " << s.tokens << " hidden " << s.hidden << " k " << s.k
                         << " ctas " << s.ctas << ": first at token " << first_bad / s.hidden << " channel "
                         << first_bad % s.hidden << " got 0x" << std::hex << got[first_bad] << " want 0x"
                         << want[first_bad];
    }
    cudaFree(d_comb);
    cudaFree(d_out);
  }
}

}  // namespace ep_reduce_test
#endif  // XSTAGE_HAVE_MOE
