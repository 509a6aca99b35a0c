// mk-run: raw generation, as llama.cpp's llama-cli does it. Loads a model (a Hugging Face directory, a
// --preset shape with random weights on the GPU, or by default a small built-in synthetic model),
// continues a prompt without any chat template and prints the speed. Runs on the GPU monokernel when there
// is one, on the CPU emulator otherwise.
//   text:  -p TEXT (encoded as Hugging Face's tokenizer(TEXT) does: the BOS added); the continuation is
//          printed as text on stdout and the summary line goes to stderr, so stdout is exactly the text.
//   ids:   -t 1,2,3 takes the prompt as token ids; --ids prints "tokens: ..." and the summary on stdout.
//          A model without a tokenizer.json (a --preset, the built-in model) works in ids only; with -t and
//          --ids the tokenizer is not loaded at all.
//   --logprobs N: after the reply, a line "logprob: ID LOGPROB ID:LOGPROB ..." per token on stdout.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <new>
#include <optional>
#include <random>

#include "device/gpu_backend.h"
#include "host/emulator/emulator.h"
#include "host/tools/cli_checks.h"
#include "host/tools/constraint_options.h"
#include "host/tools/tool_main.h"
#include "runtime/context_size.h"
#include "runtime/error.h"
#include "runtime/presets.h"
#include "runtime/synthetic_model.h"
#include "runtime/token_vocabulary.h"
#include "runtime/tokenizer.h"

namespace {

constexpr long long kMaxInt = std::numeric_limits<int>::max();

mk::DecodeBackend* g_backend = nullptr;
void on_sigint(int) {
  if (g_backend) g_backend->cancel();
}

// One id of --tokens, as typed (for messages) and as a number (unless it overflows int64).
struct TokenArg {
  std::string text;
  int64_t value = 0;
  bool overflow = false;
};

// "1,2,3" -> ids. Each must be a whole number; whether it is a valid id is checked against the model's
// vocabulary once it is loaded (check_tokens), so that a too-large id is reported as out of range.
std::vector<TokenArg> parse_tokens(const std::string& text) {
  std::vector<TokenArg> out;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    TokenArg t{text.substr(at, end - at)};
    t.text.erase(0, t.text.find_first_not_of(' '));
    t.text.erase(t.text.find_last_not_of(' ') + 1);
    const char* last = t.text.data() + t.text.size();
    const auto [stop, ec] = std::from_chars(t.text.data(), last, t.value);
    t.overflow = ec == std::errc::result_out_of_range;
    if (t.text.empty() || stop != last || (ec != std::errc() && !t.overflow))
      mk::cli::usage_error("--tokens {}: '{}' is not a token id (expected whole numbers separated by commas, e.g. 1,2,3)",
                           text, t.text);
    out.push_back(std::move(t));
    at = end + 1;
  }
  return out;
}

std::vector<int32_t> check_tokens(const std::vector<TokenArg>& ids, int vocab) {
  std::vector<int32_t> out;
  for (const TokenArg& t : ids) {
    if (t.overflow || t.value < 0 || t.value >= vocab)
      mk::cli::usage_error("--tokens: token id {} is out of range: this model's ids are 0 to {} (a vocabulary of {})",
                           t.text, vocab - 1, vocab);
    out.push_back(int32_t(t.value));
  }
  return out;
}

