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
  draft_max = check_speculation(opt.speculation, schedule.step_tokens);
  recipe = build_step_recipe(cfg);
  layout = plan_weight_layout(model);
  check_memory();
  weights = pack_weights_to_host(model, layout);
  const RopeKinds ropes = rope_kinds(recipe);
  rope = rope_tables(ropes, cfg.head_dim, opt.context);
  layer_rope = ropes.of_layer;
  size_buffers(DecodeShapes::of(cfg, layout, schedule, opt.context));
}

void EmulatorState::size_buffers(const DecodeShapes& s) {
#define MK_SIZE_BUFFER(NAME, TYPE, ELEMENTS, CELL, WHAT) \
  NAME.data.assign(size_t(ELEMENTS), TYPE{});            \
  NAME.cell = size_t(CELL);
  MK_DECODE_BUFFERS(MK_SIZE_BUFFER)
#undef MK_SIZE_BUFFER
}

void EmulatorState::watch_buffers(DependencyChecker& c) {
  checker = &c;
  const std::string device = devices.size() > 1 ? fmt::format("gpu {} ", rank) : "";
  // Every buffer the model uses, by its cells (a partial cell rounds up: att_ml's 16-byte padding).
#define MK_WATCH_BUFFER(NAME, TYPE, ELEMENTS, CELL, WHAT) \
  NAME.id = NAME.data.empty() ? -1 : c.add_buffer(device + WHAT, (NAME.data.size() + NAME.cell - 1) / NAME.cell);
  MK_DECODE_BUFFERS(MK_WATCH_BUFFER)
#undef MK_WATCH_BUFFER
  stop_at.id = c.add_buffer(device + "stop flags", stop_at.data.size());
}

// The KV cache, the RoPE table and the per-launch buffers grow with the context: a context the machine
// cannot hold is refused here, before anything is allocated (a vector that large either throws
// bad_alloc or, with overcommit, gets the process OOM-killed as it fills).
void EmulatorState::check_memory() const {
  const uint64_t ctx = uint64_t(opt.context), hd = uint64_t(cfg.head_dim);
  const DecodeShapes s = DecodeShapes::of(cfg, layout, schedule, opt.context);
  const DecodeBufferBytes state = decode_buffer_bytes(s);
  std::vector<MemoryNeed> needs = {
      {fmt::format("KV cache for {} tokens", opt.context), state.kv_cache},
      {"RoPE table", ctx * hd * sizeof(float)},
      {"the other decode buffers and the stop flags", state.total - state.kv_cache - state.chunk + ctx},
      {"weights", layout.total_bytes}};
  if (schedule.chunk.enabled()) {
    needs.push_back({fmt::format("chunk-step buffers for {} tokens", s.chunk), state.chunk});
    if (opt.check_dependencies) {
      size_t cells = 0;
#define MK_ADD_CELLS(NAME, TYPE, ELEMENTS, CELL, WHAT) cells += (size_t(ELEMENTS) + size_t(CELL) - 1) / size_t(CELL);
      MK_DECODE_CHUNK_BUFFERS(MK_ADD_CELLS)
#undef MK_ADD_CELLS
      needs.push_back({"dependency checker (chunk steps)", cells * DependencyChecker::cell_bytes()});
    }
  }
  if (opt.check_dependencies)  // its bookkeeping per cache row and token, at the least
    needs.push_back({"dependency checker", (2 * s.kv_rows + 2 * ctx) * DependencyChecker::cell_bytes()});
  check_host_memory(fmt::format("the CPU emulator with a context of {} tokens", opt.context), needs,
                    available_host_memory(), "lower the context size (-c)");
}

// Non-finite logits (NaN from a NaN or overflow anywhere upstream) would make greedy decoding emit token 0
// forever and sampling pick garbage; stop and say where instead.
void EmulatorState::check_finite(const float* l, int at, int32_t constraint_set) const {
  const size_t n = size_t(cfg.vocab_size);
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(l[i]) && (constraint_set < 0 || run.constraint->set_allows(constraint_set, int32_t(i)))) {
      if (bad++ == 0) first = i;
    }
  if (bad == 0) return;
  fail("emulator: the logits are not finite at position {} (reply token {}): {} of {} are NaN or infinite, the "
       "first for token {} ({}); the model's weights or activations overflow",
       at, run.result.tokens.size() + 1, bad, n, first, l[first]);
}

}  // namespace mk::emu
