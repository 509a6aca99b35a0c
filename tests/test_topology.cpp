// Topology without a GPU: synthetic maps, validation, JSON, the table, and the pure analysis the probe
// runs on its observations (union-find over cluster launches, the round-robin dispatch check).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/helpers/error_of.h"
#include "topology/topology.h"

namespace mk {
namespace {

using test::error_of;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// --- synthetic topologies

TEST(TopologySynthetic, EvenSplitLikeMI300X) {
  const Topology t = make_synthetic_topology(304, 8, 2);
  EXPECT_EQ(t.num_units, 304);
  EXPECT_EQ(t.num_domains(), 8);
  EXPECT_EQ(t.num_dies(), 4);
  EXPECT_EQ(t.domain_sizes(), std::vector<int>(8, 38));
  EXPECT_EQ(t.domains_in_die(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(t.domains_in_die(3), (std::vector<int>{6, 7}));
  EXPECT_EQ(t.die_of_domain(5), 2);
  // Contiguous: units 0..37 in domain 0, 38..75 in domain 1, ...
  EXPECT_EQ(t.domain_of(0), 0);
  EXPECT_EQ(t.domain_of(37), 0);
  EXPECT_EQ(t.domain_of(38), 1);
  EXPECT_EQ(t.domain_of(303), 7);
  std::vector<int> expected(38);
  std::iota(expected.begin(), expected.end(), 38);
  EXPECT_EQ(t.units_in_domain(1), expected);
  EXPECT_EQ(t.vendor, Topology::Vendor::Synthetic);
  EXPECT_EQ(t.source, "synthetic");
  EXPECT_NO_THROW(t.validate());
}

TEST(TopologySynthetic, UnevenSplitGivesTheRemainderToTheFirstDomains) {
  const Topology t = make_synthetic_topology(132, 8, 8);
  EXPECT_EQ(t.domain_sizes(), (std::vector<int>{17, 17, 17, 17, 16, 16, 16, 16}));
  EXPECT_EQ(t.num_dies(), 1);
  const std::vector<int> sizes = t.domain_sizes();
  EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), 0), 132);
}

TEST(TopologySynthetic, ExplicitDomainSizes) {
  const Topology t = make_synthetic_topology({18, 18, 16, 16, 16, 16, 16, 16}, 4);
  EXPECT_EQ(t.num_units, 132);
  EXPECT_EQ(t.num_dies(), 2);
  EXPECT_EQ(t.units_in_domain(1).front(), 18);
  EXPECT_EQ(t.units_in_domain(1).back(), 35);
}

TEST(TopologySynthetic, InterleavedLayoutDealsUnitsLikeCards) {
  const Topology t = make_synthetic_topology({3, 2, 1}, 1, UnitLayout::Interleaved);
  // round 0: d0 d1 d2, round 1: d0 d1, round 2: d0
  EXPECT_EQ(t.unit_domain, (std::vector<int>{0, 1, 2, 0, 1, 0}));
  EXPECT_EQ(t.domain_sizes(), (std::vector<int>{3, 2, 1}));
  const Topology h = make_synthetic_topology(132, 8, 8, UnitLayout::Interleaved);
  EXPECT_EQ(h.domain_sizes(), (std::vector<int>{17, 17, 17, 17, 16, 16, 16, 16}));
  EXPECT_EQ(h.domain_of(0), 0);
  EXPECT_EQ(h.domain_of(9), 1);
}

TEST(TopologySynthetic, Presets) {
  const Topology h100 = synthetic_h100();
  EXPECT_EQ(h100.num_units, 132);
  EXPECT_EQ(h100.num_domains(), 8);
  EXPECT_EQ(h100.num_dies(), 1);
  EXPECT_EQ(h100.unit_name, "SM");
  EXPECT_EQ(h100.domain_name, "GPC");
  for (int size : h100.domain_sizes()) {
    EXPECT_GE(size, 16);
    EXPECT_LE(size, 18);
  }
  const Topology mi = synthetic_mi300x();
  EXPECT_EQ(mi.num_units, 304);
  EXPECT_EQ(mi.num_domains(), 8);
  EXPECT_EQ(mi.num_dies(), 4);
  EXPECT_EQ(mi.domain_name, "XCD");
  EXPECT_EQ(mi.die_name, "IOD");
  EXPECT_EQ(mi.l2_bytes, 4ull << 20);
  EXPECT_EQ(mi.llc_bytes, 256ull << 20);
}

TEST(TopologySynthetic, SpecParsing) {
  EXPECT_EQ(synthetic_from_spec("h100").num_units, 132);
  EXPECT_EQ(synthetic_from_spec("mi300x").num_units, 304);
  const Topology t = synthetic_from_spec("10,4,2");
  EXPECT_EQ(t.num_units, 10);
  EXPECT_EQ(t.domain_sizes(), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(t.num_dies(), 2);
  EXPECT_TRUE(contains(error_of([] { synthetic_from_spec("10,4"); }), "N,D,P"));
  EXPECT_TRUE(contains(error_of([] { synthetic_from_spec("10,x,2"); }), "'x' is not an integer"));
  EXPECT_TRUE(contains(error_of([] { synthetic_from_spec("10,4,2,1"); }), "N,D,P"));
  EXPECT_TRUE(contains(error_of([] { synthetic_from_spec(""); }), "N,D,P"));
  EXPECT_TRUE(contains(error_of([] { synthetic_from_spec("10,,2"); }), "is not an integer"));
}

TEST(TopologySynthetic, RejectsImpossibleShapes) {
  EXPECT_TRUE(contains(error_of([] { make_synthetic_topology(4, 8, 1); }), "cannot fill 8 domains"));
  EXPECT_TRUE(contains(error_of([] { make_synthetic_topology(8, 0, 1); }), "at least one domain"));
  EXPECT_TRUE(contains(error_of([] { make_synthetic_topology(16, 8, 3); }), "dies of 3 domains"));
  EXPECT_TRUE(contains(error_of([] { make_synthetic_topology(16, 8, 0); }), "dies of 0 domains"));
  EXPECT_TRUE(contains(error_of([] { make_synthetic_topology(std::vector<int>{4, 0, 4}, 1); }),
                       "domain 1 has 0 units"));
  EXPECT_TRUE(contains(error_of([] { make_synthetic_topology(std::vector<int>{}, 1); }), "at least one domain"));
}

// --- queries and validation

Topology small() { return make_synthetic_topology(6, 3, 1); }  // units {0,1} {2,3} {4,5}, dies 0 1 2

TEST(TopologyValidate, QueriesCheckTheirRange) {
  const Topology t = small();
  EXPECT_TRUE(contains(error_of([&] { t.domain_of(6); }), "unit 6 is out of range"));
  EXPECT_TRUE(contains(error_of([&] { t.domain_of(-1); }), "out of range"));
  EXPECT_TRUE(contains(error_of([&] { t.units_in_domain(3); }), "domain 3 is out of range"));
  EXPECT_TRUE(contains(error_of([&] { t.die_of_domain(-1); }), "out of range"));
  EXPECT_TRUE(contains(error_of([&] { t.domains_in_die(3); }), "die 3 is out of range"));
}

TEST(TopologyValidate, UnitWithoutDomain) {
  Topology t = small();
  t.unit_domain[4] = -1;
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "unit 4 is assigned to domain -1"));
  t.unit_domain[4] = 3;
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "unit 4 is assigned to domain 3, which does not exist"));
}

