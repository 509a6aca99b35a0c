// How the topology-grouped barriers (device/measure/sync_primitives.h) group workgroups, as pure CPU code.
//
// The device discovers its grouping at kernel start: every workgroup (CTA) reads its hardware id (NVIDIA
// %smid, AMD amd_hw_id(xcc, se, sh, cu)) and looks it up in a table hw id -> group that the host built
// from a Topology (hw_id_group_table below). Without a table, or when any workgroup's id is missing
// from it, every workgroup falls back to synthetic_group_of(blockIdx.x, gridDim.x, D). It then counts
// the members of each group with atomics. This header computes the same thing on the CPU from a
// workgroup -> group assignment, so the emulator and the tests see the grouping the kernel uses.
//
// Header-only (topology/CMakeLists.txt is not touched) and C++17, because nvcc reads it too: the device
// code calls synthetic_group_of (constexpr functions are callable on the device with
// --expt-relaxed-constexpr; HIP-Clang treats constexpr functions as host+device).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "topology/topology.h"

namespace mk {

// Most groups the device barriers support (one 128-byte line per group and counter kind).
inline constexpr int kMaxSyncGroups = 64;

// Synthetic grouping of W workgroups into D groups by block index: contiguous runs, sizes differ by at
// most one (W=132, D=8: 17,16,17,16,...). The device uses exactly this formula; the host mirrors it.
constexpr int synthetic_group_of(int workgroup, int num_workgroups, int num_groups) {
  return num_workgroups <= 0 || num_groups <= 1
             ? 0
             : static_cast<int>((static_cast<long long>(workgroup) * num_groups) / num_workgroups);
}

// The grouping of one launch's workgroups, as the hierarchical barrier sees it.
struct SyncGrouping {
  int num_workgroups = 0;
  int num_groups = 0;                // group ids used are 0 .. num_groups-1 (some may be empty)
  std::vector<int> workgroup_group;  // workgroup -> group
  std::vector<int> group_size;       // workgroups per group (0 for an empty group)
  std::vector<int> group_leader;     // lowest workgroup id of each group, -1 for an empty group
  std::vector<int> group_rank;       // workgroup -> its index among its group's workgroups (ascending id)
  int num_active_groups = 0;         // groups with at least one workgroup: arrivals at the top level

