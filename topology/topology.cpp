#include "topology/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "runtime/error.h"

namespace mk {

// --- queries

int Topology::num_dies() const {
  if (domain_die.empty()) return 0;
  return *std::max_element(domain_die.begin(), domain_die.end()) + 1;
}

int Topology::domain_of(int unit) const {
  if (unit < 0 || unit >= static_cast<int>(unit_domain.size()))
    fail("topology: {} {} is out of range (the {} has {} {}s)", unit_name, unit, device_name,
         unit_domain.size(), unit_name);
  return unit_domain[static_cast<size_t>(unit)];
}

int Topology::die_of_domain(int domain) const {
  if (domain < 0 || domain >= num_domains())
    fail("topology: {} {} is out of range ({} {}s)", domain_name, domain, num_domains(), domain_name);
  return domain_die[static_cast<size_t>(domain)];
}

std::vector<int> Topology::units_in_domain(int domain) const {
  if (domain < 0 || domain >= num_domains())
    fail("topology: {} {} is out of range ({} {}s)", domain_name, domain, num_domains(), domain_name);
  std::vector<int> units;
  for (int u = 0; u < static_cast<int>(unit_domain.size()); ++u)
    if (unit_domain[static_cast<size_t>(u)] == domain) units.push_back(u);
  return units;
}

std::vector<int> Topology::domains_in_die(int die) const {
  if (die < 0 || die >= num_dies())
    fail("topology: {} {} is out of range ({} {}s)", die_name, die, num_dies(), die_name);
  std::vector<int> domains;
  for (int d = 0; d < num_domains(); ++d)
    if (domain_die[static_cast<size_t>(d)] == die) domains.push_back(d);
  return domains;
}

std::vector<int> Topology::domain_sizes() const {
  std::vector<int> sizes(static_cast<size_t>(num_domains()), 0);
  for (int d : unit_domain)
    if (d >= 0 && d < num_domains()) ++sizes[static_cast<size_t>(d)];
  return sizes;
}

std::uint32_t Topology::hw_id_of(int unit) const {
  if (unit < 0 || unit >= num_units)
    fail("topology: {} {} is out of range (the {} has {} {}s)", unit_name, unit, device_name, num_units,
         unit_name);
  return unit_hw_id.empty() ? static_cast<std::uint32_t>(unit) : unit_hw_id[static_cast<size_t>(unit)];
}

std::optional<int> Topology::unit_of_hw_id(std::uint32_t hw_id) const {
  if (unit_hw_id.empty()) {
    if (hw_id < static_cast<std::uint32_t>(num_units)) return static_cast<int>(hw_id);
    return std::nullopt;
  }
  auto it = std::find(unit_hw_id.begin(), unit_hw_id.end(), hw_id);
  if (it == unit_hw_id.end()) return std::nullopt;
  return static_cast<int>(it - unit_hw_id.begin());
}

void Topology::validate() const {
  const std::string what = device_name.empty() ? std::string("topology") : "topology of " + device_name;
  if (num_units <= 0) fail("{}: num_units must be positive, got {}", what, num_units);
  if (static_cast<int>(unit_domain.size()) != num_units)
    fail("{}: unit_domain has {} entries for {} {}s", what, unit_domain.size(), num_units, unit_name);
  if (domain_die.empty()) fail("{}: no {}s (domain_die is empty)", what, domain_name);
  const int domains = num_domains();
  std::vector<int> sizes(static_cast<size_t>(domains), 0);
  for (int u = 0; u < num_units; ++u) {
    const int d = unit_domain[static_cast<size_t>(u)];
    if (d < 0 || d >= domains)
      fail("{}: {} {} is assigned to {} {}, which does not exist (there are {})", what, unit_name, u,
           domain_name, d, domains);
    ++sizes[static_cast<size_t>(d)];
  }
  for (int d = 0; d < domains; ++d)
    if (sizes[static_cast<size_t>(d)] == 0) fail("{}: {} {} has no {}s", what, domain_name, d, unit_name);
  std::vector<bool> die_used(static_cast<size_t>(domains), false);
  for (int d = 0; d < domains; ++d) {
    const int die = domain_die[static_cast<size_t>(d)];
    if (die < 0 || die >= domains)
      fail("{}: {} {} is on {} {}, expected 0..{}", what, domain_name, d, die_name, die, domains - 1);
    die_used[static_cast<size_t>(die)] = true;
  }
  for (int die = 0; die < num_dies(); ++die)
    if (!die_used[static_cast<size_t>(die)])
      fail("{}: {} {} has no {}s ({}s must be numbered 0..{} without gaps)", what, die_name, die,
           domain_name, die_name, num_dies() - 1);
  if (!unit_hw_id.empty()) {
    if (static_cast<int>(unit_hw_id.size()) != num_units)
      fail("{}: unit_hw_id has {} entries for {} {}s", what, unit_hw_id.size(), num_units, unit_name);
    std::map<std::uint32_t, int> owner;
    for (int u = 0; u < num_units; ++u) {
      auto [it, inserted] = owner.emplace(unit_hw_id[static_cast<size_t>(u)], u);
      if (!inserted)
        fail("{}: {}s {} and {} have the same hardware id {:#x}", what, unit_name, it->second, u,
             it->first);
    }
  }
}

std::string_view to_string(Topology::Vendor vendor) {
  switch (vendor) {
    case Topology::Vendor::Nvidia: return "nvidia";
    case Topology::Vendor::Amd: return "amd";
    case Topology::Vendor::Synthetic: return "synthetic";
  }
  return "unknown";
}

Topology::Vendor vendor_from_string(std::string_view name) {
  if (name == "nvidia") return Topology::Vendor::Nvidia;
  if (name == "amd") return Topology::Vendor::Amd;
  if (name == "synthetic") return Topology::Vendor::Synthetic;
  fail("topology: unknown vendor '{}' (expected nvidia, amd or synthetic)", name);
}

// --- synthetic

Topology make_synthetic_topology(const std::vector<int>& domain_sizes, int domains_per_die, UnitLayout layout) {
  if (domain_sizes.empty()) fail("synthetic topology: needs at least one domain");
  for (size_t d = 0; d < domain_sizes.size(); ++d)
    if (domain_sizes[d] <= 0)
      fail("synthetic topology: domain {} has {} units; every domain needs at least one", d, domain_sizes[d]);
  const int domains = static_cast<int>(domain_sizes.size());
  if (domains_per_die <= 0 || domains % domains_per_die != 0)
    fail("synthetic topology: {} domains cannot be split into dies of {} domains", domains, domains_per_die);

  Topology t;
  t.device_name = "synthetic";
  t.vendor = Topology::Vendor::Synthetic;
  t.source = "synthetic";
  t.num_units = std::accumulate(domain_sizes.begin(), domain_sizes.end(), 0);
  t.unit_domain.reserve(static_cast<size_t>(t.num_units));
  if (layout == UnitLayout::Contiguous) {
    for (int d = 0; d < domains; ++d) t.unit_domain.insert(t.unit_domain.end(), static_cast<size_t>(domain_sizes[static_cast<size_t>(d)]), d);
  } else {
    const int rounds = *std::max_element(domain_sizes.begin(), domain_sizes.end());
    for (int r = 0; r < rounds; ++r)
      for (int d = 0; d < domains; ++d)
        if (domain_sizes[static_cast<size_t>(d)] > r) t.unit_domain.push_back(d);
  }
  t.domain_die.resize(static_cast<size_t>(domains));
  for (int d = 0; d < domains; ++d) t.domain_die[static_cast<size_t>(d)] = d / domains_per_die;
  t.validate();
  return t;
}

Topology make_synthetic_topology(int num_units, int num_domains, int domains_per_die, UnitLayout layout) {
  if (num_domains <= 0) fail("synthetic topology: needs at least one domain, got {}", num_domains);
  if (num_units < num_domains)
    fail("synthetic topology: {} units cannot fill {} domains (every domain needs a unit)", num_units,
         num_domains);
  std::vector<int> sizes(static_cast<size_t>(num_domains), num_units / num_domains);
  for (int d = 0; d < num_units % num_domains; ++d) ++sizes[static_cast<size_t>(d)];
  return make_synthetic_topology(sizes, domains_per_die, layout);
}

Topology synthetic_h100() {
  Topology t = make_synthetic_topology({18, 18, 16, 16, 16, 16, 16, 16}, 8);
  t.device_name = "synthetic H100-like (132 SMs, 8 GPCs; illustrative split)";
  t.arch = "sm_90";
  t.unit_name = "SM";
  t.domain_name = "GPC";
  t.die_name = "die";
  t.l2_bytes = 50ull << 20;
  t.notes.push_back("synthetic: real H100 GPC sizes differ from chip to chip; run mk-topo on the GPU");
  return t;
}

Topology synthetic_mi300x() {
  Topology t = make_synthetic_topology(304, 8, 2);
  t.device_name = "synthetic MI300X-like (304 CUs, 8 XCDs, 4 IODs)";
  t.arch = "gfx942";
  t.unit_name = "CU";
  t.domain_name = "XCD";
  t.die_name = "IOD";
  t.l2_bytes = 4ull << 20;
  t.llc_bytes = 256ull << 20;
  t.notes.push_back("synthetic: l2_bytes is per XCD, as the runtime reports it on MI300X");
  return t;
}

namespace {

int parse_int(std::string_view text, std::string_view spec) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
    fail("synthetic spec '{}': '{}' is not an integer (expected N,D,P = units,domains,domains per die)", spec,
         text);
  return value;
}

}  // namespace

