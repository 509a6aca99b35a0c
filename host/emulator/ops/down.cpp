// The CPU twin of the down op (device/ops/down.h): x[rows] += W_down * h.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_down(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const float* act = s.read(c, s.h, 0, s.h.data.size());
  const float* xin = s.read(c, s.x, in.begin, in.end);
  std::vector<float> updated(in.end - in.begin);
  for (uint32_t r = in.begin; r < in.end; ++r)
    updated[r - in.begin] = xin[r - in.begin] + s.dot_row(L.w_down, r, s.h.data.size(), act);
  std::copy(updated.begin(), updated.end(), s.write(c, s.x, in.begin, in.end));
}

}  // namespace mk::emu
