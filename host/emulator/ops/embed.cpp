// The CPU twin of the embed op (device/ops/embed.h): x = embedding[token] * the recipe's embedding scale,
// a column per token of the step's span (a folded step's: x_alt, and projected = 0).
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_embed(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  const size_t H = size_t(s.cfg.hidden_size);
  const int32_t* toks = s.read(c, s.tokens, size_t(span.index), size_t(span.index + span.count));
  // A folded step (kStartsFoldedStep): x into x_alt, and zeros as the post-norm layer 0's qkv folds.
  const bool folded = in.flags & kStartsFoldedStep;
  float* out = s.write(c, folded ? s.x_alt : s.x, 0, size_t(span.count) * H);
  if (folded) std::fill_n(s.write(c, s.projected, 0, size_t(span.count) * H), size_t(span.count) * H, 0.f);
  const float scale = s.recipe.embed_scale;
  for (int j = 0; j < span.count; ++j)
    for (size_t i = 0; i < H; ++i) out[size_t(j) * H + i] = s.wt(s.layout.embed, H, size_t(toks[j]), i) * scale;
}

}  // namespace mk::emu
