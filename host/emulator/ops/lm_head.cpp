// The CPU twin of the lm_head op (device/ops/lm_head.h), in each column of the step's span that yields a
// distribution (first_sampling_column on): logits[rows] = W_lm * RMSNorm(x) (+ the logit adjustments; -inf
// where the constraint's state does not allow the token) and the block's (max, argmax), with
// log-probabilities asked for its partials for them, when sampling its counts of the logits' first digit;
// nothing on steps that only ingest prompt tokens. A column after drafted tokens sees the adjustments and
// the constraint's state as they will be once those tokens are kept (each penalty added in order, the
// state walked along them), so its distribution is the one a one-token step there would give. Tensor
// parallel: a device's blocks take its rows of the vocabulary and write their logits and partials into the
// home device's buffers (kPushes), reading the request's state (adjustments, counts, constraint) there.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_lm_head(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  const StepSpan span = s.span(c, step);
  if (span.index + span.count < s.run.ingest) return;  // prompt tokens only: nobody needs their logits
  const size_t H = size_t(s.cfg.hidden_size), V = size_t(s.cfg.vocab_size), slots = size_t(s.schedule.lm_head_slots);
  const size_t rows = in.end - in.begin;
  EmulatorState& h = s.home();  // where the logits go and the request's state lies (this device without tensor parallel)
  const bool adjusting = s.run.adjust.active();
  std::vector<float> adjust;  // the block's rows of the adjustments, as the column sees them
  if (adjusting) {
    const float* a = h.read(c, h.logit_adjust, in.begin, in.end);
    adjust.assign(a, a + rows);
  }
  // The constraint's state and the budget left for the first column's token (runtime/constraint_budget.h).
  int state = -1, budget = 0;
  if (s.run.constraint) {
    const int32_t* cs = h.read(c, h.constraint_state, 0, 2);
    state = cs[0], budget = cs[1];
  }
  bool reachable = true;  // false past a draft the constraint does not allow: no kept token leads there
  const int j0 = first_sampling_column(span, s.run.ingest);
  std::vector<std::pair<int32_t, uint32_t>> counted;  // drafted tokens so far and their counts then
  for (int j = j0; j < span.count; ++j) {
    if (j > j0) {  // the drafted token column j ran on, kept before column j's token
      const int32_t d = *h.read(c, h.tokens, size_t(span.index + j), size_t(span.index + j + 1));
      if (state >= 0 && reachable) {
        if (s.is_eos(d) || !s.run.constraint->allowed(state, budget, d)) reachable = false;
        else state = s.run.constraint->advance(state, d), --budget;
      }
      if (adjusting) {
        auto it = std::find_if(counted.begin(), counted.end(), [&](const auto& e) { return e.first == d; });
        if (it == counted.end()) counted.emplace_back(d, *h.read(c, h.token_counts, size_t(d), size_t(d) + 1)), it = counted.end() - 1;
        if (uint32_t(d) >= in.begin && uint32_t(d) < in.end)
          adjust[size_t(d) - in.begin] += penalty_after_sample(it->second, s.run.adjust.frequency_penalty, s.run.adjust.presence_penalty);
        ++it->second;
      }
    }
    const auto xn = s.rms_norm(residual_input(s, c, in, j).data(), H, s.f32(s.layout.final_norm));
    float* out = h.write(c, h.logits, size_t(j) * V + in.begin, size_t(j) * V + in.end);
    float best = -std::numeric_limits<float>::infinity();
    int32_t best_index = int32_t(in.begin);
    for (uint32_t r = in.begin; r < in.end; ++r) {
      out[r - in.begin] = s.dot_row(s.layout.lm_head, r, H, xn.data());
      if (adjusting) out[r - in.begin] += adjust[r - in.begin];
      if (state >= 0 && (!reachable || !s.run.constraint->allowed(state, budget, int32_t(r)))) out[r - in.begin] = -std::numeric_limits<float>::infinity();
      if (out[r - in.begin] > best) best = out[r - in.begin], best_index = int32_t(r);
    }
    const size_t slot = size_t(j) * slots + in.slot;  // this block's partials of column j
    if (s.run.on_logprobs) {  // the block's partials for the log-probabilities (device/top_tokens.h)
      const float mx = *std::max_element(out, out + rows);
      double sum = 0;  // a block whose rows the constraint all masks: (-inf, 0)
      if (mx > -std::numeric_limits<float>::infinity())
        for (size_t i = 0; i < rows; ++i) sum += std::exp(double(out[i]) - double(mx));
      float* lse = h.write(c, h.lm_logsumexp, 2 * slot, 2 * slot + 2);
      lse[0] = mx, lse[1] = float(sum);
      std::vector<TokenComposite> tokens(rows);
      for (size_t i = 0; i < rows; ++i) tokens[i] = token_composite(out[i], int32_t(in.begin + i));
      const size_t top = std::min(size_t(s.run.top_logprobs), rows);
      std::partial_sort(tokens.begin(), tokens.begin() + std::ptrdiff_t(top), tokens.end(), std::greater<>());
      TokenComposite* list = h.write(c, h.lm_top, slot * kMaxTopLogprobs, (slot + 1) * kMaxTopLogprobs);
      for (size_t i = 0; i < size_t(kMaxTopLogprobs); ++i) list[i] = i < top ? tokens[i] : 0ull;
    }
    if (!s.run.sampling.greedy()) {  // the first digit's counts for the sample's select (device/select_top.h)
      uint32_t* counts = h.accumulate(c, h.lm_key_counts, size_t(j) * kSampleBins, size_t(j + 1) * kSampleBins);
      for (uint32_t r = in.begin; r < in.end; ++r) ++counts[first_digit(logit_key(out[r - in.begin]))];
    }
    *h.write(c, h.lm_best_value, slot, slot + 1) = best;
    *h.write(c, h.lm_best_index, slot, slot + 1) = best_index;
  }
}

}  // namespace mk::emu
