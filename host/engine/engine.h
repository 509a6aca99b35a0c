// The engine: a model directory turned into chat sessions. It ties a DecodeBackend (GPU monokernel, or the
// CPU emulator when there is no GPU), the model's Tokenizer and its ChatTemplate together. mk-chat and the
// C API (host/api/monokernel.h) are thin layers over it.
//
// KV-cache reuse. A session's backend keeps the whole conversation in its KV cache; a turn ingests only
// what is new. After a reply the cache holds the prompt rendered for messages[0, n) plus the reply's
// tokens except the last one, which the backend keeps "pending" and feeds first on the next generate()
// (runtime/decode_backend.h). The next turn's text is ChatTemplate::render_continuation(), which starts
// with the end-of-turn text ("<|im_end|>\n", "<|eot_id|>"):
//   - the reply ended with an end-of-turn token (EOS): the pending token *is* that text's first token, so
//     its text is cut from the front of the continuation;
//   - the reply was cut short (max tokens, Ctrl-C): the pending token is an ordinary reply token; the
//     whole continuation follows it.
// Either way the cache then reads exactly render(history with the replies as generated) - checked token
// by token in tests/test_engine.cpp. A turn stopped before its first token leaves a partial prompt in the
// cache; the session then rebuilds the cache from the history on the next turn (re-ingesting it once).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat_template.h"
#include "runtime/decode_backend.h"
#include "runtime/error.h"
#include "runtime/model.h"
#include "runtime/speculation.h"
#include "runtime/token_automaton.h"
#include "runtime/tokenizer.h"

namespace mk {

struct Model;

// What went wrong, for callers that map errors to codes (the C API).
enum class EngineErrorKind {
  InvalidArgument,  // a bad parameter or message list
  NotFound,         // the model directory does not exist
  BadModel,         // model, tokenizer or chat template files present but unusable
  ContextFull,      // the new turn does not fit the context that is left
  Backend,          // the backend could not be created or failed, a launch hung (HangError)
  Busy,             // a session used by two threads at once
  OutOfMemory,      // the context does not fit the free host (emulator) or device memory
};

class EngineError : public Error {
 public:
  EngineError(EngineErrorKind kind, const std::string& message, bool device_lost = false)
      : Error(message), kind_(kind), device_lost_(device_lost) {}
  EngineErrorKind kind() const { return kind_; }
  // A hung GPU kernel that could not be stopped (HangError::stopped() false): the GPU stays occupied
  // until the process exits and every later turn fails. The library goes on; a command-line tool exits.
  bool device_lost() const { return device_lost_; }

