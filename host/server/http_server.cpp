#include "host/server/http_server.h"

#include <fmt/format.h>

#include <cstdint>
// httplib refuses form-encoded bodies over 8 KiB with 413, and curl -d sends JSON as form-encoded unless
// told otherwise: the body limit is --max-body whatever the Content-Type says.
#define CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH SIZE_MAX
// httplib listens with a backlog of 5. Every request has a connection of its own (keep-alive is off,
// below), so a burst of clients, or an accept thread that a loaded machine runs late, overflows it: the
// kernel then drops the connection's last handshake packet and the client waits for a retransmission,
// a second or more (the kernel's ListenOverflows counted them in the load test). The kernel caps this at
// net.core.somaxconn.
#define CPPHTTPLIB_LISTEN_BACKLOG 1024
// select() cannot watch a descriptor numbered 1,024 or more, and the request gate may hold that many
// connections.
#define CPPHTTPLIB_USE_POLL
#include <httplib.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>

#include "host/server/api_error.h"
#include "host/server/metrics.h"
#include "host/server/openai_json.h"
#include "host/server/reasoning_split.h"
#include "host/server/request.h"
#include "host/server/request_gate.h"
#include "host/server/scheduler.h"
#include "host/server/tool_call_parser.h"
#include "runtime/tool_call_grammar.h"