Topology synthetic_from_spec(std::string_view spec) {
  if (spec == "h100") return synthetic_h100();
  if (spec == "mi300x") return synthetic_mi300x();
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = spec.find(',', start);
    parts.push_back(spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (parts.size() != 3)
    fail("synthetic spec '{}': expected 'h100', 'mi300x' or N,D,P (units,domains,domains per die)", spec);
  return make_synthetic_topology(parse_int(parts[0], spec), parse_int(parts[1], spec), parse_int(parts[2], spec));
}

// --- JSON

void to_json(nlohmann::json& j, const Topology& t) {
  j = nlohmann::json::object();
  j["format"] = "monokernel-topology";
  j["version"] = 1;
  j["device_name"] = t.device_name;
  j["arch"] = t.arch;
  j["vendor"] = std::string(to_string(t.vendor));
  j["source"] = t.source;
  j["levels"] = {{"unit", t.unit_name}, {"domain", t.domain_name}, {"die", t.die_name}};
  j["num_units"] = t.num_units;
  j["num_domains"] = t.num_domains();
  j["num_dies"] = t.num_dies();
  j["l2_bytes"] = t.l2_bytes;
  j["llc_bytes"] = t.llc_bytes;
  j["round_robin_dispatch"] = t.round_robin_dispatch ? nlohmann::json(*t.round_robin_dispatch) : nlohmann::json();
  j["unit_domain"] = t.unit_domain;
  j["domain_die"] = t.domain_die;
  j["unit_hw_id"] = t.unit_hw_id;
  // Derived, for people reading the file; from_json ignores it.
  nlohmann::json domains = nlohmann::json::array();
  for (int d = 0; d < t.num_domains(); ++d)
    domains.push_back({{"domain", d}, {"die", t.domain_die[static_cast<size_t>(d)]}, {"units", t.units_in_domain(d)}});
  j["domains"] = std::move(domains);
  j["notes"] = t.notes;
}

void from_json(const nlohmann::json& j, Topology& t) {
  try {
    if (!j.is_object()) fail("topology JSON: expected an object, got {}", j.type_name());
    if (j.contains("format") && j.at("format") != "monokernel-topology")
      fail("topology JSON: format is '{}', expected 'monokernel-topology'", j.at("format").dump());
    if (j.contains("version") && j.at("version") != 1)
      fail("topology JSON: version {} is not supported (expected 1)", j.at("version").dump());
    Topology out;
    out.device_name = j.at("device_name").get<std::string>();
    out.arch = j.value("arch", std::string());
    out.vendor = vendor_from_string(j.at("vendor").get<std::string>());
    out.source = j.value("source", std::string("json"));
    if (j.contains("levels")) {
      const auto& levels = j.at("levels");
      out.unit_name = levels.value("unit", out.unit_name);
      out.domain_name = levels.value("domain", out.domain_name);
      out.die_name = levels.value("die", out.die_name);
    }
    out.num_units = j.at("num_units").get<int>();
    out.unit_domain = j.at("unit_domain").get<std::vector<int>>();
    out.domain_die = j.at("domain_die").get<std::vector<int>>();
    out.unit_hw_id = j.value("unit_hw_id", std::vector<std::uint32_t>());
    out.l2_bytes = j.value("l2_bytes", std::uint64_t{0});
    out.llc_bytes = j.value("llc_bytes", std::uint64_t{0});
    if (j.contains("round_robin_dispatch") && !j.at("round_robin_dispatch").is_null())
      out.round_robin_dispatch = j.at("round_robin_dispatch").get<bool>();
    out.notes = j.value("notes", std::vector<std::string>());
    out.validate();
    t = std::move(out);
  } catch (const nlohmann::json::exception& e) {
    fail("topology JSON: {}", e.what());
  }
}

std::string topology_to_json_string(const Topology& topology, int indent) {
  const nlohmann::json j = topology;
  if (indent < 0) return j.dump();
  // One key per line in a fixed order, number arrays on one line, one line per domain and per note:
  // readable, and still small for 304 units.
  static const char* const order[] = {"format",   "version",     "device_name", "arch",       "vendor",
                                      "source",   "levels",      "num_units",   "num_domains", "num_dies",
                                      "l2_bytes", "llc_bytes",   "round_robin_dispatch",      "unit_domain",
                                      "domain_die", "unit_hw_id", "domains",    "notes"};
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::string out = "{\n";
  bool first = true;
  auto emit = [&](const std::string& key, const nlohmann::json& value) {
    if (!first) out += ",\n";
    first = false;
    out += pad + nlohmann::json(key).dump() + ": ";
    const bool list_of_lines = value.is_array() && !value.empty() && (value[0].is_object() || value[0].is_string());
    if (list_of_lines) {
      out += "[\n";
      for (size_t i = 0; i < value.size(); ++i)
        out += pad + pad + value[i].dump() + (i + 1 < value.size() ? ",\n" : "\n");
      out += pad + "]";
    } else {
      out += value.dump();
    }
  };
  for (const char* key : order)
    if (j.contains(key)) emit(key, j.at(key));
  for (const auto& [key, value] : j.items())
    if (std::find_if(std::begin(order), std::end(order), [&](const char* k) { return key == k; }) == std::end(order))
      emit(key, value);
  out += "\n}";
  return out;
}

Topology topology_from_json_string(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("topology JSON: cannot parse: {}", e.what());
  }
  return j.get<Topology>();
}

