// Instantiates the probe kernel for each store flavour and launches it.
#include "kernels/probe/probe_kernel.cuh"

namespace xstage::kernels {
namespace {

template <StoreKind S>
cudaError_t launch_as(const ProbeArgs& a, int producers, int threads, cudaStream_t s) {
  const size_t smem = kProbeStampBytes + (S == StoreKind::bulk ? a.bulk_chunk : 0);
  auto fn = probe_kernel<S>;
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  fn<<<producers, threads, smem, s>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_probe(const ProbeArgs& a, int producers, int threads, cudaStream_t s) {
  switch (a.store) {
    case StoreKind::v4: return launch_as<StoreKind::v4>(a, producers, threads, s);
    case StoreKind::v4_release: return launch_as<StoreKind::v4_release>(a, producers, threads, s);
    case StoreKind::v4_noalloc: return launch_as<StoreKind::v4_noalloc>(a, producers, threads, s);
    case StoreKind::bulk: return launch_as<StoreKind::bulk>(a, producers, threads, s);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_probe_clock(uint64_t spin_ns, uint64_t* out, cudaStream_t s) {
  probe_clock<<<1, 1, 0, s>>>(spin_ns, out);
  return cudaGetLastError();
}

cudaError_t launch_probe_work_calibrate(uint64_t iters, int threads, uint64_t* cycles, float* sink, cudaStream_t s) {
  probe_work_calibrate<<<1, threads, 0, s>>>(iters, cycles, sink);
  return cudaGetLastError();
}

}  // namespace xstage::kernels
