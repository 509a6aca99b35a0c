// mk-chat: chat with a model directory in the terminal, or answer one prompt (-p) for scripts.
// The conversation stays in the KV cache: each turn ingests only what is new (host/engine/engine.h).
// stdout carries the replies (and /stats); everything else (progress, notices, per-reply speed) goes to
// stderr, so `mk-chat -p ... > out.txt` captures exactly the reply.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <histedit.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cwchar>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>

#include "host/engine/engine.h"
#include "host/tools/cli_checks.h"
#include "host/tools/constraint_options.h"
#include "host/tools/tool_main.h"

#include "host/tools/shipped_model.h"  // the model opened without -m

namespace {

// ---------------------------------------------------------------------------------------------------
// Ctrl-C: during a reply it cancels the reply (the session survives); at the prompt, twice in a row quits.

std::atomic<mk::Session*> g_session{nullptr};  // set while a reply is being generated
// Ctrl-Cs so far. A counter, not a flag that the main loop clears: clearing could erase a Ctrl-C that
// arrived just before; the loop instead remembers how many it has already acted on.
volatile std::sig_atomic_t g_interrupts = 0;

void on_sigint(int) {
  g_interrupts = g_interrupts + 1;
  if (mk::Session* s = g_session.load()) s->cancel();  // atomic stores only: async-signal-safe
}

void install_sigint_handler() {
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a Ctrl-C at the prompt must interrupt the blocking read()
  sigaction(SIGINT, &sa, nullptr);
}

enum class ReadStatus { Line, EndOfInput, Interrupted };

// True when stdin is readable (or at its end), false when a Ctrl-C came first. `seen`: the Ctrl-Cs already
// acted on; one more makes this return false (and updates it). SIGINT is blocked except inside ppoll(),
// which unblocks it atomically while waiting: a Ctrl-C that lands just before the wait is seen by the
// counter check, one during the wait interrupts it - none is lost between the check and the wait.
bool wait_for_input(std::sig_atomic_t& seen) {
  sigset_t sigint, unblocked;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  sigprocmask(SIG_BLOCK, &sigint, &unblocked);
  int ready = 0;
  while (g_interrupts == seen && ready <= 0) {
    struct pollfd p = {STDIN_FILENO, POLLIN, 0};
    ready = ppoll(&p, 1, nullptr, &unblocked);
    if (ready < 0 && errno != EINTR) ready = 1;  // let read() report the error
  }
  sigprocmask(SIG_SETMASK, &unblocked, nullptr);
  if (g_interrupts == seen) return true;
  seen = g_interrupts;
  return false;
}

// Reads lines from stdin with read(2) (a pipe or file), so that a Ctrl-C reaches the loop instead of being
// swallowed by a restarted read or leaving an iostream in a failed state.
class PlainReader {
 public:
  ReadStatus next(std::string& line, std::sig_atomic_t& seen) {
    for (;;) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return ReadStatus::Line;
      }
      if (!wait_for_input(seen)) {
        buffer_.clear();  // the terminal dropped the half-typed line too
        return ReadStatus::Interrupted;
      }
      char chunk[4096];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n > 0) {
        buffer_.append(chunk, size_t(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (!buffer_.empty()) {  // last line without a newline
        line = std::move(buffer_);
        buffer_.clear();
        return ReadStatus::Line;
      } else {
        return ReadStatus::EndOfInput;
      }
    }
  }

 private:
  std::string buffer_;
};

// Line editing on a terminal: libedit (emacs keys: arrows, Ctrl-A/Ctrl-E, history with up/down, ~/.editrc).
// libedit reads the keys through read_key(), which waits in wait_for_input(), so that a Ctrl-C at the prompt
// is handled exactly as without the editor. The terminal is raw only while a line is being typed; replies
// stream in its normal mode.
class LineEditor {
 public:
  LineEditor() : editor_(el_init("mk-chat", stdin, stdout, stderr)), history_(history_init()) {
    if (!editor_ || !history_) throw mk::Error("cannot start line editing (libedit)");
    HistEvent ev;
    history(history_, &ev, H_SETSIZE, 1000);
    history(history_, &ev, H_SETUNIQUE, 1);  // the same line twice in a row is kept once
    el_set(editor_, EL_EDITOR, "emacs");
    el_set(editor_, EL_SIGNAL, 0);  // no handlers of its own: SIGINT is ours
    el_set(editor_, EL_PROMPT, &prompt);
    el_set(editor_, EL_HIST, history, history_);
    el_set(editor_, EL_CLIENTDATA, this);
    el_set(editor_, EL_GETCFN, &read_key);
    el_source(editor_, nullptr);  // the user's ~/.editrc, if any
  }
  ~LineEditor() {
    el_end(editor_);  // restores the terminal
    history_end(history_);
  }
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  ReadStatus next(std::string& line, std::sig_atomic_t& seen) {
    seen_ = &seen;
    interrupted_ = false;
    int count = 0;
    // The terminal goes raw before the prompt shows: this libedit prints the prompt first, and a Ctrl-D
    // typed in that window was taken by the terminal's cooked mode as end-of-file, reached libedit as a NUL
    // byte (bound to quoted-insert) and swallowed the next key (strace; docs/log.md, 2026-11-24).
    el_set(editor_, EL_PREP_TERM, 1);
    const char* text = el_gets(editor_, &count);  // prints the prompt; returns with the terminal restored
    if (interrupted_) {
      std::fputc('\n', stdout);  // leave the abandoned line on the screen, as a shell does
      return ReadStatus::Interrupted;
    }
    if (!text || count <= 0) {  // Ctrl-D on an empty line, or the terminal went away
      std::fputc('\n', stdout);
      return ReadStatus::EndOfInput;
    }
    line.assign(text, size_t(count));
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) {
      HistEvent ev;
      history(history_, &ev, H_ENTER, line.c_str());
    }
    return ReadStatus::Line;
  }

