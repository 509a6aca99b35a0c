// Down row blocks: x[rows] += W_down * h (kWritesProjected: projected[rows] = W_down * h).
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

struct DownOp : OpDefaults {
  static constexpr bool kGemv = true;
  MK_HD_INLINE static GemvMatrices gemv(const ModelDims& d, const LayerOffsets& L, uint64_t) {
    GemvMatrices g;
    g.matrix[0] = L.w_down, g.parts = 1, g.cols = d.intermediate, g.format = d.format;
    return g;
  }
  // h in planes, then the residual rows it adds to (Machine::residual_rows).
  static size_t smem_floats(const ModelDims& d, const Instr& in) { return residual_gemv_floats(d, in); }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const ModelDims& d = m.p.dims;
    auto load_h = [&] {
      const float residual = m.fetch_residual(in);
      load_to_planes(m.p.h, d.intermediate, m.smem);
      m.store_residual(in, residual);
      __syncthreads();
    };
    // Post-norm layers (kWritesProjected): the rows go to `projected`, their residual rows are zeros.
    const float* res = m.residual_rows();
    m.gemv(in, load_h, [&](uint32_t r, float v, float) { m.output_rows(in)[r] = res[r - in.begin] + v; });
  }
#endif
};

}  // namespace mk::dev
