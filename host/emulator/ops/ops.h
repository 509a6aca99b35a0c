// The CPU twins of the ops (runtime/op_table.h): host/emulator/ops/<name>.cpp defines emulate_<name>,
// which computes what the kernel's device/ops/<name>.h computes, on the emulator's state.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "host/emulator/emulator_state.h"
#include "runtime/op_table.h"
#include "runtime/schedule.h"

namespace mk::emu {

#define MK_EMULATE_DECL(E, name) void emulate_##name(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step);
MK_FOR_EACH_OP(MK_EMULATE_DECL)
#undef MK_EMULATE_DECL

// A down block that reads h slice by slice (kWaitsHSlices): slice k's part of its rows' sums; the last
// slice adds them to the residual rows. The executor calls it once per slice, each after that slice's wait.
void emulate_down_slice(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step, uint32_t k);

// Flash-decoding reduction of one head's S split partials (o: S x head_dim, unnormalised; ml: S x (m, l))
// into out[head_dim]: sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s, empty splits (l = 0) skipped. o_proj
// does it for every head, or (Schedule::combine_once) each kv group's last attention split for its heads.
void combine_head_splits(const float* o, const float* ml, int S, int head_dim, float* out);

// A row block's output (o_proj, down, post_norm, all_reduce) in column j of the step, after the instruction's last
// wait: added to the residual rows, or with kWritesProjected written to the projected buffer for the
// post_norm stage.
// Tensor parallel (kPushes): the block's partial rows go into every device's partials, in the set
// Instr::slot names and this device's slot of it ([set][device][column][hidden]), for the all_reduce.
inline void add_or_project(EmulatorState& s, const OpCtx& c, const Instr& in, int j, const std::vector<float>& rows) {
  const size_t H = size_t(s.cfg.hidden_size), base = size_t(j) * H;
  if (in.flags & kPushes) {
    const size_t at = s.partials_at(in.slot, size_t(s.rank), j);
    for (EmulatorState* d : s.devices) std::copy(rows.begin(), rows.end(), d->write(c, d->partials, at + in.begin, at + in.end));
    return;
  }
  if (in.flags & kWritesProjected) {
    std::copy(rows.begin(), rows.end(), s.write(c, s.projected, base + in.begin, base + in.end));
    return;
  }
  const float* xin = s.read(c, s.x, base + in.begin, base + in.end);
  std::vector<float> updated(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) updated[i] = xin[i] + rows[i];
  std::copy(updated.begin(), updated.end(), s.write(c, s.x, base + in.begin, base + in.end));
}

// The residual that a qkv, gate_up or LM head block normalises, column j of the step: x from the buffer
// that holds it (kReadsResidualAlt: x_alt); after a post-norm the instruction folds (Instr::folds),
// x + RMSNorm(projected) with that post-norm's weight, which the stage's kWritesResidual block also writes
// to the other buffer, as the kernel's Machine::norm_prologue does.
inline std::vector<float> residual_input(EmulatorState& s, const OpCtx& c, const Instr& in, int j) {
  const size_t H = size_t(s.cfg.hidden_size), base = size_t(j) * H;
  const bool alt = in.flags & kReadsResidualAlt;
  const float* x = s.read(c, alt ? s.x_alt : s.x, base, base + H);
  std::vector<float> v(x, x + H);
  if (in.folds == kFoldsNoNorm) return v;
  const LayerOffsets& L = s.layout.layers[folded_norm_layer(in, uint32_t(s.cfg.num_layers))];
  const auto n = s.rms_norm(s.read(c, s.projected, base, base + H), H,
                            s.f32(in.folds == kFoldsAttentionPostNorm ? L.post_attn_norm : L.post_mlp_norm));
  for (size_t i = 0; i < H; ++i) v[i] += n[i];
  if (in.flags & kWritesResidual) std::copy(v.begin(), v.end(), s.write(c, alt ? s.x : s.x_alt, base, base + H));
  return v;
}

// Runs instruction `in` of `step` on the state.
inline void emulate(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  switch (in.op) {
#define MK_EMULATE_CASE(E, name) \
  case Op::E: return emulate_##name(s, c, in, step);
    MK_FOR_EACH_OP(MK_EMULATE_CASE)
#undef MK_EMULATE_CASE
  }
}

}  // namespace mk::emu
