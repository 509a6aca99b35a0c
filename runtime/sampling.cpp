#include "runtime/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "runtime/error.h"

namespace mk {

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
  const int k = params.candidate_count(vocab);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  auto before = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
  std::vector<float> values(static_cast<size_t>(k)), scratch(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) values[size_t(i)] = logits[size_t(ids[size_t(i)])];
  const int chosen = choose_candidate(values.data(), k, params, uniform01(params.seed, step), scratch.data());
  return ids[size_t(chosen)];
}

}  // namespace mk
