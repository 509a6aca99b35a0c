// ChunkOProj (chunk steps): residual columns [begin, end) of a tile of the chunk's tokens += their
// attention output times W_o, on tensor cores.
#pragma once

#include "device/ops/chunk_matrix.h"

namespace mk::dev {

struct ChunkOProjOp : ChunkMatrixOp {
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    chunk_residual_tile(m, in, p.chunk_act, p.chunk_act_cols, p.dims.heads * p.dims.head_dim, p.layers[in.layer].wo);
  }
#endif
};

}  // namespace mk::dev
