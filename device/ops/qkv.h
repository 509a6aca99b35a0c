// QKV row blocks: qkv = RMSNorm(x) * W_qkv (+ bias). One block lies inside one kv group, whose rows are
// fused (q heads of the group, then k, then v: runtime/weight_layout.h), so attention can wait for its
// group alone.
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

struct QKVOp : OpDefaults {
  static constexpr bool kGemv = true;
  MK_HD_INLINE static GemvMatrices gemv(const ModelDims& d, const LayerOffsets& L, uint64_t) {
    GemvMatrices g;
    g.matrix[0] = L.wqkv, g.parts = 1, g.cols = d.hidden, g.format = d.format;
    return g;
  }
  static size_t smem_floats(const ModelDims& d, const Instr&) { return norm_gemv_floats(d); }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void prestage(MachineT& m, const Instr& in) {
    stage_norm_weight(m.f32(m.p.layers[in.layer].attn_norm), m.p.dims.hidden, m.staged_norm());
  }

  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const LayerOffsets& L = m.p.layers[in.layer];
    const ModelDims& d = m.p.dims;
    const float* bias = d.qkv_bias ? m.f32(L.bqkv) : nullptr;
    m.gemv(
        in, [&] { m.norm_prologue(m.p.x); }, [&](uint32_t r, float v, float) { m.p.qkv[r] = v * m.inv_rms() + (bias ? bias[r] : 0.f); });
  }
#endif
};

}  // namespace mk::dev
