// QKV row blocks: qkv = RMSNorm(x) * W_qkv (+ bias), x after the layer before's MLP post-norm when the
// block folds it (Machine::norm_prologue). One block lies inside one kv group, whose rows are
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
  // The norm GEMV's area, then the block's bias rows (Qwen2), staged before the wait.
  static size_t smem_floats(const ModelDims& d, const Instr& in) { return norm_gemv_floats(d, in) + (d.qkv_bias ? in.end - in.begin : 0); }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void prestage(MachineT& m, const Instr& in) {
    const LayerOffsets& L = m.p.layers[in.layer];
    const ModelDims& d = m.p.dims;
    m.stage_norm_weights(L.attn_norm, m.p.layers[in.layer > 0 ? in.layer - 1 : 0].post_mlp_norm);  // folding: kFoldsMlpPostNorm
    if (d.qkv_bias) stage_norm_gemv_row_constants(m.f32(L.bqkv), in.begin, in.end - in.begin, d.hidden, staged_bias(m));
  }
  // After the norm area, and the folded post-norm's weight in fold kernels (every instruction there folds).
  template <class MachineT>
  __device__ static float* staged_bias(MachineT& m) {
    return m.smem + norm_gemv_floats(m.p.dims) + (MachineT::kFold ? m.p.dims.hidden : 0);
  }

  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    // The bias rows are in shared memory once the norm prologue's barrier has passed (prestage).
    const float* bias = m.p.dims.qkv_bias ? staged_bias(m) : nullptr;
    m.gemv(
        in, [&] { m.template norm_prologue<true>(in); },
        [&](uint32_t r, float v, float) { m.p.qkv[r] = v * m.inv_rms() + (bias ? bias[r - in.begin] : 0.f); });
  }
#endif
};

}  // namespace mk::dev