 private:
  static const char* prompt(EditLine*) { return "> "; }

  // libedit's key source: one character (decoded from the locale's multibyte encoding), 0 at the end of
  // input, -1 on an error or when a Ctrl-C came while waiting (then el_gets gives up the line).
  static int read_key(EditLine* el, wchar_t* out) {
    LineEditor* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    std::mbstate_t state{};
    for (;;) {
      if (!wait_for_input(*self->seen_)) {
        self->interrupted_ = true;
        errno = EINTR;
        return -1;
      }
      char c = 0;
      const ssize_t n = ::read(STDIN_FILENO, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return int(n);
      wchar_t wc = 0;
      const size_t used = std::mbrtowc(&wc, &c, 1, &state);
      if (used == size_t(-2)) continue;  // the middle of a multibyte character
      *out = used == size_t(-1) ? wchar_t(static_cast<unsigned char>(c)) : wc;
      return 1;
    }
  }

  EditLine* editor_;
  History* history_;
  std::sig_atomic_t* seen_ = nullptr;
  bool interrupted_ = false;
};

// The editor on a terminal; plain reads otherwise (pipes, files, `mk-chat > log`).
class LineReader {
 public:
  LineReader() {
    if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) {
      std::setlocale(LC_CTYPE, "");  // libedit decodes UTF-8 keys only with the user's locale
      editor_ = std::make_unique<LineEditor>();
    }
  }
  bool prints_prompt() const { return editor_ != nullptr; }
  ReadStatus next(std::string& line, std::sig_atomic_t& seen) {
    return editor_ ? editor_->next(line, seen) : plain_.next(line, seen);
  }

 private:
  std::unique_ptr<LineEditor> editor_;
  PlainReader plain_;
};

// ---------------------------------------------------------------------------------------------------
// Output helpers

