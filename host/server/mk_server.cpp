// mk-server: an OpenAI-compatible HTTP server over the engine, so that any OpenAI client (the official
// libraries, LangChain, editors, curl) can use the monokernel. docs/server.md.
//   mk-server -m MODEL_DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [-c 0] [--temp 0.8] ...
// Logs go to stderr: the address, model, backend and context at start, then one line per generation and
// per refused request. SIGINT / SIGTERM stop it: waiting and running requests are ended, then it exits 0.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "host/engine/engine.h"
#include "host/tools/cli_checks.h"
#include "host/tools/tool_main.h"
#include "host/server/http_server.h"

namespace {

std::string read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) mk::fail("--api-key-file: cannot read {}", path);
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
  if (key.empty()) mk::fail("--api-key-file: the first line of {} is empty", path);
  return key;
}

int run(int argc, char** argv) {
  CLI::App app{"mk-server: an OpenAI-compatible HTTP server on the monokernel (CPU emulator when there is no GPU)"};
  std::string model_dir, key_file;
  int context = 0;
  bool force_emulator = false, quiet = false;
  mk::server::ServerConfig config;
  mk::TurnParams& d = config.defaults;
  // mk-chat's (llama.cpp's) defaults, for the fields a request leaves out.
  d.sampling.temperature = 0.8f;
  d.sampling.top_k = 40;
  d.sampling.top_p = 0.95f;
  d.sampling.min_p = 0.05f;
  app.add_option("-m,--model", model_dir, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--host", config.host, "address to listen on (0.0.0.0: every interface; think of --api-key then)")
      ->capture_default_str();
  app.add_option("--port", config.port, "TCP port (0: any free one, printed at start)")->capture_default_str()->check(CLI::Range(0, 65535));
  app.add_option("--api-key", config.api_key, "require 'Authorization: Bearer KEY' on every route but /health");
  app.add_option("--api-key-file", key_file, "read the API key from the first line of this file (keeps it out of ps)");
  app.add_option("--model-id", config.model_id, "the model's name in /v1/models and responses (default: the directory's name)");
  mk::cli::add_context_option(app, context, "; one cache, used by the requests in turn");
  app.add_option("-n,--n-predict", d.max_tokens, "tokens per reply when a request sets no max_tokens (-1: until the end of the turn)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  app.add_option("--temp", d.sampling.temperature, "default temperature (0: greedy)")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", d.sampling.top_k, "default top-k (0: off)")->capture_default_str()->check(CLI::Range(0, 1 << 30));
  app.add_option("--top-p", d.sampling.top_p, "default top-p (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-p", d.sampling.min_p, "default min-p (0: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  std::optional<uint64_t> seed;
  mk::cli::add_seed_option(app, seed, "seed for requests that give none (default: a random one per request)");
  app.add_option("--queue", config.queue_capacity, "requests that may wait while one generates; one more gets 429")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  app.add_option("--max-body", config.max_body_bytes, "largest request body in bytes; larger ones get 413")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1024), size_t(1) << 30));
  mk::LoadOptions load;
  mk::cli::add_quantize_options(app, load);
  mk::SpeculationParams spec;
  mk::cli::add_speculation_options(app, spec);
  int tensor_parallel = 1;
  mk::cli::add_tensor_parallel_option(app, tensor_parallel);
  app.add_flag("--emulator", force_emulator, "run on the CPU emulator even when a GPU is present");
  double watchdog = mk::EngineOptions{}.watchdog_seconds;
  mk::cli::add_watchdog_option(app, watchdog);
  app.add_flag("-q,--quiet", quiet, "no line per request on stderr");
  if (const auto status = mk::cli::parse_command_line(app, argc, argv)) return *status;
  if (d.max_tokens == 0) mk::cli::usage_error("-n must be positive, or -1 for no limit");
  mk::cli::check_speculation_flags(spec);
  if (!(d.sampling.top_p > 0.f)) mk::cli::usage_error("--top-p must be in (0, 1] (got {})", d.sampling.top_p);
  if (!key_file.empty()) {
    if (!config.api_key.empty()) mk::cli::usage_error("give either --api-key or --api-key-file, not both");
    config.api_key = read_key_file(key_file);
  }
  config.fixed_seed = seed.has_value();
  if (seed) d.sampling.seed = *seed;
  config.log_requests = !quiet;
  if (config.model_id.empty()) config.model_id = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (config.model_id.empty()) config.model_id = std::filesystem::absolute(model_dir).parent_path().filename().string();

  // SIGINT and SIGTERM go to one thread that stops the server in an orderly way (not in a handler: stopping
  // takes locks). Blocked before any other thread exists, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

  mk::EngineOptions options;
  options.backend = force_emulator ? mk::BackendChoice::Emulator : mk::BackendChoice::Auto;
  options.context = context;
  options.watchdog_seconds = watchdog;
  options.load = load;
  options.speculation = spec;
  options.tensor_parallel = tensor_parallel;
  options.on_notice = [](const std::string& m) { fmt::print(stderr, "warning: {}\n", m); };
  options.on_upload_progress = [](uint64_t done, uint64_t total, double s) {
    if (done == total) fmt::print(stderr, "uploaded {:.2f} GB of weights in {:.1f} s\n", double(total) / 1e9, s);
  };
  auto engine = mk::Engine::open(model_dir, options);

  // Every connection whose request is still arriving holds a descriptor (host/server/request_gate.h):
  // the soft limit (often 1,024) goes up to the hard one, so that slow clients do not starve accept().
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  mk::server::HttpServer server(*engine, config);
  const int port = server.bind();
  fmt::print(stderr, "mk-server: model {} (id \"{}\"), {} chat template\n", model_dir, config.model_id,
             engine->has_chat_template() ? std::string(engine->chat_template().format_name()) : "no");
  fmt::print(stderr, "{}",
             mk::cli::wrap_info(fmt::format("mk-server: backend {}{}", engine->backend_name(),
                                            engine->on_gpu() ? "" : ": on the CPU, slow for real models")));
  fmt::print(stderr, "mk-server: context {} tokens, queue {}, body limit {} bytes, {}\n", engine->context_size(), config.queue_capacity,
             config.max_body_bytes, config.api_key.empty() ? "no API key" : "API key required");
  fmt::print(stderr, "mk-server: listening on http://{}:{}\n",
             config.host.find(':') != std::string::npos ? "[" + config.host + "]" : config.host, port);
  std::fflush(stderr);

  std::thread([&server, stop_signals] {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    fmt::print(stderr, "mk-server: {}, stopping\n", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  }).detach();
  server.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return mk::cli::run_tool("mk-server", run, argc, argv); }
