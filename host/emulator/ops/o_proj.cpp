// The CPU twin of the o_proj op (device/ops/o_proj.h): combine the splits of every head (flash-decoding reduction), then x[rows] += W_o * attn.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_o_proj(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const int hd = s.cfg.head_dim, S = s.schedule.attention_splits;
  const float* o = s.read(c, s.att_o, 0, s.att_o.data.size());
  const float* ml = s.read(c, s.att_ml, 0, s.att_ml.data.size());
  // Combine the splits of every head (flash-decoding reduction).
  std::vector<float> attn(size_t(s.cfg.q_dim()), 0.f);
  for (int hh = 0; hh < s.cfg.num_heads; ++hh) {
    float M = -std::numeric_limits<float>::infinity();
    for (int sp = 0; sp < S; ++sp) M = std::max(M, ml[(size_t(hh) * size_t(S) + size_t(sp)) * 2]);
    float total = 0.f;
    for (int sp = 0; sp < S; ++sp) {
      const size_t slot = size_t(hh) * size_t(S) + size_t(sp);
      if (ml[slot * 2 + 1] == 0.f) continue;  // empty split
      const float w = std::exp(ml[slot * 2] - M);
      total += w * ml[slot * 2 + 1];
      for (int d = 0; d < hd; ++d) attn[size_t(hh) * size_t(hd) + size_t(d)] += w * o[slot * size_t(hd) + size_t(d)];
    }
    for (int d = 0; d < hd; ++d) attn[size_t(hh) * size_t(hd) + size_t(d)] /= total;
  }
  const float* xin = s.read(c, s.x, in.begin, in.end);
  std::vector<float> updated(in.end - in.begin);
  for (uint32_t r = in.begin; r < in.end; ++r)
    updated[r - in.begin] = xin[r - in.begin] + s.dot_row(L.wo, r, size_t(s.cfg.q_dim()), attn.data());
  std::copy(updated.begin(), updated.end(), s.write(c, s.x, in.begin, in.end));
}

}  // namespace mk::emu
