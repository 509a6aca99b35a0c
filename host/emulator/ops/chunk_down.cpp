// The CPU twin of the chunk_down op (device/ops/chunk_down.h): residual columns [begin, end) of the
// tile's tokens += their MLP activations (16-bit) times W_down.
#include "host/emulator/ops/chunk_matrix.h"

namespace mk::emu {

void emulate_chunk_down(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  const size_t N = size_t(s.cfg.intermediate_size);
  add_tile_to_residual(s, c, in, chunk, s.chunk_h, N, N, s.layout.layers[in.layer].w_down);
}

}  // namespace mk::emu
