// ChunkQKV (chunk steps): qkv columns [begin, end) of a tile of the chunk's tokens = their normalised
// rows times W_qkv (+ bias), on tensor cores, into chunk_qkv (fp32).
#pragma once

#include "device/ops/chunk_matrix.h"

namespace mk::dev {

struct ChunkQKVOp : ChunkMatrixOp {
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    const ModelDims& d = p.dims;
    const LayerOffsets& L = p.layers[in.layer];
    const float* bias = d.qkv_bias ? m.f32(L.bqkv) + in.begin : nullptr;
    float* out = p.chunk_qkv + in.begin;
    chunk_matrix_tile(
        m, in, p.chunk_act, p.chunk_act_cols, d.hidden, [&](int n) { return m.weight_row(L.wqkv, d.hidden, int(in.begin) + n); },
        int(in.end - in.begin), [&](int t, int n, float v0, float v1) {
          if (bias) v0 += bias[n], v1 += bias[n + 1];
          *reinterpret_cast<float2*>(out + size_t(t) * size_t(d.qkv_rows) + n) = make_float2(v0, v1);
        });
  }
#endif
};

}  // namespace mk::dev
