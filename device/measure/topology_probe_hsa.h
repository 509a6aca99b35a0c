// Internal to the AMD topology probe (device/measure/topology_probe.cu): HSA facts about one HIP device. Lives
// in its own C++ file because CMake decides MK_HSA_HAS_NUM_XCC (ROCm >= 5.7 headers) for that file.
#pragma once

#include <cstdint>
#include <string>

namespace mk::detail {

struct HsaAgentFacts {
  bool found = false;
  bool matched_by_pci = false;       // false: matched by GPU ordinal because no PCI location matched
  std::string gfx_name;              // HSA_AGENT_INFO_NAME, e.g. "gfx942"
  std::string product_name;          // HSA_AMD_AGENT_INFO_PRODUCT_NAME, e.g. "AMD Instinct MI300X"
  std::uint32_t compute_units = 0;   // HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT
  std::uint64_t cache_bytes[4] = {}; // HSA_AGENT_INFO_CACHE_SIZE: L1..L4, 0 = none reported
  int num_xcc = -1;                  // HSA_AMD_AGENT_INFO_NUM_XCC; -1: headers predate it, or it failed
  std::string error;                 // why found is false
};

// Finds the HSA GPU agent at PCI domain:bus:device (as HIP reports them); falls back to the
// gpu_ordinal-th GPU agent. Never throws: problems are reported in `error`.
HsaAgentFacts query_hsa_gpu_agent(int pci_domain, int pci_bus, int pci_device, int gpu_ordinal);

}  // namespace mk::detail
