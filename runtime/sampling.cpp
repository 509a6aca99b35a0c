#include "runtime/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "runtime/error.h"

namespace mk {
namespace {

// Token ids ordered by their logits, descending, ties to the lower id (runtime/sampling.h's order).
auto by_logit(const float* logits) {
  return [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
}

}  // namespace

std::string sampling_error(const SamplingParams& p, const SamplingNames& n) {
  // Written as !(valid) so that NaN, which fails every comparison, is rejected too.
  if (!(std::isfinite(p.temperature) && p.temperature >= 0.f))
    return fmt::format("{} {}: the temperature must be a finite number >= 0 (0: greedy)", n.temperature, p.temperature);
  if (p.top_k < 0) return fmt::format("{} {}: top-k must be >= 0 (0: off)", n.top_k, p.top_k);
  if (!(p.top_p > 0.f && p.top_p <= 1.f))
    return fmt::format("{} {}: top-p must be greater than 0 and at most 1 (1: off)", n.top_p, p.top_p);
  if (!(p.min_p >= 0.f && p.min_p <= 1.f))
    return fmt::format("{} {}: min-p must be between 0 and 1 (0: off)", n.min_p, p.min_p);
  return {};
}

void validate_sampling(const SamplingParams& params, const SamplingNames& names) {
  if (std::string e = sampling_error(params, names); !e.empty()) throw Error(e);
}

int32_t sample_token(const std::vector<float>& logits, const SamplingParams& params, uint64_t step) {
  const int vocab = int(logits.size());
  if (params.greedy()) {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // first maximum
  }
  const int k = params.candidate_count(vocab, int(std::count_if(logits.begin(), logits.end(), [](float v) { return v != -INFINITY; })));
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit(logits.data()));
  std::vector<float> values(static_cast<size_t>(k)), probs(static_cast<size_t>(k)), running(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) values[size_t(i)] = logits[size_t(ids[size_t(i)])];
  const int chosen = choose_candidate(values.data(), k, params, uniform01(params.seed, step), probs.data(), running.data());
  return ids[size_t(chosen)];
}

std::string logit_adjustments_error(const LogitAdjustments& a, int vocab) {
  if (a.bias.size() > kMaxLogitBiasEntries)
    return fmt::format("logit_bias: {} entries, at most {}", a.bias.size(), kMaxLogitBiasEntries);
  for (const auto& [token, bias] : a.bias) {
    if (token < 0 || token >= vocab) return fmt::format("logit_bias: token {} is outside the vocabulary [0, {})", token, vocab);
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias))
      return fmt::format("logit_bias: the bias {} of token {} must be between {} and {}", bias, token, -kMaxLogitBias, kMaxLogitBias);
  }
  if (!(a.frequency_penalty >= -kMaxPenalty && a.frequency_penalty <= kMaxPenalty))
    return fmt::format("frequency_penalty {} must be between {} and {}", a.frequency_penalty, -kMaxPenalty, kMaxPenalty);
  if (!(a.presence_penalty >= -kMaxPenalty && a.presence_penalty <= kMaxPenalty))
    return fmt::format("presence_penalty {} must be between {} and {}", a.presence_penalty, -kMaxPenalty, kMaxPenalty);
  return {};
}

std::vector<float> initial_logit_adjustment(const LogitAdjustments& a, int vocab) {
  std::vector<float> adjust(size_t(vocab), 0.0f);
  for (const auto& [token, bias] : a.bias) adjust[size_t(token)] += bias;
  return adjust;
}

TokenLogprobs token_logprobs(const float* logits, int vocab, int32_t token, int top) {
  float max = -INFINITY;
  for (int i = 0; i < vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - double(max));
  const float lse = max + float(std::log(sum));
  TokenLogprobs r;
  r.token = token;
  r.logprob = logits[token] - lse;
  r.top_count = std::min(std::max(top, 0), std::min(kMaxTopLogprobs, vocab));
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + r.top_count, ids.end(), by_logit(logits));
  for (int i = 0; i < r.top_count; ++i) r.top_ids[i] = ids[size_t(i)], r.top_logprobs[i] = logits[ids[size_t(i)]] - lse;
  return r;
}

}  // namespace mk
