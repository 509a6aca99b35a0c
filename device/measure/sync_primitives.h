// Device-wide synchronization for the persistent kernel: grid barriers (flat and topology-grouped) and
// counter hand-offs between workgroups (CTAs). Device-only header: include it from .cu files.
// docs/sync.md has the algorithms, the memory-ordering argument and the measurements; the CPU model of the
// same logic is topology/sync_model.h, the grouping topology/sync_grouping.h.
//
// Conventions
// - Every function named *sync*, signal_* or wait_* is called by ALL threads of the block (it contains
//   block barriers); only thread 0 (or, for the striped barrier, threads 0..groups-1) touches the counters.
// - All counters live in SyncState: one 128-byte line each (the L2 line on Hopper and on CDNA3), so no
//   two counters share a line and a waiter's line changes only when its own counter does. SyncState must
//   be zeroed before the launch (the barriers reset what they use, so it stays usable for any number of
//   episodes within the launch).
// - Waits take a SpinPolicy: pause between polls (0 = pure spin; one thread per block polls, the other
//   warps sleep in the block barrier, so spinning costs the SM nothing but L2 requests) and an optional
//   timeout that turns a hang into an error the host can report (the waits then return false).
//
// Memory ordering (acquire/release at device scope: PTX .gpu, HIP agent):
//   writer threads --bar.sync--> thread 0: release (red/atom/st .release.gpu)
//   --(the counter, through its release sequence of atomic adds)--> another block's thread 0: acquire
//   (ld.acquire.gpu, or the acquire part of atom.acq_rel) --bar.sync--> reader threads.
// PTX: causality order is transitive through bar.sync (morally strong at CTA scope) and through the
// release/acquire pair at gpu scope, so plain loads after the barrier see plain stores before it. In SASS
// (sm_90a) the release is MEMBAR.ALL.GPU before the atomic; the acquire is LDG.E.STRONG.GPU + CCTL.IVALL.
// AMD gfx942 (MI300X): each XCD has its own L2, and L2s are not coherent with each other for ordinary
// device memory. An agent-scope release therefore writes back the XCD's dirty L2 lines first
// (buffer_wbl2 sc1 + s_waitcnt) and an agent-scope acquire invalidates the XCD's L2 and the CU's L1
// afterwards (buffer_inv sc1); agent-scope atomics and sc1 loads are performed coherently beyond the L2
// (LLVM AMDGPUUsage, "Memory Model GFX942"). Both are expensive, so the AMD paths spin with RELAXED loads
// and issue ONE acquire fence after the value is seen, and non-last arrivers do release-only adds.
// gfx90a (MI200, one L2): the same code, cheaper (buffer_wbl2/buffer_invl2 only for fine-grained memory).
//
// Which to use (measured on an H200, 132 blocks, docs/measurements/h200_sync.txt): FlatCounterBarrier<1>
// 0.98 us per barrier, the same as cooperative groups' grid.sync (1.00); StripedBarrier 1.00;
// FlatGenBarrier 1.38; HierBarrier 1.88 (broadcast) / 2.46 (tree): on NVIDIA each extra level adds a
// dependent release + atomic round trip (~0.5 us) while same-line contention is small, so prefer the flat
// counter there, and counter hand-offs (~0.75 us one way) over full barriers. The release fence alone
// costs ~0.26 us per arrival. The hierarchical forms are kept for MI300X, where they are unmeasured.
#pragma once

#include "device/device_atomics.h"
#include "device/gpu.h"
#include "device/hw_unit.h"
#include "topology/sync_grouping.h"

