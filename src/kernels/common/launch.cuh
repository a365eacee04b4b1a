// The launch step that the attention and MoE launchers share, for nvcc-compiled launchers
// only (it uses <<<>>>): raise the kernel's dynamic shared-memory limit, then launch the
// persistent grid, in clusters when the kernel has them (launch_persistent_clusters).
#pragma once
#include <cuda_runtime.h>

#include "kernels/common/persistent_grid.hpp"

namespace xstage::kernels {

// `ctas` CTAs of `threads` with `smem_bytes` of dynamic shared memory on `stream`; kCluster > 1:
// clusters of kCluster CTAs along x. Returns the attribute's or the cluster launch's error; a
// plain launch's error is left to the caller's cudaGetLastError (some launchers finish a
// trace, or launch a second kernel, before they read it).
template <int kCluster, class Params>
cudaError_t launch_persistent(void (*fn)(Params), Params const& kp, int ctas, int threads, int smem_bytes,
                              cudaStream_t stream) {
  const cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e != cudaSuccess) return e;
  if constexpr (kCluster == 1) {
    fn<<<ctas, threads, smem_bytes, stream>>>(kp);
    return cudaSuccess;
  } else {
    return launch_persistent_clusters(fn, kp, ctas, kCluster, threads, smem_bytes, stream);
  }
}

}  // namespace xstage::kernels
