// ChunkGateUp (chunk steps): h columns [begin, end) of a tile of the chunk's tokens = act(gate) * up of
// their normalised rows, act the MLP's activation (ModelDims::act_linear, act_cubic, as the gate_up op
// computes it), on tensor cores, stored 16-bit. The tile's weight rows interleave the gate and
// up rows of each column (2j: gate row j, 2j + 1: up row j), so the two values of an accumulator pair,
// which one lane holds, are one column's gate and up.
#pragma once

#include "device/ops/chunk_matrix.h"

namespace mk::dev {

struct ChunkGateUpOp : ChunkMatrixOp {
  static size_t smem_floats(const ModelDims&, const Instr& in) { return chunk_matrix_smem_floats(2 * (in.end - in.begin)); }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    const ModelDims& d = p.dims;
    const LayerOffsets& L = p.layers[in.layer];
    const int H = d.hidden;
    uint16_t* h = p.chunk_h + in.begin;
    chunk_matrix_tile(
        m, in, p.chunk_act, p.chunk_act_cols, H,
        [&](int n) { return m.weight_row((n & 1) ? L.w_up : L.w_gate, H, int(in.begin) + n / 2); }, int(2 * (in.end - in.begin)),
        [&](int t, int n, float g, float u) {
          h[size_t(t) * size_t(d.intermediate) + n / 2] = m.to_act16(g / (1.0f + __expf(-g * (d.act_linear + d.act_cubic * g * g))) * u);
        });
  }
#endif
};

}  // namespace mk::dev