TEST(TopologyValidate, SizesMustAgree) {
  Topology t = small();
  t.unit_domain.pop_back();
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "unit_domain has 5 entries for 6 units"));
  Topology z = small();
  z.num_units = 0;
  EXPECT_TRUE(contains(error_of([&] { z.validate(); }), "num_units must be positive"));
  Topology nd = small();
  nd.domain_die.clear();
  EXPECT_TRUE(contains(error_of([&] { nd.validate(); }), "domain_die is empty"));
}

TEST(TopologyValidate, EmptyDomain) {
  Topology t = small();
  t.unit_domain = {0, 0, 2, 2, 2, 2};
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "domain 1 has no units"));
}

TEST(TopologyValidate, DieNumbering) {
  Topology t = small();
  t.domain_die = {0, 2, 2};
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "die 1 has no domains"));
  t.domain_die = {0, -1, 0};
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "domain 1 is on die -1"));
}

TEST(TopologyValidate, HardwareIds) {
  Topology t = small();
  t.unit_hw_id = {10, 11, 12, 13, 14, 15};
  EXPECT_NO_THROW(t.validate());
  EXPECT_EQ(t.hw_id_of(2), 12u);
  EXPECT_EQ(t.unit_of_hw_id(15), 5);
  EXPECT_FALSE(t.unit_of_hw_id(3).has_value());
  t.unit_hw_id[5] = 10;
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "units 0 and 5 have the same hardware id 0xa"));
  t.unit_hw_id.pop_back();
  EXPECT_TRUE(contains(error_of([&] { t.validate(); }), "unit_hw_id has 5 entries"));
  const Topology identity = small();
  EXPECT_EQ(identity.hw_id_of(4), 4u);
  EXPECT_EQ(identity.unit_of_hw_id(4), 4);
  EXPECT_FALSE(identity.unit_of_hw_id(6).has_value());
}

