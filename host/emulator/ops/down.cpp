// The CPU twin of the down op (device/ops/down.h): x[rows] += W_down * h (kWritesProjected:
// projected[rows] = W_down * h), in every column of the step's span.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_down(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  const LayerOffsets& L = s.layout.layers[in.layer];
  const size_t I = size_t(s.cfg.intermediate_size);
  for (int j = 0; j < span.count; ++j) {
    const float* act = s.read(c, s.h, size_t(j) * I, size_t(j + 1) * I);
    std::vector<float> sums(in.end - in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r) sums[r - in.begin] = s.dot_row(L.w_down, r, I, act);
    add_or_project(s, c, in, j, sums);
  }
}

void emulate_down_slice(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step, uint32_t k) {
  const StepSpan span = s.span(c, step);
  const LayerOffsets& L = s.layout.layers[in.layer];
  const HSlices& hs = s.schedule.h_slices;
  const size_t I = size_t(s.cfg.intermediate_size), c0 = hs.begin(k), c1 = std::min(I, c0 + hs.cols);
  const size_t rows = in.end - in.begin;
  std::vector<float>& acc = s.partial_sums[size_t(c.wg)];  // the sums of every column, column after column
  if (k == 0) acc.assign(size_t(span.count) * rows, 0.f);
  for (int j = 0; j < span.count; ++j) {
    const float* act = s.read(c, s.h, size_t(j) * I + c0, size_t(j) * I + c1);
    for (uint32_t r = in.begin; r < in.end; ++r) {
      float& sum = acc[size_t(j) * rows + (r - in.begin)];
      sum = s.dot_row_part(L.w_down, r, I, c0, c1, act, sum);
    }
  }
  // The residual rows are read only after every slice's wait: those waits are what order this block
  // after the o_proj blocks that wrote them and the gate_up blocks that read all of x.
  if (k + 1 == hs.count)
    for (int j = 0; j < span.count; ++j)
      add_or_project(s, c, in, j, std::vector<float>(acc.begin() + std::ptrdiff_t(size_t(j) * rows), acc.begin() + std::ptrdiff_t(size_t(j + 1) * rows)));
}

}  // namespace mk::emu
