// Test support for the attention kernels: device RNG, naive fp32 reference, comparisons.
#ifdef XSTAGE_HAVE_ATTENTION
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/attention_reference.hpp"

namespace xstage::gputest {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

__device__ __forceinline__ float load16(const void* p, int64_t i, bool bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
              : __half2float(static_cast<const __half*>(p)[i]);
}

__global__ void fill_kernel(void* p, size_t n, bool bf16, uint64_t seed, float amplitude) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ull + i);
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float x = (2.f * u - 1.f) * amplitude;
    if (bf16)
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(x);
    else
      static_cast<__half*>(p)[i] = __float2half(x);
  }
}

__global__ void to_float_kernel(const void* p, size_t n, bool bf16, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = load16(p, static_cast<int64_t>(i), bf16);
}

struct RefArgs {
  const void *q, *k, *v;
  int64_t qb, qs, qh, kb, ks, kh, vb, vs, vh;
  int batch, heads, q_len, kv_len, d;
  float scale;
  bool causal, bf16;
  int key_offset;  // causal: query i sees keys j <= i + key_offset
  float* o;
  float* lse;
};

constexpr int kMaxD = 128;

__global__ void reference_kernel(RefArgs a) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t >= (long long)a.batch * a.heads * a.q_len) return;
  // Consecutive threads = consecutive query rows of one (batch, head): K/V reads broadcast.
  const int i = static_cast<int>(t % a.q_len);
  const int h = static_cast<int>((t / a.q_len) % a.heads);
  const int b = static_cast<int>(t / ((long long)a.q_len * a.heads));
  float q[kMaxD];
  const int64_t qoff = b * a.qb + h * a.qh + static_cast<int64_t>(i) * a.qs;
  for (int d = 0; d < a.d; ++d) q[d] = load16(a.q, qoff + d, a.bf16);
  const int n_keys = a.causal ? min(i + 1 + a.key_offset, a.kv_len) : a.kv_len;
  float m = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    const int64_t koff = b * a.kb + h * a.kh + static_cast<int64_t>(j) * a.ks;
    float dot = 0.f;
    for (int d = 0; d < a.d; ++d) dot = fmaf(q[d], load16(a.k, koff + d, a.bf16), dot);
    m = fmaxf(m, dot * a.scale);
  }
  float acc[kMaxD];
  for (int d = 0; d < a.d; ++d) acc[d] = 0.f;
  float sum = 0.f;
  for (int j = 0; j < n_keys; ++j) {
    const int64_t koff = b * a.kb + h * a.kh + static_cast<int64_t>(j) * a.ks;
    float dot = 0.f;
    for (int d = 0; d < a.d; ++d) dot = fmaf(q[d], load16(a.k, koff + d, a.bf16), dot);
    const float p = expf(dot * a.scale - m);
    sum += p;
    const int64_t voff = b * a.vb + h * a.vh + static_cast<int64_t>(j) * a.vs;
    for (int d = 0; d < a.d; ++d) acc[d] = fmaf(p, load16(a.v, voff + d, a.bf16), acc[d]);
  }
  float* o = a.o + ((static_cast<int64_t>(b) * a.q_len + i) * a.heads + h) * a.d;
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  for (int d = 0; d < a.d; ++d) o[d] = acc[d] * inv;
  a.lse[(static_cast<int64_t>(b) * a.heads + h) * a.q_len + i] = sum > 0.f ? m + logf(sum) : -INFINITY;
}

struct CheckArgs {
  const void* o;
  int64_t ob, os, oh;
  int batch, heads, q_len, s_alloc, d;
  bool bf16;
  const float* ref;
  double* sums;                    // [2]: err_sq, ref_sq
  unsigned long long* counts;      // [2]: nan_valid, touched
};