TEST(TopologyValidate, AmdHardwareIdPacking) {
  constexpr std::uint32_t id = amd_hw_id(7, 3, 1, 9);
  static_assert(amd_hw_id_xcc(id) == 7 && amd_hw_id_se(id) == 3 && amd_hw_id_sh(id) == 1 && amd_hw_id_cu(id) == 9);
  // Sorting packed ids orders by XCC first, so each XCD's CUs are contiguous.
  EXPECT_LT(amd_hw_id(0, 7, 1, 15), amd_hw_id(1, 0, 0, 0));
  EXPECT_LT(amd_hw_id(2, 0, 1, 0), amd_hw_id(2, 1, 0, 0));
}

// --- JSON

TEST(TopologyJson, RoundTrip) {
  Topology t = synthetic_mi300x();
  t.vendor = Topology::Vendor::Amd;
  t.source = "probe";
  t.unit_hw_id.resize(static_cast<size_t>(t.num_units));
  for (int u = 0; u < t.num_units; ++u)
    t.unit_hw_id[static_cast<size_t>(u)] = amd_hw_id(static_cast<unsigned>(u / 38), 0, 0, static_cast<unsigned>(u % 38 % 16)) + static_cast<std::uint32_t>((u % 38 / 16) << 5);
  t.round_robin_dispatch = true;
  t.notes.push_back("a note");
  ASSERT_NO_THROW(t.validate());
  const std::string text = topology_to_json_string(t);
  const Topology back = topology_from_json_string(text);
  EXPECT_EQ(back.device_name, t.device_name);
  EXPECT_EQ(back.arch, t.arch);
  EXPECT_EQ(back.vendor, Topology::Vendor::Amd);
  EXPECT_EQ(back.source, "probe");
  EXPECT_EQ(back.unit_name, "CU");
  EXPECT_EQ(back.domain_name, "XCD");
  EXPECT_EQ(back.die_name, "IOD");
  EXPECT_EQ(back.num_units, t.num_units);
  EXPECT_EQ(back.unit_domain, t.unit_domain);
  EXPECT_EQ(back.domain_die, t.domain_die);
  EXPECT_EQ(back.unit_hw_id, t.unit_hw_id);
  EXPECT_EQ(back.l2_bytes, t.l2_bytes);
  EXPECT_EQ(back.llc_bytes, t.llc_bytes);
  EXPECT_EQ(back.round_robin_dispatch, std::optional<bool>(true));
  EXPECT_EQ(back.notes, t.notes);
  // And the text is stable through a second trip; the one-line form reads back the same.
  EXPECT_EQ(topology_to_json_string(back), text);
  const std::string compact = topology_to_json_string(t, -1);
  EXPECT_EQ(compact.find('\n'), std::string::npos);
  EXPECT_EQ(topology_from_json_string(compact).unit_hw_id, t.unit_hw_id);
}

