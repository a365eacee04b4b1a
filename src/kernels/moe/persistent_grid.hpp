// Grid size of the persistent MoE kernels (host only): `requested` CTAs, or one per SM of the
// current device when requested <= 0, never more than the kernel's tile-count bound.
#pragma once
#include <cuda_runtime.h>

namespace xstage::kernels::moe {

inline cudaError_t persistent_grid(int requested, long long tiles, int& ctas) {
  ctas = requested;
  if (ctas <= 0) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    e = cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
  }
  if (ctas > tiles) ctas = static_cast<int>(tiles);
  return cudaSuccess;
}

}  // namespace xstage::kernels::moe
