// ChunkOProj (chunk steps): residual columns [begin, end) of a tile of the chunk's tokens += their
// attention output times W_o, on tensor cores.
#pragma once

#include "device/ops/chunk_matrix.h"

namespace mk::dev {

struct ChunkOProjOp : OpDefaults {
  static size_t smem_floats(const ModelDims&, const Instr&) { return chunk_matrix_smem_floats(); }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    const ModelDims& d = p.dims;
    const LayerOffsets& L = p.layers[in.layer];
    const int K = d.heads * d.head_dim;
    float* x = p.chunk_x + in.begin;
    chunk_matrix_tile(
        m, in, p.chunk_act, p.chunk_act_cols, K, [&](int n) { return m.weight_row(L.wo, K, int(in.begin) + n); }, int(in.end - in.begin),
        [&](int t, int n, float v0, float v1) {
          float2* r = reinterpret_cast<float2*>(x + size_t(t) * size_t(d.hidden) + n);
          const float2 old = load_fresh(r);
          *r = make_float2(old.x + v0, old.y + v1);
        });
  }
#endif
};

}  // namespace mk::dev
