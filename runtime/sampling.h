// Sampling parameters and the one sampling rule that the emulator and the GPU kernel both implement.
//
// Rule, applied to the logits of one step (the order of Hugging Face's logits warpers):
//  1. temperature <= 0 or top_k == 1: greedy, argmax with ties to the lowest token id.
//  2. candidates: the K highest logits, K = top_k if 0 < top_k <= kMaxCandidates, else kMaxCandidates;
//     ordered by logit descending, ties by token id ascending.
//  3. probabilities p_i = softmax(logit_i / temperature) over the candidates.
//  4. top-p (top_p < 1): keep the shortest prefix whose probability sum reaches top_p (at least one).
//  5. min-p (min_p > 0): keep those with p_i >= min_p * p_0.
//  6. draw u = uniform(seed, step) in [0, 1); return the first candidate whose running sum of the kept
//     probabilities exceeds u * (their total).
// The running sums are added in a fixed order (chunked_running_sums below), so that the GPU, which adds
// them in parallel, chooses exactly what the CPU chooses.
// The cap of kMaxCandidates tokens is a documented approximation of top-p/min-p without top-k: the
// tokens beyond the 1024 most likely ones are never drawn.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "runtime/portability.h"

namespace mk {

inline constexpr int kMaxCandidates = 1024;
// The candidates are found by a radix select over logit keys (device/select_top.h) whose first digit,
// the key's top 12 bits (an eighth of an octave of logit), the LM head counts as it makes the logits
// (KernelParams::lm_key_counts): fine enough that the bin crossing the 1,024th place usually holds few
// enough logits to be gathered in one pass.
inline constexpr int kFirstDigitBits = 12;
inline constexpr int kSampleBins = 1 << kFirstDigitBits;

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: off (the candidate cap still applies)
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  MK_HD bool greedy() const { return temperature <= 0.0f || top_k == 1; }
  // The candidates the rule draws from, among `above_minus_inf` logits that are not -inf (a constraint
  // masks tokens to -inf): never a masked token, whatever the draw's rounding.
  MK_HD int candidate_count(int vocab, int above_minus_inf) const {
    int k = (top_k > 0 && top_k <= kMaxCandidates) ? top_k : kMaxCandidates;
    if (above_minus_inf < vocab) vocab = above_minus_inf > 0 ? above_minus_inf : 1;
    return k < vocab ? k : vocab;
  }
};

// What the sampling values are called where they come from, for messages: the C API's field names by
// default, the command-line flags in the tools.
struct SamplingNames {
  const char* temperature = "temperature";
  const char* top_k = "top_k";
  const char* top_p = "top_p";
  const char* min_p = "min_p";
};
inline constexpr SamplingNames kSamplingFlags{"--temp", "--top-k", "--top-p", "--min-p"};

// The one validity rule for sampling values, applied the same way by the tools, the C API and both
// backends, whatever the temperature (a value that only greedy decoding ignores is still a mistake):
// temperature finite and >= 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1]. Returns what is wrong with
// the first invalid value, naming it as `names` says; "" when all are valid.
std::string sampling_error(const SamplingParams& params, const SamplingNames& names = {});
// Throws mk::Error with sampling_error's message.
void validate_sampling(const SamplingParams& params, const SamplingNames& names = {});

// Counter-based RNG (splitmix64 finaliser over seed and counter): the same bits on CPU and GPU.
MK_HD_INLINE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 random bits; `counter` is the generation step.
MK_HD_INLINE float uniform01(uint64_t seed, uint64_t counter) {
  const uint64_t bits = mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ (counter * 0xd1b54a32d192ed03ull));
  return float(bits >> 40) * (1.0f / 16777216.0f);
}

// The running sums of the candidates' probabilities that steps 4 and 6 use, in chunks of kSumChunk:
// left to right within a chunk, each chunk's start the sum of the chunks before it (left to right too),
// running[i] = start + within. The GPU sums a chunk a lane; this order makes its sums the CPU's floats.
inline constexpr int kSumChunk = 32;
static_assert(kMaxCandidates <= kSumChunk * kSumChunk, "a lane a chunk, one warp");
MK_HD_INLINE void chunked_running_sums(const float* probs, int n, float* running) {
  float start = 0.0f;
  for (int c = 0; c < n; c += kSumChunk) {
    float within = 0.0f;
    for (int i = c; i < n && i < c + kSumChunk; ++i) {
      within += probs[i];
      running[i] = start + within;
    }
    start += within;
  }
}

// The probability weight of step 3 (relative to the top candidate's): exp((logit - top) / temperature).
MK_HD_INLINE float candidate_weight(float logit, float top_logit, float inv_temperature) {
  return expf((logit - top_logit) * inv_temperature);
}

