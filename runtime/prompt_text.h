// A rendered chat prompt, and where the messages' own text lies in it. A chat template writes control
// tokens ("<|im_start|>", "<|eot_id|>") as text; a message may hold the same characters, and they must
// stay text: otherwise any user can end a turn or open a system turn by typing its markers. The
// tokenizer parses special tokens in the template's text only, never inside `plain` ranges
// (Tokenizer::encode(const PromptText&)).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mk {

struct PromptText {
  std::string text;
  std::vector<std::pair<size_t, size_t>> plain;  // [begin, end) byte ranges of message text, ascending

  // The template's own text.
  PromptText& operator+=(std::string_view template_text) {
    text += template_text;
    return *this;
  }
  PromptText& operator+=(const PromptText& other) {
    const size_t at = text.size();
    text += other.text;
    for (const auto& [b, e] : other.plain) plain.emplace_back(at + b, at + e);
    return *this;
  }
  // A message's text.
  void add_message_text(std::string_view message_text) {
    if (message_text.empty()) return;
    plain.emplace_back(text.size(), text.size() + message_text.size());
    text += message_text;
  }
  // Drops the first n bytes, which must be the template's text (the end-of-turn marker a cached reply
  // already holds).
  void erase_prefix(size_t n) {
    text.erase(0, n);
    std::vector<std::pair<size_t, size_t>> kept;
    for (const auto& [b, e] : plain)
      if (e > n) kept.emplace_back(b > n ? b - n : 0, e - n);
    plain = std::move(kept);
  }
};

}  // namespace mk
