#include "host/emulator/emulator_state.h"

#include <fmt/format.h>

#include "runtime/error.h"
#include "runtime/rope.h"

namespace mk::emu {

EmulatorState::EmulatorState(const Model& m, Schedule s, const EmulatorOptions& o)
    : model(m), cfg(m.config), opt(o), schedule(std::move(s)) {
  if (schedule.num_workgroups != opt.num_workgroups)
    fail("emulator: schedule built for {} workgroups, options say {}", schedule.num_workgroups, opt.num_workgroups);
  if (opt.context < 1) fail("emulator: context must be at least 1 token (got {})", opt.context);
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

void EmulatorState::start_checker() {
  checker.reset();
  if (!opt.check_dependencies) return;
  checker.emplace(schedule.num_workgroups, schedule.counter_lines(), [this](const InstrRef& r) { return describe(r); });
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

}  // namespace mk::emu
