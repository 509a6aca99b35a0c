// Tests build their models with runtime/synthetic_model.h; these names keep the tests short.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/model.h"
#include "runtime/synthetic_model.h"

namespace mk::test {
using synthetic::encode;
using synthetic::make_temp_dir;
using synthetic::TensorBytes;
using synthetic::TinyModelSpec;
using synthetic::write_safetensors;
using synthetic::write_tiny_model;

// A tiny random model of `spec`, written to a fresh temporary directory (named after `tag`) and loaded
// with `load` (load-time quantization, say).
inline std::unique_ptr<Model> load_tiny_model(const TinyModelSpec& spec, const std::string& tag, const LoadOptions& load = {}) {
  const auto dir = make_temp_dir(tag);
  write_tiny_model(dir, spec);
  return load_model(dir, load);
}

// A long prompt of `n` ids for the tiny models' 160-token vocabulary: id (37 i + 11) mod 160, which
// repeats only every 160 positions.
inline std::vector<int32_t> long_prompt(size_t n) {
  std::vector<int32_t> prompt(n);
  for (size_t i = 0; i < n; ++i) prompt[i] = int32_t((i * 37 + 11) % 160);
  return prompt;
}
}  // namespace mk::test
