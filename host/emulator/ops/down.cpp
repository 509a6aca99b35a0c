// The CPU twin of the down op (device/ops/down.h): x[rows] += W_down * h (kWritesProjected:
// projected[rows] = W_down * h).
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_down(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const float* act = s.read(c, s.h, 0, s.h.data.size());
  std::vector<float> sums(in.end - in.begin);
  for (uint32_t r = in.begin; r < in.end; ++r) sums[r - in.begin] = s.dot_row(L.w_down, r, s.h.data.size(), act);
  add_or_project(s, c, in, sums);
}

void emulate_down_slice(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t k) {
  const LayerOffsets& L = s.layout.layers[in.layer];
  const HSlices& hs = s.schedule.h_slices;
  const size_t N = s.h.data.size(), c0 = hs.begin(k), c1 = std::min(N, c0 + hs.cols);
  std::vector<float>& acc = s.partial_sums[size_t(c.wg)];
  if (k == 0) acc.assign(in.end - in.begin, 0.f);
  const float* act = s.read(c, s.h, c0, c1);
  for (uint32_t r = in.begin; r < in.end; ++r)
    acc[r - in.begin] = s.dot_row_part(L.w_down, r, N, c0, c1, act, acc[r - in.begin]);
  // The residual rows are read only after every slice's wait: those waits are what order this block
  // after the o_proj blocks that wrote them and the gate_up blocks that read all of x.
  if (k + 1 == hs.count) add_or_project(s, c, in, acc);
}

}  // namespace mk::emu
