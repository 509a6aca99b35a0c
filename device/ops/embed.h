// Embed (workgroup 0): x = embedding[token of this step] * ModelDims::embed_scale (a folded step's: x_alt,
// and projected = 0: runtime/schedule.h's kStartsFoldedStep).
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

struct EmbedOp : OpDefaults {
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr&) {
    const int32_t token = load_fresh(m.p.tokens + m.step);
    const int cols = m.p.dims.hidden;
    // A constant in the 16-bit kernels (their head is in their format), so the decode folds there.
    const MatrixFormat f = matrix_format_quantized(MachineT::kFormat) ? m.p.dims.head_format : MachineT::kFormat;
    const uint8_t* row = m.matrix(m.p.embed) + size_t(token) * size_t(matrix_row_bytes(f, cols));
    const float scale = m.p.dims.embed_scale;
    // A folded step (kStartsFoldedStep): x into x_alt, and zeros as the post-norm layer 0's qkv folds.
    float* x = MachineT::kFold ? m.p.x_alt : m.p.x;
    for (int i = threadIdx.x; i < cols; i += kThreads) x[i] = matrix_row_element(f, row, cols, i) * scale;
    if constexpr (MachineT::kFold)
      for (int i = threadIdx.x; i < cols; i += kThreads) m.p.projected[i] = 0.f;
  }
#endif
};

}  // namespace mk::dev