 private:
  EngineErrorKind kind_;
  bool device_lost_;
};

enum class BackendChoice { Auto, Gpu, Emulator };

// Far beyond any GPU's SM or CU count (MI300X: 304); more only make the schedule larger.
inline constexpr int kMaxEmulatorWorkgroups = 4096;

struct EngineOptions {
  BackendChoice backend = BackendChoice::Auto;  // Auto: the GPU when there is one, else the emulator
  // KV cache tokens per session; 0: min(4096, the model's max_position_embeddings); at most
  // limits::kMaxPositions. More than the model's trained length is allowed with a notice (runtime/context_size.h).
  int context = 0;
  int gpu_device = 0;
  // The emulator's virtual workgroups: the arithmetic does not depend on it; fewer is faster on a CPU.
  int emulator_workgroups = 16;
  // GPU: seconds without any workgroup finishing an instruction before a launch counts as hung and is
  // stopped (GpuOptions::watchdog_seconds); kMinWatchdogSeconds to kMaxWatchdogSeconds
  // (runtime/decode_backend.h).
  double watchdog_seconds = kDefaultWatchdogSeconds;
  // Load-time quantization of a bf16/fp16 checkpoint, the head included or not, and its progress
  // (runtime/model.h; a quantized checkpoint runs as stored without it).
  LoadOptions load;
  // Speculative decoding (runtime/speculation.h): a drafter proposes tokens that steps of several tokens
  // verify against the model's own ones; the replies are token for token what they are without it. Runs on
  // the CPU emulator so far (the GPU kernel's token steps take one token: opening fails there, saying so).
  SpeculationParams speculation;
  // Tensor parallel (runtime/tensor_parallel.h): each token step split over this many devices. The CPU
  // emulator runs them as virtual devices; on the GPU, more than 1 fails opening, saying so.
  int tensor_parallel = 1;
  // GPU weight upload: (bytes done, bytes total, seconds so far).
  std::function<void(uint64_t, uint64_t, double)> on_upload_progress;
  // Notices for the user: the fallback to the emulator, and why.
  std::function<void(const std::string&)> on_notice;
};

// Makes one backend (one KV cache). The engine calls it for each session beyond the ones it can reuse.
using BackendFactory = std::function<std::unique_ptr<DecodeBackend>()>;

struct SessionOptions {
  std::string system_prompt;  // empty: none (the template's default, if it has one)
  ChatOptions chat;           // Llama 3.1 date, Qwen3 thinking switch
};

struct TurnParams {
  int max_tokens = -1;  // -1: until the end of turn or a full context
  SamplingParams sampling;
  LogitAdjustments adjust;  // logit_bias and the penalties (runtime/sampling.h)
  // When set, each reply token's log-probabilities (and its top_logprobs most likely alternatives,
  // 0..kMaxTopLogprobs), passed before the token: before complete()'s on_token gets it, before chat()'s
  // on_text gets the text it completes (a token's text may wait for the next tokens of its character).
  LogprobCallback on_logprobs;
  int top_logprobs = 0;
  // A JSON object, a JSON schema or a regex the reply must be (docs/structured_output.md); compiled with
  // Engine::compile_constraint (cached). A reply that completes it ends there (stop Eos).
  constraint::ConstraintSpec constraint;
};

struct TurnResult {
  std::string text;  // the reply (without the end-of-turn token)
  StopReason stop = StopReason::None;  // Eos when the model ended its turn
  GenerateStats stats;                 // stats.ingested_tokens: the pending token + the new turn's tokens
};

// A completion of a prompt given as token ids (Session::complete).
struct CompletionResult {
  std::vector<int32_t> tokens;  // the reply as passed to the callback: no stop token, nothing after a cancel
  StopReason stop = StopReason::None;  // Eos when the model ended its turn
  GenerateStats stats;                 // stats.ingested_tokens: what ran through the model, not the reused prefix
  int cached_tokens = 0;               // prompt tokens the KV cache already held and did not run again
};

struct SessionStats {
  int context_tokens = 0;  // tokens in the KV cache
  int context_size = 0;
  int turns = 0;           // replies since the start or the last reset
  int last_ingested_tokens = 0;
  int last_generated_tokens = 0;  // an end-of-turn token included
  double last_first_token_seconds = 0;
  double last_tokens_per_second = 0;
  double last_total_seconds = 0;
  StopReason last_stop = StopReason::None;
  int last_drafted_tokens = 0;   // speculative decoding: tokens drafted in the last reply, and of them
  int last_accepted_tokens = 0;  // those the model's own tokens confirmed
};

using TextCallback = std::function<void(std::string_view text)>;
using TokenIdCallback = std::function<void(int32_t token)>;

class Session;

class Engine {
 public:
  // Loads the model, tokenizer and chat template from `dir` and prepares one backend (on the GPU this
  // uploads the weights, reporting progress). Throws EngineError.
  static std::unique_ptr<Engine> open(const std::filesystem::path& dir, const EngineOptions& options = {});

  // Tests: an engine over any backend. `template_error` explains a missing chat template. The factory
  // must produce backends whose vocabulary and EOS ids fit the tokenizer.
  Engine(Tokenizer tokenizer, std::optional<ChatTemplate> chat_template, std::string template_error,
         std::vector<int32_t> model_eos_ids, BackendFactory factory);
  ~Engine();

  const Tokenizer& tokenizer() const;
  // Throws EngineError(BadModel) naming why when the model directory has no usable chat template.
  const ChatTemplate& chat_template() const;
  bool has_chat_template() const;
  std::string backend_name() const;
  bool on_gpu() const;
  // The model's vocabulary size: the token ids a prompt may hold are [0, vocab_size()). It can be smaller
  // than the tokenizer's (ids the model has no embedding row for).
  int vocab_size() const;
  // Each session's KV cache in tokens (EngineOptions::context, or the default it resolved to).
  int context_size() const;

  // The constraint compiled against this model's vocabulary (its EOS: the end-of-turn tokens), from a
  // cache of the most recent ones. Thread-safe. Throws EngineError(InvalidArgument) naming the keyword,
  // construct or limit that fails; `what` ("response_format", "--json-schema") starts the message.
  std::shared_ptr<const constraint::TokenAutomaton> compile_constraint(const constraint::ConstraintSpec& spec, std::string_view what) const;

  // The prompt tokens of a whole conversation with the generation prompt, as a session's first turn
  // encodes it: the template's markup (the BOS, "<|im_start|>", ...) as control tokens, each message's
  // text as text, so that typed markers cannot end a turn or open a system turn. Throws EngineError
  // (InvalidArgument for messages the template cannot render, BadModel without a template).
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options = {}) const;

