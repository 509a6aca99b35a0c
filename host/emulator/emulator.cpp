#include "host/emulator/emulator.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "host/emulator/dependency_checker.h"
#include "runtime/error.h"
#include "runtime/limits.h"
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

constexpr uint32_t kGateIndex = std::numeric_limits<uint32_t>::max();  // InstrRef.index of a step gate

// A shared buffer of the decode state, with its cell size for the dependency checker.
template <typename T>
struct Buffer {
  std::vector<T> data;
  size_t cell = 1;  // elements per checked cell
  int id = -1;      // checker buffer id
};

}  // namespace

struct Emulator::Impl {
  const Model& model;
  const ModelConfig& cfg;
  EmulatorOptions opt;
  Schedule schedule;
  WeightLayout layout;
  std::vector<uint8_t> weights;  // the packed device image
  std::vector<float> rope;       // [context][hd/2] cos, then sin

  // Decode state (what the GPU keeps in device memory).
  Buffer<float> x, qkv, att_o, att_ml, h, logits, lm_best_value;
  Buffer<int32_t> lm_best_index;  // checked together with lm_best_value (same cells)
  Buffer<uint16_t> k_cache, v_cache;  // bf16 [layer][kv head][position][head_dim]
  Buffer<int32_t> tokens;             // token fed at each step of the current launch
  Buffer<uint8_t> stop_at;            // stop_at[s] = 1: Sample at step s ended the launch

  int position = 0;
  int32_t pending = -1;
  std::atomic<bool> cancel_flag{false};
  std::vector<std::vector<float>> recorded;

  // Per launch.
  struct Launch {
    int start = 0;
    int ingest = 0;  // tokens to run before the first sample
    int max_new = 0;
    SamplingParams sampling;
    const TokenCallback* on_token = nullptr;
    GenerateResult result;
    std::chrono::steady_clock::time_point t0;
  } run;
  std::vector<unsigned> counters;  // one value per counter line (Schedule::counter_lines)
  std::optional<emu::DependencyChecker> checker;

  Impl(const Model& m, Schedule s, const EmulatorOptions& o)
      : model(m), cfg(m.config), opt(o), schedule(std::move(s)) {
    if (schedule.num_workgroups != opt.num_workgroups)
      fail("emulator: schedule built for {} workgroups, options say {}", schedule.num_workgroups, opt.num_workgroups);
    if (opt.context < 1 || opt.context > limits::kMaxPositions)
      fail("emulator: context must be between 1 and {} tokens (got {})", limits::kMaxPositions, opt.context);
    if (cfg.sliding_window > 0 && opt.context > cfg.sliding_window)
      fail("context {} exceeds the model's sliding window of {} tokens, which is not supported", opt.context, cfg.sliding_window);
    layout = plan_weight_layout(cfg, matrix_dtype_for(model));
    weights = pack_weights_to_host(model, layout);
    rope = rope_table(cfg, opt.context);
    const size_t hd = size_t(cfg.head_dim), S = size_t(schedule.attention_splits);
    x.data.assign(size_t(cfg.hidden_size), 0.f);
    qkv.data.assign(size_t(layout.qkv_rows), 0.f);
    att_o.data.assign(size_t(cfg.num_heads) * S * hd, 0.f);
    att_o.cell = hd;
    att_ml.data.assign(size_t(cfg.num_heads) * S * 2, 0.f);
    att_ml.cell = 2;
    h.data.assign(size_t(cfg.intermediate_size), 0.f);
    logits.data.assign(size_t(cfg.vocab_size), 0.f);
    lm_best_value.data.assign(size_t(schedule.lm_head_slots), 0.f);
    lm_best_index.data.assign(size_t(schedule.lm_head_slots), 0);
    k_cache.data.assign(size_t(cfg.num_layers) * size_t(cfg.num_kv_heads) * size_t(opt.context) * hd, 0);
    k_cache.cell = hd;
    v_cache.data = k_cache.data;
    v_cache.cell = hd;
  }

