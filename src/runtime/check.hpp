// Checked CUDA/NCCL calls: every failure names the call, what was being done and the sizes.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "xstage/error.hpp"

namespace xstage::detail {

[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const std::string& what, const char* file, int line);
[[noreturn]] void throw_nccl(ncclResult_t r, const char* call, const std::string& what, const char* file, int line);

}  // namespace xstage::detail

// XS_CUDA(call, "what was being done (with sizes)")
#define XS_CUDA(call, what)                                                       \
  do {                                                                            \
    cudaError_t xs_e_ = (call);                                                   \
    if (xs_e_ != cudaSuccess)                                                     \
      ::xstage::detail::throw_cuda(xs_e_, #call, (what), __FILE__, __LINE__);     \
  } while (0)

#define XS_NCCL(call, what)                                                       \
  do {                                                                            \
    ncclResult_t xs_r_ = (call);                                                  \
    if (xs_r_ != ncclSuccess)                                                     \
      ::xstage::detail::throw_nccl(xs_r_, #call, (what), __FILE__, __LINE__);     \
  } while (0)