TEST(TopologyJson, DocumentShape) {
  const nlohmann::json j = synthetic_h100();
  EXPECT_EQ(j.at("format"), "monokernel-topology");
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("vendor"), "synthetic");
  EXPECT_EQ(j.at("num_domains"), 8);
  EXPECT_TRUE(j.at("round_robin_dispatch").is_null());
  EXPECT_EQ(j.at("domains").size(), 8u);
  EXPECT_EQ(j.at("domains")[0].at("units").size(), 18u);
  EXPECT_EQ(j.at("levels").at("domain"), "GPC");
}

TEST(TopologyJson, RejectsBadDocuments) {
  EXPECT_TRUE(contains(error_of([] { topology_from_json_string("{not json"); }), "cannot parse"));
  EXPECT_TRUE(contains(error_of([] { topology_from_json_string("[1,2]"); }), "expected an object"));
  nlohmann::json j = make_synthetic_topology(4, 2, 1);
  nlohmann::json missing = j;
  missing.erase("unit_domain");
  EXPECT_TRUE(contains(error_of([&] { topology_from_json_string(missing.dump()); }), "unit_domain"));
  nlohmann::json bad_map = j;
  bad_map["unit_domain"] = {0, 0, 0, 5};
  EXPECT_TRUE(contains(error_of([&] { topology_from_json_string(bad_map.dump()); }), "unit 3 is assigned to domain 5"));
  nlohmann::json wrong_type = j;
  wrong_type["num_units"] = "four";
  EXPECT_TRUE(contains(error_of([&] { topology_from_json_string(wrong_type.dump()); }), "topology JSON"));
  nlohmann::json vendor = j;
  vendor["vendor"] = "intel";
  EXPECT_TRUE(contains(error_of([&] { topology_from_json_string(vendor.dump()); }), "unknown vendor 'intel'"));
  nlohmann::json version = j;
  version["version"] = 2;
  EXPECT_TRUE(contains(error_of([&] { topology_from_json_string(version.dump()); }), "version 2"));
  nlohmann::json format = j;
  format["format"] = "something-else";
  EXPECT_TRUE(contains(error_of([&] { topology_from_json_string(format.dump()); }), "format"));
}

// --- human output

TEST(TopologyTable, RangesAndRows) {
  EXPECT_EQ(format_id_ranges({}), "");
  EXPECT_EQ(format_id_ranges({5}), "5");
  EXPECT_EQ(format_id_ranges({0, 1, 2, 3, 7, 9, 10}), "0-3, 7, 9-10");
  const std::string table = format_topology_table(synthetic_mi300x());
  EXPECT_TRUE(contains(table, "304 CUs in 8 XCDs on 4 IODs")) << table;
  EXPECT_TRUE(contains(table, "0-37")) << table;
  EXPECT_TRUE(contains(table, "266-303")) << table;
  EXPECT_TRUE(contains(table, "Infinity") || contains(table, "last-level cache: 256 MiB")) << table;
  Topology rr = make_synthetic_topology(8, 2, 1, UnitLayout::Interleaved);
  rr.round_robin_dispatch = false;
  const std::string t2 = format_topology_table(rr);
  EXPECT_TRUE(contains(t2, "0, 2, 4, 6")) << t2;
  EXPECT_TRUE(contains(t2, "NOT round-robin")) << t2;
}

// --- union-find clustering of cluster-launch observations

