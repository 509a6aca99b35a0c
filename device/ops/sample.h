// Sample (workgroup 0): the next token from the LM head's output (greedy: the blocks' (max, argmax);
// otherwise device/select_top.h's K largest, and runtime/sampling.h's rule in one warp), streamed to the
// host with its time (before it, with log-probabilities asked for, the token's TokenLogprobs record; after
// it, with logit adjustments, its penalty); with a constraint, its state moved along the token; then the
// stop checks (EOS or a complete constraint, max tokens, cancel, full context).
// Logits with a NaN or an infinity (an LM head block that entered kNonFiniteSlot: the greedy merge picks
// it, the sampling path looks for it) give no token: the launch stops and HostChannel::nonfinite_step
// tells the host.
#pragma once

#include <climits>

#include "device/ops/lm_head.h"
#include "device/ops/op_spec.h"
#include "runtime/decode_backend.h"
#include "runtime/sampling.h"
#if MK_DEVICE_CODE
#include "device/device_atomics.h"
#include "device/gemv.h"
#include "device/select_top.h"
#include "device/top_tokens.h"
#endif

namespace mk::dev {

struct SampleOp : OpDefaults {
  // The first digit's histogram, the select's composites and the block scans' slots (below).
  static size_t smem_floats(const ModelDims&, const Instr&) { return size_t(kSampleBins) + size_t(2 * kMaxCandidates) * 2 + size_t(kMaxWarps); }
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

  // Shared memory of the sampling path: the first digit's histogram; the select's composites (2 x
  // kMaxCandidates: the K candidates first, then the weights and running sums of the rule); the block
  // scans' slots.
  __device__ static uint32_t* histogram(float* smem) { return reinterpret_cast<uint32_t*>(smem); }
  __device__ static TokenComposite* candidates(float* smem) { return reinterpret_cast<TokenComposite*>(histogram(smem) + kSampleBins); }
  __device__ static int* scan_slots(float* smem) { return reinterpret_cast<int*>(candidates(smem) + 2 * kMaxCandidates); }
  // 16-byte pieces of logits a thread has in flight in the select's passes, while it works on as many:
  // more made the kernels around the sample op spill registers.
  static constexpr int kLogitPiecesInFlight = 2;

  // The lowest of the lanes' values over the warp (their bits through the float shuffles).
  __device__ static int warp_min(int v) {
#pragma unroll
    for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) {
      const int other = __float_as_int(shfl_xor(__int_as_float(v), o));
      v = other < v ? other : v;
    }
    return v;
  }

  // runtime/sampling.h's steps 3-6 over the n ordered candidates, in warp 0 (a chunk of kSumChunk a lane):
  // their weights, chunked_running_sums' sums in its order, and each "first index where" as the lowest
  // lane's find. The index of the chosen candidate, to thread 0.
  __device__ static int choose_in_warp(const TokenComposite* cand, int n, const SamplingParams& sp, float u, float* probs,
                                       float* running) {
    const float top = composite_logit(cand[0]), inv_t = 1.0f / sp.temperature;
    for (int i = threadIdx.x; i < n; i += kThreads) probs[i] = candidate_weight(composite_logit(cand[i]), top, inv_t);
    __syncthreads();
    if (warp_id() != 0) return 0;
    const int lane = lane_id(), begin = lane * kSumChunk;
    const int end = lane < kSumChunk && begin < n ? (begin + kSumChunk < n ? begin + kSumChunk : n) : begin;
    float within = 0.0f;
    for (int i = begin; i < end; ++i) within += probs[i], running[i] = within;
    float start = 0.0f;  // the chunks before this lane's, added in order
    for (int c = 0; c < kSumChunk; ++c) {
      const float chunk = shfl(within, c);
      if (c < lane) start += chunk;
    }
    for (int i = begin; i < end; ++i) running[i] = start + running[i];
    sync_warp();
    // The first index of this lane's chunk in [begin, limit) where pred holds, over the warp: INT_MAX if none.
    const auto first = [&](int limit, auto pred) {
      int found = INT_MAX;
      for (int i = begin; i < end && i < limit; ++i)
        if (pred(i)) {
          found = i;
          break;
        }
      return warp_min(found);
    };
    int kept = n;
    if (sp.top_p < 1.0f) {
      const float enough = sp.top_p * running[n - 1];
      const int found = first(n, [&](int i) { return running[i] >= enough; });
      kept = (found < n - 1 ? found : n - 1) + 1;  // running[n - 1] is always enough
    }
    if (sp.min_p > 0.0f) {
      const float floor = sp.min_p * probs[0];
      const int m = first(kept, [&](int i) { return i >= 1 && probs[i] < floor; });
      if (m < kept) kept = m;
    }
    const float target = u * running[kept - 1];
    const int chosen = first(kept, [&](int i) { return running[i] > target; });
    return chosen < kept ? chosen : kept - 1;
  }

