// The K largest of a vocabulary's logits, in one workgroup, as composites (runtime/sampling.h's
// key_composite: logit descending, ties to the lower id): the candidates of the sampling rule.
//
// A radix select over the 64-bit composites, a digit a pass from the top: each pass counts the digit's
// values among the composites that share the digits chosen so far, and the bin where the count from the
// top reaches K fixes the digit. The LM head's blocks count the first digit as they make the logits. The
// logit key's three digits come first; the id's are needed only where logits tie across the K-th place
// (digits above the largest id are known without a pass). Once the crossing bin is small, one pass
// gathers it with everything above it, and a bitonic sort puts the K largest first.
//
// Every pass reads the logits in 16-byte pieces, the next ones issued before the current ones are used:
// one workgroup reading the vocabulary one L2 round trip at a time is what made sampling cost a third of
// a token.
#pragma once

#include <cstdint>

#include "device/kernel_params.h"
#include "device/platform.h"
#include "runtime/sampling.h"

namespace mk::dev {

#if MK_DEVICE_CODE
// f(i, key) for each of the `vocab` logits (i: its id), spread over the workgroup. `logits` must be
// 16-byte aligned (a device allocation of its own). A thread's next kInFlight pieces are loaded while
// it works on the ones before: a pass costs about the L2's rate, not a round trip per batch.
template <int kInFlight, class F>
__device__ __forceinline__ void for_each_logit_key(const float* logits, int vocab, F&& f) {
  const float4* pieces = reinterpret_cast<const float4*>(logits);
  const int n4 = vocab / 4;
  constexpr int kBatch = kThreads * kInFlight;
  float4 next[kInFlight];
  const auto load = [&](int j0) {
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int j = j0 + u * kThreads;
      next[u] = j < n4 ? load_fresh(pieces + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  load(int(threadIdx.x));
  for (int j0 = int(threadIdx.x); j0 < n4; j0 += kBatch) {
    float4 v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = next[u];
    load(j0 + kBatch);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int j = j0 + u * kThreads;
      if (j < n4) {
        f(4 * j, logit_key(v[u].x));
        f(4 * j + 1, logit_key(v[u].y));
        f(4 * j + 2, logit_key(v[u].z));
        f(4 * j + 3, logit_key(v[u].w));
      }
    }
  }
  for (int i = 4 * n4 + int(threadIdx.x); i < vocab; i += kThreads) f(i, logit_key(load_fresh(logits + i)));
}

// Counted from the top bin of hist[0, bins) down, the bin where the running count reaches `need` (>= 1,
// <= the total): *bin, how many of its items are still needed (*still) and its count (*count), in shared
// memory. A thread sums its run of bins and one block scan finds the run that crosses. All threads call
// it; `scratch`: kWarps ints of shared memory. Ends in a barrier.
__device__ inline void find_crossing_bin(const uint32_t* hist, int bins, int need, int* scratch, int* bin, int* still,
                                         uint32_t* count) {
  const int per = bins / kThreads;  // the digits are 10 to 12 bits: at least 2 bins a thread
  const int top = bins - per * int(threadIdx.x);  // this thread's run: [top - per, top)
  int local = 0;
  for (int j = 1; j <= per; ++j) local += int(hist[top - j]);
  int inclusive = local;  // of this thread's run and every run above it, within the warp first
#pragma unroll
  for (int d = 1; d < MK_WARP_SIZE; d <<= 1) {
    const int other = __float_as_int(shfl(__int_as_float(inclusive), lane_id() >= d ? lane_id() - d : 0));
    if (lane_id() >= d) inclusive += other;
  }
  const int warp = int(threadIdx.x) / MK_WARP_SIZE;
  if (lane_id() == MK_WARP_SIZE - 1) scratch[warp] = inclusive;
  __syncthreads();
  for (int w = 0; w < warp; ++w) inclusive += scratch[w];
  int above = inclusive - local;
  if (above < need && inclusive >= need)
    for (int j = 1; j <= per; ++j) {
      const int h = int(hist[top - j]);
      if (above + h >= need) {
        *bin = top - j, *still = need - above, *count = uint32_t(h);
        break;
      }
      above += h;
    }
  __syncthreads();
}

// A bitonic sort of items[0, padded) (a power of two <= kSortItems) into descending order. A thread
// holds kPerThread consecutive items in registers: partners fewer than kPerThread apart are in the
// thread, up to a warp's items apart are shuffled, only farther ones go through shared memory (10 of
// 2,048 items' 66 steps). All threads call it; ends in a barrier.
inline constexpr int kSortPerThread = 4, kSortItems = kSortPerThread * kThreads;
__device__ inline void bitonic_sort_descending(TokenComposite* items, int padded) {
  constexpr int kPer = kSortPerThread;
  if (padded < 2) return;
  const int first = kPer * int(threadIdx.x);
  const int held = first < padded ? (padded - first < kPer ? padded - first : kPer) : 0;  // kPer, 0, or 2 of 2
  TokenComposite e[kPer];
#pragma unroll
  for (int r = 0; r < kPer; ++r) e[r] = r < held ? items[first + r] : 0ull;
  // A warp none of whose threads holds an item sits out the steps without a barrier.
  const bool warp_idle = kPer * MK_WARP_SIZE * (int(threadIdx.x) / MK_WARP_SIZE) >= padded;
  for (int size = 2; size <= padded; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      if (warp_idle && stride / kPer < MK_WARP_SIZE) continue;
      static_assert(kPer == 4, "the partners within a thread are written out");
      TokenComposite other[kPer];
      if (stride == 1) {  // constant indices keep e[] in registers
        other[0] = e[1], other[1] = e[0], other[2] = e[3], other[3] = e[2];
      } else if (stride == 2) {
        other[0] = e[2], other[1] = e[3], other[2] = e[0], other[3] = e[1];
      } else if (stride / kPer < MK_WARP_SIZE) {
#pragma unroll
        for (int r = 0; r < kPer; ++r) other[r] = shfl_u64(e[r], lane_id() ^ (stride / kPer));
      } else {
        __syncthreads();
#pragma unroll
        for (int r = 0; r < kPer; ++r)
          if (r < held) items[first + r] = e[r];
        __syncthreads();
#pragma unroll
        for (int r = 0; r < kPer; ++r) other[r] = r < held ? items[(first + r) ^ stride] : 0ull;
      }
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
        const int i = first + r;
        const bool keep_larger = ((i & stride) == 0) == ((i & size) == 0);  // the lower of a descending pair
        e[r] = keep_larger ? (e[r] > other[r] ? e[r] : other[r]) : (e[r] < other[r] ? e[r] : other[r]);
      }
    }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kPer; ++r)
    if (r < held) items[first + r] = e[r];
  __syncthreads();
}

