// GateUp row blocks: h = act(W_gate * RMSNorm(x)) * (W_up * RMSNorm(x)), act SiLU or GELU-tanh
// (ModelDims::act_linear, act_cubic); the gate and up rows of a block stream together (two parts of one
// chunk). x after the attention's post-norm when the block folds it (Machine::norm_prologue).
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

struct GateUpOp : OpDefaults {
  static constexpr bool kGemv = true;
  MK_HD_INLINE static GemvMatrices gemv(const ModelDims& d, const LayerOffsets& L, uint64_t) {
    GemvMatrices g;
    g.matrix[0] = L.w_gate, g.matrix[1] = L.w_up, g.parts = 2, g.cols = d.hidden, g.format = d.format;
    return g;
  }
  static size_t smem_floats(const ModelDims& d, const Instr& in) { return norm_gemv_floats(d, in); }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void prestage(MachineT& m, const Instr& in) {
    const LayerOffsets& L = m.p.layers[in.layer];
    m.stage_norm_weights(L.mlp_norm, L.post_attn_norm);  // folding: kFoldsAttentionPostNorm
  }

  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    // act(g) = g * sigmoid(g * (c1 + c3 * g^2)) (ModelDims::act_linear, act_cubic): SiLU with (1, 0),
    // GELU-tanh with (2k, 2k * 0.044715), k = sqrt(2 / pi), since (1 + tanh(z)) / 2 = sigmoid(2z). One
    // loop for both: a choice of activation inside or around the GEMV made the quantized kernels slower
    // or spill.
    // The coefficients are read in the emit, from the parameters: held in registers across the GEMV
    // they made the long-context kernels spill.
    m.gemv(
        in, [&] { m.template norm_prologue<false>(in); },
        [&](uint32_t r, float g, float u) {
          const float s = m.inv_rms();
          g *= s;
          m.p.h[r] = g / (1.0f + __expf(-g * (m.p.dims.act_linear + m.p.dims.act_cubic * g * g))) * u * s;
        });
  }
#endif
};

}  // namespace mk::dev
