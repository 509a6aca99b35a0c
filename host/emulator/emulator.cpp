#include "host/emulator/emulator.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "host/emulator/emulator_state.h"
#include "host/emulator/ops/ops.h"
#include "runtime/error.h"
#include "runtime/rope.h"
#include "runtime/schedule_diagnostics.h"
#include "runtime/tensor_parallel.h"
#include "runtime/weight_layout.h"

namespace mk {

const char* interleaving_name(Interleaving i) {
  switch (i) {
    case Interleaving::RoundRobin: return "round-robin";
    case Interleaving::Random: return "random";
    case Interleaving::Eager: return "eager";
  }
  return "?";
}

namespace {
using emu::Buffer;
using emu::kGateIndex;
using emu::OpCtx;

}  // namespace

namespace emu {

// One device's state and its workgroups' progress: what the interleaving executor moves one action at a
// time. With tensor parallel there is one per device, all sharing the launch's checker.
struct Device : EmulatorState {
  using EmulatorState::EmulatorState;

  void execute(const Instr& in, const OpCtx& c, uint32_t step) { emu::emulate(*this, c, in, step); }

  // ---- the interleaving executor ----
  struct Workgroup {
    uint32_t step = 0;
    uint32_t pc = 0;  // index into its list; == size: at the next step gate
    uint32_t slice = 0;  // an instruction that reads h slice by slice: the next slice it reads
    // Chunk steps first (pc counts in the chunk list), then the prefill gate (token step 0 waits for the
    // last chunk step), then the token steps.
    bool in_chunks = false, prefill_gate = false;
    uint32_t chunk = 0;
    bool gate_passed = true;  // step 0 has no gate
    bool done = false;
    uint32_t rank = 0;  // claimed for its next instruction (Schedule::claimed_rows)
  };
  std::vector<Workgroup> wgs;

  // The checker's number of workgroup w of this device.
  int gw(int w) const { return rank * schedule.num_workgroups + w; }

  static uint32_t target(const Wait& w, uint32_t step) { return w.per_step * (step + 1 - w.lag); }

  // What a waiter sees: the counter's value, its stripes summed.
  uint32_t value(uint32_t counter) const { return schedule.counter_value(counters, counter); }
  // What a waiter that passed may rely on, conservatively: a flat counter, its first `target` releases;
  // a per-domain counter, in each stripe the least value it can have read given that the stripes summed
  // to at least `target` and none exceeded its value now (the GPU acquires each stripe as it reads it).
  void acquire(int w, uint32_t counter, uint32_t target) {
    if (!schedule.striped(counter)) return checker->acquire(gw(w), global_line(schedule.line(counter, 0)), target);
    const uint32_t total = value(counter);
    for (uint32_t d = 0; d < schedule.stripes(counter); ++d) {
      const uint32_t mine = counters[schedule.line(counter, d)], others = total - mine;
      checker->acquire(gw(w), global_line(schedule.line(counter, d)), target > others ? target - others : 0);
    }
  }

  // Chunk steps' counters: flat, after the token steps' lines.
  uint32_t chunk_line(uint32_t counter) const { return schedule.chunk.first_line + counter; }
  uint32_t prefill_target() const { return schedule.chunk.final_per_step * uint32_t(run.chunks); }

  // Whether workgroup `w` can take its next action now.
  bool ready(int w, const Workgroup& g) const {
    if (g.done) return false;
    if (g.in_chunks) {
      const ChunkSchedule& cs = schedule.chunk;
      const uint32_t begin = cs.wg_begin[size_t(w)], end = cs.wg_begin[size_t(w) + 1];
      if (begin + g.pc == end) return true;  // moves to the next chunk
      const Instr& in = cs.instrs[begin + g.pc];
      for (int i = 0; i < in.num_waits; ++i)
        if (counters[chunk_line(in.waits[i].counter)] < target(in.waits[i], g.chunk)) return false;
      return true;
    }
    if (g.prefill_gate) return counters[chunk_line(schedule.chunk.final_counter)] >= prefill_target();
    if (!g.gate_passed) return value(schedule.sample_counter) >= g.step;
    const uint32_t begin = schedule.wg_begin[size_t(w)], end = schedule.wg_begin[size_t(w) + 1];
    if (begin + g.pc == end) return true;  // moves to the next step's gate
    const Instr& in = schedule.instrs[begin + g.pc];
    if (g.slice == 0)
      for (int i = 0; i < in.num_waits; ++i)
        if (value(in.waits[i].counter) < target(in.waits[i], g.step)) return false;
    if (in.flags & kWaitsHSlices) return value(h_slice_counter(in, g.slice)) >= schedule.h_slices.target(g.slice, g.step);
    return true;
  }

