// The tools' shared command-line pieces: exit statuses, parsing, the context and seed options, and bounds
// for numbers with messages a person can read. CLI11's own Range prints its limits
// with std::to_string, so a floating-point bound comes out as 300 digits ("not in range 0.000000 to
// 17976931348623157..."), and a number too large for the option's type only says "Could not convert".
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "runtime/decode_backend.h"
#include "runtime/error.h"
#include "runtime/limits.h"
#include "runtime/model.h"
#include "runtime/sampling.h"
#include "runtime/schedule.h"
#include "runtime/speculation.h"
#include "runtime/tensor_parallel.h"

namespace mk::cli {

// Exit statuses of every tool (docs/limits.md): 0 success, 1 an error, 2 a bad command-line argument,
// 3 a hung GPU kernel, 130 a reply that Ctrl-C stopped (mk-chat -p, mk-run).
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitHung = 3;
inline constexpr int kExitInterrupted = 130;  // as a shell reports a process that SIGINT ended

// A command-line value that parses but cannot be used (an empty prompt, two options that exclude each
// other): reported like CLI11's own errors, with kExitUsage.
class UsageError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void usage_error(fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...));
}

// CLI11's parse: nullopt to go on, or the exit status (0 after --help, kExitUsage for a bad argument,
// whose message CLI11 has printed). CLI11's own statuses (104-106, ...) are folded into one.
// Short names longer than a letter, as other engines spell them (CLI11 takes one-letter short names only):
// each is read as its long name.
inline constexpr std::pair<std::string_view, std::string_view> kMultiLetterShortNames[] = {{"-tp", "--tensor-parallel"}};

inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args)
    for (const auto& [short_name, long_name] : kMultiLetterShortNames)
      if (a == short_name) a = std::string(long_name);
      else if (a.size() > short_name.size() && a.compare(0, short_name.size() + 1, std::string(short_name) + "=") == 0)
        a = std::string(long_name) + a.substr(short_name.size());
  std::vector<char*> rewritten;
  for (std::string& a : args) rewritten.push_back(a.data());
  try {
    app.parse(int(rewritten.size()), rewritten.data());
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
}

// A whole number in [min, max]. Runs before CLI11 converts the text, so an overflowing value gets this
// message too: "--ctx-size: 99999999999 is out of range: expected a whole number from 1 to 2147483647".
inline CLI::Validator int_range(long long min, long long max) {
  return CLI::Validator(
      [min, max](std::string& input) -> std::string {
        long long value = 0;
        const char* end = input.data() + input.size();
        const auto [stop, ec] = std::from_chars(input.data(), end, value);
        const bool whole = stop == end && !input.empty();
        if (ec == std::errc() && whole && value >= min && value <= max) return {};
        if ((ec == std::errc() && whole) || (ec == std::errc::result_out_of_range && whole))
          return fmt::format("{} is out of range: expected a whole number from {} to {}", input, min, max);
        return fmt::format("{} is not a whole number (expected one from {} to {})", input, min, max);
      },
      fmt::format("INT in [{} - {}]", min, max));
}

// An information line for a terminal of `width` columns: broken at spaces, continuation lines indented by
// two, with a newline at the end (a GPU backend's name alone runs to ~180 characters).
inline std::string wrap_info(std::string_view text, size_t width = 120) {
  std::string out, line;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(at, end - at);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = "  ";
    } else if (!line.empty()) {
      line += ' ';
    }
    line += word;
    at = end + 1;
  }
  return out + line + "\n";
}

// runtime/sampling.h's rule for --temp, --top-k, --top-p and --min-p, as a command-line error.
inline void check_sampling_flags(const SamplingParams& sampling) {
  if (const std::string e = sampling_error(sampling, kSamplingFlags); !e.empty()) usage_error("{}", e);
}

// -c/--ctx-size: 0 (the default) is runtime/context_size.h's rule, the model's trained length capped at 4096.
inline CLI::Option* add_context_option(CLI::App& app, int& context, const std::string& more = "") {
  context = 0;
  return app
      .add_option("-c,--ctx-size", context,
                  "context (KV cache) size in tokens; 0: the model's trained length, at most 4096" + more)
      ->capture_default_str()
      ->check(int_range(0, limits::kMaxPositions));
}

// --seed: -1 for a random seed (llama.cpp's convention; `seed` becomes nullopt), else 0 to 2^64-1.
inline CLI::Option* add_seed_option(CLI::App& app, std::optional<uint64_t>& seed, const std::string& help) {
  const CLI::Validator check(
      [](std::string& input) -> std::string {
        if (input == "-1") return {};
        uint64_t value = 0;
        const char* end = input.data() + input.size();
        const auto [stop, ec] = std::from_chars(input.data(), end, value);
        if (ec == std::errc() && stop == end && !input.empty()) return {};
        return fmt::format("{} is not a seed: expected -1 (a random seed) or a whole number from 0 to {}", input,
                           std::numeric_limits<uint64_t>::max());
      },
      "");
  return app
      .add_option_function<std::string>(
          "--seed",
          [&seed](const std::string& text) {
            seed = text == "-1" ? std::nullopt : std::optional<uint64_t>(std::stoull(text));
          },
          help + " (-1: random)")
      ->check(check)
      ->option_text("SEED");
}

