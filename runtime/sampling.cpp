#include "runtime/sampling.h"

#include <algorithm>
#include <numeric>

namespace mk {

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
