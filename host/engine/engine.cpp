#include "host/engine/engine.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <mutex>

#include "device/gpu_backend.h"
#include "host/emulator/emulator.h"
#include "runtime/context_size.h"
#include "runtime/limits.h"
#include "runtime/model.h"
#include "runtime/tensor_parallel.h"
#include "runtime/token_vocabulary.h"

namespace mk {

struct Engine::Shared {
  Shared(Tokenizer t, std::optional<ChatTemplate> tmpl, std::string tmpl_error)
      : tokenizer(std::move(t)), chat_template(std::move(tmpl)), template_error(std::move(tmpl_error)) {}

  std::unique_ptr<Model> model;  // first member: destroyed after every backend that reads it
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::string template_error;
  std::vector<int32_t> stop_ids;  // the model's EOS ids, the tokenizer's and the template's end-of-turn token
  BackendFactory factory;
  std::string backend_name;
  bool on_gpu = false;
  int vocab_size = 0;  // the model's (prompt ids must be below it)
  int context_size = 0;  // each session's KV cache tokens

  // Constrained decoding: the vocabulary's trie (built at the first constraint), the latest automata.
  std::mutex constraint_mutex;
  std::shared_ptr<const constraint::TokenVocabulary> vocabulary;
  std::vector<std::pair<std::string, std::shared_ptr<const constraint::TokenAutomaton>>> compiled;  // newest last
  static constexpr size_t kCompiledKept = 16;

  std::mutex mutex;  // guards idle
  // Backends of closed sessions (and the one made at open): reused, since on the GPU each holds a copy
  // of the weights.
  std::vector<std::unique_ptr<DecodeBackend>> idle;

  std::shared_ptr<const constraint::TokenAutomaton> compile_constraint(const constraint::ConstraintSpec& spec, std::string_view what) {
    if (!spec.active()) return nullptr;
    const std::string key = std::to_string(int(spec.kind)) + ":" + spec.text;
    std::shared_ptr<const constraint::TokenVocabulary> v;
    {
      std::lock_guard lock(constraint_mutex);
      for (auto it = compiled.begin(); it != compiled.end(); ++it)
        if (it->first == key) {
          auto a = it->second;
          compiled.erase(it);
          compiled.emplace_back(key, a);
          return a;
        }
      if (!vocabulary) vocabulary = constraint::token_vocabulary(tokenizer, vocab_size, stop_ids);
      v = vocabulary;
    }
    std::shared_ptr<const constraint::TokenAutomaton> a;
    try {
      a = constraint::compile_token_constraint(spec, v, what);
    } catch (const constraint::ConstraintError& e) {
      throw EngineError(EngineErrorKind::InvalidArgument, e.what());
    }
    std::lock_guard lock(constraint_mutex);
    compiled.emplace_back(key, a);
    if (compiled.size() > kCompiledKept) compiled.erase(compiled.begin());
    return a;
  }

  const ChatTemplate& require_template() const {
    if (!chat_template) throw EngineError(EngineErrorKind::BadModel, template_error);
    return *chat_template;
  }

  std::unique_ptr<DecodeBackend> take_backend() {
    {
      std::lock_guard lock(mutex);
      if (!idle.empty()) {
        auto b = std::move(idle.back());
        idle.pop_back();
        return b;
      }
    }
    try {
      return factory();
    } catch (const EngineError&) {
      throw;
    } catch (const OutOfMemoryError& e) {
      throw EngineError(EngineErrorKind::OutOfMemory, e.what());
    } catch (const BadModelError& e) {  // weights that cannot run, found while packing them
      throw EngineError(EngineErrorKind::BadModel, e.what());
    } catch (const Error& e) {
      throw EngineError(EngineErrorKind::Backend, e.what());
    }
  }

  void give_back(std::unique_ptr<DecodeBackend> backend) {
    backend->reset();
    std::lock_guard lock(mutex);
    idle.push_back(std::move(backend));
  }

