#include "host/emulator/emulator_state.h"

#include <fmt/format.h>

#include <cmath>

#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/limits.h"

namespace mk::emu {

EmulatorState::EmulatorState(const Model& m, Schedule s, const EmulatorOptions& o)
    : model(m), cfg(m.config), opt(o), schedule(std::move(s)) {
  if (schedule.num_workgroups != opt.num_workgroups)
    fail("emulator: schedule built for {} workgroups, options say {}", schedule.num_workgroups, opt.num_workgroups);
  if (opt.context < 1 || opt.context > limits::kMaxPositions)
    fail("emulator: context must be between 1 and {} tokens (got {})", limits::kMaxPositions, opt.context);
  check_sliding_window_context(cfg, opt.context);
  recipe = build_step_recipe(cfg);
  layout = plan_weight_layout(model);
  check_memory();
  weights = pack_weights_to_host(model, layout);
  const RopeKinds ropes = rope_kinds(recipe);
  rope = rope_tables(ropes, cfg.head_dim, opt.context);
  layer_rope = ropes.of_layer;
  const size_t hd = size_t(cfg.head_dim), S = size_t(schedule.attention_splits);
  x.data.assign(size_t(cfg.hidden_size), 0.f);
  qkv.data.assign(size_t(layout.qkv_rows), 0.f);
  att_o.data.assign(size_t(cfg.num_heads) * S * hd, 0.f);
  att_o.cell = hd;
  att_ml.data.assign(size_t(cfg.num_heads) * S * 2, 0.f);
  att_ml.cell = 2;
  if (schedule.combine_once.enabled) {
    att.data.assign(size_t(cfg.num_heads) * hd, 0.f);
    att.cell = hd;
  }
  h.data.assign(size_t(cfg.intermediate_size), 0.f);
  if (layout.has_post_norms) projected.data.assign(size_t(cfg.hidden_size), 0.f);
  logits.data.assign(size_t(cfg.vocab_size), 0.f);
  lm_best_value.data.assign(size_t(schedule.lm_head_slots), 0.f);
  lm_best_index.data.assign(size_t(schedule.lm_head_slots), 0);
  k_cache.data.assign(size_t(cfg.num_layers) * size_t(cfg.num_kv_heads) * size_t(opt.context) * hd, 0);
  k_cache.cell = hd;
  v_cache.data = k_cache.data;
  v_cache.cell = hd;
  if (schedule.chunk.enabled()) {
    // Cells of 8 elements: every chunk op reads and writes whole multiples of 8 columns.
    const size_t C = size_t(schedule.chunk.tokens);
    chunk_x.data.assign(C * size_t(cfg.hidden_size), 0.f);
    chunk_qkv.data.assign(C * size_t(layout.qkv_rows), 0.f);
    chunk_act.data.assign(C * chunk_act_cols(), 0);
    chunk_q.data.assign(C * size_t(cfg.q_dim()), 0);
    chunk_h.data.assign(C * size_t(cfg.intermediate_size), 0);
    for (size_t* cell : {&chunk_x.cell, &chunk_qkv.cell, &chunk_act.cell, &chunk_q.cell, &chunk_h.cell}) *cell = 8;
  }
}

void EmulatorState::start_checker() {
  checker.reset();
  if (!opt.check_dependencies) return;
  checker.emplace(schedule.num_workgroups, schedule.counter_lines(), [this](const InstrRef& r) { return describe(r); });
  x.id = checker->add_buffer("x (residual stream)", x.data.size());
  qkv.id = checker->add_buffer("qkv", qkv.data.size());
  att_o.id = checker->add_buffer("attention partial outputs", att_o.data.size() / att_o.cell);
  att_ml.id = checker->add_buffer("attention partial max/sum", att_ml.data.size() / att_ml.cell);
  if (schedule.combine_once.enabled) att.id = checker->add_buffer("attention output", att.data.size() / att.cell);
  h.id = checker->add_buffer("mlp activations", h.data.size());
  if (layout.has_post_norms) projected.id = checker->add_buffer("projected rows (before their post-norm)", projected.data.size());
  logits.id = checker->add_buffer("logits", logits.data.size());
  lm_best_value.id = lm_best_index.id = checker->add_buffer("lm_head partial argmax", lm_best_value.data.size());
  k_cache.id = checker->add_buffer("K cache", k_cache.data.size() / k_cache.cell);
  v_cache.id = checker->add_buffer("V cache", v_cache.data.size() / v_cache.cell);
  tokens.id = checker->add_buffer("tokens", tokens.data.size());
  stop_at.id = checker->add_buffer("stop flags", stop_at.data.size());
  if (schedule.chunk.enabled()) {
    chunk_x.id = checker->add_buffer("chunk residual stream", chunk_x.data.size() / 8);
    chunk_qkv.id = checker->add_buffer("chunk qkv", chunk_qkv.data.size() / 8);
    chunk_act.id = checker->add_buffer("chunk matrix input", chunk_act.data.size() / 8);
    chunk_q.id = checker->add_buffer("chunk queries", chunk_q.data.size() / 8);
    chunk_h.id = checker->add_buffer("chunk mlp activations", chunk_h.data.size() / 8);
    chunk_tokens.id = checker->add_buffer("prompt tokens of the chunk steps", chunk_tokens.data.size());
  }
}

// The KV cache, the RoPE table and the per-launch buffers grow with the context: a context the machine
// cannot hold is refused here, before anything is allocated (a vector that large either throws
// bad_alloc or, with overcommit, gets the process OOM-killed as it fills).
void EmulatorState::check_memory() const {
  const uint64_t ctx = uint64_t(opt.context), hd = uint64_t(cfg.head_dim);
  const uint64_t cache_rows = uint64_t(cfg.num_layers) * uint64_t(cfg.num_kv_heads) * ctx;
  std::vector<MemoryNeed> needs = {
      {fmt::format("KV cache for {} tokens", opt.context), 2 * cache_rows * hd * sizeof(uint16_t)},
      {"RoPE table", ctx * hd * sizeof(float)},
      {"token and stop buffers", (ctx + 1) * sizeof(int32_t) + ctx},
      {"weights", layout.total_bytes}};
  if (schedule.chunk.enabled()) {
    const uint64_t C = uint64_t(schedule.chunk.tokens);
    const uint64_t floats = C * uint64_t(cfg.hidden_size + layout.qkv_rows);
    const uint64_t halves = C * uint64_t(chunk_act_cols() + size_t(cfg.q_dim()) + size_t(cfg.intermediate_size));
    needs.push_back({fmt::format("chunk-step buffers for {} tokens", C), floats * 4 + halves * 2});
    if (opt.check_dependencies) needs.push_back({"dependency checker (chunk steps)", (floats + halves) / 8 * DependencyChecker::cell_bytes()});
  }
  if (opt.check_dependencies)  // its bookkeeping per cache row and token, at the least
    needs.push_back({"dependency checker", (2 * cache_rows + 2 * ctx) * DependencyChecker::cell_bytes()});
  check_host_memory(fmt::format("the CPU emulator with a context of {} tokens", opt.context), needs,
                    available_host_memory(), "lower the context size (-c)");
}

// Non-finite logits (NaN from a NaN or overflow anywhere upstream) would make greedy decoding emit token 0
// forever and sampling pick garbage; stop and say where instead.
void EmulatorState::check_finite(const float* l, uint32_t step) const {
  const size_t n = logits.data.size();
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(l[i])) {
      if (bad++ == 0) first = i;
    }
  if (bad == 0) return;
  fail("emulator: the logits are not finite at position {} (reply token {}): {} of {} are NaN or infinite, the "
       "first for token {} ({}); the model's weights or activations overflow",
       run.start + int(step), run.result.tokens.size() + 1, bad, n, first, l[first]);
}

}  // namespace mk::emu
