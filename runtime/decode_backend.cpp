#include "runtime/decode_backend.h"

#include "runtime/token_automaton.h"


namespace mk {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::None: return "none";
    case StopReason::Eos: return "eos";
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::Cancelled: return "cancelled";
    case StopReason::ContextFull: return "context_full";
  }
  return "?";
}

double GenerateStats::decode_tokens_per_second() const {
  const double t = total_seconds - first_token_seconds;
  return generated_tokens > 1 && t > 0 ? double(generated_tokens - 1) / t : 0.0;
}

void check_request(const GenerateRequest& req, int vocab) {
  if (req.max_new_tokens < 0)
    throw RequestError(fmt::format("generate: max_new_tokens must be >= 0 (got {})", req.max_new_tokens));
  // The one sampling rule (runtime/sampling.h), reported as a bad request.
  if (std::string e = sampling_error(req.sampling, {}); !e.empty()) throw RequestError("generate: " + e);
  if (std::string e = logit_adjustments_error(req.adjust, vocab); !e.empty()) throw RequestError("generate: " + e);
  if (req.constraint && req.constraint->vocabulary->size() != vocab)
    throw RequestError(fmt::format("generate: the constraint was compiled for a vocabulary of {} tokens; the model has {}",
                                   req.constraint->vocabulary->size(), vocab));
  if (req.top_logprobs < 0 || req.top_logprobs > kMaxTopLogprobs)
    throw RequestError(fmt::format("generate: top_logprobs must be between 0 and {} (got {})", kMaxTopLogprobs, req.top_logprobs));
}

std::vector<int32_t> tokens_to_ingest(const std::vector<int32_t>& input, int32_t pending_token, int position,
                                      int context, int vocab_size) {
  std::vector<int32_t> tokens;
  if (pending_token >= 0) tokens.push_back(pending_token);
  tokens.insert(tokens.end(), input.begin(), input.end());
  if (tokens.empty()) throw RequestError("generate: nothing to run (empty prompt and no previous reply to continue)");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      throw RequestError(
          fmt::format("generate: token {} at index {} is outside the vocabulary [0, {})", tokens[i], i, vocab_size));
  if (int64_t(position) + int64_t(tokens.size()) > context)
    throw RequestError(fmt::format(
        "generate: the prompt of {} tokens does not fit the context: {} tokens already in the cache + {} > {} "
        "(raise the context with -c, or reset the session)",
        tokens.size(), position, tokens.size(), context));
  return tokens;
}

}  // namespace mk