  uint32_t h_slice_counter(const Instr& in, uint32_t k) const { return schedule.h_slices.counter(in.layer, k); }

  // One slice of an instruction that reads h slice by slice (the waits were checked by ready()); true
  // when it was the last.
  bool advance_slice(int w, Workgroup& g, const Instr& in, const OpCtx& c) {
    if (checker) acquire(w, h_slice_counter(in, g.slice), schedule.h_slices.target(g.slice, g.step));
    emu::emulate_down_slice(*this, c, in, g.step, g.slice);
    if (++g.slice < schedule.h_slices.count) return false;
    g.slice = 0;
    return true;
  }

  // Workgroup w claims the rank of its instruction `index` (a block with claimed rows) as the
  // instruction before it starts, before that one's waits: the checker sees the claim with the clock from
  // before them, as the GPU's claim would be made.
  void claim(int w, Workgroup& g, uint32_t index) {
    const Instr& next = schedule.instrs[index];
    const uint32_t line = schedule.line(schedule.claimed_rows.counter(next.layer, next.op), 0);
    if (checker) checker->claim(gw(w), emu::InstrRef{g.step, index, next.seq, uint32_t(rank)}, global_line(line), uint32_t(schedule.num_workgroups));
    g.rank = ClaimedRows::rank(counters[line]++, g.step, uint32_t(schedule.num_workgroups));
  }

  // Adds 1 to the counter on this device, or with kPushes on every device (each device's schedule
  // numbers its counters alike).
  void signal(int w, uint32_t counter, bool pushes = false) {
    const uint32_t line = schedule.line(counter, fallback_sync_domain(uint32_t(w), uint32_t(schedule.sync_domains)));
    for (emu::EmulatorState* d : devices) {
      if (!pushes && d != this) continue;
      if (checker) checker->release(gw(w), d->global_line(line));
      ++d->counters[line];
    }
  }

  void advance_chunk(int w, Workgroup& g) {
    const ChunkSchedule& cs = schedule.chunk;
    const uint32_t begin = cs.wg_begin[size_t(w)], end = cs.wg_begin[size_t(w) + 1];
    if (begin + g.pc == end) {
      g.pc = 0;
      if (++g.chunk == uint32_t(run.chunks)) g.in_chunks = false, g.prefill_gate = true;
      return;
    }
    const uint32_t index = begin + g.pc;
    const Instr& in = cs.instrs[index];
    if (checker)
      for (int i = 0; i < in.num_waits; ++i) checker->acquire(gw(w), global_line(chunk_line(in.waits[i].counter)), target(in.waits[i], g.chunk));
    execute(in, OpCtx{w, emu::InstrRef{g.chunk, index | emu::kChunkIndex, in.seq, uint32_t(rank)}}, g.chunk);
    if (checker) checker->release(gw(w), global_line(chunk_line(in.signal)));
    ++counters[chunk_line(in.signal)];
    ++g.pc;
  }

  void advance(int w, Workgroup& g) {
    if (g.in_chunks) return advance_chunk(w, g);
    if (g.prefill_gate) {
      if (checker) checker->acquire(gw(w), global_line(chunk_line(schedule.chunk.final_counter)), prefill_target());
      g.prefill_gate = false;
      return;
    }
    const uint32_t begin = schedule.wg_begin[size_t(w)], end = schedule.wg_begin[size_t(w) + 1];
    if (!g.gate_passed) {  // step gate: the previous step's Sample has run; did it stop the launch?
      if (checker) acquire(w, schedule.sample_counter, g.step);
      const OpCtx c{w, emu::InstrRef{g.step, kGateIndex, uint32_t(w), uint32_t(rank)}};
      if (*read(c, stop_at, g.step - 1, g.step)) {
        g.done = true;
        return;
      }
      g.gate_passed = true;
      return;
    }
    if (begin + g.pc == end) {
      ++g.step;
      g.pc = 0;
      g.gate_passed = false;
      if (g.step >= tokens.data.size()) g.done = true;  // cannot happen: Sample stops at the context
      return;
    }
    const uint32_t index = begin + g.pc;
    const Instr& in = schedule.instrs[index];
    if (g.slice == 0 && index + 1 < end && (schedule.instrs[index + 1].flags & kClaimsRows)) claim(w, g, index + 1);
    if (checker && g.slice == 0)
      for (int i = 0; i < in.num_waits; ++i) acquire(w, in.waits[i].counter, target(in.waits[i], g.step));
    const OpCtx c{w, emu::InstrRef{g.step, index, in.seq, uint32_t(rank)}};
    if (in.flags & kWaitsHSlices) {
      if (!advance_slice(w, g, in, c)) return;
    } else if (in.flags & kClaimsRows) {
      execute(schedule.claimed_rows.resolve(in, g.rank, uint32_t(schedule.num_workgroups)), c, g.step);
    } else {
      execute(in, c, g.step);
    }
    if (in.flags & kSignalsHSlices) {
      const HSlices& hs = schedule.h_slices;
      for (uint32_t k = hs.first_touched(in.begin); k <= hs.last_touched(in.end); ++k) signal(w, hs.counter(in.layer, k));
    } else {
      signal(w, in.signal, (in.flags & kPushes) != 0);
    }
    ++g.pc;
  }

