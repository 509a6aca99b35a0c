// The CPU twin of the sample op (device/ops/sample.h): the next token (greedy: the blocks' argmax; else
// runtime/sampling.h's rule), its log-probabilities, its penalty, its callback, and the stop checks;
// non-finite logits stop the launch.
#include "host/emulator/ops/ops.h"

#include <numeric>

#include "runtime/error.h"

namespace mk::emu {

namespace {

// The sampled token's record from the LM head blocks' partials, merged as the kernel merges them.
TokenLogprobs merged_logprobs(EmulatorState& s, const OpCtx& c, const float* logits, int32_t token) {
  const size_t slots = s.lm_best_value.data.size();
  const float* lse = s.read(c, s.lm_logsumexp, 0, 2 * slots);
  const TokenComposite* lists = s.read(c, s.lm_top, 0, slots * kMaxTopLogprobs);
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t b = 0; b < slots; ++b) mx = std::max(mx, lse[2 * b]);
  double sum = 0;
  for (size_t b = 0; b < slots; ++b)
    if (lse[2 * b + 1] > 0) sum += double(lse[2 * b + 1]) * std::exp(double(lse[2 * b]) - double(mx));
  const float log_sum = mx + float(std::log(sum));
  std::vector<TokenComposite> all(lists, lists + slots * kMaxTopLogprobs);
  const int top = s.run.top_logprobs;
  std::partial_sort(all.begin(), all.begin() + top, all.end(), std::greater<>());
  TokenLogprobs r;
  r.token = token;
  r.logprob = logits[token] - log_sum;
  r.top_count = top;
  for (int i = 0; i < top; ++i) r.top_ids[i] = composite_id(all[size_t(i)]), r.top_logprobs[i] = composite_logit(all[size_t(i)]) - log_sum;
  r.drop_impossible();  // as the GPU backend does
  return r;
}

}  // namespace

void emulate_sample(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  StopReason stop = StopReason::None;
  if (int(step) + 1 >= s.run.ingest && s.run.max_new > 0) {
    const float* l = s.read(c, s.logits, 0, s.logits.data.size());
    const int state = s.run.constraint ? *s.read(c, s.constraint_state, 0, 1) : -1;
    s.check_finite(l, step, state);
    int32_t token;
    if (s.run.sampling.greedy()) {  // reduce the lm_head blocks' partial argmax (ties: lowest id)
      const float* v = s.read(c, s.lm_best_value, 0, s.lm_best_value.data.size());
      const int32_t* id = s.read(c, s.lm_best_index, 0, s.lm_best_index.data.size());
      size_t best = 0;
      for (size_t i = 1; i < s.lm_best_value.data.size(); ++i)
        if (v[i] > v[best] || (v[i] == v[best] && id[i] < id[best])) best = i;
      token = id[best];
    } else {
      // The LM head blocks' counts of the first digit: whole (every block added its rows), then cleared
      // for the next step's, as the kernel's select reads and clears them.
      const uint32_t* counts = s.read(c, s.lm_key_counts, 0, size_t(kSampleBins));
      const uint64_t counted = std::accumulate(counts, counts + kSampleBins, uint64_t(0));
      if (counted != s.logits.data.size())
        fail("step {}: the LM head's first-digit counts hold {} logits of {}", step, counted, s.logits.data.size());
      std::fill_n(s.write(c, s.lm_key_counts, 0, size_t(kSampleBins)), kSampleBins, 0u);
      token = sample_token(std::vector<float>(l, l + s.logits.data.size()), s.run.sampling, uint64_t(s.run.start) + step);
    }
    if (s.opt.record_logits) s.recorded.emplace_back(l, l + s.logits.data.size());
    auto& r = s.run.result;
    if (r.tokens.empty())
      r.stats.first_token_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.run.t0).count();
    r.tokens.push_back(token);
    if (step + 1 < s.tokens.data.size()) *s.write(c, s.tokens, step + 1, step + 2) = token;
    if (s.run.on_logprobs) (*s.run.on_logprobs)(merged_logprobs(s, c, l, token));
    if (s.run.adjust.active()) {  // the token's penalty, for the next steps' LM head
      uint32_t* count = s.write(c, s.token_counts, size_t(token), size_t(token) + 1);
      *s.write(c, s.logit_adjust, size_t(token), size_t(token) + 1) +=
          penalty_after_sample((*count)++, s.run.adjust.frequency_penalty, s.run.adjust.presence_penalty);
    }
    if (*s.run.on_token) (*s.run.on_token)(token);
    bool eos = std::find(s.cfg.eos_token_ids.begin(), s.cfg.eos_token_ids.end(), token) != s.cfg.eos_token_ids.end();
    if (state >= 0 && !eos) {  // the constraint's state moved along the token's bytes; complete: the end
      if (!s.run.constraint->allowed(state, token)) fail("step {}: token {} is not allowed in constraint state {}", step, token, state);
      const int next = s.run.constraint->advance(state, token);
      *s.write(c, s.constraint_state, 0, 1) = next;
      eos = s.run.constraint->state_end[size_t(next)] != 0;
    }
    if (eos) stop = StopReason::Eos;
    else if (int(r.tokens.size()) >= s.run.max_new) stop = StopReason::MaxTokens;
    else if (s.cancel_flag.load()) stop = StopReason::Cancelled;
    else if (s.run.start + int(step) + 1 >= s.opt.context) stop = StopReason::ContextFull;
  } else if (int(step) + 1 >= s.run.ingest) {
    stop = StopReason::MaxTokens;  // max_new_tokens == 0: ingest only
  } else if (s.cancel_flag.load()) {
    stop = StopReason::Cancelled;
  }
  *s.write(c, s.stop_at, step, step + 1) = stop != StopReason::None;
  if (stop != StopReason::None) s.run.result.stop = stop;
}

}  // namespace mk::emu