  // ---- accessors that report to the dependency checker ----
  struct Ctx {
    int wg;
    emu::InstrRef ref;
  };
  template <typename T>
  const T* read(const Ctx& c, const Buffer<T>& b, size_t begin, size_t end) {
    if (checker) checker->read(c.wg, c.ref, b.id, begin / b.cell, (end + b.cell - 1) / b.cell);
    return b.data.data() + begin;
  }
  template <typename T>
  T* write(const Ctx& c, Buffer<T>& b, size_t begin, size_t end) {
    if (checker) checker->write(c.wg, c.ref, b.id, begin / b.cell, (end + b.cell - 1) / b.cell);
    return b.data.data() + begin;
  }

  std::string describe(const emu::InstrRef& r) const {
    if (r.index == kGateIndex) return fmt::format("step {}, workgroup {}: step gate (reads the stop flag)", r.step, r.seq);
    return fmt::format("step {}, workgroup {}: {}", r.step, schedule.workgroup_of(r.index), schedule.describe(schedule.instrs[r.index]));
  }

  void start_checker() {
    checker.reset();
    if (!opt.check_dependencies) return;
    checker.emplace(schedule.num_workgroups, schedule.counter_lines(), [this](const emu::InstrRef& r) { return describe(r); });
    x.id = checker->add_buffer("x (residual stream)", x.data.size());
    qkv.id = checker->add_buffer("qkv", qkv.data.size());
    att_o.id = checker->add_buffer("attention partial outputs", att_o.data.size() / att_o.cell);
    att_ml.id = checker->add_buffer("attention partial max/sum", att_ml.data.size() / att_ml.cell);
    h.id = checker->add_buffer("mlp activations", h.data.size());
    logits.id = checker->add_buffer("logits", logits.data.size());
    lm_best_value.id = lm_best_index.id = checker->add_buffer("lm_head partial argmax", lm_best_value.data.size());
    k_cache.id = checker->add_buffer("K cache", k_cache.data.size() / k_cache.cell);
    v_cache.id = checker->add_buffer("V cache", v_cache.data.size() / v_cache.cell);
    tokens.id = checker->add_buffer("tokens", tokens.data.size());
    stop_at.id = checker->add_buffer("stop flags", stop_at.data.size());
  }

  // ---- weights ----
  float wt(uint64_t offset, size_t i) const { return load_as_float(weights.data() + offset, layout.matrix_dtype, int64_t(i)); }
  const float* f32(uint64_t offset) const { return reinterpret_cast<const float*>(weights.data() + offset); }
  // dot(row `r` of matrix at `offset` with `cols` columns, v), accumulated in fp32 like the kernel.
  float dot_row(uint64_t offset, size_t r, size_t cols, const float* v) const {
    float acc = 0.f;
    for (size_t c = 0; c < cols; ++c) acc += wt(offset, r * cols + c) * v[c];
    return acc;
  }
  std::vector<float> rms_norm(const float* v, size_t n, const float* weight) const {
    float ss = 0.f;
    for (size_t i = 0; i < n; ++i) ss += v[i] * v[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + cfg.rms_norm_eps);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = v[i] * inv * weight[i];
    return out;
  }
  void rope_inplace(float* head, int pos) const {
    const size_t half = size_t(cfg.head_dim / 2);
    const float* cs = rope.data() + size_t(pos) * half;
    const float* sn = rope.data() + size_t(opt.context) * half + size_t(pos) * half;
    for (size_t i = 0; i < half; ++i) {
      const float a = head[i], b = head[i + half];
      head[i] = a * cs[i] - b * sn[i];
      head[i + half] = b * cs[i] + a * sn[i];
    }
  }