  // Where each of its workgroups that has not finished stands.
  std::vector<WorkgroupPosition> blocked() const {
    std::vector<WorkgroupPosition> out;
    for (size_t w = 0; w < wgs.size(); ++w) {
      const Workgroup& g = wgs[w];
      if (g.done) continue;
      if (g.in_chunks) out.push_back({int(w), g.chunk, false, schedule.chunk.wg_begin[w] + g.pc, true, false});
      else if (g.prefill_gate) out.push_back({int(w), uint32_t(run.chunks), false, 0, false, true});
      else out.push_back({int(w), g.step, !g.gate_passed, schedule.wg_begin[w] + g.pc});
    }
    return out;
  }
};

}  // namespace emu

struct Emulator::Impl {
  EmulatorOptions opt;
  std::vector<std::unique_ptr<Model>> shards;  // tensor parallel: each device's shard of the model
  std::vector<std::unique_ptr<emu::Device>> devices;
  std::optional<emu::DependencyChecker> checker;

  Impl(const Model& model, std::vector<Schedule> schedules, const EmulatorOptions& options) : opt(options) {
    const int D = opt.tensor_parallel;
    if (int(schedules.size()) != D)
      fail("emulator: {} schedules for {} devices (tensor_parallel); one per device", schedules.size(), D);
    if (D > 1) check_tensor_parallel(model, D);
    for (int r = 0; r < D; ++r) {
      if (schedules[size_t(r)].devices != D || schedules[size_t(r)].rank != r)
        fail("emulator: the schedule for device {} was built for device {} of {}", r, schedules[size_t(r)].rank, schedules[size_t(r)].devices);
      const Model* m = &model;
      if (D > 1) m = shards.emplace_back(shard_model(model, D, r)).get();
      devices.push_back(std::make_unique<emu::Device>(*m, std::move(schedules[size_t(r)]), opt));
      devices.back()->rank = r;
    }
    std::vector<emu::EmulatorState*> all;
    for (auto& d : devices) all.push_back(d.get());
    for (auto& d : devices) d->devices = all;
  }

  emu::Device& home() { return *devices.front(); }

  // One checker for every device's workgroups, counter lines and buffers.
  void start_checker() {
    checker.reset();
    for (auto& d : devices) d->checker = nullptr;
    if (!opt.check_dependencies) return;
    const Schedule& s = home().schedule;
    checker.emplace(s.num_workgroups * int(devices.size()), s.counter_lines() * uint32_t(devices.size()),
                    [this](const emu::InstrRef& r) { return devices.at(r.device)->describe(r); });
    for (auto& d : devices) d->watch_buffers(*checker);
  }

  [[noreturn]] void report_deadlock() const {
    std::string where;
    for (const auto& d : devices) {
      const std::vector<WorkgroupPosition> blocked = d->blocked();
      if (blocked.empty()) continue;
      const std::vector<unsigned> values = d->schedule.counter_values(d->counters);
      const std::string list = describe_blocked(d->schedule, blocked, &values);
      where += devices.size() > 1 ? fmt::format("\ngpu {}:{}", d->rank, list) : list;
    }
    // Nothing of the launch is committed (position and pending token change only after it): the
    // emulator is as before the call.
    throw HangError(fmt::format("emulator: deadlock, no workgroup can proceed:{}", where), /*stopped=*/true);
  }