namespace mk::dev::sync {

constexpr int kLineBytes = 128;
constexpr int kMaxGroups = kMaxSyncGroups;  // topology/sync_grouping.h

struct alignas(kLineBytes) Line {
  unsigned value;
  unsigned pad[kLineBytes / 4 - 1];
};
static_assert(sizeof(Line) == kLineBytes, "one counter per cache line");

// All barrier counters of one launch. Zero it before the launch.
struct SyncState {
  Line counter;                    // FlatCounterBarrier
  Line flat_count, flat_gen;       // FlatGenBarrier
  Line top_count, top_gen;         // HierBarrier top level
  Line setup_count, setup_gen;     // FlatGenBarrier used by discover_group (and free for other uses)
  Line setup_miss;                 // discover_group: some block's hardware id is not in the table
  Line setup_groups;               // discover_group: groups with at least one block
  Line group_count[kMaxGroups];    // HierBarrier group level
  Line group_gen[kMaxGroups];      // HierBarrier (tree release)
  Line stripe[kMaxGroups];         // StripedBarrier
  Line setup_members[kMaxGroups];  // discover_group: blocks per group
};

// ---------------------------------------------------------------- memory-ordered primitives
// (device_atomics.h has load_acquire, add_release, the system-scope forms, global_timer_ns.)

// Arrival on a ticket counter: returns the old value. NVIDIA: atom.acq_rel (the acquire half is only an L1
// invalidate, cheap). AMD: release only; the one arriver that goes on (the last) calls
// acquire_after_arrival(), so the others skip a buffer_inv sc1.
__device__ __forceinline__ unsigned arrive_fetch_add(unsigned* p, unsigned v) {
#if defined(MK_PLATFORM_NVIDIA)
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
#else
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

// Makes the last arriver's later release cumulative over everything the earlier arrivers released.
__device__ __forceinline__ void acquire_after_arrival() {
#if defined(MK_PLATFORM_AMD)
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
#endif
}

// One poll of a spin loop and what follows the last one. NVIDIA: every poll is ld.acquire.gpu (an L2
// read plus an L1 invalidate; no fence). AMD: relaxed polls (global_load sc1) and one acquire fence once
// the value is seen, instead of a buffer_inv sc1 per poll.
__device__ __forceinline__ unsigned poll_load(const unsigned* p) {
#if defined(MK_PLATFORM_NVIDIA)
  return load_acquire(p);
#else
  return load_relaxed_gpu(p);
#endif
}
__device__ __forceinline__ void poll_done() {
#if defined(MK_PLATFORM_AMD)
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
#endif
}

__device__ __forceinline__ void pause_ns(unsigned ns) {
  if (ns == 0) return;
#if defined(MK_PLATFORM_NVIDIA)
  __nanosleep(ns);
#else
  for (unsigned i = 0; i < (ns + 31) / 32; ++i) __builtin_amdgcn_s_sleep(1);  // s_sleep 1 = 64 clocks
#endif
}

// hw_unit_id(): device/hw_unit.h.

// ---------------------------------------------------------------- spinning

struct SpinPolicy {
  unsigned sleep_ns = 0;              // pause between polls; 0 = pure spin
  unsigned long long timeout_ns = 0;  // 0 = wait forever; else give up (return false) after this long
  unsigned* abort_flag = nullptr;     // optional: set on a timeout; every wait gives up once it is set
};

// The timeout / abort bookkeeping of a spin loop, checked every 256 polls so that the hot path costs
// one increment and a compare. On expiry it raises the abort flag so that the other waiters give up too.
struct SpinDeadline {
  unsigned polls = 0;
  unsigned long long start = 0;
  __device__ __forceinline__ bool expired(const SpinPolicy& sp) {
    if (sp.timeout_ns == 0 || (++polls & 255u) != 0) return false;
    const unsigned long long now = global_timer_ns();
    if (start == 0) start = now;
    const bool aborted = sp.abort_flag != nullptr && load_relaxed_gpu(sp.abort_flag) != 0;
    if (!aborted && now - start <= sp.timeout_ns) return false;
    if (sp.abort_flag != nullptr) store_relaxed_gpu(sp.abort_flag, 1);
    return true;
  }
};

// Thread-level: polls *p until done(value). Returns false on timeout or abort (SpinDeadline).
template <typename Done>
__device__ __forceinline__ bool spin_until(const unsigned* p, Done done, const SpinPolicy& sp) {
  SpinDeadline deadline;
  for (;;) {
    if (done(poll_load(p))) {
      poll_done();
      return true;
    }
    pause_ns(sp.sleep_ns);
    if (deadline.expired(sp)) return false;
  }
}

// Wrap-safe "a counter that only grows has reached target" (mod 2^32), as topology/sync_model.h.
__device__ __forceinline__ bool reached(unsigned v, unsigned target) { return static_cast<int>(v - target) >= 0; }

// Block-level AND of every thread's ok; also a full block barrier with memory ordering. NVIDIA:
// bar.red.and orders memory like bar.sync. AMD: __syncthreads_and is an LDS reduction whose fencing is not
// documented, so a __syncthreads (workgroup release/acquire fences + s_barrier) comes first.
__device__ __forceinline__ bool block_all(bool ok) {
#if defined(MK_PLATFORM_NVIDIA)
  return __syncthreads_and(ok ? 1 : 0) != 0;
#else
  __syncthreads();
  return __syncthreads_and(ok ? 1 : 0) != 0;
#endif
}

// ---------------------------------------------------------------- grid barriers
// Each object is constructed by every thread with the same arguments (all of its state is uniform over
// the block) and used for any number of episodes. sync() returns false only when a wait timed out.

// Block-level wait by several pollers: lane 0 of warps 0..pollers-1 each poll *p, warp k starting
// k * stagger_cycles later, so their polls are spread over one L2 round trip R and the change is seen
// about R/2 + R/(2 * pollers) after it lands instead of R. The first poller that sees it acquires and
// tells the others through shared memory (they exit without an acquire of their own; the block barrier
// that follows orders them after the one that did). `token` must differ from the token of the previous
// wait (e.g. the target) and `seen` must not hold it at the start.
// Measured on an H200 (flat_counter_p2/p4): no gain, 0.99-1.17 us vs 0.98 with one poller, whatever the
// stagger: the extra polls load the line that all arrivals hit. Kept for other chips and for the record.
template <typename Done>
__device__ __forceinline__ bool poll_shared(const unsigned* p, Done done, volatile unsigned* seen, unsigned token,
                                            unsigned pollers, unsigned stagger_cycles, const SpinPolicy& sp) {
  const unsigned warp = threadIdx.x / MK_WARP_SIZE;
  if (threadIdx.x % MK_WARP_SIZE != 0 || warp >= pollers) return true;
  if (warp != 0 && stagger_cycles != 0) {
    const long long start = clock64();
    while (clock64() - start < static_cast<long long>(warp * stagger_cycles))
      if (*seen == token) return true;
  }
  SpinDeadline deadline;
  for (;;) {
    if (*seen == token) return true;
    if (done(poll_load(p))) {
      poll_done();
      *seen = token;
      return true;
    }
    pause_ns(sp.sleep_ns);
    if (deadline.expired(sp)) return false;
  }
}

// One monotone counter: every block release-adds 1 and acquire-polls until it reaches episode * blocks.
// Shortest dependency chain (the last arrival is one fire-and-forget red), but every poll of all blocks
// hits the line that all blocks' atomics also hit. kPollers > 1: several warps poll, staggered
// (poll_shared); needs blockDim.x >= kPollers * warp size.
template <int kPollers = 1>
class FlatCounterBarrier {
 public:
  __device__ FlatCounterBarrier(SyncState* s, unsigned blocks, unsigned stagger_cycles = 0)
      : counter_(&s->counter.value), blocks_(blocks), stagger_(stagger_cycles) {
    if (kPollers > 1 && threadIdx.x == 0) seen_flag() = 0;  // the first target is `blocks`, never 0
  }
  __device__ bool sync(const SpinPolicy& sp) {
    __syncthreads();
    target_ += blocks_;
    const unsigned target = target_;
    const auto done = [target](unsigned v) { return reached(v, target); };
    bool ok = true;
    if (threadIdx.x == 0) add_release(counter_, 1u);
    if constexpr (kPollers == 1) {
      if (threadIdx.x == 0) ok = spin_until(counter_, done, sp);
    } else {
      ok = poll_shared(counter_, done, &seen_flag(), target, kPollers, stagger_, sp);
    }
    return block_all(ok);
  }

 private:
  __device__ static volatile unsigned& seen_flag() {
    __shared__ unsigned seen;
    return *const_cast<volatile unsigned*>(&seen);
  }
  unsigned* counter_;
  unsigned blocks_;
  unsigned stagger_;
  unsigned target_ = 0;
};

// Ticket counter + generation flag (the classic sense-reversing barrier, with a generation number instead
// of a sense bit). Arrive: acq_rel add on the count. The last arriver (old == blocks-1) resets the count
// and release-stores the new generation; everyone else acquire-polls the generation line, which changes
// once per episode. Reset safety: the next episode's adds come after the generation was seen, which the
// last arriver published after its reset.
class FlatGenBarrier {
 public:
  __device__ FlatGenBarrier(unsigned* count, unsigned* gen, unsigned blocks)
      : count_(count), gen_(gen), blocks_(blocks) {}
  __device__ FlatGenBarrier(SyncState* s, unsigned blocks)
      : FlatGenBarrier(&s->flat_count.value, &s->flat_gen.value, blocks) {}
  __device__ bool sync(const SpinPolicy& sp) {
    __syncthreads();
    const unsigned g = ++generation_;
    bool ok = true;
    if (threadIdx.x == 0) {
      if (arrive_fetch_add(count_, 1u) == blocks_ - 1) {
        acquire_after_arrival();
        store_relaxed_gpu(count_, 0u);
        store_release_gpu(gen_, g);
      } else {
        ok = spin_until(
            gen_, [g](unsigned v) { return v == g; }, sp);
      }
    }
    return block_all(ok);
  }

 private:
  unsigned* count_;
  unsigned* gen_;
  unsigned blocks_;
  unsigned generation_ = 0;
};

// Where this block runs in the grouping, the same in every thread of the block (discover_group).
struct BlockGroup {
  unsigned hw_id = 0;     // NVIDIA %smid, AMD amd_hw_id
  int group = 0;          // 0 .. num_groups-1
  int group_size = 0;     // blocks of this launch in my group
  int num_groups = 0;     // group ids in use (table groups or synthetic count); some may be empty
  int active_groups = 0;  // groups with at least one block
  int from_table = 0;     // 1: the hardware-id table; 0: synthetic (blockIdx-based) fallback
  int rank = 0;           // my index among my group's blocks, in arrival order at discovery
  bool ok = true;         // false if a discovery barrier timed out
};

// Kernel argument: hardware id -> group, built on the host by hw_id_group_table (topology/sync_grouping.h).
struct GroupMap {
  const int* hw_to_group = nullptr;  // nullptr: synthetic grouping
  unsigned table_size = 0;
  int table_groups = 0;      // groups named by the table (<= kMaxGroups)
  int synthetic_groups = 8;  // D of the fallback synthetic_group_of(blockIdx.x, gridDim.x, D)
};

// Every block learns its group at kernel start (two setup barriers on SyncState::setup_*; `setup` is
// the FlatGenBarrier over those lines, reusable afterwards). If ANY block's hardware id is missing from
// the table, all blocks fall back to the synthetic grouping, so they agree.
__device__ inline BlockGroup discover_group(SyncState* s, FlatGenBarrier& setup, const GroupMap& map,
                                            const SpinPolicy& sp) {
  // Plain ints: HIP rejects __shared__ objects with constructors (BlockGroup has member initialisers).
  __shared__ int sh[7];  // hw_id, table group, from_table, num_groups, group, rank, group_size
  __shared__ int sh_active;
  bool ok = true;
  if (threadIdx.x == 0) {
    const unsigned id = hw_unit_id();
    int g = -1;
    if (map.hw_to_group != nullptr && id < map.table_size) g = map.hw_to_group[id];
    if (g < 0 || g >= map.table_groups || g >= kMaxGroups) store_relaxed_gpu(&s->setup_miss.value, 1u);
    sh[0] = static_cast<int>(id);
    sh[1] = g;
  }
  ok = setup.sync(sp) && ok;
  if (threadIdx.x == 0) {
    const bool miss = load_relaxed_gpu(&s->setup_miss.value) != 0;  // ordered by the barrier's acquire
    const int synthetic =
        map.synthetic_groups < 1 ? 1 : (map.synthetic_groups > kMaxGroups ? kMaxGroups : map.synthetic_groups);
    const int num_groups = miss ? synthetic : map.table_groups;
    const int group =
        miss ? synthetic_group_of(static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), num_groups) : sh[1];
    const unsigned ticket = arrive_fetch_add(&s->setup_members[group].value, 1u);
    if (ticket == 0) arrive_fetch_add(&s->setup_groups.value, 1u);
    sh[2] = miss ? 0 : 1;
    sh[3] = num_groups;
    sh[4] = group;
    sh[5] = static_cast<int>(ticket);
  }
  ok = setup.sync(sp) && ok;
  if (threadIdx.x == 0) {
    sh[6] = static_cast<int>(load_relaxed_gpu(&s->setup_members[sh[4]].value));
    sh_active = static_cast<int>(load_relaxed_gpu(&s->setup_groups.value));
  }
  __syncthreads();
  BlockGroup out;
  out.hw_id = static_cast<unsigned>(sh[0]);
  out.from_table = sh[2];
  out.num_groups = sh[3];
  out.group = sh[4];
  out.rank = sh[5];
  out.group_size = sh[6];
  out.active_groups = sh_active;
  out.ok = ok;
  __syncthreads();  // nobody overwrites sh before everyone copied it (a second call)
  return out;
}

// Hierarchical barrier. Arrive on my group's ticket counter; the group's last arriver resets it and
// arrives on the top counter; the top last arriver resets that and release-stores the top generation.
// Release, kTree = true: each group's last arriver waits for the top generation and then release-stores
// its group's generation, which the group's other blocks wait on (two release hops, each line polled by
// one group). kTree = false (broadcast): everyone polls the top generation (one hop, one line polled by
// all blocks; it still changes once per episode).
// Contention: at most max(group size, active groups) atomics per line instead of all blocks on one.
template <bool kTree>
class HierBarrier {
 public:
  __device__ HierBarrier(SyncState* s, const BlockGroup& b)
      : s_(s),
        group_(b.group),
        group_size_(static_cast<unsigned>(b.group_size)),
        active_(static_cast<unsigned>(b.active_groups)) {}
  __device__ bool sync(const SpinPolicy& sp) {
    __syncthreads();
    const unsigned g = ++generation_;
    bool ok = true;
    if (threadIdx.x == 0) {
      unsigned* group_count = &s_->group_count[group_].value;
      unsigned* group_gen = &s_->group_gen[group_].value;
      const auto is_g = [g](unsigned v) { return v == g; };
      if (arrive_fetch_add(group_count, 1u) != group_size_ - 1) {
        ok = spin_until(kTree ? group_gen : &s_->top_gen.value, is_g, sp);
      } else {
        acquire_after_arrival();
        store_relaxed_gpu(group_count, 0u);
        if (arrive_fetch_add(&s_->top_count.value, 1u) == active_ - 1) {
          acquire_after_arrival();
          store_relaxed_gpu(&s_->top_count.value, 0u);
          store_release_gpu(&s_->top_gen.value, g);
        } else {
          ok = spin_until(&s_->top_gen.value, is_g, sp);
        }
        if (kTree) store_release_gpu(group_gen, g);
      }
    }
    return block_all(ok);
  }