  // ---- the fused instructions ----
  void op_embed(const Ctx& c, uint32_t step) {
    const int32_t tok = *read(c, tokens, step, step + 1);
    float* out = write(c, x, 0, x.data.size());
    for (size_t i = 0; i < x.data.size(); ++i) out[i] = wt(layout.embed, size_t(tok) * x.data.size() + i);
  }

  void op_qkv(const Ctx& c, const Instr& in) {
    const LayerOffsets& L = layout.layers[in.layer];
    const size_t H = size_t(cfg.hidden_size);
    const auto xn = rms_norm(read(c, x, 0, H), H, f32(L.attn_norm));
    float* out = write(c, qkv, in.begin, in.end);
    for (uint32_t r = in.begin; r < in.end; ++r)
      out[r - in.begin] = dot_row(L.wqkv, r, H, xn.data()) + (layout.has_qkv_bias ? f32(L.bqkv)[r] : 0.f);
  }

  void op_attention(const Ctx& c, const Instr& in, int pos) {
    const LayerOffsets& L = layout.layers[in.layer];
    const int hd = cfg.head_dim, G = cfg.group_size(), S = schedule.attention_splits;
    const uint32_t g = in.begin, split = in.end;
    const size_t group_base = size_t(g) * size_t(layout.qkv_group_rows);
    const float* group = read(c, qkv, group_base, group_base + size_t(layout.qkv_group_rows));
    int p0, p1;
    attention_split_range(pos + 1, S, int(split), &p0, &p1);
    const size_t cache_base = (size_t(in.layer) * size_t(cfg.num_kv_heads) + g) * size_t(opt.context);

    std::vector<float> head(static_cast<size_t>(hd));
    auto prepare = [&](const float* src, uint64_t norm) {  // q/k norm (Qwen3) then RoPE, into `head`
      std::copy_n(src, hd, head.begin());
      if (layout.has_qk_norm) head = rms_norm(head.data(), size_t(hd), f32(norm));
      rope_inplace(head.data(), pos);
    };
    if (p0 <= pos && pos < p1) {  // this split owns the new position: append K and V
      prepare(group + size_t(G) * size_t(hd), L.k_norm);
      uint16_t* k = write(c, k_cache, (cache_base + size_t(pos)) * size_t(hd), (cache_base + size_t(pos) + 1) * size_t(hd));
      uint16_t* v = write(c, v_cache, (cache_base + size_t(pos)) * size_t(hd), (cache_base + size_t(pos) + 1) * size_t(hd));
      for (int d = 0; d < hd; ++d) {
        k[d] = float_to_bf16(head[size_t(d)]);
        v[d] = float_to_bf16(group[size_t(G + 1) * size_t(hd) + size_t(d)]);
      }
    }
    const float scale = 1.0f / std::sqrt(float(hd));
    const uint16_t* K = p1 > p0 ? read(c, k_cache, (cache_base + size_t(p0)) * size_t(hd), (cache_base + size_t(p1)) * size_t(hd)) : nullptr;
    const uint16_t* V = p1 > p0 ? read(c, v_cache, (cache_base + size_t(p0)) * size_t(hd), (cache_base + size_t(p1)) * size_t(hd)) : nullptr;
    for (int j = 0; j < G; ++j) {
      const size_t slot = size_t(int(g) * G + j) * size_t(S) + split;  // (query head, split)
      float* o = write(c, att_o, slot * size_t(hd), (slot + 1) * size_t(hd));
      float* ml = write(c, att_ml, slot * 2, slot * 2 + 2);
      std::fill_n(o, hd, 0.f);
      float m = -std::numeric_limits<float>::infinity(), l = 0.f;
      if (p1 > p0) {
        prepare(group + size_t(j) * size_t(hd), L.q_norm);
        std::vector<float> scores(size_t(p1 - p0));
        for (int p = p0; p < p1; ++p) {
          float dot = 0.f;
          for (int d = 0; d < hd; ++d) dot += head[size_t(d)] * bf16_to_float(K[size_t(p - p0) * size_t(hd) + size_t(d)]);
          scores[size_t(p - p0)] = dot * scale;
          m = std::max(m, dot * scale);
        }
        for (int p = p0; p < p1; ++p) {
          const float e = std::exp(scores[size_t(p - p0)] - m);
          l += e;
          for (int d = 0; d < hd; ++d) o[d] += e * bf16_to_float(V[size_t(p - p0) * size_t(hd) + size_t(d)]);
        }
      }
      ml[0] = m;
      ml[1] = l;
    }
  }