// --watchdog SECONDS: how long a GPU launch may go without any workgroup finishing an instruction before
// it is stopped as hung (runtime/decode_backend.h's bounds).
inline CLI::Option* add_watchdog_option(CLI::App& app, double& seconds) {
  const CLI::Validator check(
      [](std::string& input) -> std::string {
        double value = 0;
        const char* end = input.data() + input.size();
        const auto [stop, ec] = std::from_chars(input.data(), end, value);
        if (ec == std::errc() && stop == end && value >= kMinWatchdogSeconds && value <= kMaxWatchdogSeconds) return {};
        return fmt::format("{} is not a number of seconds from {} to {}", input, kMinWatchdogSeconds, kMaxWatchdogSeconds);
      },
      "");
  return app
      .add_option("--watchdog", seconds,
                  "GPU: seconds without progress before a launch counts as hung and is stopped, naming the stuck "
                  "instruction")
      ->capture_default_str()
      ->check(check)
      ->option_text("SECONDS");
}

// --spec none|lookup, --draft-max K, --lookup-min N, --lookup-max N: speculative decoding
// (runtime/speculation.h), into `spec`. The replies are the same tokens with or without it.
inline void add_speculation_options(CLI::App& app, SpeculationParams& spec) {
  static const std::map<std::string, Drafter> kNames{{"none", Drafter::None}, {"lookup", Drafter::Lookup}};
  app.add_option("--spec", spec.drafter,
                 "speculative decoding: none, or lookup (draft the continuation of the latest earlier occurrence of the "
                 "newest tokens in the prompt and reply, and verify the drafts in one step); the tokens are the same "
                 "either way. CPU emulator only so far; default: none")
      ->transform(CLI::CheckedTransformer(kNames, CLI::ignore_case))
      ->option_text("none|lookup");
  app.add_option("--draft-max", spec.draft_max, fmt::format("with --spec: drafts a step at most (default {})", kDefaultDraftTokens))
      ->check(int_range(1, kMaxStepTokens - 1))
      ->option_text("K");
  app.add_option("--lookup-min", spec.lookup_min, "with --spec lookup: the shortest run of newest tokens matched")
      ->capture_default_str()
      ->check(int_range(1, kMaxLookupTokens));
  app.add_option("--lookup-max", spec.lookup_max, "with --spec lookup: the longest run of newest tokens matched")
      ->capture_default_str()
      ->check(int_range(1, kMaxLookupTokens));
}

// --tensor-parallel N (-tp N): each token step split over N devices (runtime/tensor_parallel.h), into
// `devices`. The CPU emulator runs N virtual devices; the GPU kernel runs one device so far.
inline void add_tensor_parallel_option(CLI::App& app, int& devices) {
  app.add_option("--tensor-parallel", devices,
                 fmt::format("(or -tp N) split each token step over N devices (the model's kv heads and MLP width must divide "
                             "by N; the tokens are one device's wherever the logits agree, prompts going through token "
                             "steps). CPU emulator only so far (N virtual devices); 1 to {}, default 1",
                             kMaxTensorParallel))
      ->check(int_range(1, kMaxTensorParallel))
      ->option_text("N");
}

// After parsing: the flags add_speculation_options read, checked together.
inline void check_speculation_flags(const SpeculationParams& spec) {
  if (spec.lookup_min > spec.lookup_max) usage_error("--lookup-min {} is above --lookup-max {}", spec.lookup_min, spec.lookup_max);
}

// The counts of a reply's speculation for a summary line: ", 12 of 20 drafts kept" ("" without drafts).
inline std::string drafts_summary(const GenerateStats& s) {
  return s.drafted_tokens > 0 ? fmt::format(", {} of {} drafts kept", s.accepted_tokens, s.drafted_tokens) : std::string();
}

// --quantize none|<a quantized matrix format> and --quantize-head yes|no: load-time quantization of a
// bf16/fp16 checkpoint (quantized checkpoints load as stored), into `load`, with progress on stderr. The
// format names are runtime/matrix_format.h's.
inline void add_quantize_options(CLI::App& app, LoadOptions& load) {
  static const std::map<std::string, int> kNames = [] {
    std::map<std::string, int> names{{"none", -1}};
    for (const MatrixFormat f : kMatrixFormats)
      if (matrix_format_quantized(f)) names.emplace(std::string(matrix_format_name(f)), int(f));
    return names;
  }();
  static const std::map<std::string, bool> kYesNo{{"yes", true}, {"no", false}};
  std::vector<std::string> formats;
  for (const auto& [name, format] : kNames)
    if (format >= 0) formats.push_back(name);
  app.add_option_function<int>(
         "--quantize", [&load](int format) { load.quantize = format < 0 ? Quantize() : Quantize(MatrixFormat(format)); },
         fmt::format("quantize the weight matrices at load time, to a quantized matrix format ({}: one scale, and for "
                     "a format with them a zero point, per group of columns of a row); default: none",
                     fmt::join(formats, ", ")))
      ->transform(CLI::CheckedTransformer(kNames, CLI::ignore_case))
      ->option_text(fmt::format("none|{}", fmt::join(formats, "|")));
  app.add_option("--quantize-head", load.quantize_head,
                 fmt::format("with --quantize: quantize the embedding and the LM head too (yes), or keep them in 16 "
                             "bits (no); default: {}", load.quantize_head ? "yes" : "no"))
      ->transform(CLI::CheckedTransformer(kYesNo, CLI::ignore_case))
      ->option_text("yes|no");
  load.on_quantize_progress = [&load](int done, int total) {
    fmt::print(stderr, "\rquantizing the weight matrices to {}: {}/{}{}", load.quantize ? matrix_format_name(*load.quantize) : "?", done,
               total, done == total ? "\n" : "");
  };
}

}  // namespace mk::cli
