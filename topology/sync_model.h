// CPU model of the device barriers of device/measure/sync_primitives.h: the same counters, the same arrival and
// release logic and the same memory orders, over std::atomic. For tests (std::thread, or one thread that
// interleaves participants in any order) and for the emulator, which can step participants one at a time.
//
// Each barrier is a non-blocking state machine per participant (one participant = one workgroup's
// thread 0; the striped barrier's parallel poll is done sequentially here, which is equivalent because
// its counters only grow):
//   arrive(p)  starts p's next episode (p must not be waiting);
//   poll(p)    does one step of p's wait and returns true once p may pass (then p is no longer waiting).
// A blocking sync() is arrive + poll until true.
//
// Kinds (docs/sync.md has the algorithms and the ordering argument):
//   FlatCounter    one monotone counter: release-add, acquire-poll until it reaches episode * W.
//   FlatGen        ticket counter + generation flag: acq_rel add; the last arriver resets the counter
//                  and release-stores the generation that everyone else acquire-polls.
//   HierTree       per-group counter; the group's last arriver adds to the top counter; the top last
//                  arriver releases the top generation; each group's last arriver (which waited for it)
//                  then releases its group's generation, which the group's other members wait on.
//   HierBroadcast  hierarchical arrival as HierTree, but everyone waits on the top generation.
//   Striped        per-group monotone counters (release-add, no return value); a waiter acquire-polls
//                  every group's counter until each reaches episode * group size.
// Header-only, C++17.
#pragma once

#include <atomic>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "topology/sync_grouping.h"

namespace mk {

enum class SyncBarrierKind { FlatCounter, FlatGen, HierTree, HierBroadcast, Striped };

inline constexpr SyncBarrierKind kAllSyncBarrierKinds[] = {SyncBarrierKind::FlatCounter, SyncBarrierKind::FlatGen,
                                                           SyncBarrierKind::HierTree, SyncBarrierKind::HierBroadcast,
                                                           SyncBarrierKind::Striped};

inline std::string_view to_string(SyncBarrierKind k) {
  switch (k) {
    case SyncBarrierKind::FlatCounter:
      return "flat_counter";
    case SyncBarrierKind::FlatGen:
      return "flat_gen";
    case SyncBarrierKind::HierTree:
      return "hier_tree";
    case SyncBarrierKind::HierBroadcast:
      return "hier_bcast";
    case SyncBarrierKind::Striped:
      return "striped";
  }
  return "?";
}

// Wrap-safe "v has reached target" for counters that only grow (mod 2^32), as on the device.
constexpr bool counter_reached(unsigned v, unsigned target) { return static_cast<int>(v - target) >= 0; }

class SyncBarrierModel {
 public:
  struct Participant {
    int workgroup = 0;
    int group = 0;
    unsigned gen = 0;  // episodes started
    enum class Wait { None, Counter, Gen, GroupGen, TopGen, Stripes } wait = Wait::None;
    int stripe_next = 0;         // Striped: groups already seen complete in this episode
    bool last_in_group = false;  // HierTree: this participant carries its group to the top level
  };

  SyncBarrierModel(SyncBarrierKind kind, SyncGrouping grouping)
      : kind_(kind), g_(std::move(grouping)), lines_(std::make_unique<Line[]>(num_lines(g_.num_groups))) {}

  SyncBarrierKind kind() const { return kind_; }
  const SyncGrouping& grouping() const { return g_; }

  Participant participant(int workgroup) const {
    Participant p;
    p.workgroup = workgroup;
    p.group = g_.workgroup_group.at(static_cast<size_t>(workgroup));
    return p;
  }