// The K (1 <= K <= vocab, K <= kMaxCandidates) largest composites of the `vocab` logits into out[0, K),
// descending. `out`: room for kSortItems composites of shared memory. `hist`: kSampleBins words of shared
// memory holding the counts of the first digit (first_digit) over the whole vocabulary (the LM head's
// blocks counted their rows). `scratch`: kWarps ints. All threads call it; ends in a barrier.
//
// Digits are chosen over the vocabulary until the bin that crosses the K-th place holds at most
// kMaxCandidates composites (with the counted first digit, often none is); one pass then gathers those
// above the bin and the bin's (at most K + kMaxCandidates) into `out`, the bin's remaining digits are
// chosen there, the K to the front, and only they are sorted.
template <int kInFlight>
__device__ void select_top_composites(const float* logits, int vocab, int K, uint32_t* hist, TokenComposite* out,
                                      int* scratch) {
  __shared__ int crossing_bin, still_needed, gathered;
  __shared__ uint32_t crossing_count;
  static_assert(kFirstDigitBits == 12, "the digits below add up to 64 bits after a first one of 12");
  static_assert(kMaxCandidates * 2 <= kSortItems, "the candidates and a crossing bin of as many are gathered together");
  // The composite's digits from the top: the logit key's (12, 10 and 10 bits), then the id's complement's
  // (10, 11, 11). Their shifts (52, 42, 32, 22, 11, 0) a byte each, so that no array is indexed at run
  // time (local memory).
  constexpr uint64_t kShifts = 0x00'0b'16'20'2a'34ull;
  const auto shift_of = [&](int d) { return int((kShifts >> (8 * d)) & 0xff); };
  const auto bins_of = [&](int d) { return 1u << (d == 0 ? 12 : d <= 3 ? 10 : 11); };
  const int id_bits = vocab > 1 ? 32 - __clz(vocab - 1) : 1;  // the bits any id can have set
  TokenComposite prefix = 0, mask = 0;  // the digits chosen so far, and where they are
  int remaining = K;                    // how many of those with `prefix` are still needed
  int d = 0;                            // the next digit
  // Digits the id's complement has as ones whatever the id (above the largest id) need no pass.
  const auto skip_known_digits = [&] {
    while (shift_of(d) < 32 && shift_of(d) >= id_bits) {
      const TokenComposite digit = TokenComposite(bins_of(d) - 1) << shift_of(d);
      prefix |= digit, mask |= digit, ++d;
    }
  };
  // Digit d from the counts in `hist` (counted: each(f) called f with every candidate): the bin crossing
  // the K-th place joins the prefix; returns its count.
  const auto choose = [&](bool counted, auto&& each) {
    const int shift = shift_of(d);
    const uint32_t bins = bins_of(d);
    if (!counted) {
      for (uint32_t b = threadIdx.x; b < bins; b += kThreads) hist[b] = 0;
      __syncthreads();
      each([&](TokenComposite c) {
        if ((c & mask) == prefix) atomicAdd(hist + (uint32_t(c >> shift) & (bins - 1)), 1u);
      });
    }
    __syncthreads();
    find_crossing_bin(hist, int(bins), remaining, scratch, &crossing_bin, &still_needed, &crossing_count);
    prefix |= TokenComposite(crossing_bin) << shift, mask |= TokenComposite(bins - 1) << shift;
    remaining = still_needed;
    ++d;
    return crossing_count;
  };
  const auto each_logit = [&](auto&& f) {
    const uint32_t key_mask = uint32_t(mask >> 32), key_prefix = uint32_t(prefix >> 32);
    for_each_logit_key<kInFlight>(logits, vocab, [&](int i, uint32_t key) {
      if ((key & key_mask) == key_prefix) f(key_composite(key, i));  // the key's test first: 32 bits
    });
  };
  // Over the vocabulary until the crossing bin is small (by the last digit it holds one composite).
  uint32_t count = choose(true, each_logit);
  while (count > uint32_t(kMaxCandidates)) {
    skip_known_digits();
    count = choose(false, each_logit);
  }
  // Those above the crossing bin (K - remaining) and the bin's: (c & mask) >= prefix.
  if (threadIdx.x == 0) gathered = 0;
  __syncthreads();
  const uint32_t key_floor = uint32_t(prefix >> 32);  // a smaller key is below all of them
  for_each_logit_key<kInFlight>(logits, vocab, [&](int i, uint32_t key) {
    if (key < key_floor) return;
    const TokenComposite c = key_composite(key, i);
    if ((c & mask) >= prefix) out[atomicAdd(&gathered, 1)] = c;
  });
  __syncthreads();
  const int n = gathered;
  if (n > K) {
    // The crossing bin's remaining digits over the gathered ones, then the K at or above the prefix to
    // the front (each thread's items read before any is written).
    const auto each_gathered = [&](auto&& f) {
      for (int i = threadIdx.x; i < n; i += kThreads) f(out[i]);
    };
    while (count != uint32_t(remaining)) {
      skip_known_digits();
      count = choose(false, each_gathered);
    }
    static_assert(kSortItems == 4 * kThreads, "four gathered items a thread");
    TokenComposite mine[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = int(threadIdx.x) + j * kThreads;
      mine[j] = i < n ? out[i] : 0ull;
    }
    __syncthreads();
    if (threadIdx.x == 0) gathered = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (int(threadIdx.x) + j * kThreads < n && (mine[j] & mask) >= prefix) out[atomicAdd(&gathered, 1)] = mine[j];
  }
  int padded = 1;
  while (padded < K) padded <<= 1;
  for (int i = K + int(threadIdx.x); i < padded; i += kThreads) out[i] = 0ull;
  __syncthreads();
  bitonic_sort_descending(out, padded);
}

// The first digit's counts of rows [begin, end) of `logits` (written by this block) added into `counts`
// (kSampleBins words, device memory: the sum over the LM head's blocks); `hist`: kSampleBins words of
// shared memory. All threads call it.
__device__ inline void count_first_digit(const float* logits, uint32_t begin, uint32_t end, uint32_t* hist, uint32_t* counts) {
  __syncthreads();  // the block's logits are written, and `hist` is free
  for (int b = threadIdx.x; b < kSampleBins; b += kThreads) hist[b] = 0;
  __syncthreads();
  for (uint32_t r = begin + threadIdx.x; r < end; r += kThreads) atomicAdd(hist + first_digit(logit_key(logits[r])), 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < kSampleBins; b += kThreads)
    if (hist[b] != 0) atomicAdd(counts + b, hist[b]);
}
#endif

}  // namespace mk::dev
