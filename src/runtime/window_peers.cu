#include "runtime/nccl_v228.hpp"
#include "runtime/window_peers.hpp"

namespace xstage::nccl {
namespace {

__global__ void resolve_kernel(ncclWindow_t win, int world, void** out) {
  for (int p = threadIdx.x; p < world; p += blockDim.x) out[p] = peer_ptr(win, 0, p);
}

}  // namespace

cudaError_t resolve_window_peers(ncclWindow_t window, int world, PeerWindow* out) {
  void** d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(void*) * world);
  if (e != cudaSuccess) return e;
  resolve_kernel<<<1, 32>>>(window, world, d);
  e = cudaGetLastError();
  void* h[kMaxTeamSize] = {};
  if (e == cudaSuccess) e = cudaMemcpy(h, d, sizeof(void*) * world, cudaMemcpyDeviceToHost);
  cudaFree(d);
  for (int p = 0; p < world; ++p) out->base[p] = static_cast<char*>(h[p]);
  return e;
}

}  // namespace xstage::nccl