__global__ void check_kernel(CheckArgs c) {
  const long long total = (long long)c.batch * c.s_alloc * c.heads * c.d;
  double err = 0, ref = 0;
  unsigned long long nan = 0, touched = 0;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    const int d = static_cast<int>(e % c.d);
    const int h = static_cast<int>((e / c.d) % c.heads);
    const int s = static_cast<int>((e / ((long long)c.d * c.heads)) % c.s_alloc);
    const int b = static_cast<int>(e / ((long long)c.d * c.heads * c.s_alloc));
    const int64_t off = b * c.ob + h * c.oh + static_cast<int64_t>(s) * c.os + d;
    if (s < c.q_len) {
      const float x = load16(c.o, off, c.bf16);
      const float r = c.ref[((static_cast<int64_t>(b) * c.q_len + s) * c.heads + h) * c.d + d];
      if (!isfinite(x)) ++nan;
      else {
        err += double(x - r) * double(x - r);
      }
      ref += double(r) * r;
    } else {
      if (static_cast<const uint16_t*>(c.o)[off] != 0xFFFFu) ++touched;
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    err += __shfl_xor_sync(0xffffffffu, err, off);
    ref += __shfl_xor_sync(0xffffffffu, ref, off);
    nan += __shfl_xor_sync(0xffffffffu, nan, off);
    touched += __shfl_xor_sync(0xffffffffu, touched, off);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&c.sums[0], err);
    atomicAdd(&c.sums[1], ref);
    atomicAdd(&c.counts[0], nan);
    atomicAdd(&c.counts[1], touched);
  }
}

__global__ void lse_kernel(const float* lse, const float* ref, long long n, float* max_err,
                           unsigned long long* nan) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const float x = lse[i];
    const float r = ref[i];
    if (!isfinite(x)) {
      atomicAdd(nan, 1ull);
      continue;
    }
    const float e = fabsf(x - r) / fmaxf(1.f, fabsf(r));
    atomicMax(reinterpret_cast<unsigned int*>(max_err), __float_as_uint(e));  // e >= 0: bits order like values
  }
}

