// The CPU twin of the chunk_o_proj op (device/ops/chunk_o_proj.h): residual columns [begin, end) of the
// tile's tokens += their attention output (16-bit) times W_o.
#include "host/emulator/ops/chunk_matrix.h"

namespace mk::emu {

void emulate_chunk_o_proj(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  add_tile_to_residual(s, c, in, chunk, s.chunk_act, s.chunk_act_cols(), size_t(s.cfg.q_dim()), s.layout.layers[in.layer].wo);
}

}  // namespace mk::emu