namespace mk::server {
namespace {

using json = nlohmann::json;
using httplib::DataSink;
using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

constexpr const char* kChatPath = "/v1/chat/completions";
constexpr const char* kCompletionPath = "/v1/completions";
constexpr const char* kModelsPath = "/v1/models";
constexpr std::string_view kModelPrefix = "/v1/models/";

// The client's connection is checked on every token, and this often while no token comes (a long prompt):
// a disconnect is noticed by the next token and the generation stops at the one after. A waiting job's
// client is checked less often.
constexpr auto kRunningPoll = std::chrono::milliseconds(1);
constexpr auto kWaitingPoll = std::chrono::milliseconds(25);

void set_error(Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(dump(e.to_json()), "application/json");
  if (e.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
  if (e.status() == 429) res.set_header("Retry-After", "1");
}

// A fixed set of labels for the metrics (a client cannot grow it by asking for random paths).
std::string route_label(const std::string& path) {
  for (const char* known : {kChatPath, kCompletionPath, kModelsPath, "/health", "/metrics"})
    if (path == known) return path;
  if (path.starts_with(kModelPrefix)) return "/v1/models/{id}";
  return "other";
}

bool equal_constant_time(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool write(DataSink& sink, std::string_view data) { return sink.write(data.data(), data.size()); }

GateLimits gate_limits_for(const ServerConfig& config) {
  GateLimits limits;
  limits.max_body_bytes = config.max_body_bytes;
  // Half the descriptors at most, so that accept() and the workers always have some.
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
    limits.max_pending = std::clamp<size_t>(size_t(files.rlim_cur) / 2, 16, limits.max_pending);
  return limits;
}

// A request's bytes that the gate has read, then its socket.
class GatedSocketStream final : public httplib::Stream {
 public:
  GatedSocketStream(std::string bytes, httplib::detail::SocketStream& socket) : bytes_(std::move(bytes)), socket_(socket) {}
  bool is_readable() const override { return offset_ < bytes_.size() || socket_.is_readable(); }
  bool is_writable() const override { return socket_.is_writable(); }
  ssize_t read(char* ptr, size_t size) override {
    if (offset_ == bytes_.size()) return socket_.read(ptr, size);
    const size_t n = std::min(size, bytes_.size() - offset_);
    std::memcpy(ptr, bytes_.data() + offset_, n);
    offset_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override { return socket_.write(ptr, size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { socket_.get_remote_ip_and_port(ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { socket_.get_local_ip_and_port(ip, port); }
  socket_t socket() const override { return socket_.socket(); }

 private:
  std::string bytes_;
  size_t offset_ = 0;
  httplib::detail::SocketStream& socket_;
};

// httplib's server behind the request gate. Its accept loop gives each connection to its task queue as
// "process this socket"; the queue here runs that at once on the accept thread, and the processing is
// overridden to hand the socket to the gate, which returns at once. A worker then serves the request once
// the gate has it whole: one request per connection (`Connection: close`).
class GatedServer final : public httplib::Server {
 public:
  std::function<void(socket_t)> on_connection;

  void serve(socket_t sock, std::string bytes) {
    httplib::detail::SocketStream socket(sock, read_timeout_sec_, read_timeout_usec_, write_timeout_sec_, write_timeout_usec_);
    GatedSocketStream stream(std::move(bytes), socket);
    bool connection_closed = false;
    process_request(stream, /*close_connection=*/true, connection_closed, nullptr);
    httplib::detail::shutdown_socket(sock);
    httplib::detail::close_socket(sock);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    on_connection(sock);
    return true;
  }
};

struct InlineTaskQueue final : httplib::TaskQueue {
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

// How a chat reply is read for tool calls: the model's format (None: it is not) and the functions.
struct ToolReading {
  ToolCallFormat format = ToolCallFormat::None;
  std::vector<std::string> names;
};

struct HttpServer::Impl {
  Impl(Engine& e, const ServerConfig& c)
      : engine(e), config(c), gate_limits(gate_limits_for(c)), session(engine.create_session()), context(session->stats().context_size),
        scheduler(*session, engine.tokenizer(), config.queue_capacity, metrics), started(std::time(nullptr)),
        seeds(std::random_device{}()) {
    setup();
  }

  Engine& engine;
  const ServerConfig config;
  // Read once: the open-file limit they depend on is raised (mk_server.cpp) before the server is made.
  const GateLimits gate_limits;
  std::unique_ptr<Session> session;
  const int context;
  Metrics metrics;
  Scheduler scheduler;
  GatedServer http;
  const int64_t started;
  std::atomic<uint64_t> next_id{1};
  std::mutex seed_mutex;
  std::mt19937_64 seeds;

  // -------------------------------------------------------------------------------------------------
  // Checks

  void require_key(const Request& req) const {
    if (config.api_key.empty()) return;
    const std::string header = req.get_header_value("Authorization");
    if (header.empty())
      throw ApiError(401, "invalid_request_error",
                     "no API key: send it in the header 'Authorization: Bearer KEY' (the server was started with --api-key)",
                     {}, "invalid_api_key");
    constexpr std::string_view kBearer = "Bearer ";
    if (!header.starts_with(kBearer) || !equal_constant_time(std::string_view(header).substr(kBearer.size()), config.api_key))
      throw ApiError(401, "invalid_request_error", "the API key is not valid", {}, "invalid_api_key");
  }

  ApiError too_large() const {
    return ApiError(413, "invalid_request_error",
                    fmt::format("the request body is larger than the limit of {} bytes (mk-server --max-body)", config.max_body_bytes),
                    {}, "request_too_large");
  }

  // What httplib answered on its own (no route, a malformed request, a body over the limit), in
  // OpenAI's error form.
  ApiError status_error(int status, const Request& req) const {
    switch (status) {
      case 404:
        return ApiError(404, "invalid_request_error",
                        fmt::format("unknown endpoint {} {} (this server has POST {}, POST {}, GET {}, GET /health, GET /metrics)",
                                    req.method, req.path, kChatPath, kCompletionPath, kModelsPath),
                        {}, "unknown_url");
      case 413: return too_large();
      case 414: return ApiError(414, "invalid_request_error", "the request line is too long");
      case 400: return ApiError(400, "invalid_request_error", "malformed HTTP request (request line, headers or body)");
      default: return ApiError(status, status >= 500 ? "server_error" : "invalid_request_error", fmt::format("HTTP {}", status));
    }
  }

  // -------------------------------------------------------------------------------------------------
  // Requests -> jobs

  // Qwen3's thinking, on unless the request turns it off: the reply may begin with a <think> block.
  bool thinks(const CompletionRequest& r) const {
    return r.endpoint == Endpoint::Chat && engine.chat_template().format() == ChatFormat::Qwen3 && r.enable_thinking.value_or(true);
  }

  std::shared_ptr<Job> make_job(const CompletionRequest& r) {
    auto job = std::make_shared<Job>();
    job->endpoint = r.endpoint;
    const Tokenizer& tok = engine.tokenizer();
    if (r.endpoint == Endpoint::Chat) {
      if (!engine.has_chat_template())
        throw invalid_request("this model directory has no usable chat template; use /v1/completions with a prompt", "messages");
      ChatOptions options;
      options.enable_thinking = r.enable_thinking;
      if (r.tool_choice != ToolChoice::None) {
        if (engine.chat_template().tool_call_format() == ToolCallFormat::None)
          throw invalid_request(fmt::format("'tools': this model's chat template ({}) has no tool-call format; tool calls need a "
                                            "Llama 3.1/3.2 or a Qwen2.5/Qwen3 (<tool_call>) template",
                                            engine.chat_template().format_name()),
                                "tools");
        options.tools = r.tools;  // tool_choice none: the model is not shown them
      }
      try {
        job->prompt = engine.encode_chat(r.messages, options);
      } catch (const EngineError& e) {
        if (e.kind() != EngineErrorKind::InvalidArgument) throw;
        throw invalid_request(fmt::format("'messages' cannot be rendered with the model's chat template: {}", e.what()), "messages");
      }
    } else if (r.prompt_tokens) {
      job->prompt = *r.prompt_tokens;
    } else {
      // As Hugging Face's tokenizer(prompt) does: special tokens in the text are parsed, BOS is added.
      job->prompt = tok.encode(r.prompt, /*parse_special=*/true, /*add_special_tokens=*/true);
    }

    if (job->prompt.empty()) throw invalid_request("the prompt is empty: at least one token is needed", "prompt");
    if (job->prompt.size() > size_t(context))
      throw invalid_request(fmt::format("the prompt is {} tokens long, but the context holds {} tokens (mk-server -c)",
                                        job->prompt.size(), context),
                            r.endpoint == Endpoint::Chat ? "messages" : "prompt", "context_length_exceeded");
    for (size_t i = 0; i < job->prompt.size(); ++i)
      if (job->prompt[i] < 0 || job->prompt[i] >= engine.vocab_size())
        throw invalid_request(fmt::format("the prompt's token {} (at index {}) is outside the model's vocabulary of {} tokens",
                                          job->prompt[i], i, engine.vocab_size()),
                              r.endpoint == Endpoint::Chat ? "messages" : "prompt");

    job->params = config.defaults;
    if (r.max_tokens) job->params.max_tokens = *r.max_tokens;
    SamplingParams& s = job->params.sampling;
    if (r.temperature) s.temperature = *r.temperature;
    if (r.top_p) s.top_p = *r.top_p;
    if (r.min_p) s.min_p = *r.min_p;
    if (r.top_k) s.top_k = *r.top_k;
    if (r.seed) {
      s.seed = *r.seed;
    } else if (r.random_seed || !config.fixed_seed) {
      std::lock_guard lock(seed_mutex);
      s.seed = seeds();
    }
    job->stop = r.stop;
    job->logprobs = r.logprobs;
    job->params.top_logprobs = r.top_logprobs;
    // The parser checked every value; what it could not check is the token ids against the vocabulary.
    if (std::string e = logit_adjustments_error(r.adjust, engine.vocab_size()); !e.empty()) throw invalid_request(e, "logit_bias");
    job->params.adjust = r.adjust;
    // Compiled here, on the request's thread (a cache keeps it for the generation): an unsupported keyword
    // or a constraint past the limits is a 400 naming it, before the request waits for the GPU.
    if (r.constraint.active()) {
      try {
        engine.compile_constraint(r.constraint, "response_format");
      } catch (const EngineError& e) {
        throw invalid_request(e.what(), "response_format");
      }
      job->params.constraint = r.constraint;
    }
    // tool_choice required or a function: the reply is a call (one or more where the format and
    // parallel_tool_calls allow), its arguments valid under the function's parameter schema.
    if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function) {
      std::vector<constraint::ToolFunction> functions;
      for (size_t i = 0; i < r.tools.size(); ++i) {
        const auto& f = r.tools[i]["function"];
        if (r.tool_choice == ToolChoice::Function && f["name"] != r.tool_choice_function) continue;
        constraint::ToolFunction fn{f["name"].get<std::string>(), std::nullopt, fmt::format("tools[{}].function.parameters", i)};
        if (f.contains("parameters") && !f["parameters"].is_null()) fn.parameters = f["parameters"];
        functions.push_back(std::move(fn));
      }
      // A named function is called once. Qwen3 with thinking on may reason first.
      job->params.constraint = constraint::tool_call_constraint(engine.chat_template().tool_call_format(), functions,
                                                                r.tool_choice == ToolChoice::Required && r.parallel_tool_calls,
                                                                thinks(r));
      try {
        engine.compile_constraint(job->params.constraint, "tools");
      } catch (const EngineError& e) {
        throw invalid_request(e.what(), "tools");
      }
    }
    return job;
  }

  ResponseIds new_ids(Endpoint endpoint) {
    ResponseIds ids;
    ids.endpoint = endpoint;
    ids.id = fmt::format("{}-{:x}{:06x}", endpoint == Endpoint::Chat ? "chatcmpl" : "cmpl", started, next_id.fetch_add(1));
    ids.created = std::time(nullptr);
    ids.model = config.model_id;
    return ids;
  }

  void completion(Endpoint endpoint, const Request& req, Response& res) {
    require_key(req);
    const CompletionRequest r = parse_request(endpoint, req.body);
    std::shared_ptr<Job> job = make_job(r);
    switch (scheduler.submit(job)) {
      case Scheduler::Admission::Queued: break;
      case Scheduler::Admission::QueueFull:
        throw ApiError(429, "rate_limit_error",
                       fmt::format("the server is busy: {} requests are already waiting (mk-server --queue); retry later",
                                   config.queue_capacity),
                       {}, "queue_full");
      case Scheduler::Admission::Stopping: throw ApiError(503, "server_error", "the server is shutting down");
    }
    const ResponseIds ids = new_ids(endpoint);
    const std::string path = req.path;
    // The reply's <think> block is its reasoning.
    const bool split_reasoning = thinks(r);
    // With tools the model may call, its content is read for calls.
    ToolReading tools;
    if (r.tool_choice != ToolChoice::None) tools = {engine.chat_template().tool_call_format(), r.tool_names()};
    // Also when the response never starts (the client left before the headers went out); a no-op once done.
    auto release = [this, job](bool) { scheduler.cancel(job); };
    if (r.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, job, ids, path, usage = r.include_usage, split_reasoning, tools](size_t, DataSink& sink) {
            return stream(job, ids, usage, split_reasoning, tools, path, sink);
          },
          release);
    } else {
      // Sent through a provider too, so that a client that goes away while waiting is noticed.
      res.set_chunked_content_provider(
          "application/json",
          [this, job, ids, path, split_reasoning, tools](size_t, DataSink& sink) {
            return respond(job, ids, split_reasoning, tools, path, sink);
          },
          release);
    }
  }

  // -------------------------------------------------------------------------------------------------
  // Responses

  // The client went away: stop the job (dequeue it, or cancel its generation) and wait until it has
  // stopped, so that the next request starts on an idle generator.
  bool gone(const std::shared_ptr<Job>& job, const std::string& path, bool streamed) {
    for (;;) {
      scheduler.cancel(job);
      if (job->wait(kRunningPoll).done) break;
    }
    log_generation(path, streamed, job->outcome());
    return false;
  }

  // Waits for the job's next token or its end, then checks the client (before writing: the first write
  // to a closed connection still succeeds). nullopt: the client is gone.
  std::optional<Job::Update> next(const std::shared_ptr<Job>& job, DataSink& sink) {
    Job::Update u = job->wait(job->started() ? kRunningPoll : kWaitingPoll);
    if (!u.done && !sink.is_writable()) return std::nullopt;
    return u;
  }

  bool stream(const std::shared_ptr<Job>& job, const ResponseIds& ids, bool usage, bool split_reasoning, const ToolReading& tools,
              const std::string& path, DataSink& sink) {
    bool first = true;
    std::optional<ReasoningSplitter> splitter;
    if (split_reasoning) splitter.emplace();
    std::optional<ToolCallParser> calls;
    if (tools.format != ToolCallFormat::None) calls.emplace(tools.format, tools.names);
    bool called = false;
    // With logprobs: the entries of the tokens generated since the last chunk go out with the next one
    // (text held back by a stop string or an incomplete character goes out later, its tokens with it).
    std::vector<LogprobEntry> entries;
    size_t text_offset = 0;  // completions: the bytes of the tokens already sent
    const auto take_logprobs = [&]() -> json {
      if (!job->logprobs) return nullptr;
      json j = logprobs_json(ids.endpoint, entries, text_offset);
      for (const LogprobEntry& e : entries) text_offset += e.bytes.size();
      entries.clear();
      return j;
    };
    // The tool-call parser's events: content as text, calls as OpenAI streams them.
    const auto send_events = [&](const std::vector<ToolCallEvent>& events) {
      for (const ToolCallEvent& e : events) {
        called = called || e.kind == ToolCallEvent::Kind::Call;
        const json chunk = e.kind == ToolCallEvent::Kind::Content ? text_chunk(ids, e.text, first, usage, false, take_logprobs())
                                                                  : tool_call_chunk(ids, e, first, usage, take_logprobs());
        if (!write(sink, sse_event(chunk))) return false;
        first = false;
      }
      return true;
    };
    // One chunk for each non-empty part; false when the client is gone.
    const auto send = [&](const SplitText& parts) {
      for (const bool reasoning : {true, false}) {
        const std::string& text = reasoning ? parts.reasoning : parts.content;
        if (text.empty()) continue;
        if (!reasoning && calls) {
          if (!send_events(calls->push(text))) return false;
          continue;
        }
        if (!write(sink, sse_event(text_chunk(ids, text, first, usage, reasoning, take_logprobs())))) return false;
        first = false;
      }
      return true;
    };
    for (;;) {
      const auto u = next(job, sink);
      if (!u) return gone(job, path, true);
      entries.insert(entries.end(), std::make_move_iterator(u->logprobs.begin()), std::make_move_iterator(u->logprobs.end()));
      if (!u->text.empty() && !send(splitter ? splitter->push(u->text) : SplitText{{}, u->text})) return gone(job, path, true);
      if (u->done) break;
    }
    if (splitter && !send(splitter->finish())) return gone(job, path, true);
    if (calls && !send_events(calls->finish())) return gone(job, path, true);
    // Tokens whose text never went out (a stop string's, a reply of only held-back text): a chunk of no text.
    if (!entries.empty()) {
      if (!write(sink, sse_event(text_chunk(ids, "", first, usage, false, take_logprobs())))) return gone(job, path, true);
      first = false;
    }
    JobOutcome o = job->outcome();
    log_generation(path, true, o);
    if (called && o.finish_reason == "stop") o.finish_reason = "tool_calls";
    if (o.finish_reason == "error" || o.finish_reason == "cancelled") {
      // The status line went out long ago: the failure travels as an event (OpenAI's clients raise it).
      const ApiError e = o.finish_reason == "error" ? ApiError(500, "server_error", fmt::format("generation failed: {}", o.error))
                                                    : ApiError(503, "server_error", "the server is shutting down");
      write(sink, sse_event(e.to_json()));
      write(sink, kSseDone);
      sink.done();
      return true;
    }
    if (first && ids.endpoint == Endpoint::Chat) write(sink, sse_event(text_chunk(ids, "", true, usage)));
    write(sink, sse_event(finish_chunk(ids, o, usage)));
    if (usage) write(sink, sse_event(usage_chunk(ids, o)));
    write(sink, kSseDone);
    sink.done();
    return true;
  }

  bool respond(const std::shared_ptr<Job>& job, const ResponseIds& ids, bool split_reasoning, const ToolReading& tools,
               const std::string& path, DataSink& sink) {
    std::string text;
    std::vector<LogprobEntry> entries;
    for (;;) {
      const auto u = next(job, sink);
      if (!u) return gone(job, path, false);
      text += u->text;
      entries.insert(entries.end(), std::make_move_iterator(u->logprobs.begin()), std::make_move_iterator(u->logprobs.end()));
      if (u->done) break;
    }
    std::optional<std::string> reasoning;
    if (split_reasoning) {
      SplitText parts = mk::server::split_reasoning(text);
      reasoning = std::move(parts.reasoning);
      text = std::move(parts.content);
    }
    ParsedReply parsed;
    if (tools.format != ToolCallFormat::None) parsed = parse_tool_calls(tools.format, tools.names, text);
    else parsed.content = std::move(text);
    JobOutcome o = job->outcome();
    log_generation(path, false, o);
    // The status (200) is sent: a failure can only cut the connection, which clients report as an error.
    if (o.finish_reason == "error" || o.finish_reason == "cancelled") return false;
    if (!parsed.calls.empty() && o.finish_reason == "stop") o.finish_reason = "tool_calls";
    write(sink, dump(full_response(ids, parsed.content, o, reasoning, job->logprobs ? logprobs_json(ids.endpoint, entries) : json(nullptr),
                                   parsed.calls)));
    sink.done();
    return true;
  }

  void log_generation(const std::string& path, bool streamed, const JobOutcome& o) const {
    if (!config.log_requests) return;
    if (o.finish_reason == "error") {
      fmt::print(stderr, "POST {}: generation failed: {}\n", path, o.error);
      return;
    }
    const std::string drafts =
        o.drafted_tokens > 0 ? fmt::format("{} of {} drafts kept, ", o.accepted_tokens, o.drafted_tokens) : std::string();
    fmt::print(stderr, "POST {}{}: {} prompt tokens ({} cached), {} generated, queue {:.1f} ms, first token {:.1f} ms, "
                       "{:.1f} tok/s, {}{}\n",
               path, streamed ? " (stream)" : "", o.prompt_tokens, o.cached_tokens, o.completion_tokens, o.queue_seconds * 1e3,
               o.first_token_seconds * 1e3, o.decode_tokens_per_second, drafts, o.finish_reason);
  }

  // -------------------------------------------------------------------------------------------------
  // Routes

  // Every handler answers errors in OpenAI's form; nothing escapes to httplib (which would answer 500
  // with the exception text in a header).
  template <typename F>
  httplib::Server::Handler guarded(F body) {
    return [this, body](const Request& req, Response& res) {
      try {
        body(req, res);
      } catch (const ApiError& e) {
        set_error(res, e);
      } catch (const std::exception& e) {
        set_error(res, ApiError(500, "server_error", fmt::format("internal error: {}", e.what())));
      }
    };
  }

  void setup() {
    // One request per connection (GatedServer::serve): a waiting or streaming request holds its
    // connection's thread, and a request refused before its body was read (411) must not leave that body
    // to be parsed as the next request.
    http.set_tcp_nodelay(true);  // each token's event goes out at once, not after Nagle's delay
    // httplib sets SO_REUSEPORT, which lets a second server bind the same port and take half of the
    // connections. SO_REUSEADDR alone: a busy port is an error, a restart right after a stop is not.
    http.set_socket_options([](socket_t sock) {
      const int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    http.set_payload_max_length(config.max_body_bytes);
    http.new_task_queue = [] { return new InlineTaskQueue; };

    http.set_expect_100_continue_handler([this](const Request& req, Response& res) {
      try {  // answered before the client sends the body
        require_key(req);
        if (req.get_header_value<uint64_t>("Content-Length") > config.max_body_bytes) throw too_large();
      } catch (const ApiError& e) {
        set_error(res, e);
        return e.status();
      }
      return 100;
    });
    http.set_pre_routing_handler([this](const Request& req, Response& res) {
      try {
        // httplib bounds only bodies with a Content-Length; others would be read whole into memory.
        if (req.method == "POST" && (req.has_header("Transfer-Encoding") || !req.has_header("Content-Length")))
          throw ApiError(411, "invalid_request_error",
                         "the request body needs a Content-Length header (chunked request bodies are not accepted)", {},
                         "length_required");
        // /v1/models/{id} without a regex route (a pattern with '.+' over an 8 KiB path recurses deeply).
        if ((req.method == "GET" || req.method == "HEAD") && req.path.starts_with(kModelPrefix)) {
          require_key(req);
          const std::string id = req.path.substr(kModelPrefix.size());
          if (id != config.model_id)
            throw ApiError(404, "invalid_request_error",
                           fmt::format("the model '{}' does not exist; this server has '{}'", id, config.model_id), "model",
                           "model_not_found");
          res.set_content(dump(model_json(config.model_id, started)), "application/json");
          return HandlerResponse::Handled;
        }
      } catch (const ApiError& e) {
        set_error(res, e);
        return HandlerResponse::Handled;
      }
      return HandlerResponse::Unhandled;
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
      if (!res.body.empty()) return HandlerResponse::Unhandled;  // already in OpenAI's form
      set_error(res, status_error(res.status, req));
      return HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
      set_error(res, ApiError(500, "server_error", "internal error"));
    });
    http.set_logger([this](const Request& req, const Response& res) {
      metrics.count_http(route_label(req.path), res.status);
      if (config.log_requests && res.status >= 400) {
        std::string message = res.body;
        try {
          message = json::parse(res.body).at("error").at("message").get<std::string>();
        } catch (const std::exception&) {
        }
        fmt::print(stderr, "{} {} {}: {}\n", req.method, req.path.substr(0, 200), res.status, message);
      }
    });

    http.Post(kChatPath, guarded([this](const Request& req, Response& res) { completion(Endpoint::Chat, req, res); }));
    http.Post(kCompletionPath, guarded([this](const Request& req, Response& res) { completion(Endpoint::Completion, req, res); }));
    http.Get(kModelsPath, guarded([this](const Request& req, Response& res) {
      require_key(req);
      res.set_content(dump(models_json(config.model_id, started)), "application/json");
    }));
    http.Get("/health", guarded([this](const Request&, Response& res) {
      const HealthReply h = health_reply(scheduler.state());
      res.status = h.status;
      res.set_content(dump(h.body), "application/json");
    }));
    http.Get("/metrics", guarded([this](const Request& req, Response& res) {
      require_key(req);
      res.set_content(metrics.render(scheduler.state(), config.model_id, engine.backend_name()),
                      "text/plain; version=0.0.4; charset=utf-8");
    }));
  }

  // The gate's own answers, in OpenAI's error form.
  std::string refusal(int status) {
    const ApiError e =
        status == 408   ? ApiError(408, "invalid_request_error",
                                   fmt::format("the request did not arrive whole within {} s of the connection's opening",
                                               gate_limits.whole_request.count() / 1000.0),
                                   {}, "request_timeout")
        : status == 431 ? ApiError(431, "invalid_request_error",
                                   fmt::format("the request line and headers are larger than {} bytes", gate_limits.max_header_bytes),
                                   {}, "request_header_fields_too_large")
                        : ApiError(503, "server_error",
                                   fmt::format("too many requests are arriving at once (more than {} connections or {} MiB); "
                                               "this one had waited longest or came past the bytes: retry later",
                                               gate_limits.max_pending, gate_limits.max_buffered_bytes >> 20));
    metrics.count_http("other", status);
    if (config.log_requests) fmt::print(stderr, "connection refused with {}: {}\n", status, e.what());
    const std::string body = dump(e.to_json());
    return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}", status,
                       httplib::detail::status_message(status), body.size(), body);
  }


};

HttpServer::HttpServer(Engine& engine, const ServerConfig& config) : impl_(std::make_unique<Impl>(engine, config)) {}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const ServerConfig& c = impl_->config;
  errno = 0;
  const int port = c.port == 0 ? impl_->http.bind_to_any_port(c.host) : (impl_->http.bind_to_port(c.host, c.port) ? c.port : -1);
  if (port < 0)
    fail("cannot listen on {}:{}: {}", c.host, c.port,
         errno ? fmt::format("{} (is another server on that port?)", std::strerror(errno))
               : std::string("the host does not resolve to an address of this machine"));
  return port;
}

void HttpServer::run() {
  Impl& s = *impl_;
  // Enough workers for every request the queue admits, the one generating, and a few for /health,
  // /metrics and the answers (429, 4xx) to the rest; further requests wait for a worker, whole.
  httplib::ThreadPool workers(s.config.queue_capacity + 1 + 8);
  RequestGate gate(
      s.gate_limits,
      [&](int sock, std::string bytes) {
        workers.enqueue([&s, sock, bytes = std::move(bytes)]() mutable { s.http.serve(sock, std::move(bytes)); });
      },
      [&](int status) { return s.refusal(status); });
  s.http.on_connection = [&gate](socket_t sock) { gate.admit(sock); };
  s.http.listen_after_bind();
  gate.stop();
  workers.shutdown();
}

void HttpServer::stop() {
  impl_->scheduler.stop();
  impl_->http.stop();
}

}  // namespace mk::server
