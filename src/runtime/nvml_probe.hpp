// NVLink facts through NVML, loaded at run time (dlopen) so that xstage runs on machines
// without a driver (CI) and builds without nvml.h.
#pragma once
#include <string>
#include <vector>

namespace xstage::detail {

struct NvmlLinks {
  bool available = false;
  std::string status;                    // why not available
  std::vector<int> active_links;         // per bus id given, -1 unknown
  std::vector<std::vector<int>> nvlink;  // [i][j]: 1 yes, 0 no, -1 unknown
};

NvmlLinks probe_nvlink(const std::vector<std::string>& pci_bus_ids);

}  // namespace xstage::detail
