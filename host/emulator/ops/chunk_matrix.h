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

}  // namespace mk::emu
