// The CPU twin of the post_norm op (device/ops/post_norm.h): x[rows] += RMSNorm(projected)[rows], with the
// layer's post-attention (slot kAttentionNorm) or post-MLP (kMlpNorm) norm weight, in every column of the
// step's span.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_post_norm(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size);
  for (int j = 0; j < span.count; ++j) {
    const auto n = s.rms_norm(s.read(c, s.projected, size_t(j) * H, size_t(j + 1) * H), H,
                              s.f32(in.slot == kAttentionNorm ? L.post_attn_norm : L.post_mlp_norm));
    add_or_project(s, c, in, j, std::vector<float>(n.begin() + in.begin, n.begin() + in.end));
  }
}

}  // namespace mk::emu