  // Stop on every id that ends a turn, not only the model's EOS list: a model directory whose
  // generation_config.json forgets the chat end-of-turn token would otherwise talk past its turn.
  void collect_stop_ids(const std::vector<int32_t>& model_eos) {
    stop_ids = model_eos;
    for (const int32_t id : tokenizer.eos_ids()) stop_ids.push_back(id);
    if (chat_template) {
      const auto eot = tokenizer.encode(chat_template->end_of_turn(), /*parse_special=*/true);
      if (!eot.empty() && tokenizer.is_added(eot.front())) stop_ids.push_back(eot.front());
    }
    std::sort(stop_ids.begin(), stop_ids.end());
    stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  }
};

namespace {

template <typename F>
auto as_bad_model(F&& load) {
  try {
    return load();
  } catch (const EngineError&) {
    throw;
  } catch (const Error& e) {
    throw EngineError(EngineErrorKind::BadModel, e.what());
  }
}

// Marks the session busy for the duration of a call; a second thread gets a clear error, not a race.
class BusyGuard {
 public:
  explicit BusyGuard(std::atomic<bool>& busy) : busy_(busy) {
    if (busy_.exchange(true))
      throw EngineError(EngineErrorKind::Busy, "the session is already in use by another call (one thread at a time)");
  }
  ~BusyGuard() { busy_ = false; }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

void check_params(const TurnParams& p, int vocab) {
  const auto bad = [](const std::string& m) { throw EngineError(EngineErrorKind::InvalidArgument, m); };
  if (p.max_tokens == 0 || p.max_tokens < -1)
    bad(fmt::format("max_tokens must be positive, or -1 for no limit (got {})", p.max_tokens));
  if (std::string e = sampling_error(p.sampling); !e.empty()) bad(e);
  if (std::string e = logit_adjustments_error(p.adjust, vocab); !e.empty()) bad(e);
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs)
    bad(fmt::format("top_logprobs {} must be between 0 and {}", p.top_logprobs, kMaxTopLogprobs));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Engine

std::unique_ptr<Engine> Engine::open(const std::filesystem::path& dir, const EngineOptions& options) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec))
    throw EngineError(EngineErrorKind::NotFound, fmt::format("model directory {} does not exist", dir.string()));
  if (!std::filesystem::is_directory(dir, ec))
    throw EngineError(EngineErrorKind::NotFound,
                      fmt::format("{} is not a directory (expected a Hugging Face model directory)", dir.string()));
  const auto invalid = [](const std::string& m) { throw EngineError(EngineErrorKind::InvalidArgument, m); };
  if (options.context < 0 || options.context > limits::kMaxPositions)
    invalid(fmt::format("the context must be between 1 and {} tokens, or 0 for the default (got {})", limits::kMaxPositions,
                        options.context));
  if (options.emulator_workgroups < 1 || options.emulator_workgroups > kMaxEmulatorWorkgroups)
    invalid(fmt::format("emulator_workgroups must be between 1 and {} (got {})", kMaxEmulatorWorkgroups,
                        options.emulator_workgroups));
  if (options.gpu_device < 0) invalid(fmt::format("gpu_device must be >= 0 (got {})", options.gpu_device));
  if (!(options.watchdog_seconds >= kMinWatchdogSeconds && options.watchdog_seconds <= kMaxWatchdogSeconds))
    invalid(fmt::format("watchdog_seconds must be between {} and {} (got {})", kMinWatchdogSeconds, kMaxWatchdogSeconds,
                        options.watchdog_seconds));
  if (options.tensor_parallel < 1 || options.tensor_parallel > kMaxTensorParallel)
    invalid(fmt::format("tensor_parallel must be between 1 and {} devices (got {})", kMaxTensorParallel, options.tensor_parallel));
  int step_tokens = 1;
  try {
    step_tokens = speculation_step_tokens(options.speculation);
    check_speculation(options.speculation, step_tokens);
  } catch (const Error& e) {
    invalid(e.what());
  }

  auto model = as_bad_model([&] { return load_model(dir, options.load); });
  auto tokenizer = as_bad_model([&] { return Tokenizer::load(dir); });
  std::optional<ChatTemplate> tmpl;
  std::string tmpl_error;
  try {  // optional: tokenizing works without one; chat() reports this message
    tmpl = ChatTemplate::load(dir);
  } catch (const Error& e) {
    tmpl_error = fmt::format("no usable chat template: {}", e.what());
  }

  auto shared = std::make_shared<Shared>(std::move(tokenizer), std::move(tmpl), std::move(tmpl_error));
  as_bad_model([&] { shared->collect_stop_ids(model->config.eos_token_ids); });
  const Model& m = *model;
  shared->model = std::move(model);

  if (options.tensor_parallel > 1) {  // before any backend exists: the model must split so
    try {
      check_tensor_parallel(m, options.tensor_parallel);
    } catch (const Error& e) {
      invalid(e.what());
    }
  }
  const ContextChoice chosen = choose_context(options.context, m.config.max_position);
  if (!chosen.warning.empty() && options.on_notice) options.on_notice(chosen.warning);
  const int context = chosen.tokens;

