// The CPU twin of the all_reduce op (device/ops/all_reduce.h), in every column of the step's span: the
// sum of every device's partial of the block's rows in the set Instr::slot names, in device order, added
// to x (kWritesProjected: written to projected).
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_all_reduce(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  for (int j = 0; j < span.count; ++j) {
    std::vector<float> rows(in.end - in.begin, 0.f);
    for (size_t d = 0; d < s.devices.size(); ++d) {
      const size_t at = s.partials_at(in.slot, d, j);
      const float* p = s.read(c, s.partials, at + in.begin, at + in.end);
      for (size_t i = 0; i < rows.size(); ++i) rows[i] += p[i];
    }
    add_or_project(s, c, in, j, rows);
  }
}

}  // namespace mk::emu