int blocks_for(long long n, int threads) {
  long long b = (n + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

}  // namespace

double OutputCheck::rel() const { return ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : (err_sq > 0 ? INFINITY : 0.0); }

void fill_random_16bit(void* p, size_t n, ops::AttentionDType dtype, uint64_t seed, float amplitude, cudaStream_t s) {
  fill_kernel<<<blocks_for(static_cast<long long>(n), 256), 256, 0, s>>>(p, n, dtype == ops::AttentionDType::bf16,
                                                                        seed, amplitude);
  check(cudaGetLastError(), "launching fill_kernel");
}

void to_float(const void* p, size_t n, ops::AttentionDType dtype, float* out, cudaStream_t s) {
  to_float_kernel<<<blocks_for(static_cast<long long>(n), 256), 256, 0, s>>>(p, n, dtype == ops::AttentionDType::bf16,
                                                                            out);
  check(cudaGetLastError(), "launching to_float_kernel");
}

void reference_attention(const ops::AttentionArgs& a, float* o_ref, float* lse_ref, cudaStream_t s) {
  if (a.head_dim > kMaxD) throw std::runtime_error("reference: head dim too large");
  RefArgs r{a.q, a.k, a.v,
            a.q_strides.b, a.q_strides.s, a.q_strides.h,
            a.k_strides.b, a.k_strides.s, a.k_strides.h,
            a.v_strides.b, a.v_strides.s, a.v_strides.h,
            a.batch, a.heads, a.q_len, a.kv_len, a.head_dim,
            a.softmax_scale == 0.f ? 1.f / std::sqrt(static_cast<float>(a.head_dim)) : a.softmax_scale,
            a.causal, a.dtype == ops::AttentionDType::bf16, ops::causal_key_offset(a), o_ref, lse_ref};
  const long long n = (long long)a.batch * a.heads * a.q_len;
  reference_kernel<<<blocks_for(n, 128), 128, 0, s>>>(r);
  check(cudaGetLastError(), "launching reference_kernel");
}

OutputCheck check_output(const ops::AttentionArgs& a, int s_alloc, const float* o_ref, cudaStream_t s) {
  double* sums = nullptr;
  unsigned long long* counts = nullptr;
  check(cudaMalloc(&sums, 2 * sizeof(double)), "allocating check sums");
  check(cudaMalloc(&counts, 2 * sizeof(unsigned long long)), "allocating check counts");
  check(cudaMemsetAsync(sums, 0, 2 * sizeof(double), s), "clearing check sums");
  check(cudaMemsetAsync(counts, 0, 2 * sizeof(unsigned long long), s), "clearing check counts");
  CheckArgs c{a.o,       a.o_strides.b, a.o_strides.s, a.o_strides.h, a.batch, a.heads, a.q_len, s_alloc,
              a.head_dim, a.dtype == ops::AttentionDType::bf16, o_ref, sums, counts};
  const long long total = (long long)a.batch * s_alloc * a.heads * a.head_dim;
  check_kernel<<<blocks_for(total, 256) < 4096 ? blocks_for(total, 256) : 4096, 256, 0, s>>>(c);
  check(cudaGetLastError(), "launching check_kernel");
  double hs[2];
  unsigned long long hc[2];
  check(cudaMemcpyAsync(hs, sums, sizeof hs, cudaMemcpyDeviceToHost, s), "reading check sums");
  check(cudaMemcpyAsync(hc, counts, sizeof hc, cudaMemcpyDeviceToHost, s), "reading check counts");
  check(cudaStreamSynchronize(s), "running the output check");
  cudaFree(sums);
  cudaFree(counts);
  OutputCheck r;
  r.err_sq = hs[0];
  r.ref_sq = hs[1];
  r.nan_valid = hc[0];
  r.touched = hc[1];

  // Every row on its own (RowChecker, the benches' per-row rule): the output allocation and
  // the reference back on the host.
  const bool bf16 = a.dtype == ops::AttentionDType::bf16;
  const int64_t span = (a.batch - 1) * a.o_strides.b + static_cast<int64_t>(s_alloc - 1) * a.o_strides.s +
                       (a.heads - 1) * a.o_strides.h + a.head_dim;
  std::vector<uint16_t> out(static_cast<size_t>(span));
  std::vector<float> ref(static_cast<size_t>(a.batch) * a.q_len * a.heads * a.head_dim);
  check(cudaMemcpyAsync(out.data(), a.o, out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost, s),
        "reading the output");
  check(cudaMemcpyAsync(ref.data(), o_ref, ref.size() * sizeof(float), cudaMemcpyDeviceToHost, s),
        "reading the reference");
  check(cudaStreamSynchronize(s), "copying the output check's rows");
  cli::RowChecker rows(kAttentionRowTolerance);
  std::vector<float> got(static_cast<size_t>(a.head_dim));
  for (int b = 0; b < a.batch; ++b)
    for (int q = 0; q < a.q_len; ++q)
      for (int h = 0; h < a.heads; ++h) {
        const uint16_t* o = out.data() + b * a.o_strides.b + static_cast<int64_t>(q) * a.o_strides.s + h * a.o_strides.h;
        for (int d = 0; d < a.head_dim; ++d) got[d] = cli::half_bits_to_float(o[d], bf16);
        const float* rr = ref.data() + ((static_cast<int64_t>(b) * a.q_len + q) * a.heads + h) * a.head_dim;
        const long long id = (static_cast<long long>(b) * a.q_len + q) * a.heads + h;
        rows.add_row(id, got.data(), rr, static_cast<size_t>(a.head_dim));
      }
  const cli::CheckRecord rec = rows.finish(r.nan_valid, "fp32 device reference");
  r.rows_checked = rec.rows_checked;
  r.rows_failed = rec.rows_failed;
  r.worst_row_rel = rec.rel_err;
  r.max_abs_err = rec.max_abs_err;
  if (rec.first_failed_row >= 0) {
    const long long f = rec.first_failed_row;
    r.first_failed_h = static_cast<int>(f % a.heads);
    r.first_failed_s = static_cast<int>((f / a.heads) % a.q_len);
    r.first_failed_b = static_cast<int>(f / (static_cast<long long>(a.heads) * a.q_len));
  }
  return r;
}

LseCheck check_lse(const ops::AttentionArgs& a, const float* lse, const float* lse_ref, cudaStream_t s) {
  float* err = nullptr;
  unsigned long long* nan = nullptr;
  check(cudaMalloc(&err, sizeof(float)), "allocating lse error");
  check(cudaMalloc(&nan, sizeof(unsigned long long)), "allocating lse nan count");
  check(cudaMemsetAsync(err, 0, sizeof(float), s), "clearing lse error");
  check(cudaMemsetAsync(nan, 0, sizeof(unsigned long long), s), "clearing lse nan count");
  const long long n = (long long)a.batch * a.heads * a.q_len;
  lse_kernel<<<blocks_for(n, 256), 256, 0, s>>>(lse, lse_ref, n, err, nan);
  check(cudaGetLastError(), "launching lse_kernel");
  float he = 0;
  unsigned long long hn = 0;
  check(cudaMemcpyAsync(&he, err, sizeof he, cudaMemcpyDeviceToHost, s), "reading lse error");
  check(cudaMemcpyAsync(&hn, nan, sizeof hn, cudaMemcpyDeviceToHost, s), "reading lse nan count");
  check(cudaStreamSynchronize(s), "running the lse check");
  cudaFree(err);
  cudaFree(nan);
  return LseCheck{he, hn};
}

}  // namespace xstage::gputest
#endif  // XSTAGE_HAVE_ATTENTION