  std::string why_no_gpu;
  const bool gpu = options.backend != BackendChoice::Emulator && gpu_available(&why_no_gpu);
  if (options.backend == BackendChoice::Gpu && !gpu)
    throw EngineError(EngineErrorKind::Backend, fmt::format("no GPU: {}", why_no_gpu));
  if (gpu && options.speculation.drafter != Drafter::None)
    invalid(fmt::format("speculative decoding ({}) runs on the CPU emulator only so far: the GPU kernel's token steps take one "
                        "token; use no drafter, or the emulator",
                        drafter_name(options.speculation.drafter)));
  if (gpu && options.tensor_parallel > 1)
    invalid(fmt::format("tensor parallel over {} devices runs on the CPU emulator only so far: the GPU kernel runs one device; "
                        "use 1, or the emulator",
                        options.tensor_parallel));
  if (gpu) {
    GpuOptions g;
    g.device = options.gpu_device;
    g.context = context;
    g.watchdog_seconds = options.watchdog_seconds;
    g.on_upload_progress = options.on_upload_progress;
    shared->factory = [&m, g] { return std::unique_ptr<DecodeBackend>(create_gpu_backend(m, g)); };
  } else {
    if (options.backend == BackendChoice::Auto && options.on_notice)
      options.on_notice(fmt::format("no GPU ({}); running on the CPU emulator, which is slow", why_no_gpu));
    EmulatorOptions e;
    e.num_workgroups = options.emulator_workgroups;
    e.context = context;
    e.check_dependencies = false;  // the checker is for tests of the schedule; it multiplies the time
    e.interleaving = Interleaving::RoundRobin;
    e.step_tokens = step_tokens;
    e.speculation = options.speculation;
    e.tensor_parallel = options.tensor_parallel;
    shared->factory = [&m, e] { return std::unique_ptr<DecodeBackend>(std::make_unique<Emulator>(m, e)); };
  }
  shared->on_gpu = gpu;
  shared->vocab_size = m.config.vocab_size;
  // Make the first backend now: the weight upload (and its progress bar) belongs to opening the model.
  auto first = shared->take_backend();
  shared->backend_name = first->name();
  shared->context_size = first->context();
  shared->idle.push_back(std::move(first));
  return std::unique_ptr<Engine>(new Engine(std::move(shared)));
}

Engine::Engine(Tokenizer tokenizer, std::optional<ChatTemplate> chat_template, std::string template_error,
               std::vector<int32_t> model_eos_ids, BackendFactory factory)
    : shared_(std::make_shared<Shared>(std::move(tokenizer), std::move(chat_template), std::move(template_error))) {
  shared_->collect_stop_ids(model_eos_ids);
  shared_->factory = std::move(factory);
  shared_->vocab_size = int(shared_->tokenizer.vocab_size());
  auto first = shared_->take_backend();
  shared_->backend_name = first->name();
  shared_->context_size = first->context();
  shared_->idle.push_back(std::move(first));
}

Engine::Engine(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
Engine::~Engine() = default;

const Tokenizer& Engine::tokenizer() const { return shared_->tokenizer; }
const ChatTemplate& Engine::chat_template() const { return shared_->require_template(); }
bool Engine::has_chat_template() const { return shared_->chat_template.has_value(); }
std::string Engine::backend_name() const { return shared_->backend_name; }
bool Engine::on_gpu() const { return shared_->on_gpu; }
int Engine::vocab_size() const { return shared_->vocab_size; }

std::shared_ptr<const constraint::TokenAutomaton> Engine::compile_constraint(const constraint::ConstraintSpec& spec, std::string_view what) const {
  return shared_->compile_constraint(spec, what);
}
int Engine::context_size() const { return shared_->context_size; }

std::vector<int32_t> Engine::encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  const ChatTemplate& tmpl = shared_->require_template();
  PromptText prompt;
  try {
    prompt = tmpl.render_prompt(messages, /*add_generation_prompt=*/true, options);
  } catch (const Error& e) {
    throw EngineError(EngineErrorKind::InvalidArgument, e.what());
  }
  // Encoding fails only on the tokenizer's own regex (PCRE2 match limits): the model's files are at fault.
  return as_bad_model([&] { return shared_->tokenizer.encode(prompt); });
}

