#include "xstage/topology.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include "runtime/check.hpp"
#include "runtime/nvml_probe.hpp"

namespace xstage {
namespace {

int attr(cudaDeviceAttr a, int dev) {
  int v = 0;
  XS_CUDA(cudaDeviceGetAttribute(&v, a, dev), fmt::format("reading attribute {} of GPU {}", int(a), dev));
  return v;
}

std::string version_string(int code) {
  // NCCL encodes >= 2.9 as major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", code / 10000, (code / 100) % 100, code % 100);
}

}  // namespace

Topology discover_topology() {
  Topology t;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    throw Error(std::string("no CUDA GPU visible (") + (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) +
                "); xstage info needs a machine with an NVIDIA GPU and driver");
  int drv = 0;
  cudaDriverGetVersion(&drv);
  t.driver_version = fmt::format("CUDA driver API {}.{}", drv / 1000, (drv % 1000) / 10);
  cudaRuntimeGetVersion(&t.cuda_runtime_version);
  int nccl = 0;
  XS_NCCL(ncclGetVersion(&nccl), "reading the NCCL version");
  t.nccl_version = version_string(nccl);
  t.nccl_header_version = fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  t.nccl_device_api = (NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)) && nccl >= NCCL_VERSION(2, 28, 0);

  std::vector<std::string> bus_ids;
  for (int d = 0; d < n; ++d) {
    GpuInfo g;
    g.index = d;
    cudaDeviceProp p{};
    XS_CUDA(cudaGetDeviceProperties(&p, d), fmt::format("reading properties of GPU {}", d));
    g.name = p.name;
    char bus[64] = {};
    XS_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus, d), fmt::format("reading PCI id of GPU {}", d));
    g.pci_bus_id = bus;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    g.sm_clock_mhz = attr(cudaDevAttrClockRate, d) / 1000.0;
    g.mem_clock_mhz = attr(cudaDevAttrMemoryClockRate, d) / 1000.0;
    g.mem_bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth, d);
    g.mem_total_gib = double(p.totalGlobalMem) / double(1ull << 30);
    g.l2_bytes = p.l2CacheSize;
    g.smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
    // Runtime API has no name for it; 102 is CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED.
    int vmm = 0;
    g.vmm_supported = cudaDeviceGetAttribute(&vmm, static_cast<cudaDeviceAttr>(102), d) == cudaSuccess && vmm != 0;
    cudaGetLastError();
    bus_ids.push_back(g.pci_bus_id);
    t.gpus.push_back(g);
  }
  auto nv = detail::probe_nvlink(bus_ids);
  t.nvml_status = nv.status;
  bool all_ok = true;
  for (int i = 0; i < n; ++i) {
    t.gpus[i].nvlink_links_active = nv.active_links[i];
    all_ok = all_ok && t.gpus[i].vmm_supported;
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      PeerLink l;
      l.src = i;
      l.dst = j;
      int can = 0;
      XS_CUDA(cudaDeviceCanAccessPeer(&can, i, j), fmt::format("asking peer access {}->{}", i, j));
      l.peer_access = can != 0;
      int v = 0;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, i, j) == cudaSuccess)
        l.native_atomics = v != 0;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, i, j) == cudaSuccess) l.perf_rank = v;
      l.nvlink = nv.nvlink[i][j] == 1 ? "yes" : nv.nvlink[i][j] == 0 ? "no" : "unknown";
      all_ok = all_ok && l.peer_access;
      t.links.push_back(l);
    }
  }
  t.symmetric_windows = t.nccl_device_api && all_ok;
  return t;
}

nlohmann::json to_json(const Topology& t) {
  nlohmann::json j;
  j["schema"] = "xstage.info.v1";
  j["driver"] = t.driver_version;
  j["cuda_runtime"] = t.cuda_runtime_version;
  j["nccl_version"] = t.nccl_version;
  j["nccl_header_version"] = t.nccl_header_version;
  j["nccl_device_api"] = t.nccl_device_api;
  j["symmetric_windows"] = t.symmetric_windows;
  j["nvml"] = t.nvml_status;
  j["gpu_count"] = t.gpus.size();
  for (const auto& g : t.gpus)
    j["gpus"].push_back({{"index", g.index},
                         {"name", g.name},
                         {"pci_bus_id", g.pci_bus_id},
                         {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                         {"sm_count", g.sm_count},
                         {"sm_clock_mhz", g.sm_clock_mhz},
                         {"mem_clock_mhz", g.mem_clock_mhz},
                         {"mem_bus_bits", g.mem_bus_bits},
                         {"mem_total_gib", g.mem_total_gib},
                         {"l2_bytes", g.l2_bytes},
                         {"smem_per_block_optin", g.smem_per_block_optin},
                         {"vmm_supported", g.vmm_supported},
                         {"nvlink_links_active", g.nvlink_links_active}});
  j["links"] = nlohmann::json::array();
  for (const auto& l : t.links)
    j["links"].push_back({{"src", l.src},
                          {"dst", l.dst},
                          {"peer_access", l.peer_access},
                          {"native_atomics", l.native_atomics},
                          {"perf_rank", l.perf_rank},
                          {"nvlink", l.nvlink}});
  return j;
}

std::string format_topology_table(const Topology& t) {
  std::string s;
  s += fmt::format("# driver: {}   CUDA runtime: {}   NCCL: {} (headers {})\n", t.driver_version,
                   t.cuda_runtime_version, t.nccl_version, t.nccl_header_version);
  s += fmt::format("# NCCL device API: {}   symmetric windows usable: {}   NVML: {}\n",
                   t.nccl_device_api ? "yes" : "no", t.symmetric_windows ? "yes" : "no", t.nvml_status);
  s += fmt::format("#{:>4} {:<22} {:>6} {:>5} {:>9} {:>9} {:>10} {:>8} {:>6} {:>7}\n", "gpu", "name", "cc", "SMs",
                   "SM MHz", "mem GiB", "L2 MiB", "smem KB", "VMM", "NVLinks");
  for (const auto& g : t.gpus)
    s += fmt::format(" {:>4} {:<22} {:>6} {:>5} {:>9.0f} {:>9.1f} {:>10.1f} {:>8} {:>6} {:>7}\n", g.index, g.name,
                     fmt::format("{}.{}", g.cc_major, g.cc_minor), g.sm_count, g.sm_clock_mhz, g.mem_total_gib,
                     g.l2_bytes / 1048576.0, g.smem_per_block_optin / 1024, g.vmm_supported ? "yes" : "no",
                     g.nvlink_links_active < 0 ? std::string("?") : std::to_string(g.nvlink_links_active));
  if (!t.links.empty()) {
    s += fmt::format("#{:>4} {:>4} {:>12} {:>8} {:>10} {:>7}\n", "src", "dst", "peer access", "atomics", "perf rank",
                     "NVLink");
    for (const auto& l : t.links)
      s += fmt::format(" {:>4} {:>4} {:>12} {:>8} {:>10} {:>7}\n", l.src, l.dst, l.peer_access ? "yes" : "no",
                       l.native_atomics ? "yes" : "no", l.perf_rank, l.nvlink);
  }
  return s;
}

}  // namespace xstage
