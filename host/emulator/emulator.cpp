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

struct Emulator::Impl : emu::EmulatorState {
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

  static uint32_t target(const Wait& w, uint32_t step) { return w.per_step * (step + 1 - w.lag); }

  // What a waiter sees: the counter's value, its stripes summed.
  uint32_t value(uint32_t counter) const { return schedule.counter_value(counters, counter); }
  // What a waiter that passed may rely on, conservatively: a flat counter, its first `target` releases;
  // a per-domain counter, in each stripe the least value it can have read given that the stripes summed
  // to at least `target` and none exceeded its value now (the GPU acquires each stripe as it reads it).
  void acquire(int w, uint32_t counter, uint32_t target) {
    if (!schedule.striped(counter)) return checker->acquire(w, schedule.line(counter, 0), target);
    const uint32_t total = value(counter);
    for (uint32_t d = 0; d < schedule.stripes(counter); ++d) {
      const uint32_t mine = counters[schedule.line(counter, d)], others = total - mine;
      checker->acquire(w, schedule.line(counter, d), target > others ? target - others : 0);
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
    if (checker) checker->claim(w, emu::InstrRef{g.step, index, next.seq}, line, uint32_t(schedule.num_workgroups));
    g.rank = ClaimedRows::rank(counters[line]++, g.step, uint32_t(schedule.num_workgroups));
  }

  void signal(int w, uint32_t counter) {
    const uint32_t line = schedule.line(counter, fallback_sync_domain(uint32_t(w), uint32_t(schedule.sync_domains)));
    if (checker) checker->release(w, line);
    ++counters[line];
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
      for (int i = 0; i < in.num_waits; ++i) checker->acquire(w, chunk_line(in.waits[i].counter), target(in.waits[i], g.chunk));
    execute(in, OpCtx{w, emu::InstrRef{g.chunk, index | emu::kChunkIndex, in.seq}}, g.chunk);
    if (checker) checker->release(w, chunk_line(in.signal));
    ++counters[chunk_line(in.signal)];
    ++g.pc;
  }

  void advance(int w, Workgroup& g) {
    if (g.in_chunks) return advance_chunk(w, g);
    if (g.prefill_gate) {
      if (checker) checker->acquire(w, chunk_line(schedule.chunk.final_counter), prefill_target());
      g.prefill_gate = false;
      return;
    }
    const uint32_t begin = schedule.wg_begin[size_t(w)], end = schedule.wg_begin[size_t(w) + 1];
    if (!g.gate_passed) {  // step gate: the previous step's Sample has run; did it stop the launch?
      if (checker) acquire(w, schedule.sample_counter, g.step);
      const OpCtx c{w, emu::InstrRef{g.step, kGateIndex, uint32_t(w)}};
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
    const OpCtx c{w, emu::InstrRef{g.step, index, in.seq}};
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
      signal(w, in.signal);
    }
    ++g.pc;
  }

  [[noreturn]] void report_deadlock(const std::vector<Workgroup>& wgs) const {
    std::vector<WorkgroupPosition> blocked;
    for (size_t w = 0; w < wgs.size(); ++w) {
      const Workgroup& g = wgs[w];
      if (g.done) continue;
      if (g.in_chunks) blocked.push_back({int(w), g.chunk, false, schedule.chunk.wg_begin[w] + g.pc, true, false});
      else if (g.prefill_gate) blocked.push_back({int(w), uint32_t(run.chunks), false, 0, false, true});
      else blocked.push_back({int(w), g.step, !g.gate_passed, schedule.wg_begin[w] + g.pc});
    }
    const std::vector<unsigned> values = schedule.counter_values(counters);
    // Nothing of the launch is committed (position and pending token change only after it): the
    // emulator is as before the call.
    throw HangError(fmt::format("emulator: deadlock, no workgroup can proceed:{}", describe_blocked(schedule, blocked, &values)),
                    /*stopped=*/true);
  }

  void launch() {
    counters.assign(schedule.counter_lines(), 0);
    partial_sums.assign(size_t(schedule.num_workgroups), {});
    std::vector<Workgroup> wgs(size_t(schedule.num_workgroups));
    for (Workgroup& g : wgs) g.in_chunks = run.chunks > 0;
    std::mt19937_64 rng(opt.interleave_seed);
    std::vector<int> runnable;
    size_t rr = 0;
    size_t remaining = wgs.size();
    while (remaining > 0) {
      runnable.clear();
      for (int w = 0; w < int(wgs.size()); ++w)
        if (ready(w, wgs[size_t(w)])) runnable.push_back(w);
      if (runnable.empty()) report_deadlock(wgs);
      int pick = runnable.front();
      switch (opt.interleaving) {
        case Interleaving::Eager: break;
        case Interleaving::Random: pick = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(rng)]; break;
        case Interleaving::RoundRobin: pick = runnable[rr++ % runnable.size()]; break;
      }
      Workgroup& g = wgs[size_t(pick)];
      advance(pick, g);
      if (g.done) --remaining;
    }
  }