 private:
  SyncState* s_;
  int group_;
  unsigned group_size_;
  unsigned active_;
  unsigned generation_ = 0;
};
using HierTreeBarrier = HierBarrier<true>;
using HierBroadcastBarrier = HierBarrier<false>;

// Striped counters: each block release-adds (no return value, fire and forget) to its group's monotone
// counter; then threads 0..groups-1 each acquire-poll one group's counter until it reaches
// episode * group size, in parallel, and the block barrier joins them. No serial chain of round trips
// (one red, then polls), and the atomics are spread over `groups` lines. Each poll round reads `groups`
// lines instead of one.
class StripedBarrier {
 public:
  __device__ StripedBarrier(SyncState* s, const BlockGroup& b) : s_(s), group_(b.group), groups_(b.num_groups) {
    // Thread t < groups polls stripe t: it needs that group's size (fixed after discover_group).
    if (static_cast<int>(threadIdx.x) < groups_)
      my_stripe_size_ = load_relaxed_gpu(&s->setup_members[threadIdx.x].value);
  }
  __device__ bool sync(const SpinPolicy& sp) {
    __syncthreads();
    ++generation_;
    bool ok = true;
    if (threadIdx.x == 0) add_release(&s_->stripe[group_].value, 1u);
    if (static_cast<int>(threadIdx.x) < groups_ && my_stripe_size_ != 0) {
      const unsigned target = generation_ * my_stripe_size_;
      ok = spin_until(
          &s_->stripe[threadIdx.x].value, [target](unsigned v) { return reached(v, target); }, sp);
    }
    return block_all(ok);
  }

 private:
  SyncState* s_;
  int group_;
  int groups_;
  unsigned my_stripe_size_ = 0;
  unsigned generation_ = 0;
};

// ---------------------------------------------------------------- counter hand-off (dataflow)
// Producer block: all threads write, then signal (block barrier, thread 0 release-adds). Consumer block:
// wait_counter until the count reaches the target (thread 0 acquire-polls), then every thread may read.
// Counters only grow during a launch, so targets are cumulative (n-th hand-off: target n).

__device__ __forceinline__ void signal_counter(unsigned* counter, unsigned add = 1u) {
  __syncthreads();
  if (threadIdx.x == 0) add_release(counter, add);
}

__device__ __forceinline__ bool wait_counter(const unsigned* counter, unsigned target, const SpinPolicy& sp) {
  bool ok = true;
  if (threadIdx.x == 0)
    ok = spin_until(
        counter, [target](unsigned v) { return reached(v, target); }, sp);
  return block_all(ok);
}

}  // namespace mk::dev::sync
