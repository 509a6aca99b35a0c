// LM head row blocks: logits = W_lm * RMSNorm(x), and each block's (max, argmax) in its slot for greedy
// sampling; a block any of whose logits is NaN or infinite puts (+inf, kNonFiniteSlot) there, which wins
// the sample's merge of the slots and stops it. Skipped on prompt steps, whose logits nobody reads.
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#endif

namespace mk::dev {

inline constexpr int32_t kNonFiniteSlot = -1;  // KernelParams::lm_best_index of a block with a non-finite logit

struct LMHeadOp : OpDefaults {
  static constexpr bool kGemv = true;
  MK_HD_INLINE static GemvMatrices gemv(const ModelDims& d, const LayerOffsets&, uint64_t lm_head) {
    GemvMatrices g;
    g.matrix[0] = lm_head, g.parts = 1, g.cols = d.hidden, g.format = d.head_format;
    return g;
  }
  // Not on prompt steps: nobody reads their logits.
  static constexpr bool kEveryStep = false;
  MK_HD_INLINE static bool active(int step, int ingest) { return step + 1 >= ingest; }
  static size_t smem_floats(const ModelDims& d, const Instr&) { return norm_gemv_floats(d); }
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void prestage(MachineT& m, const Instr& in) {
    // Not on prompt steps: run() returns without waiting for the copies there.
    if (active(int(m.step), m.p.ingest)) stage_norm_weight(m.f32(m.p.final_norm), m.p.dims.hidden, m.staged_norm());
  }

  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    if (!active(int(m.step), m.p.ingest)) return;  // a prompt step: nobody needs its logits
    float best = -INFINITY;
    int32_t best_index = int32_t(in.begin);
    // 0 while every logit is finite: an infinity or a NaN times 0 is NaN, and NaN stays. One FMA a row
    // and one test at the end (a test per row cost Gemma 3's 262,144-row head 0.6% of the token).
    float poison = 0.0f;
    m.template gemv<true>(in, [&] { m.norm_prologue(m.p.x); }, [&](uint32_t r, float v, float) {
      v *= m.inv_rms();
      m.p.logits[r] = v;
      poison = fmaf(v, 0.0f, poison);
      if (v > best) best = v, best_index = int32_t(r);  // each warp's rows ascend: ties keep the lowest id
    });
    // A thread that saw a non-finite logit enters (+inf, kNonFiniteSlot), which wins every comparison of the
    // merge here and in the sample (ties go to the lower index): no barrier is added for it.
    if (poison != 0.0f) best = INFINITY, best_index = kNonFiniteSlot;
    m.block_argmax(best, best_index);
    if (threadIdx.x == 0) {
      m.p.lm_best_value[in.slot] = best;
      m.p.lm_best_index[in.slot] = best_index;
    }
  }
#endif
};

}  // namespace mk::dev
