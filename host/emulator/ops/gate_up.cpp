// The CPU twin of the gate_up op (device/ops/gate_up.h): h[rows] = act(W_gate * RMSNorm(x)) * (W_up * RMSNorm(x)),
// act the layer's activation (SiLU, GELU-tanh), in every column of the step's span.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_gate_up(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size), I = size_t(s.cfg.intermediate_size);
  const Activation act = s.recipe.layers[in.layer].activation;
  for (int j = 0; j < span.count; ++j) {
    const auto xn = s.rms_norm(residual_input(s, c, in, j).data(), H, s.f32(L.mlp_norm));
    float* out = s.write(c, s.h, size_t(j) * I + in.begin, size_t(j) * I + in.end);
    for (uint32_t r = in.begin; r < in.end; ++r) {
      const float g = s.dot_row(L.w_gate, r, H, xn.data()), u = s.dot_row(L.w_up, r, H, xn.data());
      out[r - in.begin] = activation_value(act, g) * u;
    }
  }
}

}  // namespace mk::emu
