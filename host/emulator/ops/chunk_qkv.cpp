// The CPU twin of the chunk_qkv op (device/ops/chunk_qkv.h): qkv columns [begin, end) of the tile's
// tokens = their normalised rows (16-bit) times W_qkv (+ bias).
#include "host/emulator/ops/chunk_matrix.h"

namespace mk::emu {

void emulate_chunk_qkv(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size), A = s.chunk_act_cols(), Q = size_t(s.layout.qkv_rows);
  const auto [first, last] = chunk_tile(s, in, chunk);
  for (uint32_t t = first; t < last; ++t) {
    const uint16_t* a = s.read(c, s.chunk_act, t * A, t * A + H);
    float* out = s.write(c, s.chunk_qkv, t * Q + in.begin, t * Q + in.end);
    for (uint32_t r = in.begin; r < in.end; ++r)
      out[r - in.begin] = s.dot_row_act16(L.wqkv, r, H, a) + (s.layout.has_qkv_bias ? s.f32(L.bqkv)[r] : 0.f);
  }
}

}  // namespace mk::emu
