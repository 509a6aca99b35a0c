// The CPU twin of the qkv op (device/ops/qkv.h): qkv rows [begin, end) = RMSNorm(x) * W_qkv (+ bias), in
// every column of the step's span.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_qkv(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size), R = size_t(s.layout.qkv_rows);
  for (int j = 0; j < span.count; ++j) {
    const auto xn = s.rms_norm(residual_input(s, c, in, j).data(), H, s.f32(L.attn_norm));
    float* out = s.write(c, s.qkv, size_t(j) * R + in.begin, size_t(j) * R + in.end);
    for (uint32_t r = in.begin; r < in.end; ++r)
      out[r - in.begin] = s.dot_row(L.wqkv, r, H, xn.data()) + (s.layout.has_qkv_bias ? s.f32(L.bqkv)[r] : 0.f);
  }
}

}  // namespace mk::emu
