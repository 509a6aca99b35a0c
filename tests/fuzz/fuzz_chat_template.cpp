// libFuzzer target for chat-template loading and rendering (built by scripts/run_fuzz.sh chat_template).
// Input: NUL-separated parts
//     tokenizer_config.json \0 chat_template.jinja \0 conversation
// (an empty second part: no chat_template.jinja). The conversation is messages separated by 0x01; a
// message's first byte picks its role (system, user, assistant, tool, ipython, or a role no template
// renders; byte % 6) and its number of tool calls (byte / 6 % 3, each a call of "f" with the content as
// its argument), the rest is its content, any bytes. The conversation's first byte, before the messages,
// holds the options: bit 0 set enable_thinking, bit 1 its value, bit 2 one tool ("f").
//
// Invariants, from runtime/chat_template.h (a violation aborts, so libFuzzer keeps the input):
//   - loading succeeds or throws mk::Error naming tokenizer_config.json or chat_template.jinja, with no
//     nlohmann exception left unconverted except as the parse error of the file;
//   - render() throws mk::Error exactly for what the header says is rejected (an empty list except for
//     Llama 3, roles other than system/user/assistant/tool for the ChatML formats, the Gemma rules, tools
//     or calls with a template that has no tool-call format, calls on a message that is not the
//     assistant's, a Llama 3.1 turn of more than one call, Llama 3.1 tools with no message after the
//     system one), and otherwise returns the prompt (Llama 3.1 renders tool/ipython messages as JSON
//     strings); add_generation_prompt appends exactly the
//     assistant header;
//   - every user message's content is in the prompt (trimmed for the Llama formats);
//   - render_continuation(messages, 0) == render(messages), and for Llama 3, Llama 3.1 and ChatML, for
//     every assistant message k - 1 with k >= 2 stored as generated (trimmed for the Llama formats):
//     render(messages[0, k-1), true) + its content + render_continuation(messages, k) == render(messages);
//   - python_strip() strips exactly Python's str.strip(): the longest prefix and suffix of valid UTF-8
//     whitespace code points (Python's str.isspace), never bytes of invalid UTF-8 (which Python decodes
//     as U+FFFD), and with a character set, exactly those ASCII characters.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat_template.h"
#include "runtime/error.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

constexpr const char* kConfig = "fuzz/tokenizer_config.json";
constexpr const char* kJinja = "fuzz/chat_template.jinja";

[[noreturn]] void violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "invariant violated: %s: %s\n", what, detail.c_str());
  std::abort();
}
void check(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) violated(what, detail);
}

// One decoded item of a byte string: a valid code point, or (cp = -1) one byte the WHATWG / Python
// decoder replaces. Written from Unicode Table 3-7, independent of the code under test.
struct Item {
  size_t begin, end;
  int64_t cp;
};

std::vector<Item> decode(std::string_view s) {
  std::vector<Item> out;
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 < 0x80) n = 1;
    else if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    bool ok = n > 0 && i + n <= s.size();
    int64_t cp = n == 1 ? b0 : n == 2 ? b0 & 0x1F : n == 3 ? b0 & 0x0F : b0 & 0x07;
    for (size_t k = 1; ok && k < n; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      ok = b >= (k == 1 ? lo : 0x80) && b <= (k == 1 ? hi : 0xBF);
      cp = (cp << 6) | (b & 0x3F);
    }
    if (ok) {
      out.push_back({i, i + n, cp});
      i += n;
    } else {
      out.push_back({i, i + 1, -1});  // where exactly a replaced subpart ends does not matter here
      ++i;
    }
  }
  return out;
}

