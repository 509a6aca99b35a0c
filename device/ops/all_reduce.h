// AllReduce row blocks (tensor parallel: runtime/tensor_parallel.h): rows [begin, end) of the sum of every
// device's partial of o_proj's (Instr::slot 0) or down's (1) output, in device order, added to x, or with
// kWritesProjected written to `projected` for the post_norm after it. The devices pushed their partials
// into `partials` before signalling the counter this block waited for. Compiled into the tensor-parallel
// kernels only (OpDefaults::kTensorParallelOnly).
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

struct AllReduceOp : OpDefaults {
  static constexpr bool kTensorParallelOnly = true;
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const size_t hidden = size_t(m.p.dims.hidden);
    const float* set = m.p.partials + size_t(in.slot) * size_t(m.p.devices) * hidden;
    const bool projects = in.flags & kWritesProjected;
    for (uint32_t r = in.begin + threadIdx.x; r < in.end; r += kThreads) {
      float sum = 0.f;
      for (int d = 0; d < m.p.devices; ++d) sum += load_fresh(set + size_t(d) * hidden + r);
      if (projects) m.p.projected[r] = sum;
      else m.p.x[r] = load_fresh(m.p.x + r) + sum;
    }
    __syncthreads();
  }
#endif
};

}  // namespace mk::dev
