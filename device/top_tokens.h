// The most likely tokens and the log-sum-exp of logits, computed where the logits are made: each LM head
// block reduces its rows to partials (its (max, sum of exp) and its top tokens), and the sample op merges
// the blocks' partials. Tokens are compared as composites (runtime/sampling.h's token_composite).
#pragma once

#include <cstdint>

#include "device/kernel_params.h"
#include "device/platform.h"
#include "runtime/sampling.h"

namespace mk::dev {

#if MK_DEVICE_CODE
__device__ __forceinline__ TokenComposite warp_max(TokenComposite v) {
#pragma unroll
  for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) {
    const TokenComposite other = shfl_xor_u64(v, o);
    if (other > v) v = other;
  }
  return v;
}

// The largest of a lane's composites below `prev` (0: none); unrolled, so that the array stays in
// registers.
template <int N>
__device__ __forceinline__ TokenComposite lane_best_below(const TokenComposite (&c)[N], TokenComposite prev) {
  TokenComposite best = 0;
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (c[j] < prev && c[j] > best) best = c[j];
  return best;
}

// The `top` (<= kMaxTopLogprobs) largest of `n` composites spread over the block, value(i) the i-th, into
// out[0, top) in descending order (0 where there are fewer), written by thread 0; all threads call it.
// Two rounds of tournaments without block barriers between their steps: each warp its own top from the
// items of its threads (i = thread, thread + kThreads, ...; the first kCache of each thread held in
// registers, the rest read again each step: a read from L2 in every step costs ~1 us a step), then warp 0
// the block's from the warps'. `scratch`: shared memory for kWarps x kMaxTopLogprobs composites. ~2 x top
// warp reductions.
template <int kCache, class Value>
__device__ void block_top(int n, Value value, int top, TokenComposite* scratch, TokenComposite* out) {
  constexpr int kWarpsHere = kThreads / MK_WARP_SIZE;
  TokenComposite c[kCache];
#pragma unroll
  for (int j = 0; j < kCache; ++j) {
    const int i = int(threadIdx.x) + j * kThreads;
    c[j] = i < n ? value(i) : 0ull;
  }
  const int warp = int(threadIdx.x) / MK_WARP_SIZE;
  TokenComposite prev = ~0ull;
  for (int t = 0; t < top; ++t) {
    TokenComposite best = lane_best_below(c, prev);
    for (int i = int(threadIdx.x) + kCache * kThreads; i < n; i += kThreads) {
      const TokenComposite v = value(i);
      if (v < prev && v > best) best = v;
    }
    best = warp_max(best);
    if (lane_id() == 0) scratch[warp * kMaxTopLogprobs + t] = best;
    prev = best;
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int kMerge = (kWarpsHere * kMaxTopLogprobs + MK_WARP_SIZE - 1) / MK_WARP_SIZE;
    TokenComposite d[kMerge];
#pragma unroll
    for (int j = 0; j < kMerge; ++j) {
      const int i = lane_id() + j * MK_WARP_SIZE, w = i / kMaxTopLogprobs;
      d[j] = w < kWarpsHere && i % kMaxTopLogprobs < top ? scratch[i] : 0ull;
    }
    prev = ~0ull;
    for (int t = 0; t < top; ++t) {
      const TokenComposite best = warp_max(lane_best_below(d, prev));
      if (lane_id() == 0) out[t] = best;
      prev = best;
    }
  }
  __syncthreads();  // `scratch` is free again
}

// A running (max, sum of exp(v - max)), merged with another.
struct LogSumExp {
  float max = -INFINITY, sum = 0.0f;
  __device__ void add(float v) {
    if (v == -INFINITY) return;  // a token a constraint masks: no weight (and no exp(-inf - -inf))
    if (v > max) sum = sum * __expf(max - v) + 1.0f, max = v;
    else sum += __expf(v - max);
  }
  __device__ void merge(float m, float s) {
    const float nm = fmaxf(max, m);
    if (nm == -INFINITY) return;
    sum = sum * __expf(max - nm) + s * __expf(m - nm);
    max = nm;
  }
};

// The block's LogSumExp of the threads', to every thread (all call it). `scratch`: 2 x kWarps floats of
// shared memory.
__device__ inline LogSumExp block_log_sum_exp(LogSumExp l, float* scratch) {
#pragma unroll
  for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) l.merge(shfl_xor(l.max, o), shfl_xor(l.sum, o));
  const int warp = int(threadIdx.x) / MK_WARP_SIZE;
  if (lane_id() == 0) scratch[2 * warp] = l.max, scratch[2 * warp + 1] = l.sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / MK_WARP_SIZE; ++w) l.merge(scratch[2 * w], scratch[2 * w + 1]);
    scratch[0] = l.max, scratch[1] = l.sum;
  }
  __syncthreads();
  l.max = scratch[0], l.sum = scratch[1];
  __syncthreads();  // `scratch` is free again
  return l;
}
#endif

}  // namespace mk::dev
