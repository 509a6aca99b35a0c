// The CPU twin of the o_proj op (device/ops/o_proj.h), in every column of the step's span: combine the
// splits of every head (flash-decoding reduction) unless each kv group's last attention split has
// (Schedule::combine_once), then x[rows] += W_o * attn (kWritesProjected: projected[rows] = W_o * attn).
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void combine_head_splits(const float* o, const float* ml, int S, int head_dim, float* out) {
  float M = -std::numeric_limits<float>::infinity();
  for (int sp = 0; sp < S; ++sp) M = std::max(M, ml[size_t(sp) * 2]);
  float total = 0.f;
  std::fill_n(out, head_dim, 0.f);
  for (int sp = 0; sp < S; ++sp) {
    if (ml[size_t(sp) * 2 + 1] == 0.f) continue;  // empty split
    const float w = std::exp(ml[size_t(sp) * 2] - M);
    total += w * ml[size_t(sp) * 2 + 1];
    for (int d = 0; d < head_dim; ++d) out[d] += w * o[size_t(sp) * size_t(head_dim) + size_t(d)];
  }
  for (int d = 0; d < head_dim; ++d) out[d] /= total;
}

void emulate_o_proj(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  const LayerOffsets& L = s.layout.layers[in.layer];
  const int hd = s.cfg.head_dim, S = s.schedule.attention_splits, heads = s.cfg.num_heads;
  const size_t Q = size_t(s.cfg.q_dim()), o_floats = size_t(heads) * size_t(S) * size_t(hd);
  const size_t ml_floats = attention_ml_floats(size_t(heads), size_t(S));
  for (int j = 0; j < span.count; ++j) {
    std::vector<float> combined;
    const float* attn;
    if (s.schedule.combine_once.enabled) {
      attn = s.read(c, s.att, size_t(j) * Q, size_t(j + 1) * Q);
    } else {
      const float* o = s.read(c, s.att_o, size_t(j) * o_floats, size_t(j + 1) * o_floats);
      const float* ml = s.read(c, s.att_ml, size_t(j) * ml_floats, size_t(j + 1) * ml_floats);
      combined.resize(Q);
      for (int hh = 0; hh < heads; ++hh)
        combine_head_splits(o + size_t(hh) * size_t(S) * size_t(hd), ml + size_t(hh) * size_t(S) * 2, S, hd,
                            combined.data() + size_t(hh) * size_t(hd));
      attn = combined.data();
    }
    std::vector<float> rows(in.end - in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r) rows[r - in.begin] = s.dot_row(L.wo, r, Q, attn);
    add_or_project(s, c, in, j, rows);
  }
}

}  // namespace mk::emu