// Simulates cluster launches on a chip whose true unit -> domain map is `truth`: each cluster picks
// `size` distinct units of one domain at random (what the hardware guarantees), as a probe would see.
std::vector<ClusterObservation> simulate_launch(const std::vector<int>& truth, int size, int clusters, std::int64_t first_id,
                                                std::mt19937& rng) {
  const int domains = *std::max_element(truth.begin(), truth.end()) + 1;
  std::vector<std::vector<int>> members(static_cast<size_t>(domains));
  for (int u = 0; u < static_cast<int>(truth.size()); ++u) members[static_cast<size_t>(truth[static_cast<size_t>(u)])].push_back(u);
  std::vector<ClusterObservation> out;
  for (int c = 0; c < clusters; ++c) {
    std::vector<int> eligible;
    for (int d = 0; d < domains; ++d)
      if (static_cast<int>(members[static_cast<size_t>(d)].size()) >= size) eligible.push_back(d);
    if (eligible.empty()) break;
    const int d = eligible[std::uniform_int_distribution<size_t>(0, eligible.size() - 1)(rng)];
    std::vector<int> pool = members[static_cast<size_t>(d)];
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int k = 0; k < size; ++k) out.push_back({first_id + c, pool[static_cast<size_t>(k)]});
  }
  return out;
}

TEST(TopologyClustering, HandMadeObservations) {
  // Units 0..7; clusters: {0,1}, {1,2}, {4,5}, {5,6}; unit 3 and 7 never seen.
  const std::vector<ClusterObservation> obs = {{0, 0}, {0, 1}, {1, 1}, {1, 2}, {2, 4}, {2, 5}, {3, 5}, {3, 6}};
  const ClusteringResult r = cluster_units(8, obs);
  EXPECT_EQ(r.num_observed_domains, 2);
  EXPECT_EQ(r.unseen_units, (std::vector<int>{3, 7}));
  // Domains numbered by smallest unit; unseen units get their own domains at the end.
  EXPECT_EQ(r.unit_domain, (std::vector<int>{0, 0, 0, 2, 1, 1, 1, 3}));
}

