// The CPU twin of the embed op (device/ops/embed.h): x = embedding[token of this step] * the recipe's
// embedding scale.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_embed(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const int32_t tok = *s.read(c, s.tokens, step, step + 1);
  float* out = s.write(c, s.x, 0, s.x.data.size());
  const float scale = s.recipe.embed_scale;
  for (size_t i = 0; i < s.x.data.size(); ++i) out[i] = s.wt(s.layout.embed, s.x.data.size(), size_t(tok), i) * scale;
}

}  // namespace mk::emu