std::unique_ptr<Session> Engine::create_session(const SessionOptions& options) {
  return std::unique_ptr<Session>(new Session(shared_, shared_->take_backend(), options));
}

// ---------------------------------------------------------------------------------------------------
// Session

Session::Session(std::shared_ptr<Engine::Shared> shared, std::unique_ptr<DecodeBackend> backend, SessionOptions options)
    : shared_(std::move(shared)), backend_(std::move(backend)), options_(std::move(options)) {
  reset();
}

Session::~Session() {
  if (backend_) shared_->give_back(std::move(backend_));
}

bool Session::is_stop_token(int32_t token) const {
  return std::binary_search(shared_->stop_ids.begin(), shared_->stop_ids.end(), token);
}

void Session::cancel() {
  cancel_requested_.store(true);
  backend_->cancel();
}

void Session::reset() {
  BusyGuard guard(busy_);
  backend_->reset();
  history_.clear();
  if (!options_.system_prompt.empty()) history_.push_back({"system", options_.system_prompt});
  cached_messages_ = 0;
  cache_valid_ = true;
  ended_with_stop_ = false;
  pending_token_ = -1;
  cache_tokens_.clear();
  cache_tokens_known_ = true;
  stats_ = SessionStats{};
}

SessionStats Session::stats() const {
  SessionStats s = stats_;
  s.context_tokens = backend_->position();
  s.context_size = backend_->context();
  return s;
}

void Session::note_reply(const GenerateStats& g, StopReason stop) {
  stats_.last_ingested_tokens = g.ingested_tokens;
  stats_.last_generated_tokens = g.generated_tokens;
  stats_.last_drafted_tokens = g.drafted_tokens;
  stats_.last_accepted_tokens = g.accepted_tokens;
  stats_.last_first_token_seconds = g.first_token_seconds;
  stats_.last_tokens_per_second = g.decode_tokens_per_second();
  stats_.last_total_seconds = g.total_seconds;
  stats_.last_stop = stop;
}

GenerateResult Session::generate_or_throw(const GenerateRequest& request, const TokenCallback& on_token,
                                         bool& cache_consistent, std::string_view rejected_hint) {
  try {
    return backend_->generate(request, on_token);
  } catch (const RequestError& e) {
    throw EngineError(EngineErrorKind::InvalidArgument, fmt::format("the prompt cannot be run: {}{}", e.what(), rejected_hint));
  } catch (const HangError& e) {
    cache_consistent = false;
    throw EngineError(EngineErrorKind::Backend, e.what(), /*device_lost=*/!e.stopped());
  } catch (const Error& e) {
    cache_consistent = false;
    throw EngineError(EngineErrorKind::Backend, e.what());
  } catch (...) {
    cache_consistent = false;
    throw;
  }
}

