// The CPU emulator: executes the decode schedule with virtual workgroups, in a chosen interleaving,
// with the same counters the GPU uses, and (optionally) a happens-before checker on every buffer access.
// It is a full DecodeBackend: the README's main job and mk-chat run on it when there is no GPU.
#pragma once

#include <memory>
#include <vector>

#include "runtime/decode_backend.h"
#include "runtime/model.h"
#include "runtime/schedule.h"
#include "runtime/speculation.h"

namespace mk {

enum class Interleaving {
  RoundRobin,  // one instruction per runnable workgroup in turn
  Random,      // a seeded random runnable workgroup each time
  Eager,       // always the lowest-numbered runnable workgroup: runs ahead as far as the waits allow
};
const char* interleaving_name(Interleaving i);

struct EmulatorOptions {
  int num_workgroups = 132;
  int context = 1024;
  int attention_splits = 0;  // 0: as build_schedule chooses
  int sync_domains = 1;      // ScheduleParams::sync_domains; workgroup w signals stripe w % D
  // ScheduleParams::h_slice_cols: down reads h slice by slice (0: after the whole gate_up stage, as the
  // GPU kernel does).
  int h_slice_cols = 0;
  // Prompt tokens per chunk step (prefill: ScheduleParams::chunk_tokens): -1 as plan_chunk_tokens
  // chooses for the context, 0 none (prompts go one token per step).
  int chunk_tokens = -1;
  // ScheduleParams::attention_combine: -1 the model's default, 0 in o_proj, 1 once per kv group.
  int attention_combine = -1;
  // ScheduleParams::fold_post_norms: post-norm layers' post-norms folded into the stage after each.
  bool fold_post_norms = true;
  // Run-time claimed rows (ScheduleParams::claimed_ops, claim_late_ranks, claim_shrink_percent; the GPU
  // kernel runs static rows).
  uint32_t claimed_ops = 0;
  // ScheduleParams::step_tokens: tokens a token step runs at most (1..kMaxStepTokens), with one pass over
  // the weights: prompt tokens that chunk steps do not take go through steps of this many.
  int step_tokens = 1;
  // Drafted tokens verified in those steps (runtime/speculation.h): the drafter and its limits. A drafter
  // needs step_tokens >= 2.
  SpeculationParams speculation;
  int claim_late_ranks = ScheduleParams{}.claim_late_ranks;
  int claim_shrink_percent = ScheduleParams{}.claim_shrink_percent;
  // Tensor parallel (runtime/tensor_parallel.h): the virtual devices a token step is split over, each
  // with its own workgroups, counters and shard of the weights; the checker spans them all. Prompts go
  // through token steps; steps of one token, no drafter.
  int tensor_parallel = 1;
  Interleaving interleaving = Interleaving::Random;
  uint64_t interleave_seed = 1;
  bool check_dependencies = true;  // vector-clock checker on every access (slower; off for big models)
  bool record_logits = false;      // keep the logits of every generating step
};

// The schedules the emulator runs for `options`: one, or with tensor parallel one per device (each for its
// shard and rank). Throws mk::Error for a model that does not split so (check_tensor_parallel).
std::vector<Schedule> emulator_schedules(const Model& model, const EmulatorOptions& options);

class Emulator final : public DecodeBackend {
 public:
  Emulator(const Model& model, const EmulatorOptions& options);
  // Runs a given schedule (tests use this to plant a broken dependency); with tensor parallel, one per
  // device (emulator_schedules builds them).
  Emulator(const Model& model, Schedule schedule, const EmulatorOptions& options);
  Emulator(const Model& model, std::vector<Schedule> schedules, const EmulatorOptions& options);
  ~Emulator() override;

  GenerateResult generate(const GenerateRequest& request, const TokenCallback& on_token) override;
  void cancel() override;
  void reset() override;
  bool truncate(int tokens) override;
  int position() const override;
  int context() const override;
  std::string name() const override;

  const Schedule& schedule() const;
  // Logits of each step that sampled a token in the last generate() (record_logits only).
  const std::vector<std::vector<float>>& recorded_logits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mk