  // Runs every device's workgroups, one action at a time in the chosen interleaving.
  void launch() {
    struct Who {
      emu::Device* device;
      int w;
    };
    size_t remaining = 0;
    for (auto& d : devices) {
      d->counters.assign(d->schedule.counter_lines(), 0);
      d->partial_sums.assign(size_t(d->schedule.num_workgroups), {});
      d->wgs.assign(size_t(d->schedule.num_workgroups), emu::Device::Workgroup{});
      for (emu::Device::Workgroup& g : d->wgs) g.in_chunks = d->run.chunks > 0;
      remaining += d->wgs.size();
    }
    std::mt19937_64 rng(opt.interleave_seed);
    std::vector<Who> runnable;
    size_t rr = 0;
    while (remaining > 0) {
      runnable.clear();
      for (auto& d : devices)
        for (int w = 0; w < int(d->wgs.size()); ++w)
          if (d->ready(w, d->wgs[size_t(w)])) runnable.push_back({d.get(), w});
      if (runnable.empty()) report_deadlock();
      Who pick = runnable.front();
      switch (opt.interleaving) {
        case Interleaving::Eager: break;
        case Interleaving::Random: pick = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(rng)]; break;
        case Interleaving::RoundRobin: pick = runnable[rr++ % runnable.size()]; break;
      }
      emu::Device::Workgroup& g = pick.device->wgs[size_t(pick.w)];
      pick.device->advance(pick.w, g);
      if (g.done) --remaining;
    }
  }

  // A launch's request, set up on one device as the GPU backend uploads it.
  void prepare(emu::Device& d, const GenerateRequest& req, const TokenCallback& on_token, const std::vector<int32_t>& input) {
    d.cancel_flag = false;
    d.recorded.clear();
    auto& run = d.run;
    run = emu::EmulatorState::Launch{};
    // All prompt tokens but the last go through chunk steps when there are enough of them; the last goes
    // through token step 0, which samples the first reply token.
    const int C = d.schedule.chunk.tokens;
    const int chunked = chunked_prompt_tokens(C, int(input.size()));
    run.chunk_start = d.position;
    run.chunk_count = chunked;
    run.chunks = C > 0 ? (chunked + C - 1) / C : 0;
    run.start = d.position + chunked;
    run.ingest = int(input.size()) - chunked;
    run.max_new = req.max_new_tokens;
    run.sampling = req.sampling;
    std::fill(d.lm_key_counts.data.begin(), d.lm_key_counts.data.end(), 0u);  // as the GPU backend clears them
    run.adjust = req.adjust;
    if (run.adjust.active()) {  // as the GPU backend uploads them
      d.logit_adjust.data = initial_logit_adjustment(req.adjust, d.cfg.vocab_size);
      std::fill(d.token_counts.data.begin(), d.token_counts.data.end(), 0u);
    }
    run.on_logprobs = req.on_logprobs ? &req.on_logprobs : nullptr;
    run.top_logprobs = std::min(req.top_logprobs, d.cfg.vocab_size);
    run.on_token = &on_token;
    run.constraint = req.constraint.get();
    if (run.constraint)  // as the GPU backend uploads them: the start and the first reply token's budget
      d.constraint_state.data = {run.constraint->dfa.start,
                                 constraint::constraint_budget(run.max_new, 0, opt.context, run.start + run.ingest - 1)};
    run.t0 = std::chrono::steady_clock::now();
    const size_t steps = size_t(opt.context - run.start);  // at most one step per free cache slot
    d.tokens.data.assign(steps + 1, -1);
    std::copy(input.begin() + chunked, input.end(), d.tokens.data.begin());
    d.chunk_tokens.data.assign(input.begin(), input.begin() + chunked);
    d.stop_at.data.assign(steps, 0);
    if (d.schedule.step_tokens > 1) {  // as the GPU backend uploads them
      d.step_spans.data[0] = next_step_span(0, run.ingest, d.schedule.step_tokens, opt.context - run.start);
      std::copy(input.begin(), input.end(), d.history.data.begin() + d.position);
    }
  }

