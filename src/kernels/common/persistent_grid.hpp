// Grid size of the persistent kernels, attention and MoE (host only, plain C++ so that host
// operators can size workspaces by it): `requested` CTAs, or one per SM of the current device
// when requested <= 0, never more than the kernel's tile-count bound; and their launch in
// clusters.
#pragma once
#include <cuda_runtime.h>

namespace xstage::kernels {

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

// Launches the persistent kernel `fn` in clusters of `cluster` CTAs along x for a grid of `ctas`
// (rounded up to whole clusters), no more clusters than can be resident at once (GPCs may not
// split evenly, so a full grid of clusters may not fit).
template <class Params>
cudaError_t launch_persistent_clusters(void (*fn)(Params), Params const& kp, int ctas, int cluster, int threads,
                                       int smem_bytes, cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = (ctas + cluster - 1) / cluster;
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * cluster), 1, 1);
  int resident = 0;
  cudaError_t e = cudaOccupancyMaxActiveClusters(&resident, fn, &cfg);
  if (e != cudaSuccess) return e;
  if (resident > 0 && clusters > resident) clusters = resident;
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * cluster), 1, 1);
  return cudaLaunchKernelEx(&cfg, fn, kp);
}

}  // namespace xstage::kernels