  void op_oproj(const Ctx& c, const Instr& in) {
    const LayerOffsets& L = layout.layers[in.layer];
    const int hd = cfg.head_dim, S = schedule.attention_splits;
    const float* o = read(c, att_o, 0, att_o.data.size());
    const float* ml = read(c, att_ml, 0, att_ml.data.size());
    // Combine the splits of every head (flash-decoding reduction).
    std::vector<float> attn(size_t(cfg.q_dim()), 0.f);
    for (int hh = 0; hh < cfg.num_heads; ++hh) {
      float M = -std::numeric_limits<float>::infinity();
      for (int s = 0; s < S; ++s) M = std::max(M, ml[(size_t(hh) * size_t(S) + size_t(s)) * 2]);
      float total = 0.f;
      for (int s = 0; s < S; ++s) {
        const size_t slot = size_t(hh) * size_t(S) + size_t(s);
        if (ml[slot * 2 + 1] == 0.f) continue;  // empty split
        const float w = std::exp(ml[slot * 2] - M);
        total += w * ml[slot * 2 + 1];
        for (int d = 0; d < hd; ++d) attn[size_t(hh) * size_t(hd) + size_t(d)] += w * o[slot * size_t(hd) + size_t(d)];
      }
      for (int d = 0; d < hd; ++d) attn[size_t(hh) * size_t(hd) + size_t(d)] /= total;
    }
    const float* xin = read(c, x, in.begin, in.end);
    std::vector<float> updated(in.end - in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r)
      updated[r - in.begin] = xin[r - in.begin] + dot_row(L.wo, r, size_t(cfg.q_dim()), attn.data());
    std::copy(updated.begin(), updated.end(), write(c, x, in.begin, in.end));
  }

  void op_gate_up(const Ctx& c, const Instr& in) {
    const LayerOffsets& L = layout.layers[in.layer];
    const size_t H = size_t(cfg.hidden_size);
    const auto xn = rms_norm(read(c, x, 0, H), H, f32(L.mlp_norm));
    float* out = write(c, h, in.begin, in.end);
    for (uint32_t r = in.begin; r < in.end; ++r) {
      const float g = dot_row(L.w_gate, r, H, xn.data()), u = dot_row(L.w_up, r, H, xn.data());
      out[r - in.begin] = g / (1.0f + std::exp(-g)) * u;
    }
  }

  void op_down(const Ctx& c, const Instr& in) {
    const LayerOffsets& L = layout.layers[in.layer];
    const float* act = read(c, h, 0, h.data.size());
    const float* xin = read(c, x, in.begin, in.end);
    std::vector<float> updated(in.end - in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r)
      updated[r - in.begin] = xin[r - in.begin] + dot_row(L.w_down, r, h.data.size(), act);
    std::copy(updated.begin(), updated.end(), write(c, x, in.begin, in.end));
  }

  void op_lm_head(const Ctx& c, const Instr& in, uint32_t step) {
    if (int(step) + 1 < run.ingest) return;  // prompt step whose logits nobody needs
    const size_t H = size_t(cfg.hidden_size);
    const auto xn = rms_norm(read(c, x, 0, H), H, f32(layout.final_norm));
    float* out = write(c, logits, in.begin, in.end);
    float best = -std::numeric_limits<float>::infinity();
    int32_t best_index = int32_t(in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r) {
      out[r - in.begin] = dot_row(layout.lm_head, r, H, xn.data());
      if (out[r - in.begin] > best) best = out[r - in.begin], best_index = int32_t(r);
    }
    *write(c, lm_best_value, in.slot, in.slot + 1) = best;
    *write(c, lm_best_index, in.slot, in.slot + 1) = best_index;
  }

