// Embed (workgroup 0): x = embedding[token of this step].
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
    const uint16_t* row = reinterpret_cast<const uint16_t*>(m.matrix(m.p.embed)) + size_t(token) * size_t(m.p.dims.hidden);
    for (int i = threadIdx.x; i < m.p.dims.hidden; i += kThreads) m.p.x[i] = weight_value<MachineT::kFp16>(row[i]);
  }
#endif
};

}  // namespace mk::dev
