#include "tests/helpers/tiny_chat_model.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/synthetic_model.h"

namespace mk::test {
namespace {

using json = nlohmann::json;

// GPT-2's bytes_to_unicode: the printable character a byte-level vocabulary uses for byte `b`, as UTF-8.
std::string byte_level_char(uint8_t b) {
  const auto direct = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF); };
  char32_t c = b;
  if (!direct(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x) n += !direct(x);
    c = char32_t(256 + n);
  }
  std::string out;
  if (c < 0x80) {
    out += char(c);
  } else {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  }
  return out;
}

std::string byte_level(std::string_view text) {
  std::string out;
  for (const char ch : text) out += byte_level_char(uint8_t(ch));
  return out;
}

// The Qwen2 pre-tokenizer regex and chat template (with its default system prompt).
constexpr const char* kQwenRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kChatMLTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou "
    "are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}";

}  // namespace

TinyChatModel write_tiny_chat_model(const std::filesystem::path& dir, const TinyChatModelOptions& options) {
  json vocab = json::object();
  int next = 0;
  std::vector<bool> has_byte(256, false);
  const auto add_byte = [&](int b) {
    vocab[byte_level_char(uint8_t(b))] = next++;
    has_byte[size_t(b)] = true;
  };
  add_byte('\n');
  for (int b = 0x20; b <= 0x7E; ++b) add_byte(b);

  // A few merges so that encoding is real BPE, not one token per byte.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"o", "r"}, {"l", "d"}, {"or", "ld"},
      {"i", "m"}, {"_", "s"}, {"t", "a"}, {"r", "t"}, {"a", "s"}, {"s", "t"}, {"st", "a"}};
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    const std::string ka = byte_level(a), kb = byte_level(b);
    if (!vocab.contains(ka + kb)) vocab[ka + kb] = next++;
    merge_list.push_back(ka + " " + kb);
  }

  TinyChatModel m;
  json added = json::array();
  const auto add_special = [&](const char* content) {
    const int id = next++;
    added.push_back({{"id", id}, {"content", content}, {"special", true}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"single_word", false}});
    return id;
  };
  m.endoftext = add_special("<|endoftext|>");
  m.im_start = add_special("<|im_start|>");
  m.im_end = add_special("<|im_end|>");
  m.vocab = next;
  for (int b = 0; b < 256; ++b)  // the rest of the byte alphabet, beyond the model's vocabulary
    if (!has_byte[size_t(b)]) vocab[byte_level_char(uint8_t(b))] = next++;

  json t;
  t["version"] = "1.0";
  t["added_tokens"] = added;
  t["normalizer"] = {{"type", "NFC"}};
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"}, {"pattern", {{"Regex", kQwenRegex}}}, {"behavior", "Isolated"}, {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}};
  t["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  t["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  t["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"ignore_merges", false},
                {"byte_fallback", false}, {"vocab", vocab}, {"merges", merge_list}};

  json config = {{"bos_token", nullptr}, {"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"},
                 {"chat_template", kChatMLTemplate}};

  synthetic::TinyModelSpec spec;
  spec.arch = Arch::Qwen2;
  spec.vocab = m.vocab;
  spec.eos = {m.im_end};
  spec.seed = options.seed;
  spec.max_position = 32768;
  spec.layers = options.layers;
  spec.hidden = options.hidden;
  spec.intermediate = options.intermediate;
  spec.heads = options.heads;
  spec.kv_heads = options.kv_heads;
  spec.head_dim = options.head_dim;
  auto tensors = synthetic::write_tiny_model(dir, spec);
  if (options.suppress_eos) {
    for (auto& tensor : tensors) {
      if (tensor.name != "lm_head.weight") continue;
      const size_t row_bytes = tensor.bytes.size() / size_t(spec.vocab);
      std::fill_n(tensor.bytes.begin() + std::ptrdiff_t(row_bytes * size_t(m.im_end)), row_bytes, uint8_t(0));
    }
    synthetic::write_safetensors(dir / "model.safetensors", tensors);
  }
  std::ofstream(dir / "tokenizer.json") << t.dump(1);
  std::ofstream(dir / "tokenizer_config.json") << config.dump(1);
  return m;
}

ScopedTempDir::ScopedTempDir(const std::string& tag) : path(synthetic::make_temp_dir(tag)) {}

ScopedTempDir::~ScopedTempDir() {
  std::error_code ec;  // best effort: never throw from a destructor
  std::filesystem::remove_all(path, ec);
}

}  // namespace mk::test
