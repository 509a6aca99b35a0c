// The CPU side of the topology-grouped barriers: how workgroups are grouped (topology/sync_grouping.h)
// and the barrier logic itself (topology/sync_model.h, the same counters and memory orders as
// device/measure/sync_primitives.h), run in adversarial single-threaded interleavings and on real threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "topology/sync_grouping.h"
#include "topology/sync_model.h"
#include "topology/topology.h"

#ifndef MK_SOURCE_DIR
#error "MK_SOURCE_DIR must name the repository root"
#endif

namespace mk {
namespace {

Topology h200_map() {
  std::ifstream in(std::string(MK_SOURCE_DIR) + "/docs/measurements/h200_topology.json");
  EXPECT_TRUE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return topology_from_json_string(s.str());
}

// --- grouping

TEST(SyncGrouping, SyntheticFormulaIsContiguousAndBalanced) {
  const SyncGrouping g = synthetic_sync_grouping(132, 8);
  EXPECT_EQ(g.num_workgroups, 132);
  EXPECT_EQ(g.num_groups, 8);
  EXPECT_EQ(g.num_active_groups, 8);
  EXPECT_EQ(g.group_size, (std::vector<int>{17, 16, 17, 16, 17, 16, 17, 16}));
  for (int w = 1; w < 132; ++w) EXPECT_GE(g.workgroup_group[size_t(w)], g.workgroup_group[size_t(w - 1)]);
  EXPECT_EQ(g.group_leader[0], 0);
  EXPECT_EQ(g.group_leader[1], 17);
  EXPECT_EQ(g.group_rank[17], 0);
  EXPECT_EQ(g.group_rank[18], 1);
  EXPECT_TRUE(g.is_leader(17));
  EXPECT_FALSE(g.is_leader(18));
  EXPECT_EQ(g.size_of_group_of(131), 16);
  EXPECT_EQ(synthetic_sync_grouping(304, 8).group_size, std::vector<int>(8, 38));
  // constexpr: the device evaluates the same formula.
  static_assert(synthetic_group_of(0, 132, 8) == 0 && synthetic_group_of(131, 132, 8) == 7);
  static_assert(synthetic_group_of(5, 10, 1) == 0 && synthetic_group_of(3, 0, 4) == 0);
}

TEST(SyncGrouping, FewerWorkgroupsThanGroupsLeavesEmptyGroups) {
  const SyncGrouping g = synthetic_sync_grouping(3, 8);
  EXPECT_EQ(g.num_active_groups, 3);
  EXPECT_EQ(std::accumulate(g.group_size.begin(), g.group_size.end(), 0), 3);
  for (int d = 0; d < 8; ++d) EXPECT_EQ(g.group_leader[size_t(d)] < 0, g.group_size[size_t(d)] == 0);
}

TEST(SyncGrouping, RejectsBadInput) {
  EXPECT_THROW(make_sync_grouping({0, 1, 2}, 2), Error);
  EXPECT_THROW(make_sync_grouping({0, -1}, 2), Error);
  EXPECT_THROW(make_sync_grouping({}, 2), Error);
  EXPECT_THROW(make_sync_grouping({0}, 0), Error);
  EXPECT_THROW(make_sync_grouping({0}, kMaxSyncGroups + 1), Error);
  EXPECT_THROW(synthetic_sync_grouping(0, 4), Error);
}

TEST(SyncGrouping, MergeKeepsTheMeasuredH200MapOrMergesItsFragments) {
  const Topology t = h200_map();
  ASSERT_EQ(t.num_units, 132);
  ASSERT_EQ(t.num_domains(), 12);
  // No merging: the probe's domains.
  const std::vector<int> same = merge_small_domains(t, 0);
  EXPECT_EQ(same, t.unit_domain);
  EXPECT_EQ(count_groups(same), 12);
  // Below 8: the four 2-SM fragments (SMs 124-131) become one group of 8; the group of 8 stays.
  const std::vector<int> merged = merge_small_domains(t, 8);
  EXPECT_EQ(count_groups(merged), 9);
  std::vector<int> sizes(9, 0);
  for (int g : merged) ++sizes[size_t(g)];
  EXPECT_EQ(sizes, (std::vector<int>{8, 16, 16, 16, 16, 16, 18, 18, 8}));
  for (int sm = 124; sm < 132; ++sm) EXPECT_EQ(merged[size_t(sm)], 8) << "SM " << sm;
  EXPECT_EQ(merged[0], 0);
  EXPECT_EQ(merged[16], 0);
  // Below 17: every group of 16 is too small, so they are merged in pairs, in order of their first SM.
  const std::vector<int> coarse = merge_small_domains(t, 17);
  EXPECT_LT(count_groups(coarse), 9);
  std::vector<int> coarse_sizes(size_t(count_groups(coarse)), 0);
  for (int g : coarse) ++coarse_sizes[size_t(g)];
  for (int s : coarse_sizes) EXPECT_GE(s, 17);
}

TEST(SyncGrouping, MergeRemainderJoinsAGroup) {
  // Small domains {2, 2, 3} below 8: all merged into one group of 7 < 8, no full merged group, so they
  // join the smallest big domain (10 units).
  const Topology t = make_synthetic_topology(std::vector<int>{16, 2, 10, 2, 3}, 1);
  const std::vector<int> g = merge_small_domains(t, 8);
  EXPECT_EQ(count_groups(g), 2);
  std::vector<int> sizes(2, 0);
  for (int x : g) ++sizes[size_t(x)];
  EXPECT_EQ(sizes, (std::vector<int>{16, 17}));
  // Everything small: one group.
  const Topology tiny = make_synthetic_topology(std::vector<int>{2, 2, 2}, 1);
  EXPECT_EQ(count_groups(merge_small_domains(tiny, 8)), 1);
}

TEST(SyncGrouping, HardwareIdTableFollowsUnitHwId) {
  const Topology t = h200_map();
  const std::vector<int> groups = merge_small_domains(t, 8);
  const std::vector<int> table = hw_id_group_table(t, groups);
  ASSERT_EQ(table.size(), 132u);  // dense %smid on Hopper
  for (int u = 0; u < t.num_units; ++u) EXPECT_EQ(table[t.hw_id_of(u)], groups[size_t(u)]);
  // AMD ids are sparse: the table has -1 between them.
  Topology amd = make_synthetic_topology(4, 2, 1);
  amd.unit_hw_id = {amd_hw_id(0, 0, 0, 1), amd_hw_id(0, 1, 0, 2), amd_hw_id(1, 0, 0, 1), amd_hw_id(1, 1, 0, 2)};
  const std::vector<int> amd_table = hw_id_group_table(amd, amd.unit_domain);
  EXPECT_EQ(amd_table.size(), size_t(amd_hw_id(1, 1, 0, 2)) + 1);
  EXPECT_EQ(amd_table[amd_hw_id(1, 0, 0, 1)], 1);
  EXPECT_EQ(amd_table[0], -1);
  EXPECT_THROW(hw_id_group_table(t, std::vector<int>(5, 0)), Error);
}

TEST(SyncGrouping, DeviceGroupingUsesTheTableOrFallsBackForEveryone) {
  const Topology t = h200_map();
  const std::vector<int> groups = merge_small_domains(t, 8);
  const std::vector<int> table = hw_id_group_table(t, groups);
  // Blocks land on SMs in some order (here: reversed).
  std::vector<std::uint32_t> block_sm(132);
  for (int b = 0; b < 132; ++b) block_sm[size_t(b)] = std::uint32_t(131 - b);
  bool used = false;
  const SyncGrouping g = device_sync_grouping(table, count_groups(groups), block_sm, 8, &used);
  EXPECT_TRUE(used);
  EXPECT_EQ(g.num_groups, 9);
  EXPECT_EQ(g.num_active_groups, 9);
  for (int b = 0; b < 132; ++b) EXPECT_EQ(g.workgroup_group[size_t(b)], groups[size_t(131 - b)]);
  // One block on an SM the table does not know: everyone uses the synthetic grouping.
  block_sm[7] = 500;
  const SyncGrouping f = device_sync_grouping(table, count_groups(groups), block_sm, 8, &used);
  EXPECT_FALSE(used);
  EXPECT_EQ(f.group_size, synthetic_sync_grouping(132, 8).group_size);
  // A partial grid (fewer blocks than SMs) leaves some groups with fewer members, none empty here.
  std::vector<std::uint32_t> half(66);
  std::iota(half.begin(), half.end(), 0u);
  const SyncGrouping h = device_sync_grouping(table, count_groups(groups), half, 8, &used);
  EXPECT_TRUE(used);
  EXPECT_EQ(std::accumulate(h.group_size.begin(), h.group_size.end(), 0), 66);
}

// --- barrier logic: single-threaded adversarial interleavings

struct InterleaveOutcome {
  bool early_pass = false;
  bool deadlock = false;
  std::string what;
};

// Steps participants in a random order (or round-robin when seed == 0) for `episodes` episodes each.
// Fails if a participant passes episode e before all participants arrived at e, or if everyone unfinished
// is waiting and a full sweep of polls lets nobody pass.
// `participants` defaults to the grouping's workgroup count; a different number models a barrier that was
// told the wrong count.
InterleaveOutcome run_interleaved(SyncBarrierKind kind, const SyncGrouping& g, int episodes, std::uint64_t seed,
                                  int participants = -1) {
  SyncBarrierModel model(kind, g);
  const int W = participants < 0 ? g.num_workgroups : participants;
  std::vector<SyncBarrierModel::Participant> ps;
  for (int w = 0; w < W; ++w) ps.push_back(model.participant(w));
  std::vector<int> done(size_t(W), 0);
  std::vector<bool> waiting(size_t(W), false);
  std::vector<int> arrived(size_t(episodes) + 2, 0);
  std::mt19937_64 rng(seed);
  InterleaveOutcome out;
  const auto passed = [&](int w) {
    const int e = ++done[size_t(w)];
    waiting[size_t(w)] = false;
    if (arrived[size_t(e)] != W && !out.early_pass) {
      out.early_pass = true;
      out.what = "workgroup " + std::to_string(w) + " passed episode " + std::to_string(e) + " after only " +
                 std::to_string(arrived[size_t(e)]) + " of " + std::to_string(W) + " arrivals";
    }
  };
  int next = 0;
  for (;;) {
    std::vector<int> live;
    for (int w = 0; w < W; ++w)
      if (done[size_t(w)] < episodes) live.push_back(w);
    if (live.empty()) return out;
    if (std::all_of(live.begin(), live.end(), [&](int w) { return waiting[size_t(w)]; })) {
      bool any = false;  // polls change shared state only when they pass, so one sweep decides
      for (int w : live)
        if (model.poll(ps[size_t(w)])) passed(w), any = true;
      if (!any) {
        out.deadlock = true;
        out.what = "all " + std::to_string(live.size()) + " unfinished participants wait and none can pass";
        return out;
      }
      continue;
    }
    const int w = seed == 0 ? live[size_t(next++ % int(live.size()))]
                            : live[size_t(std::uniform_int_distribution<int>(0, int(live.size()) - 1)(rng))];
    auto& p = ps[size_t(w)];
    if (!waiting[size_t(w)]) {
      ++arrived[size_t(done[size_t(w)] + 1)];
      model.arrive(p);
      waiting[size_t(w)] = true;
      if (p.wait == SyncBarrierModel::Participant::Wait::None) passed(w);
    } else if (model.poll(p)) {
      passed(w);
    }
  }
}

std::vector<std::pair<std::string, SyncGrouping>> groupings_to_test() {
  std::vector<std::pair<std::string, SyncGrouping>> out;
  out.emplace_back("132 in 8 synthetic", synthetic_sync_grouping(132, 8));
  out.emplace_back("5 in 3", synthetic_sync_grouping(5, 3));
  out.emplace_back("3 in 8 (empty groups)", synthetic_sync_grouping(3, 8));
  out.emplace_back("1 workgroup", synthetic_sync_grouping(1, 1));
  out.emplace_back("2 in 1", synthetic_sync_grouping(2, 1));
  // The measured H200 map with its fragments, blocks placed on SMs in a shuffled order.
  const Topology t = h200_map();
  std::vector<std::uint32_t> sm(132);
  std::iota(sm.begin(), sm.end(), 0u);
  std::shuffle(sm.begin(), sm.end(), std::mt19937_64(7));
  const std::vector<int> raw = t.unit_domain;
  const std::vector<int> table = hw_id_group_table(t, raw);
  out.emplace_back("H200 probed map", device_sync_grouping(table, count_groups(raw), sm, 8));
  return out;
}

TEST(SyncModel, NoWorkgroupPassesEarlyInAnyInterleaving) {
  for (const auto& [name, g] : groupings_to_test())
    for (SyncBarrierKind kind : kAllSyncBarrierKinds)
      for (std::uint64_t seed : {0ull, 1ull, 2ull, 3ull}) {
        const int episodes = g.num_workgroups > 64 ? 20 : 200;
        const InterleaveOutcome r = run_interleaved(kind, g, episodes, seed);
        EXPECT_FALSE(r.early_pass) << to_string(kind) << ", " << name << ", seed " << seed << ": " << r.what;
        EXPECT_FALSE(r.deadlock) << to_string(kind) << ", " << name << ", seed " << seed << ": " << r.what;
      }
}

TEST(SyncModel, TheCheckerCatchesABrokenBarrier) {
  const SyncGrouping g = synthetic_sync_grouping(12, 3);
  // Flat barriers told 11 workgroups while 12 take part: they release one arrival early.
  SyncGrouping broken = g;
  broken.num_workgroups = 11;
  for (SyncBarrierKind kind : {SyncBarrierKind::FlatGen, SyncBarrierKind::FlatCounter}) {
    const InterleaveOutcome r = run_interleaved(kind, broken, 50, 5, 12);
    EXPECT_TRUE(r.early_pass || r.deadlock) << to_string(kind);
  }
  // Hierarchical and striped barriers that count group 1 one member short.
  broken = g;
  broken.group_size[1] -= 1;
  for (SyncBarrierKind kind : {SyncBarrierKind::HierTree, SyncBarrierKind::HierBroadcast, SyncBarrierKind::Striped}) {
    const InterleaveOutcome r = run_interleaved(kind, broken, 50, 5);
    EXPECT_TRUE(r.early_pass || r.deadlock) << to_string(kind);
  }
}

TEST(SyncModel, ArrivingTwiceIsRejected) {
  SyncBarrierModel model(SyncBarrierKind::FlatGen, synthetic_sync_grouping(2, 1));
  auto p = model.participant(0);
  model.arrive(p);
  EXPECT_THROW(model.arrive(p), Error);
}

// --- barrier logic on real threads: plain (non-atomic) data written before a barrier is read after it.
// Exactly the device check: slot[round % 2][w] = round; after the barrier every slot of that parity must
// hold this round (a writer cannot reach round + 2 before this thread arrives at round + 1). Plain data
// makes a missing happens-before a data race that ThreadSanitizer reports.

TEST(SyncModel, ThreadsSeeEachOthersWritesAfterEveryBarrier) {
  const int W = 12, rounds = 1500;
  const std::vector<int> wg_group = {0, 0, 0, 0, 0, 1, 1, 2, 3, 3, 3, 3};  // uneven, one singleton group
  for (SyncBarrierKind kind : kAllSyncBarrierKinds) {
    SyncBarrierModel model(kind, make_sync_grouping(wg_group, 5));  // group 4 stays empty
    std::vector<unsigned> slots(size_t(2 * W), 0);
    std::atomic<long> violations{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < W; ++w)
      threads.emplace_back([&, w] {
        auto p = model.participant(w);
        long bad = 0;
        for (int r = 1; r <= rounds; ++r) {
          unsigned* parity = slots.data() + size_t((r & 1) * W);
          parity[w] = unsigned(r);
          model.sync(p, [] { std::this_thread::yield(); });
          for (int k = 0; k < W; ++k) bad += parity[k] != unsigned(r);
        }
        violations += bad;
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(violations.load(), 0) << to_string(kind);
  }
}

}  // namespace
}  // namespace mk