void print_progress(uint64_t done, uint64_t total, double seconds) {
  const double gb = double(done) / 1e9, total_gb = double(total) / 1e9;
  const double rate = seconds > 0 ? gb / seconds : 0.0;
  if (!isatty(STDERR_FILENO)) {  // a log file gets one line, not hundreds of carriage returns
    if (done == total) fmt::print(stderr, "uploaded {:.2f} GB of weights in {:.1f} s ({:.1f} GB/s)\n", total_gb, seconds, rate);
    return;
  }
  constexpr int kWidth = 30;
  const int filled = total ? int(double(kWidth) * double(done) / double(total)) : kWidth;
  fmt::print(stderr, "\ruploading weights [{:#<{}}{:.<{}}] {:.2f} / {:.2f} GB  {:.1f} GB/s", "", filled, "",
             kWidth - filled, gb, total_gb, rate);
  if (done == total) fmt::print(stderr, "\n");
  std::fflush(stderr);
}

// `one_shot`: -p, where there is no /reset to suggest.
void print_reply_stats(const mk::TurnResult& r, const mk::Session& session, bool one_shot) {
  const mk::SessionStats s = session.stats();
  const auto& g = r.stats;
  const std::string speed = fmt::format("{} tokens, {:.1f} tok/s, first token {:.1f} ms, context {}/{}{}",
                                        g.generated_tokens, g.decode_tokens_per_second(), g.first_token_seconds * 1e3,
                                        s.context_tokens, s.context_size, mk::cli::drafts_summary(g));
  switch (r.stop) {
    case mk::StopReason::Cancelled: fmt::print(stderr, "[stopped: {}]\n", speed); break;
    case mk::StopReason::ContextFull:
      fmt::print(stderr, "[{}]\n[the context is full ({} tokens): {}]\n", speed, s.context_size,
                 one_shot ? "use a larger -c for a longer reply" : "/reset to start a new conversation, or restart with a larger -c");
      break;
    default: fmt::print(stderr, "[{}]\n", speed); break;
  }
}

void print_session_stats(const mk::Session& session, const mk::Engine& engine) {
  const mk::SessionStats s = session.stats();
  fmt::print("context: {} / {} tokens\n", s.context_tokens, s.context_size);
  fmt::print("turns: {}\n", s.turns);
  if (s.turns > 0 || s.last_ingested_tokens > 0)
    fmt::print("last turn: ingested {} tokens, generated {} ({}), first token {:.1f} ms, {:.1f} tok/s\n",
               s.last_ingested_tokens, s.last_generated_tokens, mk::stop_reason_name(s.last_stop),
               s.last_first_token_seconds * 1e3, s.last_tokens_per_second);
  if (s.last_drafted_tokens > 0)
    fmt::print("last turn's speculation: {} tokens drafted, {} kept\n", s.last_drafted_tokens, s.last_accepted_tokens);
  fmt::print("backend: {}\n", engine.backend_name());
  std::fflush(stdout);
}

// One reply, streamed to stdout as it is generated. Returns nullopt when the turn could not start.
// `one_shot`: -p, where there is no /reset to suggest.
std::optional<mk::TurnResult> reply(mk::Session& session, const std::string& text, const mk::TurnParams& params,
                                    bool one_shot) {
  bool ends_with_newline = true;
  g_session = &session;
  std::optional<mk::TurnResult> result;
  try {
    result = session.chat(text, params, [&](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      ends_with_newline = piece.back() == '\n';
    });
  } catch (const mk::EngineError& e) {
    g_session = nullptr;
    if (e.device_lost()) {  // the hung kernel would not stop: nothing more can run, and teardown would wait for it
      fmt::print(stderr, "error: {}\nexiting: the GPU is occupied by a kernel that cannot be stopped\n", e.what());
      std::fflush(stderr);
      std::_Exit(3);
    }
    if (e.kind() == mk::EngineErrorKind::ContextFull)
      fmt::print(stderr, "error: {}\n[{}]\n", e.what(),
                 one_shot ? "use a shorter prompt, or a larger context (-c)"
                          : "/reset to start a new conversation, or restart with a larger -c");
    else
      fmt::print(stderr, "error: {}\n", e.what());
    return std::nullopt;
  }
  g_session = nullptr;
  if (!ends_with_newline) std::fputc('\n', stdout);
  std::fflush(stdout);
  return result;
}

