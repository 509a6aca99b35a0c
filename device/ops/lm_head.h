// LM head row blocks: logits = W_lm * RMSNorm(x) (+ the request's logit adjustments; -inf for the tokens
// a constraint does not allow in its state), and each block's
// (max, argmax) in its slot for greedy sampling (with log-probabilities asked for, also its partials for
// them); a block any of whose logits is NaN or infinite puts (+inf, kNonFiniteSlot) there, which wins the
// sample's merge of the slots and stops it. When sampling, the block also counts its logits' first digit
// for the sample's select. Skipped on prompt steps, whose logits nobody reads.
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/gemv.h"
#include "device/select_top.h"
#include "device/top_tokens.h"
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
  // The products' activations; then logprob_partials' scratch (a warp of at least 32 lanes) or the
  // first digit's histogram.
  static size_t smem_floats(const ModelDims& d, const Instr& in) {
    size_t floats = norm_gemv_floats(d, in);
    if (floats < size_t(kThreads / 32) * kMaxTopLogprobs * 2) floats = size_t(kThreads / 32) * kMaxTopLogprobs * 2;
    return floats > size_t(kSampleBins) ? floats : size_t(kSampleBins);
  }
#if MK_DEVICE_CODE
  struct Best {
    float value;
    int32_t index;
  };
  // Over the block's rows [begin, end) once its logits are written: logits[r] += adjust[r] (when
  // adjust is set), and -inf where bit r of `allowed` is clear (when it is set); this thread's best of
  // them (rows ascending: ties keep the lowest id). Not inlined: inside the products' loop, or inlined
  // after it, it made the fp8 long-context kernels spill.
  __device__ __noinline__ static Best adjust_logits(float* logits, const float* adjust, const uint32_t* allowed, uint32_t begin,
                                                    uint32_t end) {
    __syncthreads();
    Best b{-INFINITY, int32_t(begin)};
    for (uint32_t r = begin + threadIdx.x; r < end; r += kThreads) {
      float v = logits[r];
      if (adjust) v += load_fresh(adjust + r);
      if (allowed && ((allowed[r >> 5] >> (r & 31u)) & 1u) == 0u) v = -INFINITY;
      logits[r] = v;
      if (v > b.value) b = {v, int32_t(r)};
    }
    return b;
  }

  // The token set of the constraint's state for the budget left (the sample op of the step before, or the
  // host, wrote both).
  __device__ static const uint32_t* allowed_tokens(const ConstraintTables& c, const int32_t* state_and_budget) {
    const int32_t set = constraint::constraint_set(c.state_sets, load_fresh(state_and_budget), load_fresh(state_and_budget + 1));
    return c.masks + size_t(set) * size_t(c.mask_words);
  }

  // What the sample op merges from the blocks, each part where asked for: with log-probabilities (`lse`
  // not null), the block's (max, sum of exp) of its logits and its `top` most likely tokens
  // (device/top_tokens.h); when sampling (`counts` not null), its logits' first digit counted into the
  // step's counts (device/select_top.h). `smem`: the activation area, free after the products. Not
  // inlined, as add_adjustments; one call for both, as each call site costs the kernel registers.
  __device__ __noinline__ static void block_partials(const float* logits, uint32_t begin, uint32_t end, int top, float* lse,
                                                     TokenComposite* top_list, uint32_t* counts, float* smem) {
    if (lse) logprob_partials(logits, begin, end, top, lse, top_list, smem);
    if (counts) count_first_digit(logits, begin, end, reinterpret_cast<uint32_t*>(smem), counts);
  }
  __device__ static void logprob_partials(const float* logits, uint32_t begin, uint32_t end, int top, float* lse,
                                          TokenComposite* top_list, float* smem) {
    __syncthreads();  // the block's logits are written
    LogSumExp l;
    for (uint32_t r = begin + threadIdx.x; r < end; r += kThreads) l.add(logits[r]);
    l = block_log_sum_exp(l, smem);
    if (threadIdx.x == 0) lse[0] = l.max, lse[1] = l.sum;
    // 4 rows a thread in registers: 2,048 a block, a 262,144-token vocabulary over 128 blocks.
    block_top<4>(int(end - begin), [&](int i) { return token_composite(logits[begin + uint32_t(i)], int32_t(begin) + i); }, top,
              reinterpret_cast<TokenComposite*>(smem), top_list);
  }

  template <class MachineT>
  __device__ static void prestage(MachineT& m, const Instr& in) {
    // Not on prompt steps: run() returns without waiting for the copies there.
    // Folding: the last layer's MLP post-norm (kFoldsMlpPostNorm).
    if (active(int(m.step), m.p.ingest)) m.stage_norm_weights(m.p.final_norm, m.p.layers[m.p.dims.layers - 1].post_mlp_norm);
  }

  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    if (!active(int(m.step), m.p.ingest)) return;  // a prompt step: nobody needs its logits
    float best = -INFINITY;
    int32_t best_index = int32_t(in.begin);
    // 0 while every logit is finite: an infinity or a NaN times 0 is NaN, and NaN stays. One FMA a row
    // and one test at the end (a test per row cost Gemma 3's 262,144-row head 0.6% of the token).
    float poison = 0.0f;
    m.template gemv<true>(in, [&] { m.template norm_prologue<true>(in); }, [&](uint32_t r, float v, float) {
      v *= m.inv_rms();
      m.p.logits[r] = v;
      poison = fmaf(v, 0.0f, poison);
      if (v > best) best = v, best_index = int32_t(r);  // each warp's rows ascend: ties keep the lowest id
    });
    // The request's logit_bias and penalties (the sample op of the step before wrote their entries) and
    // its constraint's mask, in a pass of their own over the block's rows. `poison` saw the logits before:
    // the adjustments are finite, and the mask's -inf is not the model's.
    if (m.p.adjust_logits || m.p.constraint.masks) {
      const Best b = adjust_logits(m.p.logits, m.p.adjust_logits ? m.p.logit_adjust : nullptr,
                                   m.p.constraint.masks ? allowed_tokens(m.p.constraint, m.p.constraint_state) : nullptr, in.begin, in.end);
      best = b.value, best_index = b.index;
    }
    const bool sampling = !m.p.sampling.greedy();
    if (m.p.out_logprobs || sampling)
      block_partials(m.p.logits, in.begin, in.end, m.p.top_logprobs, m.p.out_logprobs ? m.p.lm_logsumexp + 2 * in.slot : nullptr,
                     m.p.lm_top + size_t(in.slot) * kMaxTopLogprobs, sampling ? m.p.lm_key_counts : nullptr, m.smem);
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
