// Bounds for command-line numbers, with messages a person can read. CLI11's own Range prints its limits
// with std::to_string, so a floating-point bound comes out as 300 digits ("not in range 0.000000 to
// 17976931348623157..."), and a number too large for the option's type only says "Could not convert".
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <map>
#include <string>
#include <system_error>

#include "runtime/model.h"

namespace mk::cli {

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

// --quantize none|fp8|int4 and --quantize-head yes|no: load-time quantization of a bf16/fp16 checkpoint
// (quantized checkpoints load as stored), into `load`, with progress on stderr.
inline void add_quantize_options(CLI::App& app, LoadOptions& load) {
  static const std::map<std::string, Quantize> kNames{{"none", Quantize::None}, {"fp8", Quantize::Fp8}, {"int4", Quantize::Int4}};
  static const std::map<std::string, bool> kYesNo{{"yes", true}, {"no", false}};
  app.add_option("--quantize", load.quantize,
                 "quantize the weight matrices at load time: none, fp8 (E4M3, one scale per 128 columns of a row) or int4 "
                 "(4-bit, one scale and zero point per 128 columns of a row)")
      ->transform(CLI::CheckedTransformer(kNames, CLI::ignore_case))
      ->default_str("none");
  app.add_option("--quantize-head", load.quantize_head,
                 "with --quantize: quantize the embedding and the LM head too (yes), or keep them in 16 bits (no)")
      ->transform(CLI::CheckedTransformer(kYesNo, CLI::ignore_case))
      ->default_str(load.quantize_head ? "yes" : "no");
  load.on_quantize_progress = [&load](int done, int total) {
    fmt::print(stderr, "\rquantizing the weight matrices to {}: {}/{}{}", load.quantize == Quantize::Int4 ? "int4" : "fp8", done,
               total, done == total ? "\n" : "");
  };
}

}  // namespace mk::cli
