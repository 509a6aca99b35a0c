#include "tests/helpers/tiny_chat_model.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
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
// The same with Qwen3's generation prompt: an empty think block when thinking is switched off.
constexpr const char* kQwen3StyleTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is "
    "defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}";

void set_bf16_row(synthetic::TensorBytes& t, int64_t row, const std::vector<float>& values) {
  const size_t cols = size_t(t.shape.at(1));
  for (size_t c = 0; c < cols; ++c) {
    const uint16_t v = float_to_bf16(c < values.size() ? values[c] : 0.0f);
    std::memcpy(t.bytes.data() + (size_t(row) * cols + c) * 2, &v, 2);
  }
}

// Makes every reply of the model `reply` (distinct token ids, ending in the end-of-turn token), started
// by the token `after`: see TinyChatModelOptions::scripted_thinking.
void script_reply(std::vector<synthetic::TensorBytes>& tensors, int hidden, int32_t after, const std::vector<int32_t>& reply) {
  constexpr float kLogit = 4.0f;  // times rms-normalised basis vectors (sqrt(hidden)): a margin of ~32
  for (auto& t : tensors) {
    const bool zero = t.name.ends_with("o_proj.weight") || t.name.ends_with("down_proj.weight");
    if (zero) std::fill(t.bytes.begin(), t.bytes.end(), uint8_t(0));
    if (t.name == "model.norm.weight")
      for (int c = 0; c < hidden; ++c) {
        const uint16_t one = float_to_bf16(1.0f);
        std::memcpy(t.bytes.data() + size_t(c) * 2, &one, 2);
      }
  }
  std::vector<int32_t> chain = {after};
  chain.insert(chain.end(), reply.begin(), reply.end());
  if (int(chain.size()) > hidden) throw std::runtime_error("scripted reply longer than the hidden size");
  for (auto& t : tensors) {
    if (t.name != "model.embed_tokens.weight" && t.name != "lm_head.weight") continue;
    for (size_t i = 0; i < chain.size(); ++i) {
      std::vector<float> basis(size_t(hidden), 0.0f);
      if (t.name == "model.embed_tokens.weight") {
        basis[i] = 1.0f;
        set_bf16_row(t, chain[i], basis);
      } else if (i + 1 < chain.size()) {
        basis[i] = kLogit;
        set_bf16_row(t, chain[i + 1], basis);  // the successor's row points at its predecessor's vector
      }
    }
  }
}

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
  if (options.scripted_thinking) {  // added tokens that are not special, as in Qwen3's tokenizer
    m.think = add_special("<think>");
    m.end_think = add_special("</think>");
    added[added.size() - 2]["special"] = false;
    added[added.size() - 1]["special"] = false;
  }
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
                 {"chat_template", options.scripted_thinking ? kQwen3StyleTemplate : kChatMLTemplate}};

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
  if (options.scripted_thinking) {
    const auto id = [&](char c) { return vocab.at(byte_level_char(uint8_t(c))).get<int32_t>(); };
    script_reply(tensors, spec.hidden, id('\n'), {m.think, id('P'), id('l'), id('a'), id('n'), m.end_think, id('O'), id('K'), m.im_end});
    synthetic::write_safetensors(dir / "model.safetensors", tensors);
  } else if (options.suppress_eos) {
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