// The tokenizer of a model directory, or nullopt when it has none (a --preset, the built-in model, a
// directory without tokenizer.json). A tokenizer.json that is there but broken is an error.
std::optional<mk::Tokenizer> load_tokenizer(const std::string& model_dir) {
  if (model_dir.empty() || !std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json")) return std::nullopt;
  return mk::Tokenizer::load(model_dir);
}

int run(int argc, char** argv) {
  CLI::App app{"mk-run: continue a prompt with one persistent GPU kernel (CPU emulator when there is no GPU)"};
  std::string model_dir, preset, prompt, tokens_text;
  int n = 64, context = 0, workgroups = 132;
  bool force_emulator = false, quiet = false, print_ids = false;
  mk::SamplingParams sampling;
  std::optional<uint64_t> seed = 0;
  app.add_option("-m,--model", model_dir, "Hugging Face model directory (config.json + *.safetensors; tokenizer.json for text)");
  app.add_option("--preset", preset, "a real model's shape with random weights, on the GPU: " +
                                         fmt::format("{}", fmt::join(mk::preset_names(), ", ")));
  auto* prompt_option =
      app.add_option("-p,--prompt", prompt, "prompt text, continued as is (no chat template; the BOS is added and "
                                            "special tokens in the text are read, as Hugging Face's tokenizer does)");
  app.add_option("-t,--tokens", tokens_text, "prompt token ids, comma-separated (default without -p: 1,2,3,4)")
      ->excludes(prompt_option);
  app.add_flag("--ids", print_ids, "print the generated token ids instead of their text");
  app.add_option("-n,--n-predict", n, "tokens to generate")->capture_default_str()->check(mk::cli::int_range(0, kMaxInt));
  mk::cli::add_context_option(app, context);
  app.add_option("--temp", sampling.temperature, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", sampling.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", sampling.top_p, "top-p")->capture_default_str();
  app.add_option("--min-p", sampling.min_p, "min-p")->capture_default_str();
  mk::cli::add_seed_option(app, seed, "sampling seed (default: 0)");
  mk::LogitAdjustments adjust;
  std::vector<std::string> bias_text;
  app.add_option("--logit-bias", bias_text, "ID=BIAS: add BIAS (-100..100) to token ID's logit (repeatable)");
  app.add_option("--frequency-penalty", adjust.frequency_penalty, "subtract this (-2..2) per earlier sampling of a token")
      ->capture_default_str();
  app.add_option("--presence-penalty", adjust.presence_penalty, "subtract this (-2..2) from a token sampled before")
      ->capture_default_str();
  mk::cli::ConstraintFlags constraint_flags;
  mk::cli::add_constraint_options(app, constraint_flags);
  int logprobs = -1;
  app.add_option("--logprobs", logprobs, "after the reply, print each token's log-probability and N alternatives (0..20)")
      ->check(mk::cli::int_range(0, mk::kMaxTopLogprobs));
  mk::SpeculationParams speculation;
  mk::cli::add_speculation_options(app, speculation);
  int tensor_parallel = 1;
  mk::cli::add_tensor_parallel_option(app, tensor_parallel);
  app.add_flag("--emulator", force_emulator, "run on the CPU emulator even when a GPU is present");
  double watchdog = mk::GpuOptions{}.watchdog_seconds;
  mk::cli::add_watchdog_option(app, watchdog);
  mk::LoadOptions load;
  mk::cli::add_quantize_options(app, load);
  app.add_option("--workgroups", workgroups, "emulator: virtual workgroups")->capture_default_str()->check(mk::cli::int_range(1, 4096));
  app.add_flag("-q,--quiet", quiet, "print only the summary line");
  if (const auto status = mk::cli::parse_command_line(app, argc, argv)) return *status;
  if (!model_dir.empty() && !preset.empty()) mk::cli::usage_error("give either -m or --preset, not both");
  mk::cli::check_sampling_flags(sampling);
  mk::cli::check_speculation_flags(speculation);
  const bool text_prompt = prompt_option->count() > 0;
  if (text_prompt && prompt.empty()) mk::cli::usage_error("-p: the prompt is empty (give the text to continue)");
  if (text_prompt && model_dir.empty())
    mk::cli::usage_error("-p needs a model with a tokenizer: give -m MODEL_DIR (a --preset or the built-in model takes -t IDS)");
  for (const std::string& b : bias_text) {
    const size_t eq = b.find('=');
    int32_t id = -1;
    float bias = 0;
    const char* end = b.data() + b.size();
    if (eq == std::string::npos || std::from_chars(b.data(), b.data() + eq, id).ptr != b.data() + eq ||
        std::from_chars(b.data() + eq + 1, end, bias).ptr != end || eq + 1 == b.size())
      mk::cli::usage_error("--logit-bias {}: expected ID=BIAS, such as 13=-100", b);
    adjust.bias.emplace_back(id, bias);
  }
  const std::vector<TokenArg> token_ids = parse_tokens(tokens_text.empty() ? "1,2,3,4" : tokens_text);
  sampling.seed = seed ? *seed : std::random_device{}();

  std::string why_no_gpu;
  const bool use_gpu = !force_emulator && mk::gpu_available(&why_no_gpu);
  if (speculation.drafter != mk::Drafter::None && use_gpu)
    mk::cli::usage_error("--spec {}: speculative decoding runs on the CPU emulator only so far (the GPU kernel's token steps take "
                         "one token); add --emulator, or leave --spec out",
                         mk::drafter_name(speculation.drafter));
  if (tensor_parallel > 1 && use_gpu)
    mk::cli::usage_error("--tensor-parallel {}: several devices run on the CPU emulator only so far (the GPU kernel runs one); add "
                         "--emulator, or leave --tensor-parallel out",
                         tensor_parallel);
  // Removes the built-in model's temporary directory on every way out, errors included.
  struct TempDir {
    std::filesystem::path path;
    ~TempDir() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  } synthetic_dir;
  std::unique_ptr<mk::Model> model;
  if (!preset.empty()) {
    if (!use_gpu) mk::fail("--preset needs a GPU ({}); use -m with a model directory to run on the emulator",
                           force_emulator ? "--emulator was given" : why_no_gpu);
    model = mk::preset_model(preset, load);
  } else if (!model_dir.empty()) {
    fmt::print(stderr, "loading {}\n", model_dir);
    model = mk::load_model(model_dir, load);
  } else {
    // The built-in default: a small synthetic Llama-style model, written once to a temp directory.
    synthetic_dir.path = mk::synthetic::make_temp_dir("builtin-model");
    mk::synthetic::TinyModelSpec spec;
    spec.hidden = 256, spec.intermediate = 512, spec.layers = 4, spec.heads = 8, spec.kv_heads = 2;
    spec.head_dim = 32, spec.vocab = 1024, spec.eos = {};
    mk::synthetic::write_tiny_model(synthetic_dir.path, spec);
    model = mk::load_model(synthetic_dir.path, load);
    fmt::print(stderr, "model: built-in synthetic Llama-style model ({} layers, hidden {}, vocab {}; random weights)\n",
               spec.layers, spec.hidden, spec.vocab);
  }

  // Ids in and out (-t ... --ids) need no tokenizer: a model whose tokenizer.json this build cannot read
  // (Gemma 3's) still runs so.
  const std::optional<mk::Tokenizer> tokenizer = text_prompt || !print_ids ? load_tokenizer(model_dir) : std::nullopt;
  if (text_prompt && !tokenizer)
    mk::fail("-p: {} has no tokenizer.json to encode the prompt with (give the prompt as ids: -t 1,2,3)",
             (std::filesystem::path(model_dir) / "tokenizer.json").string());
  // Text out where there is a tokenizer, unless --ids asks for the ids.
  const bool print_text = tokenizer && !print_ids;
  std::vector<int32_t> input;
  if (text_prompt) {
    // As Hugging Face's tokenizer(prompt) does: special tokens in the text are parsed, the BOS is added.
    input = tokenizer->encode(prompt, /*parse_special=*/true, /*add_special_tokens=*/true);
    for (size_t i = 0; i < input.size(); ++i)
      if (input[i] >= model->config.vocab_size)
        mk::fail("-p: the prompt's token {} (at index {}) is outside the model's vocabulary of {} tokens", input[i], i,
                 model->config.vocab_size);
  } else {
    input = check_tokens(token_ids, model->config.vocab_size);
  }

  if (const std::string e = mk::logit_adjustments_error(adjust, model->config.vocab_size); !e.empty())
    mk::cli::usage_error("{} (--logit-bias, --frequency-penalty, --presence-penalty)", e);
  // The constraint, compiled before the backend holds the GPU: its errors come first.
  std::shared_ptr<const mk::constraint::TokenAutomaton> constraint;
  if (const mk::constraint::ConstraintSpec spec = mk::cli::constraint_spec(constraint_flags); spec.active()) {
    if (!tokenizer) mk::cli::usage_error("{} needs the model's tokenizer.json (-m with a tokenizer)", mk::cli::constraint_flag_name(constraint_flags));
    constraint = mk::cli::compile_constraint_flags(constraint_flags, spec, *tokenizer, model->config.vocab_size,
                                                   model->config.eos_token_ids);
    const int32_t bound = constraint->completion_bound[size_t(constraint->dfa.start)];
    if (!quiet)
      fmt::print(stderr, "{}: {} automaton states, {:.2f} MiB of tables; a reply ends complete within {} tokens\n",
                 mk::cli::constraint_flag_name(constraint_flags), constraint->token_states(),
                 double(constraint->device_bytes()) / double(1 << 20),
                 constraint->closes_within_budget ? fmt::to_string(bound) : std::string("no known number of"));
    if (constraint->closes_within_budget && n < bound)
      fmt::print(stderr, "warning: -n {} may cut the reply short of the constraint: it is sure to end complete with -n {} "
                 "or more (docs/structured_output.md)\n", n, bound);
  }
  const mk::ContextChoice chosen = mk::choose_context(context, model->config.max_position);
  if (!chosen.warning.empty()) fmt::print(stderr, "warning: {}\n", chosen.warning);

  std::unique_ptr<mk::DecodeBackend> backend;
  if (use_gpu) {
    mk::GpuOptions opt;
    opt.context = chosen.tokens;
    opt.watchdog_seconds = watchdog;
    opt.random_weights_seed = preset.empty() ? 0 : 1234;
    // A terminal gets a line redrawn in place; a log file one line at the end, not hundreds of '\r's.
    const bool tty = isatty(STDERR_FILENO);
    bool open_line = false;  // a progress line without its newline yet
    opt.on_upload_progress = [&quiet, &open_line, tty](uint64_t done, uint64_t total, double s) {
      if (quiet || (!tty && done != total)) return;
      fmt::print(stderr, "{}uploading weights: {:.2f} / {:.2f} GB ({:.1f} GB/s){}", tty ? "\r" : "", double(done) / 1e9,
                 double(total) / 1e9, s > 0 ? double(done) / 1e9 / s : 0.0, done == total ? "\n" : "");
      open_line = done != total;
    };
    backend = mk::create_gpu_backend(*model, opt);
    if (open_line) fmt::print(stderr, "\n");
  } else {
    if (!force_emulator) fmt::print(stderr, "warning: no GPU ({}); running the CPU emulator\n", why_no_gpu);
    mk::EmulatorOptions opt;
    opt.num_workgroups = workgroups;
    opt.context = chosen.tokens;
    opt.check_dependencies = false;
    opt.step_tokens = mk::speculation_step_tokens(speculation);
    opt.speculation = speculation;
    opt.tensor_parallel = tensor_parallel;
    backend = std::make_unique<mk::Emulator>(*model, opt);
  }
  fmt::print(stderr, "{}", mk::cli::wrap_info(fmt::format("backend: {}, context {} tokens", backend->name(), chosen.tokens)));
  g_backend = backend.get();
  std::signal(SIGINT, on_sigint);

  mk::GenerateRequest req;
  req.input = input;
  req.max_new_tokens = n;
  req.sampling = sampling;
  req.adjust = adjust;
  req.constraint = constraint;
  std::vector<mk::TokenLogprobs> records;
  if (logprobs >= 0) req.top_logprobs = logprobs, req.on_logprobs = [&](const mk::TokenLogprobs& r) { records.push_back(r); };
  // Text goes out as the tokens complete UTF-8 characters. In ids, "tokens:" goes out with the first token,
  // so that a generation that fails before it leaves no empty line.
  std::optional<mk::StreamingDecoder> decoder;
  if (print_text) decoder.emplace(*tokenizer);
  bool printed = false, ends_with_newline = true;
  const auto put_text = [&](const std::string& piece) {
    if (piece.empty()) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    printed = true;
    ends_with_newline = piece.back() == '\n';
  };
  mk::GenerateResult result;
  try {
    result = backend->generate(req, [&](int32_t token) {
      if (quiet) return;
      if (decoder) {
        put_text(decoder->push(token));
        return;
      }
      fmt::print("{} {}", printed ? "" : "tokens:", token);
      printed = true;
      std::fflush(stdout);
    });
  } catch (...) {
    if (printed && (!decoder || !ends_with_newline)) fmt::print("\n");
    throw;
  }
  if (decoder) put_text(decoder->flush());
  if (printed && (!decoder || !ends_with_newline)) fmt::print("\n");
  // "logprob: ID LOGPROB ID:LOGPROB ..." per token: the token, then its alternatives, most likely first.
  for (const mk::TokenLogprobs& r : records) {
    std::string line = fmt::format("logprob: {} {:.6f}", r.token, r.logprob);
    for (int i = 0; i < r.top_count; ++i) line += fmt::format(" {}:{:.6f}", r.top_ids[i], r.top_logprobs[i]);
    fmt::print("{}\n", line);
  }
  std::fflush(stdout);
  const auto& s = result.stats;
  // The backend is named on its own line above: this one stays short.
  const std::string summary =
      fmt::format("{} prompt tokens, {} generated ({}), first token {:.2f} ms, {:.2f} ms/token, {:.1f} tok/s{}",
                  s.ingested_tokens, s.generated_tokens, mk::stop_reason_name(result.stop), s.first_token_seconds * 1e3,
                  s.decode_tokens_per_second() > 0 ? 1e3 / s.decode_tokens_per_second() : 0.0,
                  s.decode_tokens_per_second(), mk::cli::drafts_summary(s));
  fmt::print(print_text ? stderr : stdout, "{}{}\n", summary, seed ? "" : fmt::format(" (seed {})", sampling.seed));
  return result.stop == mk::StopReason::Cancelled ? mk::cli::kExitInterrupted : 0;
}

}  // namespace

int main(int argc, char** argv) { return mk::cli::run_tool("mk-run", run, argc, argv); }
