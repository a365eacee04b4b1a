#include "runtime/nvml_probe.hpp"

#include <dlfcn.h>

namespace xstage::detail {
namespace {
// The few NVML entry points used, with their C ABI (nvml.h is not part of the toolkit here).
using nvmlDevice = void*;
using InitFn = int (*)();
using ShutdownFn = int (*)();
using ByBusFn = int (*)(const char*, nvmlDevice*);
using LinkStateFn = int (*)(nvmlDevice, unsigned, int*);
using P2PFn = int (*)(nvmlDevice, nvmlDevice, int, int*);
constexpr int kP2PCapsNvlink = 2;   // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kP2PStatusOk = 0;     // NVML_P2P_STATUS_OK
constexpr unsigned kMaxLinks = 18;  // Hopper has 18 NVLink links
}  // namespace

NvmlLinks probe_nvlink(const std::vector<std::string>& ids) {
  NvmlLinks out;
  const size_t n = ids.size();
  out.active_links.assign(n, -1);
  out.nvlink.assign(n, std::vector<int>(n, -1));
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.status = "libnvidia-ml.so.1 not loadable";
    return out;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<ShutdownFn>(dlsym(lib, "nvmlShutdown"));
  auto by_bus = reinterpret_cast<ByBusFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto link_state = reinterpret_cast<LinkStateFn>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
  auto p2p = reinterpret_cast<P2PFn>(dlsym(lib, "nvmlDeviceGetP2PStatus"));
  if (!init || !shutdown || !by_bus || !link_state || !p2p || init() != 0) {
    out.status = "NVML symbols missing or nvmlInit failed";
    dlclose(lib);
    return out;
  }
  std::vector<nvmlDevice> dev(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    if (by_bus(ids[i].c_str(), &dev[i]) != 0) continue;
    int active = 0;
    for (unsigned l = 0; l < kMaxLinks; ++l) {
      int on = 0;
      if (link_state(dev[i], l, &on) != 0) break;
      active += on ? 1 : 0;
    }
    out.active_links[i] = active;
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (i == j || !dev[i] || !dev[j]) continue;
      int st = -1;
      if (p2p(dev[i], dev[j], kP2PCapsNvlink, &st) == 0) out.nvlink[i][j] = (st == kP2PStatusOk) ? 1 : 0;
    }
  shutdown();
  dlclose(lib);
  out.available = true;
  out.status = "ok";
  return out;
}

}  // namespace xstage::detail
