// Random inputs and the naive fp32 reference of the MoE grouped GEMM (see moe_reference.hpp).
#include "moe_reference.hpp"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "runtime/check.hpp"

namespace xstage::gputest {
namespace {

__device__ __forceinline__ float uniform01(uint64_t seed, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + i * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull;
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return static_cast<float>(x >> 40) * (1.f / 16777216.f);
}

__global__ void fill_fp8_kernel(uint8_t* p, size_t n, uint64_t seed, float amp) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float v = (2.f * uniform01(seed, i) - 1.f) * amp;
    p[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
}

__global__ void fill_float_kernel(float* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = lo + (hi - lo) * uniform01(seed, i);
}

__device__ __forceinline__ float fp8_to_float(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
}

// One expert: a 16 x 16 block of threads computes 16 rows x 16 columns.
__global__ void ref_kernel(const uint8_t* a, const float* sa, const uint8_t* b, const float* sb, int row0, int rows,
                           int m_total, int n, int k, float* c) {
  __shared__ float as[16][17];
  __shared__ float bs[16][17];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int r = blockIdx.y * 16 + ty;  // row of the expert
  const int j = blockIdx.x * 16 + tx;  // output column
  const int kbs = k / 128;
  float acc = 0.f, blk = 0.f;
  for (int k0 = 0; k0 < k; k0 += 16) {
    const int ra = blockIdx.y * 16 + ty;
    as[ty][tx] = ra < rows ? fp8_to_float(a[static_cast<int64_t>(row0 + ra) * k + k0 + tx]) : 0.f;
    const int jb = blockIdx.x * 16 + ty;
    bs[ty][tx] = fp8_to_float(b[static_cast<int64_t>(jb) * k + k0 + tx]);
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk) blk += as[ty][kk] * bs[tx][kk];
    __syncthreads();
    if ((k0 + 16) % 128 == 0) {
      const int kb = k0 / 128;
      if (r < rows) acc += blk * sa[static_cast<int64_t>(kb) * m_total + row0 + r] * sb[(j / 128) * kbs + kb];
      blk = 0.f;
    }
  }
  if (r < rows) c[static_cast<int64_t>(row0 + r) * n + j] = acc;
}

// The same with fp32 weights that carry their scales.
__global__ void ref_f32w_kernel(const uint8_t* a, const float* sa, const float* w, int row0, int rows, int m_total,
                                int n, int k, float* c) {
  __shared__ float as[16][17];
  __shared__ float ws[16][17];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int r = blockIdx.y * 16 + ty;
  const int j = blockIdx.x * 16 + tx;
  float acc = 0.f, blk = 0.f;
  for (int k0 = 0; k0 < k; k0 += 16) {
    as[ty][tx] = r < rows ? fp8_to_float(a[static_cast<int64_t>(row0 + r) * k + k0 + tx]) : 0.f;
    ws[ty][tx] = w[static_cast<int64_t>(blockIdx.x * 16 + ty) * k + k0 + tx];
    __syncthreads();
    for (int kk = 0; kk < 16; ++kk) blk += as[ty][kk] * ws[tx][kk];
    __syncthreads();
    if ((k0 + 16) % 128 == 0) {
      if (r < rows) acc += blk * sa[static_cast<int64_t>(k0 / 128) * m_total + row0 + r];
      blk = 0.f;
    }
  }
  if (r < rows) c[static_cast<int64_t>(row0 + r) * n + j] = acc;
}

}  // namespace

void reference_expert_gemm_f32w(const uint8_t* a, const float* a_scales, const float* w, int row0, int rows,
                                int m_total, int n, int k, float* c, cudaStream_t s) {
  if (rows == 0) return;
  ref_f32w_kernel<<<dim3(n / 16, (rows + 15) / 16), dim3(16, 16), 0, s>>>(a, a_scales, w, row0, rows, m_total, n, k, c);
  XS_CUDA(cudaGetLastError(), "launching the w4a8 reference");
}

void fill_fp8_random(uint8_t* p, size_t n, uint64_t seed, float amplitude, cudaStream_t s) {
  fill_fp8_kernel<<<1024, 256, 0, s>>>(p, n, seed, amplitude);
  XS_CUDA(cudaGetLastError(), "launching fill_fp8_random");
}

void fill_float_random(float* p, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  fill_float_kernel<<<1024, 256, 0, s>>>(p, n, seed, lo, hi);
  XS_CUDA(cudaGetLastError(), "launching fill_float_random");
}

void poison(void* p, size_t bytes, cudaStream_t s) { XS_CUDA(cudaMemsetAsync(p, 0xFF, bytes, s), "poisoning"); }

void reference_grouped_gemm(const uint8_t* a, const float* a_scales, const uint8_t* b, const float* b_scales,
                            const std::vector<int>& counts, const std::vector<int>& offsets, int m_total, int n,
                            int k, float* c, cudaStream_t s) {
  const int experts = static_cast<int>(counts.size());
  for (int e = 0; e < experts; ++e) {
    if (counts[e] == 0) continue;
    dim3 grid(n / 16, (counts[e] + 15) / 16);
    ref_kernel<<<grid, dim3(16, 16), 0, s>>>(a, a_scales, b + static_cast<int64_t>(e) * n * k,
                                             b_scales + static_cast<int64_t>(e) * (n / 128) * (k / 128), offsets[e],
                                             counts[e], m_total, n, k, c);
    XS_CUDA(cudaGetLastError(), "launching the moe reference");
  }
}

}  // namespace xstage::gputest