TurnResult Session::chat(const std::vector<ChatMessage>& messages, const TurnParams& params, const TextCallback& on_text) {
  BusyGuard guard(busy_);
  if (messages.empty()) throw EngineError(EngineErrorKind::InvalidArgument, "chat: no message to send");
  check_params(params, shared_->vocab_size);
  const ChatTemplate& tmpl = shared_->require_template();
  const Tokenizer& tokenizer = shared_->tokenizer;

  cache_tokens_known_ = false;  // complete() after this turn starts from an empty cache
  if (!cache_valid_) {  // a turn stopped during its prompt: start the cache over from the history
    backend_->reset();
    cached_messages_ = 0;
    pending_token_ = -1;
    ended_with_stop_ = false;
    cache_valid_ = true;
  }

  // The new turn's text: everything if the cache is empty, else only what follows the cached reply.
  std::vector<ChatMessage> conversation = history_;
  conversation.insert(conversation.end(), messages.begin(), messages.end());
  // The messages' own text stays text: control tokens are read from the template's markup only.
  PromptText prompt;
  try {
    prompt = cached_messages_ == 0 ? tmpl.render_prompt(conversation, true, options_.chat)
                                   : tmpl.render_continuation_prompt(conversation, cached_messages_, true, options_.chat);
  } catch (const Error& e) {
    throw EngineError(EngineErrorKind::InvalidArgument, e.what());
  }
  // The pending token is fed first. When it is the end-of-turn token, it already stands for the
  // continuation's leading "<|im_end|>" / "<|eot_id|>": drop that text so it is not there twice.
  if (cached_messages_ > 0 && ended_with_stop_) {
    const std::string_view eot = tokenizer.token_bytes(pending_token_);
    if (!eot.empty() && std::string_view(prompt.text).starts_with(eot)) prompt.erase_prefix(eot.size());
  }
  // Encoding fails only on the tokenizer's own regex (PCRE2 match limits): the model's files are at fault.
  const std::vector<int32_t> input = as_bad_model([&] { return tokenizer.encode(prompt); });

  const int pending = cached_messages_ > 0 && pending_token_ >= 0 ? 1 : 0;
  const int position = backend_->position(), context = backend_->context();
  const int ingest = int(input.size()) + pending;
  if (position + ingest > context) {
    if (position == 0)
      throw EngineError(EngineErrorKind::ContextFull,
                        fmt::format("the prompt is {} tokens long but the context holds {} tokens", ingest, context));
    throw EngineError(EngineErrorKind::ContextFull,
                      fmt::format("the context is full: {} tokens in use + {} for this turn > {} tokens (reset the "
                                  "conversation, or use a larger context)",
                                  position, ingest, context));
  }

  GenerateRequest request;
  request.input = input;
  // No limit: the backend stops at the end of the context and says so (ContextFull).
  request.max_new_tokens = params.max_tokens < 0 ? std::numeric_limits<int>::max() : params.max_tokens;
  request.sampling = params.sampling;
  request.adjust = params.adjust;
  request.constraint = shared_->compile_constraint(params.constraint, "constraint");
  TokenLogprobs logprobs;  // the backend's record of the token it passes next
  if (params.on_logprobs) {
    request.top_logprobs = params.top_logprobs;
    request.on_logprobs = [&](const TokenLogprobs& r) { logprobs = r; };
  }

  TurnResult out;
  StreamingDecoder decoder(tokenizer);
  bool saw_stop = false;
  std::exception_ptr callback_error;
  const auto emit = [&](const std::string& piece) {
    if (piece.empty() || callback_error) return;
    out.text += piece;
    if (!on_text) return;
    try {
      on_text(piece);
    } catch (...) {  // never unwind through a running backend: stop it, rethrow after
      callback_error = std::current_exception();
      backend_->cancel();
    }
  };
  const auto on_token = [&](int32_t token) {
    if (saw_stop) return;  // a GPU may sample a token after a stop that is not in the model's EOS list
    if (is_stop_token(token)) {
      saw_stop = true;
      backend_->cancel();  // no-op when the backend stops on it anyway
      return;
    }
    // A cancel() that raced with the start of generate() was cleared by the backend; repeat it.
    if (cancel_requested_.load()) backend_->cancel();
    if (params.on_logprobs && !callback_error) {
      try {
        params.on_logprobs(logprobs);
      } catch (...) {
        callback_error = std::current_exception();
        backend_->cancel();
      }
    }
    emit(decoder.push(token));
  };

  cancel_requested_ = false;
  // The context was checked above, so a request the backend rejects has a token the model has no
  // embedding row for: the tokenizer knows more ids than the model.
  const GenerateResult result =
      generate_or_throw(request, on_token, cache_valid_, " (its text has tokens the model's vocabulary lacks)");
  emit(decoder.flush());

  out.stats = result.stats;
  out.stop = saw_stop ? StopReason::Eos : result.stop;
  note_reply(result.stats, out.stop);

  if (result.tokens.empty()) {
    // Stopped while reading the prompt: the cache holds part of it. The messages are dropped (as if
    // never sent) and the cache is rebuilt from the history next turn.
    cache_valid_ = false;
  } else {
    history_ = std::move(conversation);
    history_.push_back({"assistant", out.text});
    cached_messages_ = history_.size();
    pending_token_ = result.tokens.back();
    ended_with_stop_ = is_stop_token(pending_token_);
    ++stats_.turns;
  }
  if (callback_error) std::rethrow_exception(callback_error);
  return out;
}

