// The CPU twin of the sample op (device/ops/sample.h): the next token (greedy: the blocks' argmax; else
// runtime/sampling.h's rule), its callback, and the stop checks; non-finite logits stop the launch.
#include "host/emulator/ops/ops.h"

namespace mk::emu {

void emulate_sample(EmulatorState& s, const OpCtx& c, const Instr& in, uint32_t step) {
  StopReason stop = StopReason::None;
  if (int(step) + 1 >= s.run.ingest && s.run.max_new > 0) {
    const float* l = s.read(c, s.logits, 0, s.logits.data.size());
    s.check_finite(l, step);
    int32_t token;
    if (s.run.sampling.greedy()) {  // reduce the lm_head blocks' partial argmax (ties: lowest id)
      const float* v = s.read(c, s.lm_best_value, 0, s.lm_best_value.data.size());
      const int32_t* id = s.read(c, s.lm_best_index, 0, s.lm_best_index.data.size());
      size_t best = 0;
      for (size_t i = 1; i < s.lm_best_value.data.size(); ++i)
        if (v[i] > v[best] || (v[i] == v[best] && id[i] < id[best])) best = i;
      token = id[best];
    } else {
      token = sample_token(std::vector<float>(l, l + s.logits.data.size()), s.run.sampling, uint64_t(s.run.start) + step);
    }
    if (s.opt.record_logits) s.recorded.emplace_back(l, l + s.logits.data.size());
    auto& r = s.run.result;
    if (r.tokens.empty())
      r.stats.first_token_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.run.t0).count();
    r.tokens.push_back(token);
    if (step + 1 < s.tokens.data.size()) *s.write(c, s.tokens, step + 1, step + 2) = token;
    if (*s.run.on_token) (*s.run.on_token)(token);
    const bool eos = std::find(s.cfg.eos_token_ids.begin(), s.cfg.eos_token_ids.end(), token) != s.cfg.eos_token_ids.end();
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
