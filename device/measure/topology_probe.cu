// probe_topology for NVIDIA (thread-block clusters + %smid) and AMD (HW_REG_HW_ID / HW_REG_XCC_ID).
// See device/measure/topology_probe.h for the interface and docs/topology.md for what is measured vs assumed.
#include "device/measure/topology_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "device/device_atomics.h"
#include "device/gpu.h"
#include "device/hw_unit.h"
#include "runtime/error.h"

#if defined(MK_PLATFORM_AMD)
#include "device/measure/topology_probe_hsa.h"
#endif

namespace mk {
namespace {

// --- small RAII helpers over the HIP-spelled runtime (mapped to CUDA on NVIDIA by device/gpu.h)

using dev::CurrentDevice;

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    MK_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
  }
  ~DeviceArray() {
    if (ptr_) (void)hipFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> download(hipStream_t stream) const {
    std::vector<T> host(count_);
    MK_GPU_CHECK(hipMemcpyAsync(host.data(), ptr_, count_ * sizeof(T), hipMemcpyDeviceToHost, stream));
    MK_GPU_CHECK(hipStreamSynchronize(stream));
    return host;
  }
  void fill_ones(hipStream_t stream) const {  // 0xffffffff marks "not written"
    MK_GPU_CHECK(hipMemsetAsync(ptr_, 0xff, count_ * sizeof(T), stream));
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

class Stream {
 public:
  Stream() { MK_GPU_CHECK(hipStreamCreateWithFlags(&stream_, hipStreamNonBlocking)); }
  ~Stream() { (void)hipStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  hipStream_t get() const { return stream_; }

 private:
  hipStream_t stream_{};
};

constexpr unsigned kNotWritten = 0xffffffffu;

// Keeps the probe CTA/workgroup alone on its SM/CU: more than half of the per-SM/CU shared memory.
size_t one_per_unit_shared_bytes(size_t per_unit, size_t per_block_max) {
  return std::min(per_block_max, per_unit / 2 + 1024);
}

// ============================================================================================ NVIDIA
#if defined(MK_PLATFORM_NVIDIA)

// One CTA of a cluster: thread 0 records where it ran, then stays resident for spin_ns so that the
// clusters of one launch are spread over all GPCs instead of reusing the first free SMs.
__global__ void cluster_probe_kernel(unsigned* smid_out, unsigned* cluster_out, unsigned* nsmid_out,
                                     unsigned long long spin_ns) {
  if (threadIdx.x != 0) return;
  unsigned smid, nsmid, cluster;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cluster));
  smid_out[blockIdx.x] = smid;
  cluster_out[blockIdx.x] = cluster;
  nsmid_out[blockIdx.x] = nsmid;
  const unsigned long long start = dev::global_timer_ns();
  while (dev::global_timer_ns() - start < spin_ns) {
  }
}

Topology probe_nvidia(int device, const ProbeOptions& options) {
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err != cudaSuccess)
    fail("topology probe: no usable NVIDIA GPU (cudaGetDeviceCount: {}: {})", cudaGetErrorName(count_err),
         cudaGetErrorString(count_err));
  if (count <= 0) fail("topology probe: no NVIDIA GPU is visible");
  if (device < 0 || device >= count)
    fail("topology probe: device {} does not exist ({} NVIDIA GPU{} visible: 0..{})", device, count,
         count == 1 ? "" : "s", count - 1);
  CurrentDevice current(device);

  cudaDeviceProp prop{};
  MK_GPU_CHECK(cudaGetDeviceProperties(&prop, device));
  Topology t;
  t.vendor = Topology::Vendor::Nvidia;
  t.device_name = prop.name;
  t.arch = fmt::format("sm_{}{}", prop.major, prop.minor);
  t.source = "probe";
  t.unit_name = "SM";
  t.domain_name = "GPC";
  t.die_name = "die";
  t.l2_bytes = static_cast<std::uint64_t>(std::max(prop.l2CacheSize, 0));
  const int num_sms = prop.multiProcessorCount;
  if (num_sms <= 0) fail("topology probe: {} reports {} SMs", t.device_name, num_sms);
  if (prop.major < 9)
    fail("topology probe: {} ({}) has no thread-block clusters (sm_90 or newer is needed), so its GPCs "
         "cannot be probed",
         t.device_name, t.arch);

  cudaFuncAttributes func_attr{};
  const cudaError_t attr_err = cudaFuncGetAttributes(&func_attr, cluster_probe_kernel);
  if (attr_err != cudaSuccess) {
    (void)cudaGetLastError();
    fail("topology probe: the probe kernel cannot run on {} ({}): {} ({}); this build's "
         "CMAKE_CUDA_ARCHITECTURES does not cover it",
         t.device_name, t.arch, cudaGetErrorName(attr_err), cudaGetErrorString(attr_err));
  }

  const size_t smem = one_per_unit_shared_bytes(prop.sharedMemPerMultiprocessor, prop.sharedMemPerBlockOptin);
  MK_GPU_CHECK(cudaFuncSetAttribute(cluster_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  // Cluster size 16 (beyond the portable 8) needs an opt-in; without it the probe still works with 8.
  if (cudaFuncSetAttribute(cluster_probe_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();
    t.notes.push_back("non-portable cluster sizes (> 8) were refused; probed with portable sizes only");
  }
  int blocks_per_sm = 0;
  MK_GPU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, cluster_probe_kernel, 32, smem));
  if (blocks_per_sm != 1)
    t.notes.push_back(fmt::format("probe CTAs were meant to be alone on their SM, but {} fit on one", blocks_per_sm));

  Stream stream;
  cudaLaunchAttribute cluster_attr{};
  cluster_attr.id = cudaLaunchAttributeClusterDimension;
  cudaLaunchConfig_t config{};
  config.blockDim = dim3(32, 1, 1);
  config.dynamicSmemBytes = smem;
  config.stream = stream.get();
  config.gridDim = dim3(static_cast<unsigned>(num_sms), 1, 1);
  int max_cluster = 0;
  MK_GPU_CHECK(cudaOccupancyMaxPotentialClusterSize(&max_cluster, cluster_probe_kernel, &config));
  if (max_cluster < 2)
    fail("topology probe: {} allows clusters of at most {} CTA with the probe's launch shape; GPCs cannot be "
         "inferred",
         t.device_name, max_cluster);

  const unsigned long long spin_ns = static_cast<unsigned long long>(options.spin_us) * 1000ull;
  std::optional<UnitClustering> clustering;
  int universe = 0;  // %nsmid: smids are below it (the PTX manual allows gaps)
  int launches = 0;
  std::vector<int> sizes_used;
  bool cluster_id_note = false;
  // Largest clusters first (most SMs joined per cluster); then every smaller size, whose different
  // leftovers reach the SMs that big clusters never land on (a GPC of 18 SMs fits one cluster of 16).
  for (int size = max_cluster; size >= 2; --size) {
    cluster_attr.val.clusterDim.x = static_cast<unsigned>(size);
    cluster_attr.val.clusterDim.y = 1;
    cluster_attr.val.clusterDim.z = 1;
    config.attrs = &cluster_attr;
    config.numAttrs = 1;
    config.gridDim = dim3(static_cast<unsigned>(size), 1, 1);
    int active_clusters = 0;
    const cudaError_t occ_err = cudaOccupancyMaxActiveClusters(&active_clusters, cluster_probe_kernel, &config);
    if (occ_err != cudaSuccess || active_clusters <= 0) {
      (void)cudaGetLastError();
      continue;  // this size does not fit with one CTA per SM
    }
    // Twice what fits at once: the first wave fills every GPC, the second lands wherever SMs free up.
    const int clusters = std::max(2 * active_clusters, (num_sms + size - 1) / size);
    const int grid = clusters * size;
    config.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
    DeviceArray<unsigned> smid(static_cast<size_t>(grid)), cluster(static_cast<size_t>(grid)),
        nsmid(static_cast<size_t>(grid));
    sizes_used.push_back(size);
    int quiet = 0;
    for (int round = 0; round < options.max_launches_per_size && quiet < options.stable_launches; ++round) {
      smid.fill_ones(stream.get());
      MK_GPU_CHECK(cudaLaunchKernelEx(&config, cluster_probe_kernel, smid.get(), cluster.get(), nsmid.get(), spin_ns));
      MK_GPU_CHECK(cudaGetLastError());
      ++launches;
      const std::vector<unsigned> s = smid.download(stream.get());
      const std::vector<unsigned> c = cluster.download(stream.get());
      const std::vector<unsigned> n = nsmid.download(stream.get());
      if (!clustering) {
        universe = std::max(num_sms, static_cast<int>(n[0]));
        clustering.emplace(universe);
      }
      std::vector<ClusterObservation> observations;
      observations.reserve(static_cast<size_t>(grid));
      for (int b = 0; b < grid; ++b) {
        if (s[static_cast<size_t>(b)] == kNotWritten)
          fail("topology probe: CTA {} of a cluster launch (size {}) did not run", b, size);
        if (c[static_cast<size_t>(b)] != static_cast<unsigned>(b / size) && !cluster_id_note) {
          // %clusterid is what the hardware grouped; it is used as the key either way.
          t.notes.push_back(fmt::format("CTA {} reported %clusterid.x {}, not blockIdx.x / {} = {}", b,
                                        c[static_cast<size_t>(b)], size, b / size));
          cluster_id_note = true;
        }
        if (s[static_cast<size_t>(b)] >= static_cast<unsigned>(universe))
          fail("topology probe: CTA {} ran on SM {}, but %nsmid is {}", b, s[static_cast<size_t>(b)], universe);
        observations.push_back({static_cast<std::int64_t>(c[static_cast<size_t>(b)]), static_cast<int>(s[static_cast<size_t>(b)])});
      }
      const bool changed = clustering->add(observations);
      quiet = changed ? 0 : quiet + 1;
      if (options.verbose)
        fmt::print(stderr, "mk-topo: cluster size {:2}, launch {:2}: {} SMs seen in {} groups{}\n", size, round,
                   clustering->num_seen(), clustering->num_components_seen(), changed ? "" : " (no change)");
    }
  }
  if (!clustering) fail("topology probe: no cluster size could be launched on {}", t.device_name);

  // Units: smids 0..num_sms-1 when the numbering is dense (it is on Hopper); otherwise the smids seen.
  const ClusteringResult r = clustering->result();
  std::vector<bool> seen(static_cast<size_t>(universe), false);
  int max_seen = -1;
  for (int u = 0; u < universe; ++u)
    if (r.unit_domain[static_cast<size_t>(u)] < r.num_observed_domains) {
      seen[static_cast<size_t>(u)] = true;
      max_seen = u;
    }
  std::vector<int> unit_smid;
  if (max_seen < num_sms) {
    for (int u = 0; u < num_sms; ++u) unit_smid.push_back(u);
  } else {
    for (int u = 0; u < universe; ++u)
      if (seen[static_cast<size_t>(u)]) unit_smid.push_back(u);
    t.notes.push_back(fmt::format("%smid numbering has gaps (saw smid {} with {} SMs): units are the {} smids seen",
                                  max_seen, num_sms, unit_smid.size()));
  }
  t.num_units = static_cast<int>(unit_smid.size());
  int next_domain = r.num_observed_domains;
  std::vector<int> unseen;
  for (int smid_value : unit_smid) {
    t.unit_hw_id.push_back(static_cast<std::uint32_t>(smid_value));
    if (seen[static_cast<size_t>(smid_value)]) {
      t.unit_domain.push_back(r.unit_domain[static_cast<size_t>(smid_value)]);
    } else {
      t.unit_domain.push_back(next_domain++);
      unseen.push_back(smid_value);
    }
  }
  t.domain_die.assign(static_cast<size_t>(next_domain), 0);
  if (!unseen.empty())
    t.notes.push_back(fmt::format("{} SM(s) never ran a probe CTA and got a GPC of their own: smid {}", unseen.size(),
                                  format_id_ranges(unseen)));
  t.notes.push_back(fmt::format("GPCs inferred from {} cluster launches (cluster sizes {}..{}): SMs that ran CTAs "
                                "of one cluster share a GPC; GPCs never joined by a cluster would show as separate",
                                launches, sizes_used.empty() ? 0 : sizes_used.back(),
                                sizes_used.empty() ? 0 : sizes_used.front()));
  t.notes.push_back("die: all GPCs are put on die 0; the L2 partition of each GPC is not inferred");
  t.validate();
  return t;
}

#endif  // MK_PLATFORM_NVIDIA

// =============================================================================================== AMD
#if defined(MK_PLATFORM_AMD)

constexpr unsigned kHasXccBit = 0x80000000u;

// One workgroup: lane 0 records its XCC/SE/SH/CU as amd_hw_id() (dev::hw_unit_id; bit 31 set when the
// XCC id is real, i.e. the code object is gfx94x), then stays resident for spin_ns so workgroups spread
// over all CUs.
__global__ void xcd_probe_kernel(unsigned* out, unsigned long long spin_ns) {
  if (threadIdx.x != 0) return;
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
  const unsigned has_xcc = kHasXccBit;
#else
  const unsigned has_xcc = 0;
#endif
  out[blockIdx.x] = has_xcc | dev::hw_unit_id();
  const unsigned long long start = dev::global_timer_ns();
  while (dev::global_timer_ns() - start < spin_ns) {
  }
}

std::string gfx_name_of(const char* gcn_arch_name) {  // "gfx942:sramecc+:xnack-" -> "gfx942"
  std::string name = gcn_arch_name;
  const size_t colon = name.find(':');
  return colon == std::string::npos ? name : name.substr(0, colon);
}

Topology probe_amd(int device, const ProbeOptions& options) {
  int count = 0;
  const hipError_t count_err = hipGetDeviceCount(&count);
  if (count_err != hipSuccess)
    fail("topology probe: no usable AMD GPU (hipGetDeviceCount: {}: {})", hipGetErrorName(count_err),
         hipGetErrorString(count_err));
  if (count <= 0) fail("topology probe: no AMD GPU is visible");
  if (device < 0 || device >= count)
    fail("topology probe: device {} does not exist ({} AMD GPU{} visible: 0..{})", device, count,
         count == 1 ? "" : "s", count - 1);
  CurrentDevice current(device);

  hipDeviceProp_t prop{};
  MK_GPU_CHECK(hipGetDeviceProperties(&prop, device));
  Topology t;
  t.vendor = Topology::Vendor::Amd;
  t.arch = gfx_name_of(prop.gcnArchName);
  t.device_name = prop.name[0] != '\0' ? std::string(prop.name) : t.arch;
  t.source = "probe";
  t.unit_name = "CU";
  t.domain_name = "XCD";
  t.die_name = "IOD";
  t.l2_bytes = static_cast<std::uint64_t>(std::max(prop.l2CacheSize, 0));
  const int runtime_cus = prop.multiProcessorCount;
  if (runtime_cus <= 0) fail("topology probe: {} reports {} CUs", t.device_name, runtime_cus);
  if (t.arch.rfind("gfx9", 0) != 0)
    fail("topology probe: {} is {}; the probe reads gfx9 hardware registers (CDNA: gfx90a, gfx94x)", t.device_name,
         t.arch);
  const bool gfx94x = t.arch.rfind("gfx94", 0) == 0;

  // HSA: product name, CU count, caches and (ROCm >= 5.7 headers) the XCC count, for the same PCI device.
  const detail::HsaAgentFacts hsa = detail::query_hsa_gpu_agent(prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, device);
  if (!hsa.found) {
    t.notes.push_back("HSA agent query failed: " + hsa.error);
  } else {
    if (!hsa.product_name.empty()) t.device_name = hsa.product_name;
    if (!hsa.matched_by_pci)
      t.notes.push_back("HSA agent matched to the HIP device by ordinal (PCI location did not match): check it");
    if (hsa.compute_units != 0 && static_cast<int>(hsa.compute_units) != runtime_cus)
      t.notes.push_back(fmt::format("HIP reports {} CUs, HSA {}", runtime_cus, hsa.compute_units));
    if (t.l2_bytes == 0) t.l2_bytes = hsa.cache_bytes[1];
    t.llc_bytes = hsa.cache_bytes[2];  // MI300X: the Infinity Cache (MALL) appears as L3 here (assumed)
  }
  if (gfx94x) t.notes.push_back("l2_bytes is the runtime's figure: on MI300X that is one XCD's L2");

  hipFuncAttributes func_attr{};
  const hipError_t attr_err = hipFuncGetAttributes(&func_attr, reinterpret_cast<const void*>(xcd_probe_kernel));
  if (attr_err != hipSuccess) {
    (void)hipGetLastError();
    fail("topology probe: the probe kernel cannot run on {} ({}): {} ({}); this build's offload targets (MK_AMD_ARCHS) "
         "do not cover it",
         t.device_name, t.arch, hipGetErrorName(attr_err), hipGetErrorString(attr_err));
  }

  const size_t smem = one_per_unit_shared_bytes(prop.maxSharedMemoryPerMultiProcessor, prop.sharedMemPerBlock);
  // A multiple of 8 workgroups per launch so a round-robin over 8 XCDs covers each XCD equally.
  const int grid = ((2 * runtime_cus + 7) / 8) * 8;
  const unsigned long long spin_ns = static_cast<unsigned long long>(options.spin_us) * 1000ull;
  Stream stream;
  DeviceArray<unsigned> out(static_cast<size_t>(grid));

  std::set<std::uint32_t> units;                    // amd_hw_id of every CU seen
  std::vector<std::vector<std::uint32_t>> per_launch;  // raw records, for the dispatch check
  bool has_xcc = false;
  int quiet = 0;
  for (int launch = 0; launch < options.max_launches_per_size && quiet < options.stable_launches; ++launch) {
    out.fill_ones(stream.get());
    hipLaunchKernelGGL(xcd_probe_kernel, dim3(static_cast<unsigned>(grid)), dim3(MK_WARP_SIZE), smem, stream.get(),
                       out.get(), spin_ns);
    MK_GPU_CHECK(hipGetLastError());
    const std::vector<unsigned> records = out.download(stream.get());
    const size_t before = units.size();
    std::vector<std::uint32_t> ids;
    ids.reserve(records.size());
    for (int wg = 0; wg < grid; ++wg) {
      const unsigned rec = records[static_cast<size_t>(wg)];
      if (rec == kNotWritten) fail("topology probe: workgroup {} of the probe launch did not run", wg);
      has_xcc = (rec & kHasXccBit) != 0;
      ids.push_back(rec & ~kHasXccBit);
      units.insert(rec & ~kHasXccBit);
    }
    per_launch.push_back(std::move(ids));
    quiet = units.size() > before ? 0 : quiet + 1;
    if (options.verbose)
      fmt::print(stderr, "mk-topo: launch {:2}: {} of {} CUs seen\n", launch, units.size(), runtime_cus);
  }
  if (gfx94x && !has_xcc)
    t.notes.push_back("the probe kernel ran a code object without the XCC register (not built for this gfx94x?)");

  // Domains: distinct XCC ids, densely in ascending order. Units: sorted by (xcc, se, sh, cu), so each
  // XCD's CUs are contiguous.
  std::map<unsigned, int> domain_of_xcc;
  for (std::uint32_t id : units) domain_of_xcc.emplace(amd_hw_id_xcc(id), 0);
  {
    int d = 0;
    for (auto& [xcc, domain] : domain_of_xcc) domain = d++;
  }
  t.num_units = static_cast<int>(units.size());
  for (std::uint32_t id : units) {
    t.unit_hw_id.push_back(id);
    t.unit_domain.push_back(domain_of_xcc.at(amd_hw_id_xcc(id)));
  }
  // Dies: MI300X has 2 XCDs per IOD. No register names the IOD; XCCs 2k and 2k+1 are assumed to share one.
  std::map<unsigned, int> die_of_pair;
  for (const auto& [xcc, domain] : domain_of_xcc) die_of_pair.emplace(has_xcc ? xcc / 2 : 0u, 0);
  {
    int die = 0;
    for (auto& [pair, d] : die_of_pair) d = die++;
  }
  t.domain_die.resize(domain_of_xcc.size());
  for (const auto& [xcc, domain] : domain_of_xcc)
    t.domain_die[static_cast<size_t>(domain)] = die_of_pair.at(has_xcc ? xcc / 2 : 0u);
  if (has_xcc && domain_of_xcc.size() > 1)
    t.notes.push_back("IOD: assumed XCC ids 2k and 2k+1 share an I/O die (MI300X: 2 XCDs per IOD); not measured");

  const int xcds = t.num_domains();
  if (t.num_units != runtime_cus)
    t.notes.push_back(fmt::format("the runtime reports {} CUs but probe workgroups ran on {} distinct CUs", runtime_cus,
                                  t.num_units));
  if (hsa.found && hsa.num_xcc >= 0 && hsa.num_xcc != xcds)
    t.notes.push_back(fmt::format("HSA reports {} XCCs but the probe saw {}", hsa.num_xcc, xcds));
  if (hsa.found && hsa.num_xcc < 0)
    t.notes.push_back("XCC count from the probe only (this build's HSA headers predate HSA_AMD_AGENT_INFO_NUM_XCC)");
  if (!has_xcc) t.notes.push_back("no XCC register on this GPU: all CUs form one domain");

  // Dispatch order: was workgroup i on XCD (first + i) % xcds in every launch?
  if (xcds > 1) {
    bool all_round_robin = true;
    for (size_t l = 0; l < per_launch.size(); ++l) {
      std::vector<int> wg_domain;
      wg_domain.reserve(per_launch[l].size());
      for (std::uint32_t id : per_launch[l]) wg_domain.push_back(domain_of_xcc.at(amd_hw_id_xcc(id)));
      const DispatchCheck check = check_round_robin_dispatch(wg_domain, xcds);
      if (!check.round_robin) {
        if (all_round_robin)
          t.notes.push_back(fmt::format("launch {}: {} of {} workgroups fit round-robin over {} XCDs; first misfit: "
                                        "workgroup {} on XCD {}",
                                        l, check.matching, check.total, xcds, check.first_mismatch,
                                        wg_domain[static_cast<size_t>(check.first_mismatch)]));
        all_round_robin = false;
      }
    }
    t.round_robin_dispatch = all_round_robin;
  }
  t.validate();
  return t;
}

#endif  // MK_PLATFORM_AMD

}  // namespace

Topology probe_topology(int device, const ProbeOptions& options) {
#if defined(MK_PLATFORM_NVIDIA)
  return probe_nvidia(device, options);
#elif defined(MK_PLATFORM_AMD)
  return probe_amd(device, options);
#endif
}

const char* probe_platform() {
#if defined(MK_PLATFORM_NVIDIA)
  return "nvidia";
#else
  return "amd";
#endif
}

}  // namespace mk
