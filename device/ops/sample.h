// Sample (workgroup 0): the next token from the LM head's output (greedy: the blocks' (max, argmax);
// otherwise radix select of the top K, a bitonic sort, and runtime/sampling.h's rule), streamed to the
// host with its time (before it, with log-probabilities asked for, the token's TokenLogprobs record; after
// it, with logit adjustments, its penalty); then the stop checks (EOS, max tokens, cancel, full context).
// Logits with a NaN or an infinity (an LM head block that entered kNonFiniteSlot: the greedy merge picks
// it, the sampling path looks for it) give no token: the launch stops and HostChannel::nonfinite_step
// tells the host.
#pragma once

#include "device/ops/lm_head.h"
#include "device/ops/op_spec.h"
#include "runtime/decode_backend.h"
#include "runtime/sampling.h"
#if MK_DEVICE_CODE
#include "device/device_atomics.h"
#include "device/gemv.h"
#include "device/top_tokens.h"
#endif

namespace mk::dev {

struct SampleOp : OpDefaults {
  // The radix-select histogram, the candidates (keys, values, probabilities) and the block scan's slots.
  static size_t smem_floats(const ModelDims&, const Instr&) {
    return size_t(kSampleBins) + size_t(kMaxCandidates) * 2 + size_t(kMaxCandidates) * 2 + size_t(kMaxWarps) + 4;
  }
#if MK_DEVICE_CODE
  // The LM head slots' (max, argmax) merged, ties to the lowest id; a thread per slot, so that all slots'
  // loads are in flight at once (a serial loop would wait one L2 round trip per slot).
  template <class MachineT>
  __device__ static int32_t greedy_token(MachineT& m) {
    __shared__ int32_t chosen;
    float best = -INFINITY;
    int32_t id = INT32_MAX;
    for (int s = threadIdx.x; s < m.p.dims.lm_head_slots; s += kThreads) {
      const float v = load_fresh(m.p.lm_best_value + s);
      const int32_t i = load_fresh(m.p.lm_best_index + s);
      if (v > best || (v == best && i < id)) best = v, id = i;
    }
    m.block_argmax(best, id);
    if (threadIdx.x == 0) chosen = id;  // slots hold -inf at worst (never NaN), so some slot's id wins:
                                        // kNonFiniteSlot's (+inf, -1) when a block saw a non-finite logit
    __syncthreads();
    return chosen;
  }

  // Whether an LM head block saw a non-finite logit at this step.
  template <class MachineT>
  __device__ static bool logits_nonfinite(MachineT& m) {
    bool bad = false;
    for (int s = threadIdx.x; s < m.p.dims.lm_head_slots; s += kThreads) bad |= load_fresh(m.p.lm_best_index + s) == kNonFiniteSlot;
    return __syncthreads_or(bad) != 0;
  }

