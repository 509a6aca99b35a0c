// The CPU twin of the chunk_o_proj op (device/ops/chunk_o_proj.h): residual columns [begin, end) of the
// tile's tokens += their attention output (16-bit) times W_o.
#include "host/emulator/ops/chunk_matrix.h"

namespace mk::emu {

void emulate_chunk_o_proj(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size), A = s.chunk_act_cols(), K = size_t(s.cfg.q_dim());
  const auto [first, last] = chunk_tile(s, in, chunk);
  for (uint32_t t = first; t < last; ++t) {
    const uint16_t* a = s.read(c, s.chunk_act, t * A, t * A + K);
    std::vector<float> sums(in.end - in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r) sums[r - in.begin] = s.dot_row_act16(L.wo, r, K, a);
    const float* x = s.read(c, s.chunk_x, t * H + in.begin, t * H + in.end);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += x[i];
    std::copy(sums.begin(), sums.end(), s.write(c, s.chunk_x, t * H + in.begin, t * H + in.end));
  }
}

}  // namespace mk::emu
