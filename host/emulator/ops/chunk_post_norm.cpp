// The CPU twin of the chunk_post_norm op (device/ops/chunk_post_norm.h): for the chunk's tokens
// [begin, end), the residual rows += RMSNorm(projected rows) with the layer's post-attention (slot
// kAttentionNorm) or post-MLP (kMlpNorm) norm weight.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_chunk_post_norm(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size);
  const float* g = s.f32(in.slot == kAttentionNorm ? L.post_attn_norm : L.post_mlp_norm);
  const uint32_t end = std::min(in.end, s.chunk_length(chunk));
  for (uint32_t t = in.begin; t < end; ++t) {
    const std::vector<float> n = s.rms_norm(s.read(c, s.chunk_projected, t * H, (t + 1) * H), H, g);
    const float* x = s.read(c, s.chunk_x, t * H, (t + 1) * H);
    std::vector<float> updated(H);
    for (size_t k = 0; k < H; ++k) updated[k] = x[k] + n[k];
    std::copy(updated.begin(), updated.end(), s.write(c, s.chunk_x, t * H, (t + 1) * H));
  }
}

}  // namespace mk::emu