TEST(TopologyClustering, ClusterIdsNeedNotBeDense) {
  const std::vector<ClusterObservation> obs = {{1000, 3}, {-5, 0}, {1000, 1}, {-5, 2}};
  const ClusteringResult r = cluster_units(4, obs);
  EXPECT_EQ(r.unit_domain, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_TRUE(r.unseen_units.empty());
}

TEST(TopologyClustering, AddReportsWhetherAnythingWasLearnt) {
  UnitClustering c(4);
  EXPECT_TRUE(c.add({{0, 0}, {0, 1}}));
  EXPECT_FALSE(c.add({{7, 1}, {7, 0}}));  // same pair again: nothing new
  EXPECT_EQ(c.num_seen(), 2);
  EXPECT_EQ(c.num_components_seen(), 1);
  EXPECT_TRUE(c.add({{8, 2}}));           // a new unit, alone
  EXPECT_EQ(c.num_components_seen(), 2);
  EXPECT_TRUE(c.add({{9, 2}, {9, 1}}));   // a merge
  EXPECT_EQ(c.num_components_seen(), 1);
  EXPECT_FALSE(c.add({}));
  EXPECT_EQ(c.result().unseen_units, (std::vector<int>{3}));
}

TEST(TopologyClustering, RejectsUnitsOutOfRange) {
  UnitClustering c(4);
  EXPECT_TRUE(contains(error_of([&] { c.add({{0, 4}}); }), "reports unit 4, outside 0..3"));
  EXPECT_TRUE(contains(error_of([&] { c.add({{0, -1}}); }), "outside"));
  EXPECT_TRUE(contains(error_of([] { UnitClustering bad(0); }), "must be positive"));
}

TEST(TopologyClustering, RecoversAnUnevenH100LikeMapFromSimulatedLaunches) {
  // The truth: 132 SMs in GPCs of 18,18,16,16,16,16,16,16 with SM ids dealt across GPCs (as real chips
  // number them), then shuffled so nothing lines up with id order.
  Topology truth_t = make_synthetic_topology({18, 18, 16, 16, 16, 16, 16, 16}, 8, UnitLayout::Interleaved);
  std::mt19937 rng(1234);
  std::vector<int> truth = truth_t.unit_domain;
  std::shuffle(truth.begin(), truth.end(), rng);

  // The probe's loop: sizes 16 down to 2, launches until 3 in a row teach nothing.
  UnitClustering clustering(132);
  std::int64_t next_cluster = 0;
  for (int size = 16; size >= 2; --size) {
    int quiet = 0;
    for (int launch = 0; launch < 12 && quiet < 3; ++launch) {
      const auto obs = simulate_launch(truth, size, 2 * (132 / size), next_cluster, rng);
      next_cluster += 1000;
      quiet = clustering.add(obs) ? 0 : quiet + 1;
    }
  }
  const ClusteringResult r = clustering.result();
  EXPECT_TRUE(r.unseen_units.empty());
  EXPECT_EQ(r.num_observed_domains, 8);
  // Same partition as the truth (domain numbers may differ): a bijection between the labels.
  std::vector<int> map_to_truth(8, -1);
  for (int u = 0; u < 132; ++u) {
    int& m = map_to_truth[static_cast<size_t>(r.unit_domain[static_cast<size_t>(u)])];
    if (m < 0) m = truth[static_cast<size_t>(u)];
    EXPECT_EQ(m, truth[static_cast<size_t>(u)]) << "unit " << u;
  }
  std::vector<int> sorted = map_to_truth;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(TopologyClustering, SmallClustersAloneLeaveDomainsSplit) {
  // Only pairs, once: domains cannot be recovered; the result says so by having more domains than the
  // truth rather than by merging across domains.
  const std::vector<int> truth = {0, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<ClusterObservation> obs = {{0, 0}, {0, 1}, {1, 2}, {1, 3}, {2, 4}, {2, 5}, {3, 6}, {3, 7}};
  const ClusteringResult r = cluster_units(8, obs);
  EXPECT_EQ(r.num_observed_domains, 4);
  for (int u = 0; u < 8; ++u)
    for (int v = 0; v < 8; ++v)
      if (r.unit_domain[static_cast<size_t>(u)] == r.unit_domain[static_cast<size_t>(v)]) {
        EXPECT_EQ(truth[static_cast<size_t>(u)], truth[static_cast<size_t>(v)]);
      }
}

// --- round-robin dispatch check

TEST(TopologyDispatch, RoundRobinFromAnyStart) {
  std::vector<int> wg;
  for (int i = 0; i < 24; ++i) wg.push_back((i + 3) % 8);
  const DispatchCheck c = check_round_robin_dispatch(wg, 8);
  EXPECT_TRUE(c.round_robin);
  EXPECT_EQ(c.first_domain, 3);
  EXPECT_EQ(c.matching, 24);
  EXPECT_EQ(c.first_mismatch, -1);
}

TEST(TopologyDispatch, DetectsABreak) {
  std::vector<int> wg;
  for (int i = 0; i < 16; ++i) wg.push_back(i % 8);
  wg[10] = 5;
  const DispatchCheck c = check_round_robin_dispatch(wg, 8);
  EXPECT_FALSE(c.round_robin);
  EXPECT_EQ(c.first_mismatch, 10);
  EXPECT_EQ(c.matching, 15);
  EXPECT_EQ(c.total, 16);
  // Blocked (0,0,1,1,...) is not round-robin.
  std::vector<int> blocked;
  for (int i = 0; i < 16; ++i) blocked.push_back(i / 2);
  EXPECT_FALSE(check_round_robin_dispatch(blocked, 8).round_robin);
}

TEST(TopologyDispatch, EdgeCases) {
  EXPECT_FALSE(check_round_robin_dispatch({}, 8).round_robin);
  EXPECT_TRUE(check_round_robin_dispatch({0, 0, 0}, 1).round_robin);
  EXPECT_TRUE(contains(error_of([] { check_round_robin_dispatch({0, 9}, 8); }), "workgroup 1 is on domain 9"));
  EXPECT_TRUE(contains(error_of([] { check_round_robin_dispatch({0}, 0); }), "must be positive"));
}

}  // namespace
}  // namespace mk
