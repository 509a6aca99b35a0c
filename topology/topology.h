// The chip's domains, as the schedule builder, the barriers and the CPU emulator see them.
//
// Three levels: a UNIT is what runs one workgroup/CTA at a time in our persistent kernel (NVIDIA SM,
// AMD CU); a DOMAIN is the group of units that share the fast path (NVIDIA GPC, AMD XCD with its own
// L2); a DIE groups domains (AMD IOD, 2 XCDs each on MI300X; NVIDIA: one die, see docs/topology.md).
// Units and domains are numbered densely from 0; the hardware ids a kernel reads (%smid, HW_REG_HW_ID
// fields) are kept in unit_hw_id.
//
// A Topology comes from device/measure/topology_probe.h (measured), from make_synthetic_topology (tests, the
// emulator, machines without a GPU) or from JSON written by `mk-topo --json`.
//
// This header is read by nvcc too (C++17 there): no std::span, no nlohmann include (json_fwd only).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mk {

struct Topology {
  enum class Vendor { Nvidia, Amd, Synthetic };

  std::string device_name;              // "NVIDIA H100 80GB HBM3", "AMD Instinct MI300X", "synthetic"
  std::string arch;                     // "sm_90", "gfx942", "" for synthetic
  Vendor vendor = Vendor::Synthetic;
  std::string source = "synthetic";     // "probe" (measured in a kernel), "runtime" (runtime query
                                        // only), "synthetic", "json"

  // Level names for printing: {"SM", "GPC", "die"} on NVIDIA, {"CU", "XCD", "IOD"} on AMD.
  std::string unit_name = "unit";
  std::string domain_name = "domain";
  std::string die_name = "die";

  int num_units = 0;
  std::vector<int> unit_domain;         // unit -> domain, size num_units
  std::vector<int> domain_die;          // domain -> die, size num_domains()
  // unit -> the id the hardware reports inside a kernel (NVIDIA %smid; AMD amd_hw_id(xcc, se, sh, cu)).
  // Empty means identity (unit u reads u), as for synthetic topologies.
  std::vector<std::uint32_t> unit_hw_id;

  // Memory facts from the runtime (0 = unknown). l2_bytes is what the runtime reports: the whole L2 on
  // NVIDIA, one XCD's L2 on MI300X (4 MiB of 8 x 4 MiB). llc_bytes: a cache beyond L2 (MI300X
  // Infinity Cache, 256 MiB), 0 if none or unknown.
  std::uint64_t l2_bytes = 0;
  std::uint64_t llc_bytes = 0;

  // AMD: whether workgroup i was observed to land on domain (first + i) % num_domains for every i of the
  // probe launch. Unset when not measured (NVIDIA, synthetic, single-domain AMD).
  std::optional<bool> round_robin_dispatch;

  // Everything the probe assumed, could not see or found odd; printed by mk-topo.
  std::vector<std::string> notes;

  // --- queries (call validate() first on a topology built by hand)
  int num_domains() const { return static_cast<int>(domain_die.size()); }
  int num_dies() const;                                  // max(domain_die) + 1, 0 if no domains
  int domain_of(int unit) const;                         // throws mk::Error if unit is out of range
  int die_of_domain(int domain) const;                   // throws mk::Error if domain is out of range
  std::vector<int> units_in_domain(int domain) const;    // ascending unit ids
  std::vector<int> domains_in_die(int die) const;        // ascending domain ids
  std::vector<int> domain_sizes() const;                 // units per domain
  std::uint32_t hw_id_of(int unit) const;                // unit_hw_id[unit], or unit if empty
  std::optional<int> unit_of_hw_id(std::uint32_t hw_id) const;

  // Throws mk::Error naming the first problem: sizes that disagree, a unit without a domain, an empty
  // domain, a domain without a die, a gap in the die numbering, duplicate hardware ids.
  void validate() const;
};

std::string_view to_string(Topology::Vendor vendor);
Topology::Vendor vendor_from_string(std::string_view name);  // throws mk::Error on an unknown name

// Packs the AMD hardware location of a wave into one id (bits: cu 3:0, sh 4, se 7:5, xcc 15:8).
constexpr std::uint32_t amd_hw_id(unsigned xcc, unsigned se, unsigned sh, unsigned cu) {
  return ((xcc & 0xffu) << 8) | ((se & 0x7u) << 5) | ((sh & 0x1u) << 4) | (cu & 0xfu);
}
constexpr unsigned amd_hw_id_xcc(std::uint32_t id) { return (id >> 8) & 0xffu; }
constexpr unsigned amd_hw_id_se(std::uint32_t id) { return (id >> 5) & 0x7u; }
constexpr unsigned amd_hw_id_sh(std::uint32_t id) { return (id >> 4) & 0x1u; }
constexpr unsigned amd_hw_id_cu(std::uint32_t id) { return id & 0xfu; }

