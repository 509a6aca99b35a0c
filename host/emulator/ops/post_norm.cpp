// The CPU twin of the post_norm op (device/ops/post_norm.h): x[rows] += RMSNorm(projected)[rows], with the
// layer's post-attention (slot kAttentionNorm) or post-MLP (kMlpNorm) norm weight.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_post_norm(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t /*step*/) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size);
  const auto n = s.rms_norm(s.read(c, s.projected, 0, H), H, s.f32(in.slot == kAttentionNorm ? L.post_attn_norm : L.post_mlp_norm));
  add_or_project(s, c, in, std::vector<float>(n.begin() + in.begin, n.begin() + in.end));
}

}  // namespace mk::emu