  // The sampled token: the candidates by select_top_composites from the LM head blocks' counts of the
  // first digit (which it then clears for the next step's), and the rule. Not inlined (nor are the
  // log-probabilities' functions below): inlined into the kernel, their code made the fp8 long-context
  // kernels spill.
  __device__ __noinline__ static int32_t sample_candidates(const float* logits, int vocab, uint32_t* counts, float temperature, int top_k,
                                                           float top_p, float min_p, float u, float* smem) {
    SamplingParams sp;
    sp.temperature = temperature, sp.top_k = top_k, sp.top_p = top_p, sp.min_p = min_p;
    uint32_t* hist = histogram(smem);
    for (int b = threadIdx.x; b < kSampleBins; b += kThreads) {
      hist[b] = load_fresh(counts + b);
      counts[b] = 0u;  // ordered before the next step's counts by the token's release
    }
    __syncthreads();
    // -inf (a constraint's masked tokens, and nothing else: NaNs stopped the step before) has a bin of
    // its own in the first digit.
    const int K = sp.candidate_count(vocab, vocab - int(hist[first_digit(logit_key(-INFINITY))]));
    TokenComposite* cand = candidates(smem);
    select_top_composites<kLogitPiecesInFlight>(logits, vocab, K, hist, cand, scan_slots(smem));
    float* probs = reinterpret_cast<float*>(cand + kMaxCandidates);  // past the K candidates
    __shared__ int32_t chosen;
    const int c = choose_in_warp(cand, K, sp, u, probs, probs + kMaxCandidates);
    if (threadIdx.x == 0) chosen = composite_id(cand[c]);
    __syncthreads();
    return chosen;
  }

  template <class MachineT>
  __device__ static int32_t sample_token(MachineT& m) {
    const float u = uniform01(m.p.sampling.seed, uint64_t(m.p.start) + m.step);
    const SamplingParams& sp = m.p.sampling;
    return sample_candidates(m.p.logits, m.p.dims.vocab, m.p.lm_key_counts, sp.temperature, sp.top_k, sp.top_p, sp.min_p, u, m.smem);
  }

  // The record of `token` for the host (runtime/sampling.h's TokenLogprobs) with `top` alternatives,
  // from the LM head blocks' partials (device/top_tokens.h): their log-sum-exps merged, and the `top`
  // largest of their top lists. Not inlined, as sample_candidates.
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

  // The constraint's state moved along the token's bytes through the DFA, for the next step's LM head;
  // whether the new state is an end. Thread 0 (it wrote the state at the step before). Not inlined, as
  // sample_candidates, and given the tables' fields one by one: a reference into the kernel's parameters
  // would copy them to the stack.
  __device__ __noinline__ static bool advance_constraint(const int32_t* next, const uint8_t* byte_class, const uint8_t* token_bytes,
                                                         const uint32_t* token_offsets, const uint8_t* state_end, int classes,
                                                         int32_t* state, int32_t token) {
    int s = *state;
    const uint32_t end = token_offsets[token + 1];
    for (uint32_t i = token_offsets[token]; i < end; ++i) s = next[size_t(s) * size_t(classes) + byte_class[token_bytes[i]]];
    *state = s;
    return state_end[s] != 0;
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
        const ConstraintTables& c = m.p.constraint;
        if (!eos && c.masks) {  // a complete constraint ends the reply as an EOS would
          eos = advance_constraint(c.next, c.byte_class, c.token_bytes, c.token_offsets, c.state_end, c.classes, m.p.constraint_state, token);
          m.p.constraint_state[1] = constraint::constraint_budget(m.p.max_new, k, m.p.context, m.p.start + int(m.step) + 1);
        }
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
