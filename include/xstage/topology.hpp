// What the node looks like: GPUs, their links, and what NCCL offers on it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xstage {

struct GpuInfo {
  int index = 0;
  std::string name;
  std::string pci_bus_id;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  double sm_clock_mhz = 0;      // peak, as reported by the driver
  double mem_clock_mhz = 0;
  int mem_bus_bits = 0;
  double mem_total_gib = 0;
  int l2_bytes = 0;
  int smem_per_block_optin = 0;
  bool vmm_supported = false;   // cuMem* virtual memory (needed by NCCL symmetric windows)
  int nvlink_links_active = -1; // -1: NVML not available
};

struct PeerLink {
  int src = 0, dst = 0;
  bool peer_access = false;     // cudaDeviceCanAccessPeer
  bool native_atomics = false;
  int perf_rank = -1;           // cudaDevP2PAttrPerformanceRank (lower is better)
  std::string nvlink = "unknown";  // "yes" | "no" | "unknown" (NVML P2P NVLink status)
};

struct Topology {
  std::string driver_version;
  int cuda_runtime_version = 0;
  std::string nccl_version;        // runtime ncclGetVersion()
  std::string nccl_header_version; // compiled against
  bool nccl_device_api = false;    // NCCL >= 2.28 device API compiled in and runtime >= 2.28
  bool symmetric_windows = false;  // device API + VMM on every GPU + peer access on every pair
  std::vector<GpuInfo> gpus;
  std::vector<PeerLink> links;
  std::string nvml_status;         // why NVLink data is missing, if it is
};

// Reads the node. Throws Error("no CUDA GPU visible ...") when there is none.
Topology discover_topology();

nlohmann::json to_json(const Topology& t);
std::string format_topology_table(const Topology& t);

}  // namespace xstage