  // Exclusive prefix count of `pred` over the block in thread order, and the block total.
  __device__ static int block_prefix_count(bool pred, int* total, int* scratch) {
    const unsigned long long mask = ballot(pred);
    const unsigned long long below = mask & ((1ull << lane_id()) - 1ull);
    if (lane_id() == 0) scratch[warp_id()] = __popcll(mask);
    __syncthreads();
    int before = 0, sum = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp_id()) before += scratch[w];
      sum += scratch[w];
    }
    __syncthreads();
    *total = sum;
    return before + __popcll(below);
  }

  // The shared-memory candidates of select_candidates: composites of (key, ~id), sorted descending.
  __device__ static TokenComposite* candidates(float* smem) { return reinterpret_cast<TokenComposite*>(reinterpret_cast<uint32_t*>(smem) + kSampleBins); }

  // The K largest of the `vocab` logits (K <= kMaxCandidates), in candidates(smem)[0, K): logit
  // descending, ties by id. Not inlined (nor are the log-probabilities' functions below): inlined into
  // the kernel, their code made the fp8 long-context kernels spill.
  __device__ __noinline__ static void select_candidates(const float* logits, const int vocab, float* smem, const int K) {
    uint32_t* hist = reinterpret_cast<uint32_t*>(smem);                           // kSampleBins
    TokenComposite* cand = candidates(smem);                                      // kMaxCandidates
    float* values = reinterpret_cast<float*>(cand + kMaxCandidates);            // kMaxCandidates
    float* probs = values + kMaxCandidates;                                     // kMaxCandidates
    int* scratch = reinterpret_cast<int*>(probs + kMaxCandidates);              // kWarps + 4
    __shared__ uint32_t prefix, prefix_mask;
    __shared__ int remaining;

    // 1. Radix select (11 + 11 + 10 bits) of the K-th largest key.
    if (threadIdx.x == 0) prefix = 0, prefix_mask = 0, remaining = K;
    const int shifts[3] = {21, 10, 0}, widths[3] = {11, 11, 10};
    for (int pass = 0; pass < 3; ++pass) {
      const int shift = shifts[pass], bins = 1 << widths[pass];
      for (int b = threadIdx.x; b < bins; b += kThreads) hist[b] = 0;
      __syncthreads();
      const uint32_t pre = prefix, pre_mask = prefix_mask;
      for (int i = threadIdx.x; i < vocab; i += kThreads) {
        const uint32_t key = logit_key(load_fresh(logits + i));
        if ((key & pre_mask) == pre) atomicAdd(hist + ((key >> shift) & uint32_t(bins - 1)), 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int cum = 0;
        for (int b = bins - 1; b >= 0; --b) {
          if (cum + int(hist[b]) >= remaining) {
            remaining -= cum;
            prefix |= uint32_t(b) << shift;
            prefix_mask |= uint32_t(bins - 1) << shift;
            break;
          }
          cum += int(hist[b]);
        }
      }
      __syncthreads();
    }
    const uint32_t threshold = prefix;
    const int greater = K - remaining;  // keys strictly above the threshold; `remaining` ties are taken

    // 2. Gather the candidates in id order: all keys above the threshold, the lowest-id ties.
    int n_greater = 0, n_equal = 0;
    for (int base = 0; base < vocab; base += kThreads) {
      const int i = base + int(threadIdx.x);
      const uint32_t key = i < vocab ? logit_key(load_fresh(logits + i)) : 0u;
      const bool gt = i < vocab && key > threshold, eq = i < vocab && key == threshold;
      int total_gt, total_eq;
      const int at_gt = block_prefix_count(gt, &total_gt, scratch);
      const int at_eq = block_prefix_count(eq, &total_eq, scratch);
      // Sort key: logit descending, then id ascending.
      const TokenComposite composite = key_composite(key, i);
      if (gt) cand[n_greater + at_gt] = composite;
      if (eq && n_equal + at_eq < remaining) cand[greater + n_equal + at_eq] = composite;
      n_greater += total_gt;
      n_equal += total_eq;
    }
    int padded = 1;
    while (padded < K) padded <<= 1;
    for (int i = K + int(threadIdx.x); i < padded; i += kThreads) cand[i] = 0ull;
    __syncthreads();

    // 3. Bitonic sort, descending.
    for (int size = 2; size <= padded; size <<= 1)
      for (int stride = size / 2; stride > 0; stride >>= 1) {
        for (int i = threadIdx.x; i < padded; i += kThreads) {
          const int j = i ^ stride;
          if (j > i) {
            const bool descending = (i & size) == 0;
            const TokenComposite a = cand[i], b = cand[j];
            if ((a < b) == descending) cand[i] = b, cand[j] = a;
          }
        }
        __syncthreads();
      }

  }

  template <class MachineT>
  __device__ static int32_t sample_token(MachineT& m) {
    const SamplingParams& sp = m.p.sampling;
    const int K = sp.candidate_count(m.p.dims.vocab);
    select_candidates(m.p.logits, m.p.dims.vocab, m.smem, K);
    // The shared rule over the ordered candidates.
    TokenComposite* cand = candidates(m.smem);
    float* values = reinterpret_cast<float*>(cand + kMaxCandidates);
    float* probs = values + kMaxCandidates;
    __shared__ int32_t chosen;
    for (int i = threadIdx.x; i < K; i += kThreads) values[i] = composite_logit(cand[i]);
    __syncthreads();
    if (threadIdx.x == 0) {
      const float u = uniform01(sp.seed, uint64_t(m.p.start) + m.step);
      chosen = composite_id(cand[choose_candidate(values, K, sp, u, probs)]);
    }
    __syncthreads();
    return chosen;
  }

  // The record of `token` for the host (runtime/sampling.h's TokenLogprobs) with `top` alternatives,
  // from the LM head blocks' partials (device/top_tokens.h): their log-sum-exps merged, and the `top`
  // largest of their top lists. Not inlined, as select_candidates.
  __device__ __noinline__ static void write_logprobs(const float* logits, const float* block_lse, const TokenComposite* block_top_lists,
                                                     int slots, float* smem, TokenLogprobs* r, const int32_t token, const int top) {
    LogSumExp l;
    for (int b = threadIdx.x; b < slots; b += kThreads) l.merge(load_fresh(block_lse + 2 * b), load_fresh(block_lse + 2 * b + 1));
    l = block_log_sum_exp(l, smem);
    TokenComposite* scratch = reinterpret_cast<TokenComposite*>(smem);
    TokenComposite* best = scratch + kWarps * kMaxTopLogprobs;
    // 8 a thread in registers: the lists of 20 of up to 204 blocks.
    block_top<8>(slots * top, [&](int i) { return load_fresh(block_top_lists + (i / top) * kMaxTopLogprobs + i % top); }, top, scratch, best);
    // The alternatives written a thread each.
    const float lse = l.max + logf(l.sum);
    if (threadIdx.x == 0) {
      r->token = token;
      r->logprob = load_fresh(logits + token) - lse;
      r->top_count = top;
    }
    for (int i = threadIdx.x; i < top; i += kThreads) r->top_ids[i] = composite_id(best[i]), r->top_logprobs[i] = composite_logit(best[i]) - lse;
    __syncthreads();  // the record is whole before thread 0 publishes the token
  }

  // The sampled token's penalty into its logit adjustment for the next steps' LM head.
  template <class MachineT>
  __device__ static void add_penalty(MachineT& m, int32_t token) {
    const uint32_t before = m.p.token_counts[token];
    m.p.token_counts[token] = before + 1;
    m.p.logit_adjust[token] += penalty_after_sample(before, m.p.frequency_penalty, m.p.presence_penalty);
  }

  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr&) {
    StopReason stop = StopReason::None;
    const bool sampling_step = int(m.step) + 1 >= m.p.ingest;
    if (sampling_step && m.p.max_new > 0) {
      const bool greedy = m.p.sampling.greedy();
      const int32_t token = greedy ? greedy_token(m) : logits_nonfinite(m) ? kNonFiniteSlot : sample_token(m);
      if (token != kNonFiniteSlot && m.p.out_logprobs)
        write_logprobs(m.p.logits, m.p.lm_logsumexp, m.p.lm_top, m.p.dims.lm_head_slots, m.smem,
                       m.p.out_logprobs + (int(m.step) + 1 - m.p.ingest), token, m.p.top_logprobs);
      if (threadIdx.x == 0 && token != kNonFiniteSlot && m.p.adjust_logits) add_penalty(m, token);
      if (threadIdx.x == 0 && token == kNonFiniteSlot) {
        m.p.channel->nonfinite_step = m.step + 1;
        stop = StopReason::Cancelled;  // ends the launch; the host reads nonfinite_step first and fails
      } else if (threadIdx.x == 0) {
        const int k = int(m.step) + 2 - m.p.ingest;  // tokens produced so far, this one included
        m.p.out_tokens[k - 1] = token;
        m.p.out_token_time_ns[k - 1] = global_timer_ns();
        m.p.tokens[m.step + 1] = token;
        // The release at system scope orders this thread's writes above (token, time) before the count.
        store_release_system(const_cast<uint32_t*>(&m.p.channel->token_count), uint32_t(k));
        bool eos = false;
        for (int e = 0; e < m.p.num_eos; ++e) eos |= m.p.eos[e] == token;
        if (eos) stop = StopReason::Eos;
        else if (k >= m.p.max_new) stop = StopReason::MaxTokens;
        else if (load_acquire_system(const_cast<const unsigned*>(m.p.cancel)) != 0) stop = StopReason::Cancelled;
        else if (m.p.start + int(m.step) + 1 >= m.p.context) stop = StopReason::ContextFull;
      }
    } else if (threadIdx.x == 0) {
      if (sampling_step) stop = StopReason::MaxTokens;  // max_new_tokens == 0: ingest only
      else if (load_acquire_system(const_cast<const unsigned*>(m.p.cancel)) != 0) stop = StopReason::Cancelled;
    }
    if (threadIdx.x == 0 && stop != StopReason::None) {
      *m.p.stop_flag = 1;
      m.p.channel->steps_run = m.step + 1;
      __threadfence_system();
      store_release_system(const_cast<uint32_t*>(&m.p.channel->stop_reason), uint32_t(stop));
    }
  }
#endif
};

}  // namespace mk::dev
