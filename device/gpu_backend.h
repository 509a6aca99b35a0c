// The GPU monokernel as a DecodeBackend. Plain C++: no GPU header, so host/ can include it.
// With MK_GPU=none the factory reports that the build has no GPU support.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/decode_backend.h"
#include "runtime/model.h"
#include "runtime/schedule.h"

namespace mk {

// Which of attention's two paths the kernel runs (device/ops/attention.h): the tile path, the warp path of
// the long-context kernels, or (Auto) the one attention_long_context picks for how far a launch's
// sequence reaches.
enum class AttentionPath { Auto, Tiles, WarpChunks };

struct GpuOptions {
  int device = 0;
  int context = 4096;
  int attention_splits = 0;      // 0: chosen by build_schedule from the context
  AttentionPath attention_path = AttentionPath::Auto;
  // Where attention's split partials are combined (ScheduleParams::attention_combine): -1 the model's
  // default, 0 in every o_proj workgroup, 1 once per kv group by its last split.
  int attention_combine = -1;
  // Post-norm layers (Gemma 3): each post-norm folded into the stage after it (ScheduleParams::
  // fold_post_norms), or false: a post_norm stage of its own.
  bool fold_post_norms = true;
  bool stage_barriers = false;   // the flat-barrier schedule (ScheduleParams::stage_barriers), for comparison
  // Prompt tokens per chunk step (prefill; device/kernel_plan.h's plan_chunk_steps): -1 the default for
  // the context, 0 none (prompts go one token per step).
  int chunk_tokens = -1;
  bool chunk_wide_tiles = true;  // ScheduleParams::chunk_wide_tiles
  // Per-domain counters (ScheduleParams::sync_domains; 1: all flat). unit_domain: hardware unit id (NVIDIA
  // %smid, AMD amd_hw_id) -> domain in [0, sync_domains), -1 for none, e.g. topology/sync_grouping.h's
  // hw_id_group_table of the probed map; empty: workgroup w takes domain w % sync_domains.
  int sync_domains = 1;
  std::vector<int> unit_domain;
  // Workgroups of the persistent launch, one per SM/CU; 0: every SM/CU. Fewer leave SMs idle (e.g. to
  // measure what a design that takes SMs from the weight stream would cost).
  int workgroups = 0;
  // Row stages cut into fewer blocks than workgroups (ScheduleParams::narrow_workgroups, narrow_ops).
  // -1: the stages device/kernel_plan.h's plan_narrow_stages picks, on half the workgroups (none without
  // the weight stream); 0: none; N: the stages in narrow_ops (op_bit) in N blocks.
  int narrow_workgroups = -1;
  uint32_t narrow_ops = 0;
  // No workgroup progressing for this long while every running workgroup is in a wait (a workgroup inside
  // an instruction gets ten times as long): the launch is aborted
  // (device/launch_abort.h) and generate() throws HangError naming the stuck instructions. The kernel
  // then has abort_grace_seconds to leave; if it does, the backend is usable again
  // (HangError::stopped()), else it is given up.
  double watchdog_seconds = kDefaultWatchdogSeconds;
  double abort_grace_seconds = 5;
  bool profile = false;          // per-instruction timers (globaltimer), see GpuBackend::profile()
  // With profile: the step of each launch (0 = the first) whose instructions are timestamped one by one
  // (GpuRunProfile::trace); -1: none.
  int trace_step = -1;
  // Weight stream (device/weight_stream.h): shared-memory slots for bulk weight copies; -1: as many as
  // fit (NVIDIA Hopper), 0: off (weights load straight into registers; always the case on AMD).
  int stream_slots = -1;
  // Slot size; 0: the default (as many of the longest GEMV rows as fit in 56 KiB, at least one).
  int stream_slot_kib = 0;
  // How many instructions ahead of the running one the stream may issue weight chunks. 0 measured best
  // on an H200 for all five presets (docs/log.md v14): chunks of the next instruction issued during
  // this one compete with this one's own.
  int stream_lookahead = 0;
  // Chunks issued before an instruction's inputs are ready (-1: as many as there are slots). Issuing
  // more shortens the instruction but lengthens everyone's waits: those bytes compete with the slowest
  // producers of the inputs (docs/log.md).
  int stream_early = 2;  // measured best on an H200 once no workgroup held two QKV blocks (docs/log.md)
  // Non-zero: fill the weights on the GPU with seeded random values instead of uploading the model's
  // (for presets: real shapes without a download). The model then needs a config only.
  uint64_t random_weights_seed = 0;
  // Tests and timing-only benchmarks: edits the schedule before it is uploaded (e.g. to plant a deadlock
  // for the watchdog, or mk-bench --no-waits).
  // With debug_edit_launches > 0 the edit holds for that many launches; later ones run the schedule as
  // built (the edit must keep the instruction lists' lengths).
  std::function<void(Schedule&)> debug_edit_schedule;
  int debug_edit_launches = 0;
  // Weight upload progress: (bytes done, bytes total, seconds so far).
  std::function<void(uint64_t, uint64_t, double)> on_upload_progress;
};

// Per-token device timestamps and (when profiling) time per instruction kind, from the last generate().
struct GpuRunProfile {
  std::vector<double> token_seconds;  // device time of each sampled token since the launch started
  // Summed over workgroups, per Op: seconds spent executing, seconds spent waiting on counters; of the
  // executing part, the prologue (activations into shared memory) and the signal (counter release).
  std::vector<double> exec_seconds, wait_seconds, prologue_seconds, signal_seconds;
  int num_workgroups = 0;
  // Per workgroup: the SM/CU it ran on (NVIDIA %smid; AMD as topology/topology.h's unit_hw_id), and its
  // exec and wait seconds per Op ([workgroup][op]): how evenly the work spread over the chip.
  std::vector<uint32_t> workgroup_unit;
  std::vector<std::vector<double>> workgroup_exec_seconds, workgroup_wait_seconds;
  // GpuOptions::trace_step: per instruction of the schedule (Schedule::instrs index), globaltimer seconds
  // at which its workgroup started it (before waiting), found its inputs ready, had them in shared memory
  // (end of the prologue; 0 if it has none) and had signalled it done. Empty without a trace, or when the
  // launch ended before that step.
  struct TracePoint {
    double start = 0, ready = 0, prologue_end = 0, done = 0;
  };
  std::vector<TracePoint> trace;
};

struct GpuInfo {
  std::string name;
  int sm_count = 0;
  size_t total_memory = 0, free_memory = 0;
  int l2_bytes = 0;
  int compute_major = 0, compute_minor = 0;
};

class GpuBackend : public DecodeBackend {
 public:
  virtual const GpuRunProfile& profile() const = 0;
  virtual const GpuInfo& info() const = 0;
  virtual uint64_t weight_bytes() const = 0;  // bytes of the packed weights on the device
  // The logits of the last step that computed them (the last ingested or sampled position).
  virtual std::vector<float> last_logits() const = 0;
  virtual const Schedule& schedule() const = 0;
  // Benchmarks only: pretends `tokens` positions are already in the cache by filling them with random
  // K/V (same bytes read per token as a real context of that depth; the text it encodes is noise).
  virtual void fill_context_for_benchmark(int tokens, uint64_t seed) = 0;
};

// True when this build has GPU support and a usable device is present; otherwise `why` says why not.
bool gpu_available(std::string* why);

// Uploads the model and prepares the persistent kernel; throws mk::Error (out of memory with needed and
// free bytes, unsupported GPU, grid that cannot be co-resident, ...).
// Fault injection for checking the hang path end to end (C API, tools): with MK_DEBUG_PLANT_HANG=N in the
// environment and no debug_edit_schedule of the caller's, the first N launches of each backend run a
// schedule in which layer 1's gate_up (layer 0's for one-layer models) waits for one more o_proj block
// than there is, so the watchdog fires; later launches run the real schedule.
std::unique_ptr<GpuBackend> create_gpu_backend(const Model& model, const GpuOptions& options);

}  // namespace mk
