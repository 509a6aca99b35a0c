// monokernel: C++ wrapper over the C API (monokernel.h). Header-only: it depends only on the C ABI, so it
// works with any C++17 compiler and standard library, whatever the library was built with.
//
//   monokernel::Model model("path/to/model");                 // throws monokernel::Error
//   monokernel::Session chat(model);
//   chat.generate("Hello!", {}, [](std::string_view text) { std::cout << text << std::flush; return true; });
//
// Ownership and threads are as in monokernel.h: Model and Session own their handles (move-only); a
// Session is used by one thread at a time, cancel() from any thread. Errors throw monokernel::Error with
// the status and the library's message. An exception thrown by a callback stops the generation and is
// rethrown from generate().
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "monokernel.h"

namespace monokernel {

class Error : public std::runtime_error {
 public:
  Error(mk_status status, const std::string& message)
      : std::runtime_error(std::string(mk_status_name(status)) + ": " + message), status_(status) {}
  mk_status status() const { return status_; }

 private:
  mk_status status_;
};

struct ModelOptions : mk_model_options {
  ModelOptions() { mk_model_options_init(this); }
};

struct Speculation : mk_speculation {
  Speculation() { mk_speculation_init(this); }
};

struct GenerateParams : mk_generate_params {
  GenerateParams() { mk_generate_params_init(this); }
};

using Stats = mk_stats;
using TokenLogprobs = mk_token_logprobs;
// A reply token's record (mk_logprobs_callback); return false to stop the reply.
using LogprobsCallback = std::function<bool(const TokenLogprobs&)>;

// mk_generate_options, owning its bias list.
struct GenerateOptions {
  GenerateParams params;
  std::vector<mk_logit_bias> logit_bias;  // (token, bias) pairs, bias in [-100, 100]
  float frequency_penalty = 0.0f, presence_penalty = 0.0f;  // [-2, 2]
  int top_logprobs = 0;                   // alternatives in each record, 0..MK_MAX_TOP_LOGPROBS
  LogprobsCallback on_logprobs;           // empty: no records
  mk_constraint_kind constraint_kind = MK_CONSTRAINT_NONE;
  std::string constraint;                 // the JSON schema or the regex
};

struct Message {
  std::string role, content;
};

class Model {
 public:
  explicit Model(const std::string& path, const ModelOptions& options = {}, const Speculation& speculation = {}) {
    char error[1024] = "";
    const mk_status s = mk_model_open_speculative(path.c_str(), &options, &speculation, &handle_, error, sizeof error);
    if (s != MK_OK) throw Error(s, error);
  }
  Model(Model&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Model& operator=(Model&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() { mk_model_close(handle_); }

  mk_model* get() const { return handle_; }
  std::string backend_name() const { return mk_model_backend_name(handle_); }

  std::vector<int32_t> tokenize(std::string_view text, bool parse_special = true) const {
    size_t count = 0;
    mk_status s = mk_tokenize(handle_, text.data(), text.size(), parse_special, nullptr, 0, &count);
    std::vector<int32_t> ids(count);
    if (s == MK_ERROR_BUFFER_TOO_SMALL) s = mk_tokenize(handle_, text.data(), text.size(), parse_special, ids.data(), ids.size(), &count);
    check(s);
    return ids;
  }

  std::string detokenize(const std::vector<int32_t>& ids) const {
    size_t length = 0;
    mk_status s = mk_detokenize(handle_, ids.data(), ids.size(), nullptr, 0, &length);
    std::string text(length + 1, '\0');
    if (s == MK_ERROR_BUFFER_TOO_SMALL) s = mk_detokenize(handle_, ids.data(), ids.size(), text.data(), text.size(), &length);
    check(s);
    text.resize(length);
    return text;
  }

 private:
  void check(mk_status s) const {
    if (s != MK_OK) throw Error(s, mk_model_last_error(handle_));
  }
  mk_model* handle_ = nullptr;
};

// Receives the reply's text piece by piece; return false to stop.
using TextCallback = std::function<bool(std::string_view text)>;

class Session {
 public:
  explicit Session(const Model& model, const std::string& system_prompt = {}) {
    mk_session_options options;
    mk_session_options_init(&options);
    options.system_prompt = system_prompt.c_str();
    const mk_status s = mk_session_create(model.get(), &options, &handle_);
    if (s != MK_OK) throw Error(s, mk_model_last_error(model.get()));
  }
  Session(Session&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Session& operator=(Session&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() { mk_session_destroy(handle_); }

  mk_session* get() const { return handle_; }

  // One user turn; returns the whole reply (also streamed to on_text when given).
  std::string generate(const std::string& prompt, const GenerateParams& params = {}, const TextCallback& on_text = {}) {
    return generate(std::vector<Message>{{"user", prompt}}, params, on_text);
  }

  std::string generate(const std::vector<Message>& messages, const GenerateParams& params = {},
                       const TextCallback& on_text = {}) {
    std::vector<mk_message> list;
    for (const Message& m : messages) list.push_back({m.role.c_str(), m.content.c_str()});
    Call call{on_text, {}, {}, nullptr};
    const mk_status s = mk_generate_messages(handle_, list.data(), list.size(), &params, &Session::trampoline, &call);
    if (call.error) std::rethrow_exception(call.error);
    check(s);
    return call.reply;
  }

  // One turn with GenerateOptions (mk_generate_with_options).
  std::string generate_with_options(const std::vector<Message>& messages, const GenerateOptions& options,
                                    const TextCallback& on_text = {}) {
    std::vector<mk_message> list;
    for (const Message& m : messages) list.push_back({m.role.c_str(), m.content.c_str()});
    mk_generate_options o;
    mk_generate_options_init(&o);
    o.params = options.params;
    o.logit_bias = options.logit_bias.data();
    o.logit_bias_count = options.logit_bias.size();
    o.frequency_penalty = options.frequency_penalty;
    o.presence_penalty = options.presence_penalty;
    o.top_logprobs = options.top_logprobs;
    o.constraint_kind = options.constraint_kind;
    o.constraint = options.constraint.c_str();
    Call call{on_text, {}, {}, options.on_logprobs ? &options.on_logprobs : nullptr};
    if (call.on_logprobs) o.on_logprobs = &Session::logprobs_trampoline, o.logprobs_user = &call;
    const mk_status s = mk_generate_with_options(handle_, list.data(), list.size(), &o, &Session::trampoline, &call);
    if (call.error) std::rethrow_exception(call.error);
    check(s);
    return call.reply;
  }

  void cancel() noexcept { mk_session_cancel(handle_); }
  void reset() { check(mk_session_reset(handle_)); }

  Stats stats() const {
    Stats out{};
    check(mk_session_stats(handle_, &out));
    return out;
  }
  // The last reply's drafted and kept tokens (speculative decoding).
  mk_speculation_stats speculation_stats() const {
    mk_speculation_stats out{};
    out.struct_size = sizeof out;
    check(mk_session_speculation_stats(handle_, &out));
    return out;
  }

 private:
  struct Call {
    const TextCallback& on_text;
    std::string reply;
    std::exception_ptr error;
    const LogprobsCallback* on_logprobs = nullptr;
  };

  static int logprobs_trampoline(const mk_token_logprobs* record, void* user) {
    auto* call = static_cast<Call*>(user);
    try {
      return (*call->on_logprobs)(*record) ? 0 : 1;
    } catch (...) {  // never unwind through the C library
      call->error = std::current_exception();
      return 1;
    }
  }

  static int trampoline(const char* text, size_t length, void* user) {
    auto* call = static_cast<Call*>(user);
    try {
      call->reply.append(text, length);
      return call->on_text && !call->on_text(std::string_view(text, length)) ? 1 : 0;
    } catch (...) {  // never unwind through the C library
      call->error = std::current_exception();
      return 1;
    }
  }

  void check(mk_status s) const {
    if (s != MK_OK) throw Error(s, mk_session_last_error(handle_));
  }
  mk_session* handle_ = nullptr;
};

}  // namespace monokernel