  void op_sample(const Ctx& c, uint32_t step) {
    StopReason stop = StopReason::None;
    if (int(step) + 1 >= run.ingest && run.max_new > 0) {
      int32_t token;
      if (run.sampling.greedy()) {  // reduce the lm_head blocks' partial argmax (ties: lowest id)
        const float* v = read(c, lm_best_value, 0, lm_best_value.data.size());
        const int32_t* id = read(c, lm_best_index, 0, lm_best_index.data.size());
        size_t best = 0;
        for (size_t i = 1; i < lm_best_value.data.size(); ++i)
          if (v[i] > v[best] || (v[i] == v[best] && id[i] < id[best])) best = i;
        token = id[best];
      } else {
        const float* l = read(c, logits, 0, logits.data.size());
        token = sample_token(std::vector<float>(l, l + logits.data.size()), run.sampling,
                             uint64_t(run.start) + step);
      }
      if (opt.record_logits) {
        const float* l = read(c, logits, 0, logits.data.size());
        recorded.emplace_back(l, l + logits.data.size());
      }
      auto& r = run.result;
      if (r.tokens.empty())
        r.stats.first_token_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.t0).count();
      r.tokens.push_back(token);
      if (step + 1 < tokens.data.size()) *write(c, tokens, step + 1, step + 2) = token;
      if (*run.on_token) (*run.on_token)(token);
      const bool eos = std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), token) != cfg.eos_token_ids.end();
      if (eos) stop = StopReason::Eos;
      else if (int(r.tokens.size()) >= run.max_new) stop = StopReason::MaxTokens;
      else if (cancel_flag.load()) stop = StopReason::Cancelled;
      else if (run.start + int(step) + 1 >= opt.context) stop = StopReason::ContextFull;
    } else if (int(step) + 1 >= run.ingest) {
      stop = StopReason::MaxTokens;  // max_new_tokens == 0: ingest only
    } else if (cancel_flag.load()) {
      stop = StopReason::Cancelled;
    }
    *write(c, stop_at, step, step + 1) = stop != StopReason::None;
    if (stop != StopReason::None) run.result.stop = stop;
  }

  void execute(const Instr& in, const Ctx& c, uint32_t step) {
    switch (in.op) {
      case Op::Embed: return op_embed(c, step);
      case Op::QKV: return op_qkv(c, in);
      case Op::Attention: return op_attention(c, in, run.start + int(step));
      case Op::OProj: return op_oproj(c, in);
      case Op::GateUp: return op_gate_up(c, in);
      case Op::Down: return op_down(c, in);
      case Op::LMHead: return op_lm_head(c, in, step);
      case Op::Sample: return op_sample(c, step);
    }
  }

  // ---- the interleaving executor ----
  struct Workgroup {
    uint32_t step = 0;
    uint32_t pc = 0;  // index into its list; == size: at the next step gate
    bool gate_passed = true;  // step 0 has no gate
    bool done = false;
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

  // Whether workgroup `w` can take its next action now.
  bool ready(int w, const Workgroup& g) const {
    if (g.done) return false;
    if (!g.gate_passed) return value(schedule.sample_counter) >= g.step;
    const uint32_t begin = schedule.wg_begin[size_t(w)], end = schedule.wg_begin[size_t(w) + 1];
    if (begin + g.pc == end) return true;  // moves to the next step's gate
    const Instr& in = schedule.instrs[begin + g.pc];
    for (int i = 0; i < in.num_waits; ++i)
      if (value(in.waits[i].counter) < target(in.waits[i], g.step)) return false;
    return true;
  }

  void advance(int w, Workgroup& g) {
    const uint32_t begin = schedule.wg_begin[size_t(w)], end = schedule.wg_begin[size_t(w) + 1];
    if (!g.gate_passed) {  // step gate: the previous step's Sample has run; did it stop the launch?
      if (checker) acquire(w, schedule.sample_counter, g.step);
      const Ctx c{w, emu::InstrRef{g.step, kGateIndex, uint32_t(w)}};
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
    if (checker)
      for (int i = 0; i < in.num_waits; ++i) acquire(w, in.waits[i].counter, target(in.waits[i], g.step));
    execute(in, Ctx{w, emu::InstrRef{g.step, index, in.seq}}, g.step);
    const uint32_t signalled = schedule.line(in.signal, fallback_sync_domain(uint32_t(w), uint32_t(schedule.sync_domains)));
    if (checker) checker->release(w, signalled);
    ++counters[signalled];
    ++g.pc;
  }

  [[noreturn]] void report_deadlock(const std::vector<Workgroup>& wgs) const {
    std::vector<WorkgroupPosition> blocked;
    for (size_t w = 0; w < wgs.size(); ++w) {
      const Workgroup& g = wgs[w];
      if (g.done) continue;
      blocked.push_back({int(w), g.step, !g.gate_passed, schedule.wg_begin[w] + g.pc});
    }
    const std::vector<unsigned> values = schedule.counter_values(counters);
    // Nothing of the launch is committed (position and pending token change only after it): the
    // emulator is as before the call.
    throw HangError(fmt::format("emulator: deadlock, no workgroup can proceed:{}", describe_blocked(schedule, blocked, &values)),
                    /*stopped=*/true);
  }

  void launch() {
    counters.assign(schedule.counter_lines(), 0);
    std::vector<Workgroup> wgs(size_t(schedule.num_workgroups));
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
    check_request(req);
    cancel_flag = false;
    recorded.clear();
    run = Launch{};
    run.start = position;
    run.ingest = int(input.size());
    run.max_new = req.max_new_tokens;
    run.sampling = req.sampling;
    run.on_token = &on_token;
    run.t0 = std::chrono::steady_clock::now();
    const size_t steps = size_t(opt.context - position);  // at most one step per free cache slot
    tokens.data.assign(steps + 1, -1);
    std::copy(input.begin(), input.end(), tokens.data.begin());
    stop_at.data.assign(steps, 0);
    start_checker();
    launch();
    if (checker) checker->throw_if_violations();
    // Every step that ran appended one position to the cache.
    const int steps_run = int(std::find(stop_at.data.begin(), stop_at.data.end(), 1) - stop_at.data.begin()) + 1;
    position += steps_run;
    pending = run.result.tokens.empty() ? -1 : run.result.tokens.back();
    if (run.result.stop == StopReason::Cancelled && int(steps_run) < run.ingest) pending = -1;
    run.result.stats.ingested_tokens = run.ingest;
    run.result.stats.generated_tokens = int(run.result.tokens.size());
    run.result.stats.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.t0).count();
    return run.result;
  }
};

Emulator::Emulator(const Model& model, const EmulatorOptions& options)
    : Emulator(model,
               build_schedule(model.config, ScheduleParams{options.num_workgroups, options.attention_splits, false, options.sync_domains}),
               options) {}

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
int Emulator::position() const { return impl_->position; }
int Emulator::context() const { return impl_->opt.context; }
std::string Emulator::name() const {
  return fmt::format("cpu-emulator ({} virtual workgroups, {} interleaving)", impl_->schedule.num_workgroups,
                     interleaving_name(impl_->opt.interleaving));
}
const Schedule& Emulator::schedule() const { return impl_->schedule; }
const std::vector<std::vector<float>>& Emulator::recorded_logits() const { return impl_->recorded; }

}  // namespace mk