// --- human output

std::string format_id_ranges(const std::vector<int>& ids) {
  std::string out;
  size_t i = 0;
  while (i < ids.size()) {
    size_t k = i;
    while (k + 1 < ids.size() && ids[k + 1] == ids[k] + 1) ++k;
    if (!out.empty()) out += ", ";
    out += k == i ? fmt::format("{}", ids[i]) : fmt::format("{}-{}", ids[i], ids[k]);
    i = k + 1;
  }
  return out;
}

namespace {

std::string format_bytes(std::uint64_t bytes) {
  if (bytes == 0) return "unknown";
  if (bytes % (1ull << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  return fmt::format("{} KiB", bytes >> 10);
}

}  // namespace

std::string format_topology_table(const Topology& t) {
  std::string out;
  out += fmt::format("device: {}{}  [{}, source: {}]\n", t.device_name, t.arch.empty() ? "" : " (" + t.arch + ")",
                     to_string(t.vendor), t.source);
  out += fmt::format("{} {}s in {} {}s on {} {}{}; L2: {}", t.num_units, t.unit_name, t.num_domains(),
                     t.domain_name, t.num_dies(), t.die_name, t.num_dies() == 1 ? "" : "s", format_bytes(t.l2_bytes));
  if (t.llc_bytes) out += fmt::format("; last-level cache: {}", format_bytes(t.llc_bytes));
  out += "\n";
  if (t.round_robin_dispatch)
    out += fmt::format("workgroup -> {} dispatch: {}\n", t.domain_name,
                       *t.round_robin_dispatch ? "round-robin (observed)" : "NOT round-robin (observed)");
  const std::string units_header = t.unit_name + "s";
  const size_t w_dom = std::max<size_t>(t.domain_name.size(), 3);
  const size_t w_die = std::max<size_t>(t.die_name.size(), 3);
  const size_t w_cnt = std::max<size_t>(units_header.size(), 5);
  out += fmt::format("{:>{}}  {:>{}}  {:>{}}  {}\n", t.domain_name, w_dom, t.die_name, w_die, units_header, w_cnt,
                     "ids");
  for (int d = 0; d < t.num_domains(); ++d) {
    const std::vector<int> units = t.units_in_domain(d);
    out += fmt::format("{:>{}}  {:>{}}  {:>{}}  {}\n", d, w_dom, t.domain_die[static_cast<size_t>(d)], w_die,
                       units.size(), w_cnt, format_id_ranges(units));
  }
  const bool hw_is_identity = [&] {
    for (size_t u = 0; u < t.unit_hw_id.size(); ++u)
      if (t.unit_hw_id[u] != u) return false;
    return true;
  }();
  if (!hw_is_identity)
    out += fmt::format("({} ids are dense; the hardware ids they stand for are in the JSON's unit_hw_id)\n",
                       t.unit_name);
  for (const std::string& note : t.notes) out += fmt::format("note: {}\n", note);
  return out;
}

// --- union-find clustering of cluster-launch observations

UnitClustering::UnitClustering(int num_units) {
  if (num_units <= 0) fail("unit clustering: num_units must be positive, got {}", num_units);
  parent_.resize(static_cast<size_t>(num_units));
  std::iota(parent_.begin(), parent_.end(), 0);
  rank_.assign(static_cast<size_t>(num_units), 0);
  seen_.assign(static_cast<size_t>(num_units), false);
}

int UnitClustering::find(int u) const {
  int root = u;
  while (parent_[static_cast<size_t>(root)] != root) root = parent_[static_cast<size_t>(root)];
  while (parent_[static_cast<size_t>(u)] != root) {  // path compression
    const int next = parent_[static_cast<size_t>(u)];
    parent_[static_cast<size_t>(u)] = root;
    u = next;
  }
  return root;
}

bool UnitClustering::unite(int a, int b) {
  a = find(a);
  b = find(b);
  if (a == b) return false;
  if (rank_[static_cast<size_t>(a)] < rank_[static_cast<size_t>(b)]) std::swap(a, b);
  parent_[static_cast<size_t>(b)] = a;
  if (rank_[static_cast<size_t>(a)] == rank_[static_cast<size_t>(b)]) ++rank_[static_cast<size_t>(a)];
  return true;
}

bool UnitClustering::add(const std::vector<ClusterObservation>& observations) {
  bool changed = false;
  std::map<std::int64_t, int> first_unit_of_cluster;
  for (const ClusterObservation& o : observations) {
    if (o.unit < 0 || o.unit >= num_units())
      fail("unit clustering: cluster {} reports unit {}, outside 0..{}", o.cluster, o.unit, num_units() - 1);
    if (!seen_[static_cast<size_t>(o.unit)]) {
      seen_[static_cast<size_t>(o.unit)] = true;
      changed = true;
    }
    auto [it, inserted] = first_unit_of_cluster.emplace(o.cluster, o.unit);
    if (!inserted && unite(it->second, o.unit)) changed = true;
  }
  return changed;
}

int UnitClustering::num_seen() const {
  return static_cast<int>(std::count(seen_.begin(), seen_.end(), true));
}

int UnitClustering::num_components_seen() const {
  std::set<int> roots;
  for (int u = 0; u < num_units(); ++u)
    if (seen_[static_cast<size_t>(u)]) roots.insert(find(u));
  return static_cast<int>(roots.size());
}

ClusteringResult UnitClustering::result() const {
  ClusteringResult r;
  r.unit_domain.assign(static_cast<size_t>(num_units()), -1);
  std::map<int, int> domain_of_root;  // root -> domain, numbered in order of each domain's smallest unit
  for (int u = 0; u < num_units(); ++u) {
    if (!seen_[static_cast<size_t>(u)]) continue;
    auto [it, inserted] = domain_of_root.emplace(find(u), static_cast<int>(domain_of_root.size()));
    r.unit_domain[static_cast<size_t>(u)] = it->second;
  }
  r.num_observed_domains = static_cast<int>(domain_of_root.size());
  int next = r.num_observed_domains;
  for (int u = 0; u < num_units(); ++u) {
    if (seen_[static_cast<size_t>(u)]) continue;
    r.unseen_units.push_back(u);
    r.unit_domain[static_cast<size_t>(u)] = next++;
  }
  return r;
}

ClusteringResult cluster_units(int num_units, const std::vector<ClusterObservation>& observations) {
  UnitClustering clustering(num_units);
  clustering.add(observations);
  return clustering.result();
}

// --- dispatch pattern

DispatchCheck check_round_robin_dispatch(const std::vector<int>& workgroup_domain, int num_domains) {
  if (num_domains <= 0) fail("dispatch check: num_domains must be positive, got {}", num_domains);
  DispatchCheck c;
  c.total = static_cast<int>(workgroup_domain.size());
  if (workgroup_domain.empty()) return c;
  for (size_t i = 0; i < workgroup_domain.size(); ++i)
    if (workgroup_domain[i] < 0 || workgroup_domain[i] >= num_domains)
      fail("dispatch check: workgroup {} is on domain {}, outside 0..{}", i, workgroup_domain[i], num_domains - 1);
  c.first_domain = workgroup_domain[0];
  for (int i = 0; i < c.total; ++i) {
    if (workgroup_domain[static_cast<size_t>(i)] == (c.first_domain + i) % num_domains) {
      ++c.matching;
    } else if (c.first_mismatch < 0) {
      c.first_mismatch = i;
    }
  }
  c.round_robin = c.matching == c.total;
  return c;
}

}  // namespace mk