  // Thread-safe. A session may outlive the Engine object (it shares the model with it).
  std::unique_ptr<Session> create_session(const SessionOptions& options = {});

  struct Shared;

 private:
  Engine(std::shared_ptr<Shared> shared);
  std::shared_ptr<Shared> shared_;
};

// One conversation and its KV cache. One thread at a time; cancel() from anywhere.
class Session {
 public:
  ~Session();

  // Adds `messages` (usually one "user" message; "system" only first) to the conversation and generates
  // the assistant's reply, streaming its text through on_text (whole UTF-8 characters). Throws
  // EngineError: ContextFull when the turn does not fit (the session is left as it was), InvalidArgument
  // (bad parameters or messages, or a prompt with tokens outside the model's vocabulary; the session is
  // left as it was), BadModel (no usable chat template, a tokenizer regex that fails), Busy, Backend
  // (the backend failed, or the launch hung: the message names the stuck instruction). After a Backend
  // error the turn is not in the conversation, and the next turn rebuilds the KV cache from the history:
  // the session goes on as if the failed turn had not been sent (unless device_lost()).
  // A reply stopped by cancel() is kept in the history (StopReason::Cancelled).
  TurnResult chat(const std::vector<ChatMessage>& messages, const TurnParams& params, const TextCallback& on_text);
  TurnResult chat(const std::string& user_text, const TurnParams& params, const TextCallback& on_text) {
    return chat(std::vector<ChatMessage>{{"user", user_text}}, params, on_text);
  }

  // Generates a continuation of `prompt`, token ids the caller rendered and encoded (a server that gets
  // whole conversations, or raw prompts, per request). The KV cache is reused as far as it holds a prefix
  // of `prompt` (a conversation that goes on, a shared system prompt): only the rest is ingested, and
  // CompletionResult::cached_tokens says how much was reused. Whatever the cache held, the tokens are the
  // same as from an empty cache (sampling draws by position). on_token gets each reply token in order;
  // the model's stop tokens end the reply and are not passed; after cancel() no further token is passed.
  // This ends a chat() conversation (the next chat() starts a new one, as after reset()). Throws
  // EngineError: InvalidArgument (an empty prompt, an id outside the vocabulary, bad parameters),
  // ContextFull (the prompt is longer than the context), Busy, Backend.
  CompletionResult complete(const std::vector<int32_t>& prompt, const TurnParams& params, const TokenIdCallback& on_token);

  // Stops the reply in progress at the next token; no effect when none is. Thread-safe and
  // async-signal-safe (only atomic stores), so a SIGINT handler may call it.
  void cancel();
  // Forgets the conversation (keeps the system prompt) and empties the cache.
  void reset();

  SessionStats stats() const;
  const std::vector<ChatMessage>& history() const { return history_; }

 private:
  friend class Engine;
  Session(std::shared_ptr<Engine::Shared> shared, std::unique_ptr<DecodeBackend> backend, SessionOptions options);
  bool is_stop_token(int32_t token) const;
  // Runs the backend. A request it rejects before anything runs becomes InvalidArgument ("the prompt
  // cannot be run: ..." + `rejected_hint`; backend and cache unchanged). Any other failure clears
  // `cache_consistent` (the cache may hold part of the turn) and becomes a Backend error, device_lost when
  // the hung kernel would not stop.
  GenerateResult generate_or_throw(const GenerateRequest& request, const TokenCallback& on_token, bool& cache_consistent,
                                   std::string_view rejected_hint);
  // The last reply's counts and times into stats_ (chat() and complete() alike).
  void note_reply(const GenerateStats& g, StopReason stop);

  std::shared_ptr<Engine::Shared> shared_;  // declared first: outlives backend_
  std::unique_ptr<DecodeBackend> backend_;
  SessionOptions options_;
  std::vector<ChatMessage> history_;
  size_t cached_messages_ = 0;   // history_[0, cached_messages_) is in the KV cache (+ the pending token)
  bool cache_valid_ = true;      // false: the cache holds a partial turn; rebuild it from history_
  bool ended_with_stop_ = false; // the pending token is an end-of-turn/EOS token
  int32_t pending_token_ = -1;   // the last reply's last token (not yet in the cache)
  // complete(): the KV cache's tokens in order (backend position() of them), for prefix reuse. chat() does
  // not keep it; after a chat() turn complete() starts from an empty cache.
  std::vector<int32_t> cache_tokens_;
  bool cache_tokens_known_ = true;
  SessionStats stats_;
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> busy_{false};
};

}  // namespace mk
