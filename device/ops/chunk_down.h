// ChunkDown (chunk steps): residual columns [begin, end) of a tile of the chunk's tokens += their MLP
// activations times W_down, on tensor cores.
#pragma once

#include "device/ops/chunk_matrix.h"

namespace mk::dev {

struct ChunkDownOp : ChunkMatrixOp {
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    chunk_residual_tile(m, in, p.chunk_h, p.dims.intermediate, p.dims.intermediate, p.layers[in.layer].w_down);
  }
#endif
};

}  // namespace mk::dev
