// The CPU twin of the lm_head op (device/ops/lm_head.h): logits[rows] = W_lm * RMSNorm(x) and the block's (max, argmax); nothing on prompt steps.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_lm_head(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  if (int(step) + 1 < s.run.ingest) return;  // prompt step whose logits nobody needs
  const size_t H = size_t(s.cfg.hidden_size);
  const auto xn = s.rms_norm(s.read(c, s.x, 0, H), H, s.f32(s.layout.final_norm));
  float* out = s.write(c, s.logits, in.begin, in.end);
  float best = -std::numeric_limits<float>::infinity();
  int32_t best_index = int32_t(in.begin);
  for (uint32_t r = in.begin; r < in.end; ++r) {
    out[r - in.begin] = s.dot_row(s.layout.lm_head, r, H, xn.data());
    if (out[r - in.begin] > best) best = out[r - in.begin], best_index = int32_t(r);
  }
  *s.write(c, s.lm_best_value, in.slot, in.slot + 1) = best;
  *s.write(c, s.lm_best_index, in.slot, in.slot + 1) = best_index;
}

}  // namespace mk::emu
