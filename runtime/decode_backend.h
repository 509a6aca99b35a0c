// What every executor of the schedule offers the host: the CPU emulator and the GPU monokernel.
// A backend holds one sequence (its KV cache). generate() appends `input` at the current position,
// runs it through the model, then samples up to max_new_tokens, streaming each token to `on_token`.
// The last sampled token is not yet in the cache; the next generate() feeds it first (multi-turn).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/sampling.h"

namespace mk {

namespace constraint {
struct TokenAutomaton;  // runtime/token_automaton.h
}

// Eos: an EOS token, or a constraint that is complete (GenerateRequest::constraint).
enum class StopReason { None, Eos, MaxTokens, Cancelled, ContextFull };
const char* stop_reason_name(StopReason r);

using LogprobCallback = std::function<void(const TokenLogprobs& logprobs)>;

struct GenerateRequest {
  std::vector<int32_t> input;  // tokens to ingest (the prompt, or the new turn)
  int max_new_tokens = 128;
  SamplingParams sampling;
  LogitAdjustments adjust;     // logit_bias and the penalties (runtime/sampling.h)
  // When set: each sampled token's log-probability and its `top_logprobs` (0..kMaxTopLogprobs) most likely
  // alternatives, passed just before on_token gets the token.
  LogprobCallback on_logprobs;
  int top_logprobs = 0;
  // When set: the output is constrained (docs/structured_output.md). Each step allows only the tokens of
  // the automaton's state (the mask comes before temperature, top-k, top-p and min-p, and before the
  // log-probabilities); the sampled token moves the state; a state that accepts and allows only EOS ends
  // the generation as an EOS would (StopReason::Eos, no EOS token). The state starts anew each call.
  std::shared_ptr<const constraint::TokenAutomaton> constraint;
};

struct GenerateStats {
  int ingested_tokens = 0;    // tokens run through the model before the first sample (pending one included)
  int chunked_tokens = 0;     // of them, those run through chunk steps (prefill); the rest one per step
  int generated_tokens = 0;
  int steps = 0;             // token steps run (a step of several tokens counts once)
  int drafted_tokens = 0;    // tokens drafted for verification (speculative decoding), and of them
  int accepted_tokens = 0;   // those the target's own tokens confirmed
  double first_token_seconds = 0;  // from the call to the first sampled token
  double total_seconds = 0;
  double decode_tokens_per_second() const;  // tokens after the first over the time after the first
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // sampled tokens in order (an EOS that stopped generation is included)
  StopReason stop = StopReason::None;
  GenerateStats stats;
};

using TokenCallback = std::function<void(int32_t token)>;

// A request the backend cannot run as asked: a token outside the vocabulary, a prompt that does not fit
// the context, a bad sampling parameter. Thrown before anything runs; the backend is unchanged.
class RequestError : public Error {
 public:
  using Error::Error;
};

// The GPU watchdog's limit: seconds in which no workgroup finishes an instruction before a launch counts
// as hung (GpuOptions, EngineOptions, mk_model_options, --watchdog). Below a second, a busy or time-shared
// GPU's ordinary pauses would count as hangs.
inline constexpr double kDefaultWatchdogSeconds = 10, kMinWatchdogSeconds = 1, kMaxWatchdogSeconds = 86400;

// A launch in which no workgroup could make progress: a deadlock of the schedule on the emulator, a hung
// kernel on the GPU (the watchdog). The message names the stuck instructions and the counters they wait
// for (runtime/schedule_diagnostics.h).
//   stopped() true: the launch was stopped and the backend is as it was before the call (KV cache,
//     position, pending token); tokens already passed to on_token are not part of the sequence.
//     generate() may be called again.
//   stopped() false: the GPU kernel did not leave within the grace period after the abort. The device
//     stays occupied by it; this backend fails every later call with this error, and other work on the
//     GPU will not run until the process exits. Nothing exits the process here: that is the
//     application's decision (the command-line tools exit).
class HangError : public Error {
 public:
  HangError(const std::string& message, bool stopped) : Error(message), stopped_(stopped) {}
  bool stopped() const { return stopped_; }

 private:
  bool stopped_;
};

class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;
  virtual GenerateResult generate(const GenerateRequest& request, const TokenCallback& on_token) = 0;
  virtual void cancel() = 0;         // safe from another thread; stops the current generate() at the next token
  virtual void reset() = 0;          // forget the sequence
  // Keeps the first `tokens` positions of the cache and forgets the rest and the pending token, so that
  // the next generate() appends after them: a server reuses the prefix that a new prompt shares with the
  // cached one. Returns false (changing nothing) when `tokens` is beyond position() or the backend cannot;
  // the caller then resets. The default can only empty the cache.
  virtual bool truncate(int tokens) {
    if (tokens != 0) return false;
    reset();
    return true;
  }
  virtual int position() const = 0;  // tokens in the KV cache
  virtual int context() const = 0;   // KV cache capacity in tokens
  virtual std::string name() const = 0;
};

// The request's own parameters (max_new_tokens, sampling, the logit adjustments against a vocabulary of
// `vocab` tokens, top_logprobs); throws RequestError.
void check_request(const GenerateRequest& request, int vocab);

// The tokens a generate() call will run: the pending token (if any) followed by the request's input.
// Validates against the vocabulary and the context; throws RequestError naming the limit.
std::vector<int32_t> tokens_to_ingest(const std::vector<int32_t>& input, int32_t pending_token, int position,
                                      int context, int vocab_size);

}  // namespace mk
