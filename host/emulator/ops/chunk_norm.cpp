// The CPU twin of the chunk_norm op (device/ops/chunk_norm.h): for the chunk's tokens [begin, end), the
// layer's attention or MLP RMSNorm of the residual rows as the 16-bit input of the next matrix op; layer
// 0's attention norm first gathers the tokens' embedding rows (times the recipe's embed_scale) into the
// residual stream.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_chunk_norm(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size), A = s.chunk_act_cols();
  const float* g = s.f32(in.slot == kAttentionNorm ? L.attn_norm : L.mlp_norm);
  const uint32_t end = std::min(in.end, s.chunk_length(chunk));
  for (uint32_t t = in.begin; t < end; ++t) {
    if (in.layer == 0 && in.slot == kAttentionNorm) {
      const size_t i = size_t(chunk) * size_t(s.schedule.chunk.tokens) + t;
      const int32_t tok = *s.read(c, s.chunk_tokens, i, i + 1);
      float* x = s.write(c, s.chunk_x, t * H, (t + 1) * H);
      for (size_t k = 0; k < H; ++k) x[k] = s.wt(s.layout.embed, H, size_t(tok), k) * s.recipe.embed_scale;
    }
    const float* x = s.read(c, s.chunk_x, t * H, (t + 1) * H);
    float ss = 0.f;
    for (size_t k = 0; k < H; ++k) ss += x[k] * x[k];
    const float inv = 1.0f / std::sqrt(ss / float(H) + s.cfg.rms_norm_eps);
    uint16_t* out = s.write(c, s.chunk_act, t * A, t * A + H);
    for (size_t k = 0; k < H; ++k) out[k] = s.to_act16(x[k] * inv * g[k]);
  }
}

}  // namespace mk::emu