  void arrive(Participant& p) {
    if (p.wait != Participant::Wait::None) fail("sync model: workgroup {} arrives while still waiting", p.workgroup);
    const unsigned g = ++p.gen;
    const unsigned W = static_cast<unsigned>(g_.num_workgroups);
    const unsigned n = static_cast<unsigned>(g_.group_size[static_cast<size_t>(p.group)]);
    const unsigned A = static_cast<unsigned>(g_.num_active_groups);
    switch (kind_) {
      case SyncBarrierKind::FlatCounter:
        counter().fetch_add(1, std::memory_order_release);
        p.wait = Participant::Wait::Counter;
        return;
      case SyncBarrierKind::FlatGen:
        if (count().fetch_add(1, std::memory_order_acq_rel) == W - 1) {
          count().store(0, std::memory_order_relaxed);
          gen().store(g, std::memory_order_release);
          return;  // passed
        }
        p.wait = Participant::Wait::Gen;
        return;
      case SyncBarrierKind::HierTree:
      case SyncBarrierKind::HierBroadcast: {
        const bool tree = kind_ == SyncBarrierKind::HierTree;
        if (group_count(p.group).fetch_add(1, std::memory_order_acq_rel) != n - 1) {
          p.wait = tree ? Participant::Wait::GroupGen : Participant::Wait::TopGen;
          p.last_in_group = false;
          return;
        }
        group_count(p.group).store(0, std::memory_order_relaxed);
        p.last_in_group = true;
        if (top_count().fetch_add(1, std::memory_order_acq_rel) == A - 1) {
          top_count().store(0, std::memory_order_relaxed);
          top_gen().store(g, std::memory_order_release);
          if (tree) group_gen(p.group).store(g, std::memory_order_release);
          return;  // passed
        }
        p.wait = Participant::Wait::TopGen;
        return;
      }
      case SyncBarrierKind::Striped:
        stripe(p.group).fetch_add(1, std::memory_order_release);
        p.stripe_next = 0;
        p.wait = Participant::Wait::Stripes;
        return;
    }
  }

  bool poll(Participant& p) {
    const unsigned g = p.gen;
    switch (p.wait) {
      case Participant::Wait::None:
        return true;
      case Participant::Wait::Counter:
        if (!counter_reached(counter().load(std::memory_order_acquire), g * static_cast<unsigned>(g_.num_workgroups)))
          return false;
        break;
      case Participant::Wait::Gen:
        if (gen().load(std::memory_order_acquire) != g) return false;
        break;
      case Participant::Wait::GroupGen:
        if (group_gen(p.group).load(std::memory_order_acquire) != g) return false;
        break;
      case Participant::Wait::TopGen:
        if (top_gen().load(std::memory_order_acquire) != g) return false;
        if (kind_ == SyncBarrierKind::HierTree && p.last_in_group)
          group_gen(p.group).store(g, std::memory_order_release);
        break;
      case Participant::Wait::Stripes:
        while (p.stripe_next < g_.num_groups) {
          const unsigned n = static_cast<unsigned>(g_.group_size[static_cast<size_t>(p.stripe_next)]);
          if (!counter_reached(stripe(p.stripe_next).load(std::memory_order_acquire), g * n)) return false;
          ++p.stripe_next;
        }
        break;
    }
    p.wait = Participant::Wait::None;
    return true;
  }

  template <typename Pause>
  void sync(Participant& p, Pause&& pause) {
    arrive(p);
    while (!poll(p)) pause();
  }

 private:
  // One cache line per counter, as on the device.
  struct alignas(64) Line {
    std::atomic<unsigned> v{0};
  };
  static constexpr size_t num_lines(int groups) { return 6 + 3 * static_cast<size_t>(groups); }
  std::atomic<unsigned>& line(size_t i) { return lines_[i].v; }
  std::atomic<unsigned>& counter() { return line(0); }
  std::atomic<unsigned>& count() { return line(1); }
  std::atomic<unsigned>& gen() { return line(2); }
  std::atomic<unsigned>& top_count() { return line(3); }
  std::atomic<unsigned>& top_gen() { return line(4); }
  std::atomic<unsigned>& group_count(int d) { return line(6 + static_cast<size_t>(d)); }
  std::atomic<unsigned>& group_gen(int d) {
    return line(6 + static_cast<size_t>(g_.num_groups) + static_cast<size_t>(d));
  }
  std::atomic<unsigned>& stripe(int d) {
    return line(6 + 2 * static_cast<size_t>(g_.num_groups) + static_cast<size_t>(d));
  }

  SyncBarrierKind kind_;
  SyncGrouping g_;
  std::unique_ptr<Line[]> lines_;
};

}  // namespace mk
