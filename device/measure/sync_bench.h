// Measures the synchronization primitives of device/measure/sync_primitives.h at the persistent kernel's real
// grid (one 512-thread block per SM/CU, cooperative launch): µs per grid barrier of each kind, next to the
// cooperative-groups grid barrier, and the one-way latency of a counter hand-off between two blocks.
// Every kind also runs once with checks inside the kernel (data written before a barrier must be visible
// after it; hand-off payloads must arrive whole), and reports the violations it counted.
// Plain C++ interface: host code includes it freely. MK_GPU=none: run_sync_bench throws mk::Error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mk {

struct SyncBenchOptions {
  int device = 0;
  int grid = 0;                      // blocks; 0 = one per SM/CU (the monokernel's grid)
  int threads = 512;                 // per block (the monokernel's); >= 64
  int iterations = 10000;            // barrier episodes per launch
  int repetitions = 5;               // timed launches per kind (after one warm-up launch)
  int round_trips = 2000;            // hand-off: ping-pong round trips per pair and repetition
  int max_pairs = 8;                 // hand-off: at most this many pairs per class (same / different group)
  unsigned sleep_ns = 0;             // pause between polls in the measured waits (0 = pure spin)
  unsigned stagger_cycles = 200;     // flat_counter_p2/p4: clock cycles between the pollers' first polls
  double timeout_s = 5.0;            // a wait longer than this aborts the launch (reported as hung)
  bool check = true;                 // also run each kind once with the in-kernel checks
  std::vector<std::string> methods;  // empty = all (names: see sync_bench_methods())
};

// Hardware id -> group, as hw_id_group_table (topology/sync_grouping.h) builds it. Empty table:
// synthetic grouping by block index into synthetic_groups groups.
struct SyncGroupTable {
  std::vector<int> hw_to_group;
  int num_groups = 0;
  int synthetic_groups = 8;
  std::string source;  // for printing: "probe", "json FILE", "synthetic", ...
};

struct SyncMethodResult {
  std::string name;  // flat_counter, flat_gen, hier_tree, hier_bcast, striped, cg_grid_sync
  std::string description;
  bool diagnostic = false;  // measures a cost, not a candidate (diag_no_fence is not even a valid barrier)
  bool ran = false;
  std::string skipped;            // why it did not run (empty if it ran)
  std::vector<double> us_timer;   // per repetition: µs per barrier from %globaltimer inside the kernel
  std::vector<double> us_events;  // per repetition: launch time from events / iterations (launch included)
  double median_us = 0, min_us = 0, max_us = 0;  // over us_timer
  bool checked = false;
  std::uint64_t violations = 0;  // checked launch: stale or missing values seen after a barrier
  std::uint64_t checks = 0;      // checked launch: values compared
  std::string first_violation;   // "" if none
  double checked_us = 0;         // checked launch: µs per barrier (checks included)
  bool hung = false;             // a wait timed out (the barrier is broken or a block never arrived)
};

struct SyncHandoffPair {
  bool same_group = false;
  int block_a = 0, block_b = 0;
  unsigned hw_a = 0, hw_b = 0;  // %smid / amd_hw_id of the two blocks
  int group_a = 0, group_b = 0;
  std::vector<double> one_way_us;  // per repetition: round trip / 2
  double median_us = 0;
};

struct SyncHandoff {
  std::string name;  // handoff, diag_handoff_no_fence
  bool diagnostic = false;
  std::vector<SyncHandoffPair> pairs;
  bool checked = false;
  std::uint64_t violations = 0;  // checked launch: payload words that did not match
  std::uint64_t checks = 0;
  std::string first_violation;
  bool hung = false;
  std::string skipped;
};

struct SyncBenchReport {
  std::string device_name, arch, platform;  // platform: nvidia / amd
  int units = 0;                            // SMs / CUs
  int grid = 0, threads = 0, blocks_per_unit = 0;
  int iterations = 0, repetitions = 0, round_trips = 0;
  unsigned sleep_ns = 0;
  unsigned stagger_cycles = 0;
  bool grouping_from_table = false;  // false: the kernel used the synthetic fallback
  std::string grouping_source;
  int num_groups = 0;                 // group ids in use
  std::vector<int> group_blocks;      // blocks per group as the kernel counted them
  std::vector<unsigned> block_hw_id;  // per block
  std::vector<int> block_group;       // per block
  std::vector<SyncMethodResult> methods;
  std::vector<SyncHandoff> handoffs;
  std::vector<std::string> notes;
};

// Names and one-line descriptions of the methods, in the order they run.
std::vector<std::pair<std::string, std::string>> sync_bench_methods();

// Throws mk::Error with a clear message: no GPU, bad device, a grid that cannot be co-resident, a method
// name that does not exist, a runtime call that failed, a GPU-less build.
SyncBenchReport run_sync_bench(const SyncBenchOptions& options, const SyncGroupTable& groups);

// "nvidia", "amd" or "none": what this binary's sync bench was built for.
const char* sync_bench_platform();

}  // namespace mk
