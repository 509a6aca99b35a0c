// libFuzzer target for config.json + generation_config.json (built by scripts/run_fuzz.sh config).
// Input: config.json's text, optionally followed by a NUL byte and generation_config.json's text.
//
// Invariants (a violation aborts, so libFuzzer keeps the input as a crash):
//   - every input parses or throws mk::Error naming the file it rejects, with no nlohmann exception
//     left unconverted except as the parse error of a file ("not valid JSON");
//   - a parsed config is within runtime/limits.h, heads divide, and q_dim()/kv_dim() are the exact
//     products;
//   - what the runtime sizes from a config does not overflow: the weight layout's byte offsets (checked
//     against an exact 128-bit sum) and, for configs small enough to build one quickly, the schedule
//     (signed overflow there is caught by UndefinedBehaviorSanitizer).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/error.h"
#include "runtime/limits.h"
#include "runtime/model_config.h"
#include "runtime/schedule.h"
#include "runtime/weight_layout.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

constexpr const char* kConfig = "fuzz/config.json";
constexpr const char* kGeneration = "fuzz/generation_config.json";

[[noreturn]] void violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "invariant violated: %s: %s\n", what, detail.c_str());
  std::abort();
}

void check(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) violated(what, detail);
}

// `text`: the file's contents.
void check_error(const mk::Error& e, const char* source, std::string_view text) {
  const std::string_view msg = e.what();
  check(msg.find(source) != std::string_view::npos, "the error names the file", std::string(msg));
  check(!mk::fuzz::leaks_json_library_message(msg, text), "only parse errors carry nlohmann's message", std::string(msg));
}

void check_limits(const mk::ModelConfig& c) {
  namespace L = mk::limits;
  check(c.hidden_size >= 1 && c.hidden_size <= L::kMaxHiddenSize, "hidden_size within limits");
  check(c.intermediate_size >= 1 && c.intermediate_size <= L::kMaxIntermediateSize, "intermediate_size within limits");
  check(c.num_layers >= 1 && c.num_layers <= L::kMaxLayers, "num_layers within limits");
  check(c.num_heads >= 1 && c.num_heads <= L::kMaxHeads, "num_heads within limits");
  check(c.num_kv_heads >= 1 && c.num_heads % c.num_kv_heads == 0, "num_kv_heads divides num_heads");
  check(c.head_dim >= 2 && c.head_dim <= L::kMaxHeadDim && c.head_dim % 2 == 0, "head_dim within limits");
  check(c.vocab_size >= 1 && c.vocab_size <= L::kMaxVocabSize, "vocab_size within limits");
  check(c.max_position >= 1 && c.max_position <= L::kMaxPositions, "max_position within limits");
  const int64_t q = int64_t(c.num_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim;
  check(q <= L::kMaxAttentionWidth && c.q_dim() == q && c.kv_dim() == kv, "q_dim and kv_dim are exact");
  for (const int32_t id : c.eos_token_ids) check(id >= 0 && id < L::kMaxVocabSize, "EOS ids within limits");
  check(c.bos_token_id >= -1 && c.bos_token_id < L::kMaxVocabSize, "BOS id within limits");
}

void check_layout(const mk::ModelConfig& c) {
  const mk::WeightLayout w = mk::plan_weight_layout(c, mk::MatrixFormat::BF16);
  using u128 = unsigned __int128;
  const u128 H = u128(c.hidden_size), I = u128(c.intermediate_size), V = u128(c.vocab_size);
  const u128 qkv = u128(c.q_dim()) + 2 * u128(c.kv_dim());
  check(u128(w.qkv_rows) == qkv, "qkv_rows is exact");
  const u128 per_layer = (qkv * H + H * u128(c.q_dim()) + 3 * I * H) * 2 + 2 * H * 4;
  const u128 raw = V * H * 2 * (c.tie_word_embeddings ? 1 : 2) + per_layer * u128(c.num_layers) + H * 4;
  check(u128(w.total_bytes) >= raw, "the weight layout's total does not wrap");
  check(w.layers.size() == size_t(c.num_layers), "one offset set per layer");
}

void check_schedule(const mk::ModelConfig& c) {
  constexpr int kWorkgroups = 8;
  // Instructions per layer grow with the kv heads: keep each input fast.
  if (int64_t(c.num_layers) * std::max(kWorkgroups, c.num_kv_heads) > 4096) return;
  const mk::Schedule s = mk::build_schedule(c, mk::ScheduleParams{kWorkgroups, 0});
  check(s.wg_begin.size() == size_t(kWorkgroups) + 1 && s.wg_begin.back() == s.instrs.size(), "workgroup lists cover the schedule");
  check(size_t(s.instrs_per_step) == s.instrs.size(), "every instruction is in one list");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string config(input.substr(0, nul));
  mk::ModelConfig c;
  try {
    c = mk::parse_model_config(config, kConfig);
  } catch (const mk::Error& e) {
    check_error(e, kConfig, config);
    return 0;
  }
  if (nul != std::string_view::npos) {
    try {
      mk::apply_generation_config(c, std::string(input.substr(nul + 1)), kGeneration);
    } catch (const mk::Error& e) {
      check_error(e, kGeneration, input.substr(nul + 1));
    }
  }
  check_limits(c);
  check_layout(c);
  check_schedule(c);
  return 0;
}
