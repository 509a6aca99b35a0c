// The C API over host/engine: handles, status codes and the exception boundary. Every exported function
// catches everything; the message goes to the handle's last error.
#include "monokernel.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/engine/engine.h"

struct mk_model {
  std::unique_ptr<mk::Engine> engine;
  std::string backend_name;
};

struct mk_session {
  std::unique_ptr<mk::Session> session;
  std::string last_error;
};

namespace {

// Model-level calls may come from several threads at once: their last error is kept per thread.
thread_local std::string t_model_error;

mk_status status_of(mk::EngineErrorKind kind) {
  switch (kind) {
    case mk::EngineErrorKind::InvalidArgument: return MK_ERROR_INVALID_ARGUMENT;
    case mk::EngineErrorKind::NotFound: return MK_ERROR_NOT_FOUND;
    case mk::EngineErrorKind::BadModel: return MK_ERROR_BAD_MODEL;
    case mk::EngineErrorKind::ContextFull: return MK_ERROR_CONTEXT_FULL;
    case mk::EngineErrorKind::Backend: return MK_ERROR_BACKEND;
    case mk::EngineErrorKind::Busy: return MK_ERROR_BUSY;
    case mk::EngineErrorKind::OutOfMemory: return MK_ERROR_OUT_OF_MEMORY;
  }
  return MK_ERROR_INTERNAL;
}

struct Failure {
  mk_status status;
  std::string message;
};

// Runs `body`; turns any exception into a status and a message.
template <typename F>
mk_status guarded(std::string& error, F&& body) {
  try {
    body();
    return MK_OK;
  } catch (const Failure& f) {
    error = f.message;
    return f.status;
  } catch (const mk::EngineError& e) {
    error = e.what();
    return status_of(e.kind());
  } catch (const mk::Error& e) {
    error = e.what();
    return MK_ERROR_INTERNAL;
  } catch (const std::bad_alloc&) {
    error = "out of memory";
    return MK_ERROR_OUT_OF_MEMORY;
  } catch (const std::length_error& e) {  // a container asked for more than it can ever hold
    error = std::string("out of memory: ") + e.what();
    return MK_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    error = e.what();
    return MK_ERROR_INTERNAL;
  } catch (...) {
    error = "unknown error";
    return MK_ERROR_INTERNAL;
  }
}

[[noreturn]] void invalid(const std::string& message) { throw Failure{MK_ERROR_INVALID_ARGUMENT, message}; }

void copy_to(char* buffer, size_t size, const std::string& text) {
  if (!buffer || size == 0) return;
  const size_t n = std::min(size - 1, text.size());
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

mk_stop_reason stop_of(mk::StopReason r) {
  switch (r) {
    case mk::StopReason::None: return MK_STOP_NONE;
    case mk::StopReason::Eos: return MK_STOP_EOS;
    case mk::StopReason::MaxTokens: return MK_STOP_MAX_TOKENS;
    case mk::StopReason::Cancelled: return MK_STOP_CANCELLED;
    case mk::StopReason::ContextFull: return MK_STOP_CONTEXT_FULL;
  }
  return MK_STOP_NONE;
}

mk::TurnParams turn_params(const mk_generate_params& p) {
  mk::TurnParams t;
  t.max_tokens = p.max_tokens;
  t.sampling.temperature = p.temperature;
  t.sampling.top_k = p.top_k;
  t.sampling.top_p = p.top_p;
  t.sampling.min_p = p.min_p;
  t.sampling.seed = p.seed;
  return t;
}

static_assert(MK_MAX_TOP_LOGPROBS == mk::kMaxTopLogprobs, "the C record holds the engine's alternatives");

// A struct_size-versioned input struct (`name`, filled by `init`): the fields the caller's struct_size
// covers, the rest at their defaults; a size below `first_version` (the first version's) is an error.
template <class T>
T versioned_input(const T* given, void (*init)(T*), size_t first_version, const char* name) {
  T o;
  init(&o);
  if (!given) return o;
  if (given->struct_size < first_version)
    invalid(fmt::format("{}: struct_size {} is smaller than any version of the struct ({} bytes); call {}_init", name,
                        given->struct_size, first_version, name));
  std::memcpy(&o, given, std::min(given->struct_size, sizeof(o)));
  o.struct_size = sizeof(o);
  return o;
}

mk_generate_options options_of(const mk_generate_options* given) {
  return versioned_input(given, mk_generate_options_init, offsetof(mk_generate_options, params) + sizeof(mk_generate_params),
                         "mk_generate_options");
}

mk::TurnParams turn_params(const mk_generate_options& o) {
  mk::TurnParams t = turn_params(o.params);
  if (o.logit_bias_count > 0 && !o.logit_bias)
    invalid(fmt::format("mk_generate_options: logit_bias is NULL with logit_bias_count {}", o.logit_bias_count));
  if (o.logit_bias_count > mk::kMaxLogitBiasEntries)  // before copying a count that large
    invalid(fmt::format("logit_bias: {} entries, at most {}", o.logit_bias_count, mk::kMaxLogitBiasEntries));
  for (size_t i = 0; i < o.logit_bias_count; ++i) t.adjust.bias.emplace_back(o.logit_bias[i].token, o.logit_bias[i].bias);
  t.adjust.frequency_penalty = o.frequency_penalty;
  t.adjust.presence_penalty = o.presence_penalty;
  t.top_logprobs = o.top_logprobs;
  using Kind = mk::constraint::ConstraintSpec::Kind;
  switch (o.constraint_kind) {
    case MK_CONSTRAINT_NONE: break;
    case MK_CONSTRAINT_JSON_OBJECT: t.constraint = {Kind::JsonObject, ""}; break;
    case MK_CONSTRAINT_JSON_SCHEMA:
    case MK_CONSTRAINT_REGEX:
      if (!o.constraint) invalid("mk_generate_options: constraint is NULL with a JSON schema or regex constraint_kind");
      t.constraint = {o.constraint_kind == MK_CONSTRAINT_REGEX ? Kind::Regex : Kind::JsonSchema, o.constraint};
      break;
    default: invalid(fmt::format("mk_generate_options: constraint_kind {} is not an mk_constraint_kind", int(o.constraint_kind)));
  }
  return t;
}

mk_status generate(mk_session* s, const std::vector<mk::ChatMessage>& messages, const mk_generate_options* options,
                   mk_token_callback callback, void* user) {
  return guarded(s->last_error, [&] {
    mk::Session& session = *s->session;
    const mk_generate_options o = options_of(options);
    mk::TurnParams params = turn_params(o);
    if (o.on_logprobs)
      params.on_logprobs = [&](const mk::TokenLogprobs& r) {
        mk_token_logprobs c;
        c.token = r.token, c.logprob = r.logprob, c.top_count = r.top_count;
        std::copy(std::begin(r.top_ids), std::end(r.top_ids), c.top_ids);
        std::copy(std::begin(r.top_logprobs), std::end(r.top_logprobs), c.top_logprobs);
        if (o.on_logprobs(&c, o.logprobs_user) != 0) session.cancel();
      };
    const auto on_text = [&](std::string_view text) {
      if (!callback) return;
      const std::string piece(text);  // NUL-terminated for callers that want a C string
      if (callback(piece.c_str(), piece.size(), user) != 0) session.cancel();
    };
    session.chat(messages, params, on_text);
  });
}

mk_status generate(mk_session* s, const std::vector<mk::ChatMessage>& messages, const mk_generate_params* params,
                   mk_token_callback callback, void* user) {
  mk_generate_options o;
  mk_generate_options_init(&o);
  if (params) o.params = *params;
  return generate(s, messages, &o, callback, user);
}

// The messages of mk_generate_messages / mk_generate_with_options, checked; `who` names the function.
std::vector<mk::ChatMessage> messages_of(const char* who, const mk_message* messages, size_t count) {
  std::vector<mk::ChatMessage> list;
  if (!messages && count > 0) invalid(fmt::format("{}: messages is NULL", who));
  for (size_t i = 0; i < count; ++i) {
    if (!messages[i].role || !messages[i].content) invalid(fmt::format("{}: message {} has a NULL role or content", who, i));
    list.push_back({messages[i].role, messages[i].content});
  }
  return list;
}

}  // namespace

extern "C" {

const char* mk_status_name(mk_status status) {
  switch (status) {
    case MK_OK: return "MK_OK";
    case MK_ERROR_INVALID_ARGUMENT: return "MK_ERROR_INVALID_ARGUMENT";
    case MK_ERROR_NOT_FOUND: return "MK_ERROR_NOT_FOUND";
    case MK_ERROR_BAD_MODEL: return "MK_ERROR_BAD_MODEL";
    case MK_ERROR_CONTEXT_FULL: return "MK_ERROR_CONTEXT_FULL";
    case MK_ERROR_BACKEND: return "MK_ERROR_BACKEND";
    case MK_ERROR_BUSY: return "MK_ERROR_BUSY";
    case MK_ERROR_BUFFER_TOO_SMALL: return "MK_ERROR_BUFFER_TOO_SMALL";
    case MK_ERROR_OUT_OF_MEMORY: return "MK_ERROR_OUT_OF_MEMORY";
    case MK_ERROR_INTERNAL: return "MK_ERROR_INTERNAL";
  }
  return "MK_ERROR_UNKNOWN";
}

const char* mk_version(void) { return MK_VERSION_STRING; }

void mk_model_options_init(mk_model_options* o) {
  if (!o) return;
  *o = mk_model_options{};
  o->backend = MK_BACKEND_AUTO;
  o->emulator_workgroups = mk::EngineOptions{}.emulator_workgroups;
  o->quantize_head = mk::LoadOptions{}.quantize_head ? 1 : 0;
  o->watchdog_seconds = mk::EngineOptions{}.watchdog_seconds;
}

void mk_speculation_init(mk_speculation* s) {
  if (!s) return;
  *s = mk_speculation{};
  s->struct_size = sizeof(mk_speculation);
  s->drafter = MK_DRAFTER_NONE;
  s->draft_max = mk::SpeculationParams{}.draft_max;
  s->lookup_min = mk::SpeculationParams{}.lookup_min;
  s->lookup_max = mk::SpeculationParams{}.lookup_max;
}

mk_status mk_model_open(const char* path, const mk_model_options* options, mk_model** model, char* errbuf,
                        size_t errbuf_size) {
  return mk_model_open_speculative(path, options, nullptr, model, errbuf, errbuf_size);
}

mk_status mk_model_open_speculative(const char* path, const mk_model_options* options, const mk_speculation* speculation,
                                    mk_model** model, char* errbuf, size_t errbuf_size) {
  std::string error;
  const mk_status status = guarded(error, [&] {
    if (!model) invalid("mk_model_open: model (the output pointer) is NULL");
    *model = nullptr;
    if (!path) invalid("mk_model_open: path is NULL");
    mk_model_options defaults;
    mk_model_options_init(&defaults);
    const mk_model_options& o = options ? *options : defaults;
    mk::EngineOptions e;
    switch (o.backend) {
      case MK_BACKEND_AUTO: e.backend = mk::BackendChoice::Auto; break;
      case MK_BACKEND_GPU: e.backend = mk::BackendChoice::Gpu; break;
      case MK_BACKEND_EMULATOR: e.backend = mk::BackendChoice::Emulator; break;
      default: invalid("mk_model_open: options->backend is not an mk_backend_kind");
    }
    e.context = o.context;
    e.gpu_device = o.gpu_device;
    e.emulator_workgroups = o.emulator_workgroups;
    e.watchdog_seconds = o.watchdog_seconds;
    const mk_speculation sp = versioned_input(speculation, mk_speculation_init, offsetof(mk_speculation, draft_max), "mk_speculation");
    switch (sp.drafter) {
      case MK_DRAFTER_NONE: e.speculation.drafter = mk::Drafter::None; break;
      case MK_DRAFTER_LOOKUP: e.speculation.drafter = mk::Drafter::Lookup; break;
      default: invalid("mk_model_open: speculation->drafter is not an mk_drafter");
    }
    e.speculation.draft_max = sp.draft_max;
    e.speculation.lookup_min = sp.lookup_min;
    e.speculation.lookup_max = sp.lookup_max;
    switch (o.quantize) {
      case MK_QUANTIZE_NONE: e.load.quantize = std::nullopt; break;
      case MK_QUANTIZE_FP8: e.load.quantize = mk::MatrixFormat::FP8; break;
      case MK_QUANTIZE_INT4: e.load.quantize = mk::MatrixFormat::INT4; break;
      default: invalid("mk_model_open: options->quantize is not an mk_quantize");
    }
    switch (o.quantize_head) {
      case 0: e.load.quantize_head = false; break;
      case 1: e.load.quantize_head = true; break;
      default: invalid("mk_model_open: options->quantize_head must be 0 or 1");
    }
    if (o.on_progress)
      e.on_upload_progress = [cb = o.on_progress, user = o.user](uint64_t done, uint64_t total, double s) { cb(done, total, s, user); };
    if (o.on_notice)
      e.on_notice = [cb = o.on_notice, user = o.user](const std::string& m) { cb(m.c_str(), user); };
    auto handle = std::make_unique<mk_model>();
    handle->engine = mk::Engine::open(path, e);
    handle->backend_name = handle->engine->backend_name();
    *model = handle.release();
  });
  copy_to(errbuf, errbuf_size, status == MK_OK ? std::string() : error);
  return status;
}

void mk_model_close(mk_model* model) { delete model; }

const char* mk_model_backend_name(const mk_model* model) { return model ? model->backend_name.c_str() : ""; }

const char* mk_model_last_error(const mk_model*) { return t_model_error.c_str(); }

mk_status mk_tokenize(mk_model* model, const char* text, size_t length, int parse_special, int32_t* tokens,
                      size_t capacity, size_t* count) {
  return guarded(t_model_error, [&] {
    if (!model || !count || (!text && length > 0) || (!tokens && capacity > 0))
      invalid("mk_tokenize: model, count, text (for a non-empty text) and tokens (for a non-zero capacity) must not be NULL");
    std::vector<int32_t> ids;
    try {
      ids = model->engine->tokenizer().encode(std::string_view(text ? text : "", length), parse_special != 0);
    } catch (const mk::Error& e) {  // the tokenizer's own regex failed (PCRE2 match limits): its file is at fault
      throw Failure{MK_ERROR_BAD_MODEL, e.what()};
    }
    *count = ids.size();
    if (ids.size() > capacity)
      throw Failure{MK_ERROR_BUFFER_TOO_SMALL, fmt::format("mk_tokenize: {} tokens do not fit a buffer of {}", ids.size(), capacity)};
    std::copy(ids.begin(), ids.end(), tokens);
  });
}

mk_status mk_detokenize(mk_model* model, const int32_t* tokens, size_t count, char* text, size_t capacity,
                        size_t* length) {
  return guarded(t_model_error, [&] {
    if (!model || !length || (!tokens && count > 0) || (!text && capacity > 0))
      invalid("mk_detokenize: model, length, tokens (for a non-zero count) and text (for a non-zero capacity) must not be NULL");
    const std::string s = model->engine->tokenizer().decode(std::span<const int32_t>(tokens, count));
    *length = s.size();
    if (s.size() + 1 > capacity)
      throw Failure{MK_ERROR_BUFFER_TOO_SMALL,
                    fmt::format("mk_detokenize: {} bytes and the NUL do not fit a buffer of {}", s.size(), capacity)};
    std::memcpy(text, s.c_str(), s.size() + 1);
  });
}

void mk_session_options_init(mk_session_options* o) {
  if (!o) return;
  o->system_prompt = nullptr;
  o->enable_thinking = -1;
}

mk_status mk_session_create(mk_model* model, const mk_session_options* options, mk_session** session) {
  return guarded(t_model_error, [&] {
    if (!session) invalid("mk_session_create: session (the output pointer) is NULL");
    *session = nullptr;
    if (!model) invalid("mk_session_create: model is NULL");
    mk::SessionOptions s;
    if (options && options->system_prompt) s.system_prompt = options->system_prompt;
    if (options && options->enable_thinking >= 0) s.chat.enable_thinking = options->enable_thinking != 0;
    auto handle = std::make_unique<mk_session>();
    handle->session = model->engine->create_session(s);
    *session = handle.release();
  });
}

void mk_session_destroy(mk_session* session) { delete session; }

void mk_generate_params_init(mk_generate_params* p) {
  if (!p) return;
  const mk::TurnParams t;
  p->max_tokens = t.max_tokens;
  p->temperature = t.sampling.temperature;
  p->top_k = t.sampling.top_k;
  p->top_p = t.sampling.top_p;
  p->min_p = t.sampling.min_p;
  p->seed = t.sampling.seed;
}

mk_status mk_generate(mk_session* session, const char* prompt, const mk_generate_params* params,
                      mk_token_callback callback, void* user) {
  if (!session) return MK_ERROR_INVALID_ARGUMENT;
  if (!prompt) {
    session->last_error = "mk_generate: prompt is NULL";
    return MK_ERROR_INVALID_ARGUMENT;
  }
  return generate(session, {{"user", prompt}}, params, callback, user);
}

mk_status mk_generate_messages(mk_session* session, const mk_message* messages, size_t count,
                               const mk_generate_params* params, mk_token_callback callback, void* user) {
  if (!session) return MK_ERROR_INVALID_ARGUMENT;
  std::vector<mk::ChatMessage> list;
  const mk_status status = guarded(session->last_error, [&] { list = messages_of("mk_generate_messages", messages, count); });
  if (status != MK_OK) return status;
  return generate(session, list, params, callback, user);
}

void mk_generate_options_init(mk_generate_options* o) {
  if (!o) return;
  *o = mk_generate_options{};
  o->struct_size = sizeof(*o);
  mk_generate_params_init(&o->params);
}

mk_status mk_generate_with_options(mk_session* session, const mk_message* messages, size_t count,
                                   const mk_generate_options* options, mk_token_callback callback, void* user) {
  if (!session) return MK_ERROR_INVALID_ARGUMENT;
  std::vector<mk::ChatMessage> list;
  const mk_status status = guarded(session->last_error, [&] { list = messages_of("mk_generate_with_options", messages, count); });
  if (status != MK_OK) return status;
  return generate(session, list, options, callback, user);
}

mk_status mk_session_cancel(mk_session* session) {
  if (!session) return MK_ERROR_INVALID_ARGUMENT;
  session->session->cancel();  // atomic stores only: safe from any thread, never throws
  return MK_OK;
}

mk_status mk_session_reset(mk_session* session) {
  if (!session) return MK_ERROR_INVALID_ARGUMENT;
  return guarded(session->last_error, [&] { session->session->reset(); });
}

mk_status mk_session_stats(const mk_session* session, mk_stats* out) {
  if (!session || !out) return MK_ERROR_INVALID_ARGUMENT;
  const mk::SessionStats s = session->session->stats();
  out->context_tokens = s.context_tokens;
  out->context_size = s.context_size;
  out->turns = s.turns;
  out->last_ingested_tokens = s.last_ingested_tokens;
  out->last_generated_tokens = s.last_generated_tokens;
  out->last_first_token_seconds = s.last_first_token_seconds;
  out->last_tokens_per_second = s.last_tokens_per_second;
  out->last_total_seconds = s.last_total_seconds;
  out->last_stop = stop_of(s.last_stop);
  return MK_OK;
}

mk_status mk_session_speculation_stats(const mk_session* session, mk_speculation_stats* out) {
  if (!session || !out || out->struct_size < offsetof(mk_speculation_stats, last_drafted_tokens)) return MK_ERROR_INVALID_ARGUMENT;
  const mk::SessionStats s = session->session->stats();
  mk_speculation_stats v{};
  v.struct_size = out->struct_size;
  v.last_drafted_tokens = s.last_drafted_tokens;
  v.last_accepted_tokens = s.last_accepted_tokens;
  std::memcpy(out, &v, std::min(out->struct_size, sizeof(v)));
  return MK_OK;
}

const char* mk_session_last_error(const mk_session* session) { return session ? session->last_error.c_str() : ""; }

}  // extern "C"