  GenerateResult generate(const GenerateRequest& req, const TokenCallback& on_token) {
    const auto input = tokens_to_ingest(req.input, pending, position, opt.context, cfg.vocab_size);
    check_request(req, cfg.vocab_size);
    cancel_flag = false;
    recorded.clear();
    run = Launch{};
    // All prompt tokens but the last go through chunk steps when there are enough of them; the last goes
    // through token step 0, which samples the first reply token.
    const int C = schedule.chunk.tokens;
    const int chunked = chunked_prompt_tokens(C, int(input.size()));
    run.chunk_start = position;
    run.chunk_count = chunked;
    run.chunks = C > 0 ? (chunked + C - 1) / C : 0;
    run.start = position + chunked;
    run.ingest = int(input.size()) - chunked;
    run.max_new = req.max_new_tokens;
    run.sampling = req.sampling;
    std::fill(lm_key_counts.data.begin(), lm_key_counts.data.end(), 0u);  // as the GPU backend clears them
    run.adjust = req.adjust;
    if (run.adjust.active()) {  // as the GPU backend uploads them
      logit_adjust.data = initial_logit_adjustment(req.adjust, cfg.vocab_size);
      std::fill(token_counts.data.begin(), token_counts.data.end(), 0u);
    }
    run.on_logprobs = req.on_logprobs ? &req.on_logprobs : nullptr;
    run.top_logprobs = std::min(req.top_logprobs, cfg.vocab_size);
    run.on_token = &on_token;
    run.constraint = req.constraint.get();
    if (run.constraint)  // as the GPU backend uploads them: the start and the first reply token's budget
      constraint_state.data = {run.constraint->dfa.start,
                               constraint::constraint_budget(run.max_new, 0, opt.context, run.start + run.ingest - 1)};
    run.t0 = std::chrono::steady_clock::now();
    const size_t steps = size_t(opt.context - run.start);  // at most one step per free cache slot
    tokens.data.assign(steps + 1, -1);
    std::copy(input.begin() + chunked, input.end(), tokens.data.begin());
    chunk_tokens.data.assign(input.begin(), input.begin() + chunked);
    stop_at.data.assign(steps, 0);
    if (schedule.step_tokens > 1) {  // as the GPU backend uploads them
      step_spans.data[0] = next_step_span(0, run.ingest, schedule.step_tokens, opt.context - run.start);
      std::copy(input.begin(), input.end(), history.data.begin() + position);
    }

    start_checker();
    launch();
    if (checker) checker->throw_if_violations();
    // The cache holds the launch's tokens up to the last step's kept ones; the token sampled last is
    // pending (the next launch's first input).
    position = run.start + run.next_index;
    pending = run.result.tokens.empty() ? -1 : run.result.tokens.back();
    if (run.result.stop == StopReason::Cancelled && run.next_index < run.ingest) pending = -1;
    run.result.stats.ingested_tokens = run.chunk_count + run.ingest;
    run.result.stats.chunked_tokens = run.chunk_count;
    run.result.stats.steps = int(std::find(stop_at.data.begin(), stop_at.data.end(), 1) - stop_at.data.begin()) + 1;
    run.result.stats.generated_tokens = int(run.result.tokens.size());
    run.result.stats.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.t0).count();
    return run.result;
  }
};

namespace {
ScheduleParams schedule_params(const Model& model, const EmulatorOptions& options) {
  ScheduleParams p{options.num_workgroups, options.attention_splits, false, options.sync_domains, options.h_slice_cols,
                   plan_chunk_steps(model.config, options.chunk_tokens, options.context)};
  p.attention_combine = options.attention_combine;
  p.fold_post_norms = options.fold_post_norms;
  p.claimed_ops = options.claimed_ops;
  p.claim_late_ranks = options.claim_late_ranks;
  p.claim_shrink_percent = options.claim_shrink_percent;
  p.step_tokens = options.step_tokens;
  return p;
}
}  // namespace

Emulator::Emulator(const Model& model, const EmulatorOptions& options)
    : Emulator(model, build_schedule(model.config, schedule_params(model, options)), options) {}

Emulator::Emulator(const Model& model, Schedule schedule, const EmulatorOptions& options)
    : impl_(std::make_unique<Impl>(model, std::move(schedule), options)) {}

Emulator::~Emulator() = default;

GenerateResult Emulator::generate(const GenerateRequest& request, const TokenCallback& on_token) {
  return impl_->generate(request, on_token);
}
void Emulator::cancel() { impl_->cancel_flag = true; }
void Emulator::reset() {
  impl_->position = 0;
  impl_->pending = -1;
}
// Attention reads positions [0, the current one] and each step writes its own: what lies beyond the kept
// positions is never read before it is written again.
bool Emulator::truncate(int tokens) {
  if (tokens < 0 || tokens > impl_->position) return false;
  impl_->position = tokens;
  impl_->pending = -1;
  return true;
}
int Emulator::position() const { return impl_->position; }
int Emulator::context() const { return impl_->opt.context; }
std::string Emulator::name() const {
  return fmt::format("cpu-emulator ({} virtual workgroups, {} interleaving)", impl_->schedule.num_workgroups,
                     interleaving_name(impl_->opt.interleaving));
}
const Schedule& Emulator::schedule() const { return impl_->schedule; }
const std::vector<std::vector<float>>& Emulator::recorded_logits() const { return impl_->recorded; }

}  // namespace mk
