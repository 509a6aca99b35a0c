// The CPU twin of the sample op (device/ops/sample.h): in each column of the step's span that yields a
// distribution, in order, the next token (greedy: the blocks' argmax; else runtime/sampling.h's rule), its
// log-probabilities, its penalty, its callback and the stop checks, while the token it samples is the one
// the next column ran on; non-finite logits stop the launch. Then the next step's span. Tensor parallel: on
// the home device, which writes the token and the stop flag on every device.
#include "host/emulator/ops/ops.h"

#include <numeric>

#include "runtime/error.h"

namespace mk::emu {

namespace {

// The sampled token's record from the LM head blocks' partials of its column, merged as the kernel merges
// them.
TokenLogprobs merged_logprobs(EmulatorState& s, const OpCtx& c, int j, const float* logits, int32_t token) {
  const size_t slots = size_t(s.schedule.lm_head_slots), first = size_t(j) * slots;
  const float* lse = s.read(c, s.lm_logsumexp, 2 * first, 2 * (first + slots));
  const TokenComposite* lists = s.read(c, s.lm_top, first * kMaxTopLogprobs, (first + slots) * kMaxTopLogprobs);
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

// The token of column j's distribution at `position`.
int32_t sample_column(EmulatorState& s, const OpCtx& c, uint32_t step, int j, const float* l, int position) {
  const size_t slots = size_t(s.schedule.lm_head_slots), first = size_t(j) * slots;
  if (s.run.sampling.greedy()) {  // reduce the lm_head blocks' partial argmax (ties: lowest id)
    const float* v = s.read(c, s.lm_best_value, first, first + slots);
    const int32_t* id = s.read(c, s.lm_best_index, first, first + slots);
    size_t best = 0;
    for (size_t i = 1; i < slots; ++i)
      if (v[i] > v[best] || (v[i] == v[best] && id[i] < id[best])) best = i;
    return id[best];
  }
  // The LM head blocks' counts of the first digit: whole (every block added its rows). emulate_sample
  // clears them for the next step's after its columns, as the kernel's select does.
  const size_t V = size_t(s.cfg.vocab_size), bins = size_t(kSampleBins);
  const uint32_t* counts = s.read(c, s.lm_key_counts, size_t(j) * bins, size_t(j + 1) * bins);
  const uint64_t counted = std::accumulate(counts, counts + kSampleBins, uint64_t(0));
  if (counted != V) fail("step {}: the LM head's first-digit counts hold {} logits of {}", step, counted, V);
  return sample_token(std::vector<float>(l, l + V), s.run.sampling, uint64_t(position));
}

// What every device's next step reads (the token, the stop flag, the next step's span and drafts): written on every device (tensor
// parallel: the home device's sample op pushes it, kPushes; else this device alone).
template <class T>
void write_on_every_device(EmulatorState& s, const OpCtx& c, Buffer<T> EmulatorState::*buffer, size_t at, T value) {
  for (EmulatorState* d : s.devices) *d->write(c, d->*buffer, at, at + 1) = value;
}

}  // namespace

void emulate_sample(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  const size_t V = size_t(s.cfg.vocab_size);
  StopReason stop = StopReason::None;
  int32_t next_index = span.index + span.count;  // past the tokens the step ran, unless a column's token differs
  if (span.index + span.count >= s.run.ingest && s.run.max_new > 0) {
    int state = s.run.constraint ? *s.read(c, s.constraint_state, 0, 1) : -1;
    auto& r = s.run.result;
    for (int j = first_sampling_column(span, s.run.ingest); j < span.count && stop == StopReason::None; ++j) {
      const int position = s.run.start + span.index + j;
      const float* l = s.read(c, s.logits, size_t(j) * V, size_t(j + 1) * V);
      // The budget the LM head masked this column's logits for (the tokens left, this one included).
      const int32_t budget = constraint::constraint_budget(s.run.max_new, int32_t(r.tokens.size()), s.opt.context, position);
      const int32_t set = state >= 0 ? constraint::constraint_set(s.run.constraint->state_sets.data(), state, budget) : -1;
      s.check_finite(l, position, set);
      const int32_t token = sample_column(s, c, step, j, l, position);
      if (s.opt.record_logits) s.recorded.emplace_back(l, l + V);
      if (r.tokens.empty())
        r.stats.first_token_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.run.t0).count();
      r.tokens.push_back(token);
      // The next column ran on the drafted token after this one: it stands only if it is this token.
      const size_t slot = size_t(span.index + j + 1);
      const bool next_column_stands = j + 1 < span.count && *s.read(c, s.tokens, slot, slot + 1) == token;
      if (next_column_stands) ++r.stats.accepted_tokens;
      if (slot < s.tokens.data.size()) write_on_every_device(s, c, &EmulatorState::tokens, slot, token);
      if (!s.history.data.empty() && size_t(position) + 1 < s.history.data.size())
        *s.write(c, s.history, size_t(position) + 1, size_t(position) + 2) = token;
      next_index = int32_t(slot);
      if (s.run.on_logprobs) (*s.run.on_logprobs)(merged_logprobs(s, c, j, l, token));
      if (s.run.adjust.active()) {  // the token's penalty, for the next steps' LM head
        uint32_t* count = s.write(c, s.token_counts, size_t(token), size_t(token) + 1);
        *s.write(c, s.logit_adjust, size_t(token), size_t(token) + 1) +=
            penalty_after_sample((*count)++, s.run.adjust.frequency_penalty, s.run.adjust.presence_penalty);
      }
      if (*s.run.on_token) (*s.run.on_token)(token);
      bool eos = s.is_eos(token);
      if (state >= 0 && !eos) {  // the constraint's state moved along the token's bytes; complete: the end
        if (!s.run.constraint->set_allows(set, token))
          fail("step {}: token {} is not allowed in constraint state {} with {} tokens left", step, token, state, budget);
        state = s.run.constraint->advance(state, token);
        int32_t* cs = s.write(c, s.constraint_state, 0, 2);
        cs[0] = state;
        cs[1] = constraint::constraint_budget(s.run.max_new, int32_t(r.tokens.size()), s.opt.context, position + 1);
        eos = s.run.constraint->state_end[size_t(state)] != 0;
      }
      if (eos) stop = StopReason::Eos;
      else if (int(r.tokens.size()) >= s.run.max_new) stop = StopReason::MaxTokens;
      else if (s.cancel_flag.load()) stop = StopReason::Cancelled;
      else if (position + 1 >= s.opt.context) stop = StopReason::ContextFull;
      if (!next_column_stands) break;
    }
    if (!s.run.sampling.greedy()) {  // every column the LM head counted, those after a rejected draft too
      const size_t first = size_t(first_sampling_column(span, s.run.ingest)) * size_t(kSampleBins);
      const size_t end = size_t(span.count) * size_t(kSampleBins);
      std::fill_n(s.write(c, s.lm_key_counts, first, end), end - first, 0u);
    }
  } else if (span.index + span.count >= s.run.ingest) {
    stop = StopReason::MaxTokens;  // max_new_tokens == 0: ingest only
  } else if (s.cancel_flag.load()) {
    stop = StopReason::Cancelled;
  }
  s.run.next_index = next_index;
  if (stop == StopReason::None && s.schedule.step_tokens > 1 && step + 1 < s.step_spans.data.size()) {
    const int room = s.opt.context - s.run.start;
    StepSpan next = next_step_span(next_index, s.run.ingest, s.schedule.step_tokens, room);
    if (next_index >= s.run.ingest && s.draft_max > 0) {  // generating: the newest token and its drafts
      const int wanted = std::min({s.draft_max, room - next_index - 1, s.run.max_new - int(s.run.result.tokens.size()) - 1});
      if (wanted > 0) {
        const int known = s.run.start + next_index + 1;  // the history up to the newest token
        const SpeculationParams& sp = s.opt.speculation;
        int32_t drafts[kMaxStepTokens] = {};
        const int k = lookup_drafts(s.read(c, s.history, 0, size_t(known)), known, sp.lookup_min, sp.lookup_max, wanted, drafts);
        for (int i = 0; i < k; ++i) write_on_every_device(s, c, &EmulatorState::tokens, size_t(next_index + 1 + i), drafts[i]);
        next.count = 1 + k;
        s.run.result.stats.drafted_tokens += k;
      }
    }
    write_on_every_device(s, c, &EmulatorState::step_spans, step + 1, next);
  }
  write_on_every_device(s, c, &EmulatorState::stop_at, step, uint8_t(stop != StopReason::None));
  if (stop != StopReason::None) s.run.result.stop = stop;
}

}  // namespace mk::emu
