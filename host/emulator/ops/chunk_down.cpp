// The CPU twin of the chunk_down op (device/ops/chunk_down.h): residual columns [begin, end) of the
// tile's tokens += their MLP activations (16-bit) times W_down.
#include "host/emulator/ops/chunk_matrix.h"

namespace mk::emu {

void emulate_chunk_down(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t H = size_t(s.cfg.hidden_size), N = size_t(s.cfg.intermediate_size);
  const auto [first, last] = chunk_tile(s, in, chunk);
  for (uint32_t t = first; t < last; ++t) {
    const uint16_t* a = s.read(c, s.chunk_h, t * N, (t + 1) * N);
    std::vector<float> sums(in.end - in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r) sums[r - in.begin] = s.dot_row_act16(L.w_down, r, N, a);
    const float* x = s.read(c, s.chunk_x, t * H + in.begin, t * H + in.end);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += x[i];
    std::copy(sums.begin(), sums.end(), s.write(c, s.chunk_x, t * H + in.begin, t * H + in.end));
  }
}

}  // namespace mk::emu
