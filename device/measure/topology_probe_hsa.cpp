// HSA agent queries for the AMD topology probe. Compiled by the host C++ compiler (a HOST_SOURCE of
// mk_topology_probe) so that device/CMakeLists.txt can define MK_HSA_HAS_NUM_XCC when the installed
// hsa_ext_amd.h has HSA_AMD_AGENT_INFO_NUM_XCC (ROCm >= 5.7; Debian's ROCm 5.2 does not).
#include "device/measure/topology_probe_hsa.h"

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#include <cstring>
#include <string>

namespace mk::detail {
namespace {

std::string status_text(hsa_status_t status) {
  const char* text = nullptr;
  if (hsa_status_string(status, &text) == HSA_STATUS_SUCCESS && text) return text;
  return "HSA status " + std::to_string(static_cast<int>(status));
}

struct AgentSearch {
  std::uint32_t pci_domain = 0;
  std::uint32_t pci_bus = 0;
  std::uint32_t pci_device = 0;
  int ordinal = 0;
  int gpus_seen = 0;
  bool have_pci_match = false;
  bool have_ordinal_match = false;
  hsa_agent_t pci_match{};
  hsa_agent_t ordinal_match{};
};

hsa_status_t visit_agent(hsa_agent_t agent, void* data) {
  auto* search = static_cast<AgentSearch*>(data);
  hsa_device_type_t type{};
  if (hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS || type != HSA_DEVICE_TYPE_GPU)
    return HSA_STATUS_SUCCESS;
  if (search->gpus_seen++ == search->ordinal) {
    search->ordinal_match = agent;
    search->have_ordinal_match = true;
  }
  // BDFID: bus 15:8, device 7:3, function 2:0. Zeroed first: some runtimes write fewer bytes.
  std::uint32_t bdf = 0;
  std::uint32_t domain = 0;
  if (hsa_agent_get_info(agent, static_cast<hsa_agent_info_t>(HSA_AMD_AGENT_INFO_BDFID), &bdf) == HSA_STATUS_SUCCESS &&
      hsa_agent_get_info(agent, static_cast<hsa_agent_info_t>(HSA_AMD_AGENT_INFO_DOMAIN), &domain) == HSA_STATUS_SUCCESS) {
    const std::uint32_t bus = (bdf >> 8) & 0xffu;
    const std::uint32_t device = (bdf >> 3) & 0x1fu;
    if (!search->have_pci_match && domain == search->pci_domain && bus == search->pci_bus &&
        device == search->pci_device) {
      search->pci_match = agent;
      search->have_pci_match = true;
    }
  }
  return HSA_STATUS_SUCCESS;
}

std::string fixed_string(const char* chars, size_t size) { return std::string(chars, strnlen(chars, size)); }

}  // namespace

HsaAgentFacts query_hsa_gpu_agent(int pci_domain, int pci_bus, int pci_device, int gpu_ordinal) {
  HsaAgentFacts facts;
  const hsa_status_t init = hsa_init();  // reference counted: HIP has usually initialised HSA already
  if (init != HSA_STATUS_SUCCESS) {
    facts.error = "hsa_init: " + status_text(init);
    return facts;
  }
  AgentSearch search;
  search.pci_domain = static_cast<std::uint32_t>(pci_domain);
  search.pci_bus = static_cast<std::uint32_t>(pci_bus);
  search.pci_device = static_cast<std::uint32_t>(pci_device);
  search.ordinal = gpu_ordinal;
  const hsa_status_t iterated = hsa_iterate_agents(visit_agent, &search);
  if (iterated != HSA_STATUS_SUCCESS) {
    facts.error = "hsa_iterate_agents: " + status_text(iterated);
  } else if (!search.have_pci_match && !search.have_ordinal_match) {
    facts.error = "no HSA GPU agent at PCI " + std::to_string(pci_domain) + ":" + std::to_string(pci_bus) + ":" +
                  std::to_string(pci_device) + " and only " + std::to_string(search.gpus_seen) + " GPU agent(s)";
  } else {
    const hsa_agent_t agent = search.have_pci_match ? search.pci_match : search.ordinal_match;
    facts.found = true;
    facts.matched_by_pci = search.have_pci_match;
    char name[64] = {};
    if (hsa_agent_get_info(agent, HSA_AGENT_INFO_NAME, name) == HSA_STATUS_SUCCESS)
      facts.gfx_name = fixed_string(name, sizeof(name));
    char product[64] = {};
    if (hsa_agent_get_info(agent, static_cast<hsa_agent_info_t>(HSA_AMD_AGENT_INFO_PRODUCT_NAME), product) ==
        HSA_STATUS_SUCCESS)
      facts.product_name = fixed_string(product, sizeof(product));
    std::uint32_t cus = 0;
    if (hsa_agent_get_info(agent, static_cast<hsa_agent_info_t>(HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT), &cus) ==
        HSA_STATUS_SUCCESS)
      facts.compute_units = cus;
    std::uint32_t caches[4] = {};
    if (hsa_agent_get_info(agent, HSA_AGENT_INFO_CACHE_SIZE, caches) == HSA_STATUS_SUCCESS)
      for (int level = 0; level < 4; ++level) facts.cache_bytes[level] = caches[level];
#if defined(MK_HSA_HAS_NUM_XCC)
    std::uint32_t xcc = 0;
    if (hsa_agent_get_info(agent, static_cast<hsa_agent_info_t>(HSA_AMD_AGENT_INFO_NUM_XCC), &xcc) ==
        HSA_STATUS_SUCCESS)
      facts.num_xcc = static_cast<int>(xcc);
#endif
  }
  (void)hsa_shut_down();
  return facts;
}

}  // namespace mk::detail