constexpr const char* kCommandsHelp =
    "commands: /reset (a new conversation), /stats, /help, /quit\n"
    "Ctrl-C stops a reply; twice at the prompt quits\n";

int interactive(mk::Engine& engine, mk::Session& session, const mk::TurnParams& params) {
  const bool tty = isatty(STDIN_FILENO);
  fmt::print(stderr, "{}", kCommandsHelp);
  LineReader reader;
  bool interrupted_at_prompt = false;
  std::sig_atomic_t seen = g_interrupts;
  for (;;) {
    if (tty && !reader.prints_prompt()) {
      fmt::print("> ");
      std::fflush(stdout);
    }
    std::string line;
    const auto status = reader.next(line, seen);
    if (status == ReadStatus::EndOfInput) {
      if (tty && !reader.prints_prompt()) fmt::print("\n");
      return 0;
    }
    if (status == ReadStatus::Interrupted) {
      if (interrupted_at_prompt) {
        if (!reader.prints_prompt()) fmt::print("\n");
        return 0;
      }
      interrupted_at_prompt = true;
      fmt::print(stderr, "{}(Ctrl-C again to quit, or /quit)\n", reader.prints_prompt() ? "" : "\n");
      continue;
    }
    interrupted_at_prompt = false;
    // A line of spaces is no message: sending it would cost a whole reply to nothing.
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line == "/quit" || line == "/exit") return 0;
    if (line == "/reset") {
      session.reset();
      fmt::print(stderr, "(new conversation)\n");
      continue;
    }
    if (line == "/stats") {
      print_session_stats(session, engine);
      continue;
    }
    if (line == "/help" || line == "/?") {
      fmt::print(stderr, "{}", kCommandsHelp);
      continue;
    }
    if (line.front() == '/' && line.find(' ') == std::string::npos) {
      fmt::print(stderr, "unknown command {} (commands: /reset, /stats, /help, /quit)\n", line);
      continue;
    }
    if (const auto r = reply(session, line, params, /*one_shot=*/false)) print_reply_stats(*r, session, false);
    seen = g_interrupts;  // a Ctrl-C during the reply was for the reply
  }
}