// Steps 4-6 over the candidates' weights `probs` and their running sums: the index of the chosen one.
// Each step is "the first index where ...", which the GPU answers a chunk a lane.
MK_HD_INLINE int choose_from_running(const float* probs, const float* running, int n, const SamplingParams& p, float u) {
  int kept = n;
  if (p.top_p < 1.0f) {
    const float enough = p.top_p * running[n - 1];
    for (int i = 0; i < n; ++i)
      if (running[i] >= enough) {
        kept = i + 1;
        break;
      }
  }
  if (p.min_p > 0.0f) {
    int m = 1;
    while (m < kept && probs[m] >= p.min_p * probs[0]) ++m;
    kept = m;
  }
  const float target = u * running[kept - 1];
  for (int i = 0; i < kept; ++i)
    if (running[i] > target) return i;
  return kept - 1;
}

// Applies steps 3-6 to candidates already ordered as in step 2 (`logits` holds their logit values) and
// returns the index of the chosen candidate. `probs` and `running` are scratch space of `n` floats each.
inline int choose_candidate(const float* logits, int n, const SamplingParams& p, float u, float* probs, float* running) {
  const float inv_t = 1.0f / p.temperature;
  for (int i = 0; i < n; ++i) probs[i] = candidate_weight(logits[i], logits[0], inv_t);
  chunked_running_sums(probs, n, running);
  return choose_from_running(probs, running, n, p, u);
}

// CPU implementation of the whole rule over a full logits vector (used by the emulator).
int32_t sample_token(const std::vector<float>& logits, const SamplingParams& params, uint64_t step);

// ---- Changes to the logits before sampling (OpenAI's definitions) ----
// A token's logit becomes logit + bias - c * frequency_penalty - (c > 0) * presence_penalty, c being the
// times it was sampled earlier in this reply (the prompt does not count). Every rule above then runs on
// these logits, greedy included; so do the log-probabilities below.
inline constexpr float kMaxLogitBias = 100.0f, kMaxPenalty = 2.0f;
inline constexpr size_t kMaxLogitBiasEntries = 1024;

struct LogitAdjustments {
  std::vector<std::pair<int32_t, float>> bias;  // (token, bias); a token listed twice adds both
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  bool active() const { return !bias.empty() || frequency_penalty != 0.0f || presence_penalty != 0.0f; }
};

// What sampling token j, sampled `count_before` times earlier in the reply, adds to its adjustment.
MK_HD_INLINE float penalty_after_sample(uint32_t count_before, float frequency_penalty, float presence_penalty) {
  return -(frequency_penalty + (count_before == 0 ? presence_penalty : 0.0f));
}

// Biases in [-kMaxLogitBias, kMaxLogitBias] on tokens in [0, vocab), at most kMaxLogitBiasEntries of them;
// penalties finite in [-kMaxPenalty, kMaxPenalty]. Returns what is wrong, naming the field; "" when valid.
std::string logit_adjustments_error(const LogitAdjustments& a, int vocab);

// The dense starting adjustment of every token (the biases summed), as both backends upload it.
std::vector<float> initial_logit_adjustment(const LogitAdjustments& a, int vocab);

// ---- Log-probabilities of the sampled tokens ----
// log_softmax over the whole vocabulary of the adjusted logits, at temperature 1: the model's
// distribution after logit_bias and the penalties, before temperature and the top-k / top-p / min-p
// truncation (which only choose among these tokens). Computed by the kernel's sample op (device/ops/
// sample.h) and its emulator twin; the same record on both, written to host memory per token.
inline constexpr int kMaxTopLogprobs = 20;

// Tokens in order of their logits, as one unsigned 64-bit number each: the logit's order-preserving key
// (a larger float, a larger key; never 0) above the id complemented, so that the larger composite is the
// larger logit, ties to the lower id. 0 is no token.
using TokenComposite = unsigned long long;
MK_HD_INLINE uint32_t logit_key(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
MK_HD_INLINE uint32_t first_digit(uint32_t key) { return key >> (32 - kFirstDigitBits); }
MK_HD_INLINE TokenComposite key_composite(uint32_t key, int32_t id) { return TokenComposite(key) << 32 | (0xffffffffu - uint32_t(id)); }
MK_HD_INLINE TokenComposite token_composite(float logit, int32_t id) { return key_composite(logit_key(logit), id); }
MK_HD_INLINE int32_t composite_id(TokenComposite c) { return int32_t(0xffffffffu - uint32_t(c & 0xffffffffull)); }
MK_HD_INLINE float composite_logit(TokenComposite c) {
  const uint32_t k = uint32_t(c >> 32), u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t top_count = 0;                   // entries of the two arrays in use: the most likely first,
  int32_t top_ids[kMaxTopLogprobs] = {};   // ties by the lower token id
  float top_logprobs[kMaxTopLogprobs] = {};
  // The alternatives end before the first of log-probability -inf: tokens a constraint did not allow
  // are no alternatives (the backends apply it to what the kernel lists).
  void drop_impossible() {
    while (top_count > 0 && top_logprobs[top_count - 1] == -std::numeric_limits<float>::infinity()) --top_count;
  }
};

// The record of `token` and the `top` (<= kMaxTopLogprobs) most likely tokens of `logits`, computed
// directly over the whole vector (log-sum-exp in double): the definition that the kernel's per-block
// computation is checked against.
TokenLogprobs token_logprobs(const float* logits, int vocab, int32_t token, int top);

}  // namespace mk