// Python 3's str.isspace(): characters of bidirectional type WS, B or S, or category Zs.
bool python_isspace(int64_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string_view reference_strip(std::string_view s, std::string_view chars, bool left, bool right) {
  const auto strip = [&](const Item& it) {
    if (it.cp < 0) return false;
    return chars.empty() ? python_isspace(it.cp) : it.cp < 0x80 && chars.find(char(it.cp)) != std::string_view::npos;
  };
  const std::vector<Item> items = decode(s);
  size_t first = 0, last = items.size();
  if (left)
    while (first < last && strip(items[first])) ++first;
  if (right)
    while (last > first && strip(items[last - 1])) --last;
  return first == last ? s.substr(first < items.size() ? items[first].begin : s.size(), 0)
                       : s.substr(items[first].begin, items[last - 1].end - items[first].begin);
}

void check_strip(std::string_view s) {
  for (const std::string_view chars : {std::string_view(), std::string_view("\n"), std::string_view(" \tx")})
    for (const bool left : {false, true})
      for (const bool right : {false, true}) {
        const std::string_view got = mk::python_strip(s, chars, left, right);
        const std::string_view want = reference_strip(s, chars, left, right);
        // An empty result's position is immaterial.
        check(got == want && (got.empty() || got.data() == want.data()), "python_strip is str.strip",
              std::string(s) + " -> [" + std::string(got) + "] vs [" + std::string(want) + "]");
      }
}

// The formats whose templates trim each message's content.
bool trims_content(mk::ChatFormat f) {
  return f == mk::ChatFormat::Llama3 || f == mk::ChatFormat::Llama31 || f == mk::ChatFormat::Gemma;
}

// What the header says render() rejects.
bool rejected(const mk::ChatTemplate& t, const std::vector<mk::ChatMessage>& messages, const mk::ChatOptions& o) {
  const mk::ChatFormat f = t.format();
  const bool tools = !o.tools.empty();
  if (messages.empty()) return f != mk::ChatFormat::Llama3 || tools;
  if (tools && t.tool_call_format() == mk::ToolCallFormat::None) return true;
  if (tools && f == mk::ChatFormat::Llama31 && messages.size() == (messages[0].role == "system" ? 1u : 0u)) return true;
  for (const mk::ChatMessage& m : messages) {
    if (m.tool_calls.empty()) continue;
    if (t.tool_call_format() == mk::ToolCallFormat::None || m.role != "assistant") return true;
    if (f == mk::ChatFormat::Llama31 && m.tool_calls.size() != 1) return true;
  }
  for (const mk::ChatMessage& m : messages) {
    if ((f == mk::ChatFormat::ChatML || f == mk::ChatFormat::Qwen3) && m.role != "system" && m.role != "user" &&
        m.role != "assistant" && m.role != "tool")
      return true;
    if (f == mk::ChatFormat::Gemma && m.role != "system" && m.role != "user" && m.role != "assistant") return true;
  }
  if (f == mk::ChatFormat::Gemma) {  // user / assistant alternate after an optional first system message
    const size_t first = messages[0].role == "system" ? 1 : 0;
    for (size_t i = first; i < messages.size(); ++i)
      if ((messages[i].role == "user") != ((i - first) % 2 == 0)) return true;
  }
  return false;
}

std::string generation_prompt(const mk::ChatTemplate& t, const mk::ChatOptions& o) {
  switch (t.format()) {
    case mk::ChatFormat::Llama3:
    case mk::ChatFormat::Llama31: return "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case mk::ChatFormat::ChatML: return "<|im_start|>assistant\n";
    case mk::ChatFormat::Qwen3:
      return o.enable_thinking == false ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "<|im_start|>assistant\n";
    case mk::ChatFormat::Gemma: return "<start_of_turn>model\n";
  }
  return {};
}

void check_render(const mk::ChatTemplate& t, std::vector<mk::ChatMessage> messages, const mk::ChatOptions& o) {
  const bool reject = rejected(t, messages, o);
  std::string bare, prompt;
  try {
    bare = t.render(messages, false, o);
    prompt = t.render(messages, true, o);
  } catch (const mk::Error& e) {
    check(reject, "render rejects only what the header names", e.what());
    return;
  }
  check(!reject, "render rejects what the header names");
  check(prompt == bare + generation_prompt(t, o), "add_generation_prompt appends the assistant header");
  const bool trims = trims_content(t.format());
  for (const mk::ChatMessage& m : messages)
    if (m.role == "user") {
      const std::string_view content = trims ? mk::python_strip(m.content) : std::string_view(m.content);
      check(prompt.find(content) != std::string::npos, "user content is in the prompt", m.content);
    }
  for (const bool agp : {false, true})
    check(t.render_continuation(messages, 0, agp, o) == (agp ? prompt : bare), "a continuation from 0 is the render");
  if (t.format() == mk::ChatFormat::Qwen3) return;  // documented to differ: the cache keeps <think> blocks
  // Llama 3.1 puts the tools in the first message after the system one: a prefix may have none.
  if (t.format() == mk::ChatFormat::Llama31 && !o.tools.empty()) return;
  for (size_t k = 2; k <= messages.size(); ++k) {
    // A turn with calls is rendered as the template writes them, not as generated text.
    if (messages[k - 1].role != "assistant" || !messages[k - 1].tool_calls.empty()) continue;
    std::vector<mk::ChatMessage> stored = messages;
    if (trims) stored[k - 1].content = std::string(mk::python_strip(stored[k - 1].content));
    const std::vector<mk::ChatMessage> before(stored.begin(), stored.begin() + std::ptrdiff_t(k - 1));
    for (const bool agp : {false, true}) {
      const std::string cached = t.render(before, true, o) + stored[k - 1].content;
      const std::string full = t.render(stored, agp, o);
      check(cached + t.render_continuation(stored, k, agp, o) == full, "prompt + reply + continuation == render",
            std::to_string(k));
    }
  }
  if (!messages.empty()) {
    bool threw = false;
    try {
      t.render_continuation(messages, messages.size() + 1, true, o);
    } catch (const mk::Error&) {
      threw = true;
    }
    check(threw, "a history longer than the messages is rejected");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = mk::fuzz::split_at_nul<3>(data, size);
  std::optional<mk::ChatTemplate> t;
  try {
    const std::optional<std::string> jinja = parts[1].empty() ? std::nullopt : std::optional<std::string>(parts[1]);
    t.emplace(mk::ChatTemplate::from_config_json(parts[0], kConfig, jinja, kJinja));
  } catch (const mk::Error& e) {
    const std::string_view msg = e.what();
    check(msg.find(kConfig) != std::string_view::npos || msg.find(kJinja) != std::string_view::npos,
          "the error names the file", std::string(msg));
    check(!mk::fuzz::leaks_json_library_message(msg, std::string_view(reinterpret_cast<const char*>(data), size)), "only parse errors carry nlohmann's message",
          std::string(msg));
  }

  std::string_view conversation = parts[2];
  mk::ChatOptions options;
  options.date_string = "26 Jul 2024";  // the clock is not an input
  if (!conversation.empty()) {
    const auto flags = static_cast<uint8_t>(conversation[0]);
    if (flags & 1) options.enable_thinking = (flags & 2) != 0;
    if (flags & 4)
      options.tools.push_back(nlohmann::ordered_json::parse(R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})"));
    conversation.remove_prefix(1);
  }
  static const char* const kRoles[] = {"system", "user", "assistant", "tool", "ipython", "narrator"};
  std::vector<mk::ChatMessage> messages;
  while (!conversation.empty()) {
    const size_t sep = conversation.find('\x01');
    const std::string_view m = conversation.substr(0, sep);
    if (!m.empty()) {
      const auto b = static_cast<uint8_t>(m[0]);
      std::vector<mk::ChatToolCall> calls(size_t(b / 6 % 3),
                                          mk::ChatToolCall{"f", nlohmann::ordered_json{{"q", std::string(m.substr(1))}}});
      messages.emplace_back(kRoles[b % 6], std::string(m.substr(1)), std::move(calls));
    }
    conversation = sep == std::string_view::npos ? std::string_view() : conversation.substr(sep + 1);
  }
  for (const mk::ChatMessage& m : messages) check_strip(m.content);
  if (t) check_render(*t, messages, options);
  return 0;
}