CompletionResult Session::complete(const std::vector<int32_t>& prompt, const TurnParams& params,
                                   const TokenIdCallback& on_token) {
  BusyGuard guard(busy_);
  check_params(params, shared_->vocab_size);
  const auto bad = [](const std::string& m) { throw EngineError(EngineErrorKind::InvalidArgument, m); };
  if (prompt.empty()) bad("the prompt is empty (a completion needs at least one prompt token)");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= shared_->vocab_size)
      bad(fmt::format("prompt token {} (at index {}) is outside the model's vocabulary [0, {})", prompt[i], i,
                      shared_->vocab_size));
  const int context = backend_->context();
  if (int64_t(prompt.size()) > int64_t(context))
    throw EngineError(EngineErrorKind::ContextFull,
                      fmt::format("the prompt is {} tokens long but the context holds {} tokens", prompt.size(), context));

  // The chat conversation, if any, ends: the cache is about to hold this prompt instead.
  history_.clear();
  if (!options_.system_prompt.empty()) history_.push_back({"system", options_.system_prompt});
  cached_messages_ = 0;
  cache_valid_ = false;
  ended_with_stop_ = false;
  stats_.turns = 0;

  if (!cache_tokens_known_ || size_t(backend_->position()) != cache_tokens_.size()) {
    backend_->reset();
    cache_tokens_.clear();
    pending_token_ = -1;
    cache_tokens_known_ = true;
  }

  // Reuse the longest cached prefix of the prompt, but never all of it: its last token must run to give
  // the first sample its logits. The pending token (the previous reply's last, not yet in the cache) is
  // reused as well when the prompt goes on with it: the backend feeds it first anyway.
  const size_t held = cache_tokens_.size();
  size_t common = 0;
  while (common < held && common < prompt.size() && cache_tokens_[common] == prompt[common]) ++common;
  const bool feed_pending = common == held && pending_token_ >= 0 && prompt.size() > held && prompt[held] == pending_token_;
  size_t keep = held;
  std::vector<int32_t> fed;  // what this call runs through the model, in order
  if (feed_pending) {
    fed.push_back(pending_token_);
    fed.insert(fed.end(), prompt.begin() + std::ptrdiff_t(held) + 1, prompt.end());
  } else {
    keep = std::min(common, prompt.size() - 1);
    if (keep < held || pending_token_ >= 0) {
      if (!backend_->truncate(int(keep))) {
        backend_->reset();
        keep = 0;
      }
      cache_tokens_.resize(keep);
      pending_token_ = -1;
    }
    fed.assign(prompt.begin() + std::ptrdiff_t(keep), prompt.end());
  }

  GenerateRequest request;
  request.input.assign(fed.begin() + (feed_pending ? 1 : 0), fed.end());
  request.max_new_tokens = params.max_tokens < 0 ? std::numeric_limits<int>::max() : params.max_tokens;
  request.sampling = params.sampling;
  request.adjust = params.adjust;
  request.constraint = shared_->compile_constraint(params.constraint, "constraint");
  TokenLogprobs logprobs;  // the backend's record of the token it passes next
  if (params.on_logprobs) {
    request.top_logprobs = params.top_logprobs;
    request.on_logprobs = [&](const TokenLogprobs& r) { logprobs = r; };
  }

  CompletionResult out;
  out.cached_tokens = int(keep);
  bool saw_stop = false;
  std::exception_ptr callback_error;
  const auto on_backend_token = [&](int32_t token) {
    if (saw_stop || callback_error) return;
    if (is_stop_token(token)) {
      saw_stop = true;
      backend_->cancel();  // no-op when the backend stops on it anyway
      return;
    }
    if (cancel_requested_.load()) {  // repeated: a cancel() racing with the start of generate() was cleared
      backend_->cancel();
      return;
    }
    out.tokens.push_back(token);
    try {
      if (params.on_logprobs) params.on_logprobs(logprobs);
      if (on_token) on_token(token);
    } catch (...) {  // never unwind through a running backend: stop it, rethrow after
      callback_error = std::current_exception();
      backend_->cancel();
    }
  };

  cancel_requested_ = false;
  const int start = backend_->position();
  const GenerateResult result = generate_or_throw(request, on_backend_token, cache_tokens_known_, "");

  // The cache grew by one position per step that ran: the fed tokens, then every sampled token but the
  // last (pending). A stop during the prompt leaves part of it and no pending token.
  fed.insert(fed.end(), result.tokens.begin(), result.tokens.end());
  const int steps = backend_->position() - start;
  if (steps < 0 || size_t(steps) > fed.size()) {
    cache_tokens_known_ = false;  // cannot happen with the backends' accounting; start over next time
  } else {
    cache_tokens_.insert(cache_tokens_.end(), fed.begin(), fed.begin() + steps);
    pending_token_ = result.tokens.empty() ? -1 : result.tokens.back();
  }

  out.stop = saw_stop ? StopReason::Eos : result.stop;
  out.stats = result.stats;
  note_reply(result.stats, out.stop);
  if (callback_error) std::rethrow_exception(callback_error);
  return out;
}

}  // namespace mk
