#include "xstage/error.hpp"

namespace xstage {

std::string format_error(const std::string& context, const std::string& detail) {
  if (context.empty()) return detail;
  if (detail.empty()) return context;
  return context + ": " + detail;
}

}  // namespace xstage

#include <fmt/format.h>

#include <cstring>

#include "runtime/check.hpp"

namespace xstage::detail {

static std::string where(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return fmt::format("{}:{}", base ? base + 1 : file, line);
}

void throw_cuda(cudaError_t e, const char* call, const std::string& what, const char* file, int line) {
  // A failed runtime call also leaves its error as the thread's last error; once reported here
  // it must not resurface at the next unrelated launch check (cudaGetLastError after a kernel).
  // Sticky errors stay regardless: the context is lost and every later call says so.
  (void)cudaGetLastError();
  throw Error(format_error(what, std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) +
                                     ") from " + call + " at " + where(file, line)));
}

void throw_nccl(ncclResult_t r, const char* call, const std::string& what, const char* file, int line) {
  std::string detail = std::string(ncclGetErrorString(r));
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) detail += std::string(" [") + last + "]";
  throw Error(format_error(what, "NCCL error " + std::to_string(static_cast<int>(r)) + ": " + detail +
                                     " from " + call + " at " + where(file, line)));
}

}  // namespace xstage::detail