  GenerateResult generate(const GenerateRequest& req, const TokenCallback& on_token) {
    emu::Device& h = home();
    const auto input = tokens_to_ingest(req.input, h.pending, h.position, opt.context, h.cfg.vocab_size);
    check_request(req, h.cfg.vocab_size);
    for (auto& d : devices) prepare(*d, req, on_token, input);

    start_checker();
    launch();
    if (checker) checker->throw_if_violations();
    // The cache holds the launch's tokens up to the last step's kept ones; the token sampled last is
    // pending (the next launch's first input). The home device's sample op decided for every device.
    auto& run = h.run;
    const int position = run.start + run.next_index;
    int32_t pending = run.result.tokens.empty() ? -1 : run.result.tokens.back();
    if (run.result.stop == StopReason::Cancelled && run.next_index < run.ingest) pending = -1;
    for (auto& d : devices) d->position = position, d->pending = pending;
    run.result.stats.ingested_tokens = run.chunk_count + run.ingest;
    run.result.stats.chunked_tokens = run.chunk_count;
    run.result.stats.steps = int(std::find(h.stop_at.data.begin(), h.stop_at.data.end(), 1) - h.stop_at.data.begin()) + 1;
    run.result.stats.generated_tokens = int(run.result.tokens.size());
    run.result.stats.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.t0).count();
    return run.result;
  }
};

namespace {
ScheduleParams schedule_params(const Model& model, const EmulatorOptions& options) {
  // Tensor parallel runs prompts through token steps unless chunk steps are asked for (build_schedule
  // then says they are not built for it).
  const int chunk = options.tensor_parallel > 1 && options.chunk_tokens < 0 ? 0 : options.chunk_tokens;
  ScheduleParams p{options.num_workgroups, options.attention_splits, false, options.sync_domains, options.h_slice_cols,
                   plan_chunk_steps(model.config, chunk, options.context)};
  p.attention_combine = options.attention_combine;
  p.fold_post_norms = options.fold_post_norms;
  p.claimed_ops = options.claimed_ops;
  p.claim_late_ranks = options.claim_late_ranks;
  p.claim_shrink_percent = options.claim_shrink_percent;
  p.step_tokens = options.step_tokens;
  return p;
}
}  // namespace

std::vector<Schedule> emulator_schedules(const Model& model, const EmulatorOptions& options) {
  const int D = options.tensor_parallel;
  const ScheduleParams params = schedule_params(model, options);
  if (D == 1) return {build_schedule(model.config, params)};
  check_tensor_parallel(model, D);
  const ModelConfig shard = shard_config(model.config, D);
  std::vector<Schedule> out;
  for (int r = 0; r < D; ++r) out.push_back(build_schedule(tensor_parallel_recipe(shard, D, r), shard, params));
  return out;
}

Emulator::Emulator(const Model& model, const EmulatorOptions& options) : Emulator(model, emulator_schedules(model, options), options) {}

Emulator::Emulator(const Model& model, Schedule schedule, const EmulatorOptions& options)
    : Emulator(model, std::vector<Schedule>{std::move(schedule)}, options) {}

Emulator::Emulator(const Model& model, std::vector<Schedule> schedules, const EmulatorOptions& options)
    : impl_(std::make_unique<Impl>(model, std::move(schedules), options)) {}

Emulator::~Emulator() = default;

GenerateResult Emulator::generate(const GenerateRequest& request, const TokenCallback& on_token) {
  return impl_->generate(request, on_token);
}
void Emulator::cancel() {
  for (auto& d : impl_->devices) d->cancel_flag = true;
}
void Emulator::reset() {
  for (auto& d : impl_->devices) d->position = 0, d->pending = -1;
}
// Attention reads positions [0, the current one] and each step writes its own: what lies beyond the kept
// positions is never read before it is written again.
bool Emulator::truncate(int tokens) {
  if (tokens < 0 || tokens > impl_->home().position) return false;
  for (auto& d : impl_->devices) d->position = tokens, d->pending = -1;
  return true;
}
int Emulator::position() const { return impl_->home().position; }
int Emulator::context() const { return impl_->opt.context; }
std::string Emulator::name() const {
  const std::string devices = impl_->devices.size() > 1 ? fmt::format(" on {} virtual devices", impl_->devices.size()) : "";
  return fmt::format("cpu-emulator ({} virtual workgroups{}, {} interleaving)", impl_->home().schedule.num_workgroups, devices,
                     interleaving_name(impl_->opt.interleaving));
}
const Schedule& Emulator::schedule() const { return impl_->home().schedule; }
const std::vector<std::vector<float>>& Emulator::recorded_logits() const { return impl_->home().recorded; }

}  // namespace mk