int run(int argc, char** argv) {
  CLI::App app{"mk-chat: chat with a model on the monokernel (CPU emulator when there is no GPU)"};
  std::string model_dir, system_prompt, prompt;
  int context = 0;
  bool force_emulator = false;
  mk::TurnParams params;
  // llama.cpp's defaults, so the same flags mean the same thing.
  params.sampling.temperature = 0.8f;
  params.sampling.top_k = 40;
  params.sampling.top_p = 0.95f;
  params.sampling.min_p = 0.05f;
  app.add_option("-m,--model", model_dir,
                 fmt::format("Hugging Face model directory (config.json, *.safetensors, tokenizer.json); default: the "
                             "model shipped in models/{} (or ${})", mk::tools::kShippedModelName,
                             mk::tools::kShippedModelEnv));
  app.add_option("--system", system_prompt, "system prompt");
  app.add_option("-p,--prompt", prompt, "answer this prompt, print only the reply and exit");
  constexpr long long kMaxInt = std::numeric_limits<int>::max();
  app.add_option("-n,--n-predict", params.max_tokens, "tokens per reply at most (-1: until the end of the turn)")
      ->capture_default_str()->check(mk::cli::int_range(-1, kMaxInt));
  mk::cli::add_context_option(app, context);
  mk::LoadOptions load;
  mk::cli::add_quantize_options(app, load);
  app.add_option("--temp", params.sampling.temperature, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", params.sampling.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", params.sampling.top_p, "top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", params.sampling.min_p, "min-p (0: off)")->capture_default_str();
  std::optional<uint64_t> seed;
  mk::cli::add_seed_option(app, seed, "sampling seed (default: random)");
  mk::cli::ConstraintFlags constraint_flags;
  mk::cli::add_constraint_options(app, constraint_flags);
  mk::SpeculationParams spec;
  mk::cli::add_speculation_options(app, spec);
  int tensor_parallel = 1;
  mk::cli::add_tensor_parallel_option(app, tensor_parallel);
  app.add_flag("--emulator", force_emulator, "run on the CPU emulator even when a GPU is present");
  double watchdog = mk::EngineOptions{}.watchdog_seconds;
  mk::cli::add_watchdog_option(app, watchdog);
  if (const auto status = mk::cli::parse_command_line(app, argc, argv)) return *status;
  if (params.max_tokens == 0) mk::cli::usage_error("-n 0: must be positive, or -1 for no limit");
  mk::cli::check_sampling_flags(params.sampling);
  mk::cli::check_speculation_flags(spec);
  params.sampling.seed = seed ? *seed : std::random_device{}();
  params.constraint = mk::cli::constraint_spec(constraint_flags);
  const bool one_shot = app.count("-p") > 0;
  if (one_shot && prompt.find_first_not_of(" \t\r\n") == std::string::npos)
    mk::cli::usage_error("-p: the prompt is empty (give the text to answer)");

  if (model_dir.empty()) {
    const auto found = mk::tools::find_default_model(MK_SOURCE_DIR, MK_SHIPPED_MODEL_FROM_BINDIR);
    model_dir = found.dir.string();
    if (found.from_environment)
      fmt::print(stderr, "model: {} (from ${}; -m opens another)\n", model_dir, mk::tools::kShippedModelEnv);
    else
      fmt::print(stderr, "model: {} (shipped with monokernel: a small Llama that writes Python; -m opens another)\n",
                 model_dir);
  }
  mk::EngineOptions options;
  options.backend = force_emulator ? mk::BackendChoice::Emulator : mk::BackendChoice::Auto;
  options.context = context;
  options.watchdog_seconds = watchdog;
  options.load = load;
  options.speculation = spec;
  options.tensor_parallel = tensor_parallel;
  options.on_upload_progress = print_progress;
  options.on_notice = [](const std::string& m) { fmt::print(stderr, "warning: {}\n", m); };
  auto engine = mk::Engine::open(model_dir, options);
  if (engine->on_gpu())
    fmt::print(stderr, "{}", mk::cli::wrap_info("backend: " + engine->backend_name()));
  else
    fmt::print(stderr, "{}", mk::cli::wrap_info("backend: " + engine->backend_name() + ": on the CPU, slow for real models"));
  if (!engine->has_chat_template()) engine->chat_template();  // throws: says why there is none
  if (params.constraint.active()) {  // compiled (and cached for every reply) now: its errors come first
    try {
      engine->compile_constraint(params.constraint, mk::cli::constraint_flag_name(constraint_flags));
    } catch (const mk::EngineError& e) {
      mk::cli::usage_error("{}", e.what());
    }
  }

  auto session = engine->create_session(mk::SessionOptions{system_prompt, {}});
  install_sigint_handler();
  if (!one_shot) return interactive(*engine, *session, params);

  const auto r = reply(*session, prompt, params, /*one_shot=*/true);
  if (!r) return mk::cli::kExitError;
  print_reply_stats(*r, *session, true);
  return r->stop == mk::StopReason::Cancelled ? mk::cli::kExitInterrupted : 0;
}

}  // namespace

int main(int argc, char** argv) { return mk::cli::run_tool("mk-chat", run, argc, argv); }