  int size_of_group_of(int workgroup) const {
    return group_size.at(static_cast<size_t>(workgroup_group.at(static_cast<size_t>(workgroup))));
  }
  bool is_leader(int workgroup) const {
    return group_leader.at(static_cast<size_t>(workgroup_group.at(static_cast<size_t>(workgroup)))) == workgroup;
  }
};

// From any assignment workgroup -> group id in [0, num_groups). Throws mk::Error on an id out of range or
// num_groups outside [1, kMaxSyncGroups].
inline SyncGrouping make_sync_grouping(const std::vector<int>& workgroup_group, int num_groups) {
  if (num_groups < 1 || num_groups > kMaxSyncGroups)
    fail("sync grouping: {} groups; the barriers support 1..{}", num_groups, kMaxSyncGroups);
  if (workgroup_group.empty()) fail("sync grouping: no workgroups");
  SyncGrouping g;
  g.num_workgroups = static_cast<int>(workgroup_group.size());
  g.num_groups = num_groups;
  g.workgroup_group = workgroup_group;
  g.group_size.assign(static_cast<size_t>(num_groups), 0);
  g.group_leader.assign(static_cast<size_t>(num_groups), -1);
  g.group_rank.assign(workgroup_group.size(), 0);
  for (int w = 0; w < g.num_workgroups; ++w) {
    const int grp = workgroup_group[static_cast<size_t>(w)];
    if (grp < 0 || grp >= num_groups)
      fail("sync grouping: workgroup {} is in group {}, outside 0..{}", w, grp, num_groups - 1);
    auto& size = g.group_size[static_cast<size_t>(grp)];
    g.group_rank[static_cast<size_t>(w)] = size++;
    if (g.group_leader[static_cast<size_t>(grp)] < 0) g.group_leader[static_cast<size_t>(grp)] = w;
  }
  g.num_active_groups =
      static_cast<int>(std::count_if(g.group_size.begin(), g.group_size.end(), [](int s) { return s > 0; }));
  return g;
}

// The device's fallback: workgroup w in synthetic_group_of(w, W, D).
inline SyncGrouping synthetic_sync_grouping(int num_workgroups, int num_groups) {
  if (num_workgroups < 1) fail("sync grouping: {} workgroups", num_workgroups);
  std::vector<int> wg(static_cast<size_t>(num_workgroups));
  for (int w = 0; w < num_workgroups; ++w)
    wg[static_cast<size_t>(w)] = synthetic_group_of(w, num_workgroups, num_groups);
  return make_sync_grouping(wg, num_groups);
}

// unit -> group: the topology's domains, except that domains with fewer than min_units units are merged
// with each other (in order of their smallest unit id) until each merged group has at least min_units;
// a remainder that stays too small joins the last merged group, or the smallest big domain if no small
// group was formed. Groups are numbered by their smallest unit id. min_units <= 1 keeps the domains.
//
// Why: the NVIDIA probe can leave a GPC in fragments (docs/topology.md: an H200 showed four groups of 2
// SMs); a barrier level with 2-member groups costs an extra hop for little contention relief. Merging is
// a balancing choice, NOT a claim about the hardware (merged fragments need not share a GPC).
inline std::vector<int> merge_small_domains(const Topology& t, int min_units) {
  t.validate();
  const int D = t.num_domains();
  std::vector<int> first_unit(static_cast<size_t>(D), t.num_units);
  for (int u = t.num_units - 1; u >= 0; --u) first_unit[static_cast<size_t>(t.unit_domain[static_cast<size_t>(u)])] = u;
  const std::vector<int> sizes = t.domain_sizes();
  // domain -> provisional group key (the smallest domain id whose group it joins)
  std::vector<int> domain_key(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) domain_key[static_cast<size_t>(d)] = d;
  if (min_units > 1) {
    std::vector<int> small;
    for (int d = 0; d < D; ++d)
      if (sizes[static_cast<size_t>(d)] < min_units) small.push_back(d);
    std::sort(small.begin(), small.end(),
              [&](int a, int b) { return first_unit[static_cast<size_t>(a)] < first_unit[static_cast<size_t>(b)]; });
    int current = -1, current_size = 0, last_full = -1;
    for (int d : small) {
      if (current < 0) current = d, current_size = 0;
      domain_key[static_cast<size_t>(d)] = current;
      current_size += sizes[static_cast<size_t>(d)];
      if (current_size >= min_units) last_full = current, current = -1;
    }
    if (current >= 0) {  // a remainder below min_units
      int target = last_full;
      if (target < 0) {  // no merged group: the smallest domain that was big enough, if any
        for (int d = 0; d < D; ++d)
          if (sizes[static_cast<size_t>(d)] >= min_units &&
              (target < 0 || sizes[static_cast<size_t>(d)] < sizes[static_cast<size_t>(target)]))
            target = d;
      }
      if (target >= 0)
        for (int d : small)
          if (domain_key[static_cast<size_t>(d)] == current) domain_key[static_cast<size_t>(d)] = target;
    }
  }
  // Dense group ids ordered by each group's smallest unit.
  std::vector<int> key_first(static_cast<size_t>(D), t.num_units);
  for (int d = 0; d < D; ++d) {
    auto& f = key_first[static_cast<size_t>(domain_key[static_cast<size_t>(d)])];
    f = std::min(f, first_unit[static_cast<size_t>(d)]);
  }
  std::vector<int> keys;
  for (int d = 0; d < D; ++d)
    if (domain_key[static_cast<size_t>(d)] == d) keys.push_back(d);
  std::sort(keys.begin(), keys.end(),
            [&](int a, int b) { return key_first[static_cast<size_t>(a)] < key_first[static_cast<size_t>(b)]; });
  std::vector<int> key_group(static_cast<size_t>(D), -1);
  for (size_t i = 0; i < keys.size(); ++i) key_group[static_cast<size_t>(keys[i])] = static_cast<int>(i);
  std::vector<int> unit_group(static_cast<size_t>(t.num_units));
  for (int u = 0; u < t.num_units; ++u)
    unit_group[static_cast<size_t>(u)] =
        key_group[static_cast<size_t>(domain_key[static_cast<size_t>(t.unit_domain[static_cast<size_t>(u)])])];
  return unit_group;
}

// The table the device indexes with its hardware id: table[hw_id_of(u)] = unit_group[u], -1 for ids that
// name no unit. Throws mk::Error if the sizes disagree, a group is out of [0, kMaxSyncGroups) or the
// largest hardware id would make the table absurdly large (> 1 << 20 entries).
inline std::vector<int> hw_id_group_table(const Topology& t, const std::vector<int>& unit_group) {
  if (static_cast<int>(unit_group.size()) != t.num_units)
    fail("sync grouping: {} unit groups for {} units", unit_group.size(), t.num_units);
  std::uint32_t max_id = 0;
  for (int u = 0; u < t.num_units; ++u) max_id = std::max(max_id, t.hw_id_of(u));
  if (max_id >= (1u << 20)) fail("sync grouping: hardware id {} is too large for a lookup table", max_id);
  std::vector<int> table(static_cast<size_t>(max_id) + 1, -1);
  for (int u = 0; u < t.num_units; ++u) {
    const int grp = unit_group[static_cast<size_t>(u)];
    if (grp < 0 || grp >= kMaxSyncGroups)
      fail("sync grouping: unit {} is in group {}, outside 0..{}", u, grp, kMaxSyncGroups - 1);
    table[t.hw_id_of(u)] = grp;
  }
  return table;
}

// Number of groups a unit -> group assignment uses (max + 1).
inline int count_groups(const std::vector<int>& unit_group) {
  int n = 0;
  for (int g : unit_group) n = std::max(n, g + 1);
  return n;
}

// What the device computes when workgroup w runs on the unit with hardware id workgroup_hw_id[w]: the
// table's group, or the synthetic fallback for EVERY workgroup if any id misses the table (the kernel
// decides that collectively, so all workgroups agree). synthetic_groups is D of the fallback.
inline SyncGrouping device_sync_grouping(const std::vector<int>& table, int table_groups,
                                         const std::vector<std::uint32_t>& workgroup_hw_id, int synthetic_groups,
                                         bool* used_table = nullptr) {
  const int W = static_cast<int>(workgroup_hw_id.size());
  bool miss = table.empty();
  std::vector<int> wg(static_cast<size_t>(W));
  for (int w = 0; w < W && !miss; ++w) {
    const std::uint32_t id = workgroup_hw_id[static_cast<size_t>(w)];
    if (id >= table.size() || table[id] < 0)
      miss = true;
    else
      wg[static_cast<size_t>(w)] = table[id];
  }
  if (used_table) *used_table = !miss;
  if (miss) return synthetic_sync_grouping(W, synthetic_groups);
  return make_sync_grouping(wg, table_groups);
}

}  // namespace mk
