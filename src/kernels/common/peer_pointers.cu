#include "kernels/common/peer_pointers.hpp"

#include "runtime/nccl_v228.hpp"

namespace xstage::kernels {
namespace {

__global__ void resolve_peer_pointers_kernel(ncclWindow_t win, size_t offset, int world, void** out) {
  for (int p = threadIdx.x; p < world; p += blockDim.x) out[p] = nccl::peer_ptr(win, offset, p);
}

}  // namespace

cudaError_t resolve_peer_pointers(ncclWindow_t window, size_t offset, int world, void** out_host) {
  void** d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(void*) * world);
  if (e != cudaSuccess) return e;
  resolve_peer_pointers_kernel<<<1, 32>>>(window, offset, world, d);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(out_host, d, sizeof(void*) * world, cudaMemcpyDeviceToHost);
  cudaFree(d);
  return e;
}

}  // namespace xstage::kernels