// --- synthetic topologies (tests, the emulator, machines without a GPU)

// How units are numbered across domains: Contiguous puts units 0..k-1 in domain 0; Interleaved deals
// them out like cards (unit u -> domain u % D while every domain still has room), closer to how NVIDIA
// numbers SMs across GPCs.
enum class UnitLayout { Contiguous, Interleaved };

// num_units spread as evenly as possible over num_domains (the first num_units % num_domains domains get
// one more), domains_per_die consecutive domains per die (num_domains must be a multiple of it).
Topology make_synthetic_topology(int num_units, int num_domains, int domains_per_die,
                                 UnitLayout layout = UnitLayout::Contiguous);
// Uneven domains, e.g. {18, 18, 16, 16, 16, 16, 16, 16} for an H100-like chip.
Topology make_synthetic_topology(const std::vector<int>& domain_sizes, int domains_per_die,
                                 UnitLayout layout = UnitLayout::Contiguous);
// Presets with the real level names. h100: 132 SMs in 8 GPCs of 16-18 (illustrative: the real split
// differs from chip to chip, which is why the probe measures it). mi300x: 304 CUs, 8 XCDs x 38, 2 XCDs
// per IOD, 4 MiB L2 per XCD, 256 MiB Infinity Cache.
Topology synthetic_h100();
Topology synthetic_mi300x();
// "h100", "mi300x" or "N,D,P" (units, domains, domains per die). Throws mk::Error on anything else.
Topology synthetic_from_spec(std::string_view spec);

// --- JSON (nlohmann ADL hooks; from_json validates and throws mk::Error on a bad document)
void to_json(nlohmann::json& j, const Topology& topology);
void from_json(const nlohmann::json& j, Topology& topology);
// indent < 0: one line. Otherwise one key per line, number arrays and each domain/note on one line.
std::string topology_to_json_string(const Topology& topology, int indent = 2);
Topology topology_from_json_string(std::string_view text);  // parse errors become mk::Error

// --- human output: a header and one row per domain (domain, die, count, unit ranges).
std::string format_topology_table(const Topology& topology);
// "0-3, 7, 9-10"
std::string format_id_ranges(const std::vector<int>& sorted_ids);

// --- probe analysis, pure CPU code so it is tested without a GPU

// One CTA of a cluster launch: which cluster it belonged to and which unit (dense id) it ran on.
struct ClusterObservation {
  std::int64_t cluster = 0;
  int unit = 0;
};

struct ClusteringResult {
  std::vector<int> unit_domain;   // dense domains ordered by their smallest unit; unseen units last
  int num_observed_domains = 0;   // domains formed by units that were seen
  std::vector<int> unseen_units;  // never observed: each got a domain of its own
};

// Union-find over units: all units that ran CTAs of one cluster share a domain (NVIDIA: all CTAs of a
// thread-block cluster are on one GPC). add() is fed one launch at a time and says whether the launch
// taught anything (a new unit, or two domains merged), so the probe can stop once it is stable.
class UnitClustering {
 public:
  explicit UnitClustering(int num_units);
  // Throws mk::Error if a unit is out of range.
  bool add(const std::vector<ClusterObservation>& observations);
  ClusteringResult result() const;
  int num_units() const { return static_cast<int>(parent_.size()); }
  int num_seen() const;
  int num_components_seen() const;

 private:
  int find(int u) const;
  bool unite(int a, int b);
  mutable std::vector<int> parent_;
  std::vector<int> rank_;
  std::vector<bool> seen_;
};

// One-shot form of UnitClustering.
ClusteringResult cluster_units(int num_units, const std::vector<ClusterObservation>& observations);

// Whether workgroup i landed on domain (first + i) % num_domains, as MI300X's dispatcher does over XCDs.
struct DispatchCheck {
  bool round_robin = false;
  int first_domain = -1;        // domain of workgroup 0
  int matching = 0;             // workgroups that fit the round-robin pattern
  int total = 0;
  int first_mismatch = -1;      // first workgroup that does not fit, -1 if none
};
DispatchCheck check_round_robin_dispatch(const std::vector<int>& workgroup_domain, int num_domains);

}  // namespace mk
