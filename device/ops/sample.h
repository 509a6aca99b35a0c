// Sample (workgroup 0): the next token from the LM head's output (greedy: the blocks' (max, argmax);
// otherwise radix select of the top K, a bitonic sort, and runtime/sampling.h's rule), streamed to the
// host with its time; then the stop checks (EOS, max tokens, cancel, full context). Logits with a NaN or
// an infinity (an LM head block that entered kNonFiniteSlot: the greedy merge picks it, the sampling path
// looks for it) give no token: the launch stops and HostChannel::nonfinite_step tells the host.
#pragma once

#include "device/ops/lm_head.h"
#include "device/ops/op_spec.h"
#include "runtime/decode_backend.h"
#include "runtime/sampling.h"
#if MK_DEVICE_CODE
#include "device/device_atomics.h"
#include "device/gemv.h"
#endif

namespace mk::dev {

struct SampleOp : OpDefaults {
  // The radix-select histogram, the candidates (keys, values, probabilities) and the block scan's slots.
  static size_t smem_floats(const ModelDims&, const Instr&) {
    return size_t(kSampleBins) + size_t(kMaxCandidates) * 2 + size_t(kMaxCandidates) * 2 + size_t(kMaxWarps) + 4;
  }
#if MK_DEVICE_CODE
  // Order-preserving map of floats to unsigned keys (larger float, larger key).
  __device__ static __forceinline__ uint32_t float_key(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
  __device__ static __forceinline__ float key_float(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
  }

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
  template <class MachineT>
  __device__ static int block_prefix_count(MachineT& m, bool pred, int* total, int* scratch) {
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

  template <class MachineT>
  __device__ static int32_t sample_token(MachineT& m) {
    const ModelDims& d = m.p.dims;
    const SamplingParams& sp = m.p.sampling;
    const int K = sp.candidate_count(d.vocab);
    uint32_t* hist = reinterpret_cast<uint32_t*>(m.smem);                         // kSampleBins
    unsigned long long* cand = reinterpret_cast<unsigned long long*>(hist + kSampleBins);  // kMaxCandidates
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
      for (int i = threadIdx.x; i < d.vocab; i += kThreads) {
        const uint32_t key = float_key(load_fresh(m.p.logits + i));
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
    for (int base = 0; base < d.vocab; base += kThreads) {
      const int i = base + int(threadIdx.x);
      const uint32_t key = i < d.vocab ? float_key(load_fresh(m.p.logits + i)) : 0u;
      const bool gt = i < d.vocab && key > threshold, eq = i < d.vocab && key == threshold;
      int total_gt, total_eq;
      const int at_gt = block_prefix_count(m, gt, &total_gt, scratch);
      const int at_eq = block_prefix_count(m, eq, &total_eq, scratch);
      // Sort key: logit descending, then id ascending.
      const unsigned long long composite = (unsigned long long)key << 32 | (0xffffffffu - uint32_t(i));
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
            const unsigned long long a = cand[i], b = cand[j];
            if ((a < b) == descending) cand[i] = b, cand[j] = a;
          }
        }
        __syncthreads();
      }

    // 4. The shared rule over the ordered candidates.
    __shared__ int32_t chosen;
    for (int i = threadIdx.x; i < K; i += kThreads) values[i] = key_float(uint32_t(cand[i] >> 32));
    __syncthreads();
    if (threadIdx.x == 0) {
      const float u = uniform01(sp.seed, uint64_t(m.p.start) + m.step);
      const int c = choose_candidate(values, K, sp, u, probs);
      chosen = int32_t(0xffffffffu - uint32_t(cand[c] & 0xffffffffull));
    }
    __syncthreads();
    return chosen;
  }

  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr&) {
    StopReason stop = StopReason::None;
    const bool sampling_step = int(m.step) + 1 >= m.p.ingest;
    if (sampling_step && m.p.max_new > 0) {
      const bool greedy = m.p.sampling.greedy();
      const int32_t token = greedy ? greedy_token(m) : logits_nonfinite(m) ? kNonFiniteSlot : sample_token(m);
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
