// What the chunk steps' matrix ops (chunk_qkv, chunk_o_proj, chunk_gate_up, chunk_down) share on the
// emulator: the token rows of an instruction's tile.
#pragma once

#include "host/emulator/ops/ops.h"

namespace mk::emu {

// Tokens [first, last) of the chunk that instruction `in`'s tile covers (none past the chunk's length).
struct ChunkTile {
  uint32_t first, last;
};
inline ChunkTile chunk_tile(const EmulatorState& s, const Instr& in, uint32_t chunk) {
  const uint32_t first = uint32_t(in.slot) * uint32_t(kChunkMatrixTokens);
  return {first, std::max(first, std::min(first + uint32_t(kChunkMatrixTokens), s.chunk_length(chunk)))};
}

// The residual ops' tile (chunk_o_proj, chunk_down): residual columns [begin, end) of the tile's tokens
// += their rows of `act` (row stride act_cols, K columns used) times the rows [begin, end) of the matrix
// at `weights`; with kWritesProjected (post-norm layers) the products go to the chunk's projected rows.
inline void add_tile_to_residual(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t chunk, const Buffer<uint16_t>& act,
                                 size_t act_cols, size_t K, uint64_t weights) {
  const size_t H = size_t(s.cfg.hidden_size);
  const auto [first, last] = chunk_tile(s, in, chunk);
  for (uint32_t t = first; t < last; ++t) {
    const uint16_t* a = s.read(c, act, t * act_cols, t * act_cols + K);
    std::vector<float> sums(in.end - in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r) sums[r - in.begin] = s.dot_row_act16(weights, r, K, a);
    if (in.flags & kWritesProjected) {
      std::copy(sums.begin(), sums.end(), s.write(c, s.chunk_projected, t * H + in.begin, t * H + in.end));
      continue;
    }
    const float* x = s.read(c, s.chunk_x, t * H + in.begin, t * H + in.end);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += x[i];
    std::copy(sums.begin(), sums.end(), s.write(c, s.chunk_x, t * H + in.begin, t * H + in.end));
  }
}

}  // namespace mk::emu
