// The CPU twin of the chunk_gate_up op (device/ops/chunk_gate_up.h): h columns [begin, end) of the tile's
// tokens = act(gate) * up, act the layer's activation, of their normalised rows (16-bit) times W_gate and
// W_up, stored 16-bit.
#include "host/emulator/ops/chunk_matrix.h"

namespace mk::emu {

void emulate_chunk_gate_up(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size), A = s.chunk_act_cols(), N = size_t(s.cfg.intermediate_size);
  const Activation act = s.recipe.layers[in.layer].activation;
  const auto [first, last] = chunk_tile(s, in, chunk);
  for (uint32_t t = first; t < last; ++t) {
    const uint16_t* a = s.read(c, s.chunk_act, t * A, t * A + H);
    uint16_t* out = s.write(c, s.chunk_h, t * N + in.begin, t * N + in.end);
    for (uint32_t r = in.begin; r < in.end; ++r) {
      const float g = s.dot_row_act16(L.w_gate, r, H, a), u = s.dot_row_act16(L.w_up, r, H, a);
      out[r - in.begin] = s.to_act16(activation_value(act, g) * u);
    }
  }
}

}  // namespace mk::emu
