// Built-in chat renderers: see chat_template.h. Each renderer mirrors one family of Jinja templates line
// by line; the comments quote the template fragment being reproduced.
#include "runtime/chat_template.h"

#include "runtime/error.h"
#include "runtime/json_file.h"

#include <nlohmann/json.hpp>

#include <ctime>

namespace mk {

namespace {

using json = nlohmann::json;

// A JSON value for a message: containers by kind, scalars as written (shortened).
std::string describe(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return fmt::format("an array of {} elements", v.size());
  const std::string text = v.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// One code point of possibly invalid UTF-8 at s[i]; a byte that does not start a valid sequence reads
// as U+FFFD of length 1, as Python's decode(errors="replace") makes it (never whitespace). Valid means
// shortest form, no surrogates, at most U+10FFFF: the second byte's range depends on the first
// (Unicode Table 3-7), so overlong forms such as E0 80 A0 (a space) are invalid.
char32_t read_code_point(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  *len = 1;
  if (b0 < 0x80) return b0;
  size_t n = b0 >= 0xF0 && b0 <= 0xF4 ? 4 : b0 >= 0xE0 && b0 <= 0xEF ? 3 : b0 >= 0xC2 && b0 <= 0xDF ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0xFFFD;
  const uint8_t lower = b0 == 0xE0 ? 0xA0 : b0 == 0xF0 ? 0x90 : 0x80;
  const uint8_t upper = b0 == 0xED ? 0x9F : b0 == 0xF4 ? 0x8F : 0xBF;
  char32_t c = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (b < (k == 1 ? lower : 0x80) || b > (k == 1 ? upper : 0xBF)) return 0xFFFD;
    c = (c << 6) | (b & 0x3F);
  }
  *len = n;
  return c;
}

// Python str.isspace().
bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's "text".split(sep)[0] and [-1].
std::string_view before_first(std::string_view s, std::string_view sep) {
  const size_t p = s.find(sep);
  return p == std::string_view::npos ? s : s.substr(0, p);
}
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t p = s.rfind(sep);
  return p == std::string_view::npos ? s : s.substr(p + sep.size());
}

std::string_view trim(std::string_view s) { return python_strip(s); }                       // jinja |trim
std::string_view strip_nl(std::string_view s) { return python_strip(s, "\n"); }              // .strip('\n')
std::string_view lstrip_nl(std::string_view s) { return python_strip(s, "\n", true, false); }  // .lstrip('\n')
std::string_view rstrip_nl(std::string_view s) { return python_strip(s, "\n", false, true); }  // .rstrip('\n')

// Unescapes a Jinja string literal body (\n, \t, \', \", \\).
std::string jinja_unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char n = s[++i];
      out += n == 'n' ? '\n' : n == 't' ? '\t' : n == 'r' ? '\r' : n;
    } else {
      out += s[i];
    }
  }
  return out;
}

// ChatML default system prompt written as a literal: '<|im_start|>system\nYou are ...<|im_end|>\n'.
std::string find_default_system(std::string_view tmpl) {
  constexpr std::string_view kOpen = "<|im_start|>system\\n";
  for (size_t p = tmpl.find(kOpen); p != std::string_view::npos; p = tmpl.find(kOpen, p + 1)) {
    if (p == 0) continue;
    const char quote = tmpl[p - 1];
    if (quote != '\'' && quote != '"') continue;
    const size_t body = p + kOpen.size();
    const size_t end = tmpl.find("<|im_end|>", body);
    if (end == std::string_view::npos) continue;
    const std::string_view text = tmpl.substr(body, end - body);
    if (text.empty() || contains(text, std::string_view(&quote, 1))) continue;  // a '+ expr +' in between
    return jinja_unescape(text);
  }
  return {};
}

// Llama 3.1: {%- set date_string = "26 Jul 2024" %}
std::string find_default_date(std::string_view tmpl) {
  for (const std::string_view key : {"set date_string = \"", "set date_string = '"}) {
    const size_t p = tmpl.find(key);
    if (p == std::string_view::npos) continue;
    const size_t body = p + key.size();
    const size_t end = tmpl.find(key.back(), body);
    if (end != std::string_view::npos) return std::string(tmpl.substr(body, end - body));
  }
  return "26 Jul 2024";
}

// The Qwen tools block (ChatML with <tool_call>, Qwen3): "# Tools" ... the tools as JSON, one per line.
std::string hermes_tools_block(const std::vector<nlohmann::ordered_json>& tools) {
  std::string out = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
                    "function signatures within <tools></tools> XML tags:\n<tools>";
  for (const auto& tool : tools) {
    out += '\n';
    out += python_json(tool);
  }
  out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
         "</tool_call><|im_end|>\n";
  return out;
}

// '<tool_call>\n{"name": "' + name + '", "arguments": ' + arguments | tojson + '}\n</tool_call>' after `lead`;
// Qwen3 writes string arguments as they are.
void add_hermes_call(PromptText& s, const ChatToolCall& call, std::string_view lead, bool raw_string_arguments) {
  s += std::string(lead) + "<tool_call>\n{\"name\": \"";
  s.add_message_text(call.name);
  s += "\", \"arguments\": ";
  s.add_message_text(raw_string_arguments && call.arguments.is_string() ? call.arguments.get<std::string>()
                                                                         : python_json(call.arguments));
  s += "}\n</tool_call>";
}

void python_json_into(std::string& out, const nlohmann::ordered_json& v, int indent, int depth) {
  if (!v.is_structured()) {
    out += v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return;
  }
  const bool object = v.is_object();
  if (v.empty()) {
    out += object ? "{}" : "[]";
    return;
  }
  const auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent * d), ' ');
  };
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += indent < 0 ? ", " : ",";
    first = false;
    if (indent >= 0) newline(depth + 1);
    if (object) out += nlohmann::ordered_json(it.key()).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + ": ";
    python_json_into(out, *it, indent, depth + 1);
  }
  if (indent >= 0) newline(depth);
  out += object ? '}' : ']';
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  python_json_into(out, value, indent, 0);
  return out;
}

std::string_view python_strip(std::string_view s, std::string_view chars, bool left, bool right) {
  const auto is_strip = [&](char32_t c) {
    return chars.empty() ? python_space(c) : (c < 0x80 && chars.find(static_cast<char>(c)) != std::string_view::npos);
  };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t len;
      if (!is_strip(read_code_point(s, begin, &len))) break;
      begin += len;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
      size_t len;
      const char32_t c = read_code_point(s, start, &len);
      if (start + len != end) {  // invalid tail byte: not whitespace
        break;
      }
      if (!is_strip(c)) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

ChatTemplate ChatTemplate::from_source(std::string_view tmpl, std::string bos_token, std::string_view source_name) {
  ChatTemplate t;
  t.source_ = std::string(source_name);
  t.bos_token_ = std::move(bos_token);
  if (contains(tmpl, "<|start_header_id|>")) {
    if (contains(tmpl, "Cutting Knowledge Date")) {
      t.format_ = ChatFormat::Llama31;
      t.date_from_clock_ = contains(tmpl, "strftime_now");
      t.default_date_ = find_default_date(tmpl);
      if (contains(tmpl, "tool_call")) t.tool_format_ = ToolCallFormat::Llama3Json;
    } else {
      t.format_ = ChatFormat::Llama3;
    }
    if (t.bos_token_.empty() && contains(tmpl, "bos_token"))
      fail("{}: the Llama 3 chat template uses bos_token but tokenizer_config.json has no \"bos_token\"", t.source_);
  } else if (contains(tmpl, "<|im_start|>")) {
    t.format_ = contains(tmpl, "</think>") ? ChatFormat::Qwen3 : ChatFormat::ChatML;
    if (t.format_ == ChatFormat::ChatML) t.default_system_ = find_default_system(tmpl);
    if (contains(tmpl, "<tool_call>")) t.tool_format_ = ToolCallFormat::Hermes;
  } else if (contains(tmpl, "<start_of_turn>")) {
    t.format_ = ChatFormat::Gemma;
    if (t.bos_token_.empty() && contains(tmpl, "bos_token"))
      fail("{}: the Gemma chat template uses bos_token but tokenizer_config.json has no \"bos_token\"", t.source_);
  } else {
    fail("{}: unrecognised chat_template: it has none of the markers \"<|start_header_id|>\" (Llama 3), "
         "\"<|im_start|>\" (ChatML / Qwen) or \"<start_of_turn>\" (Gemma); supported formats: Llama 3, Llama 3.1, "
         "ChatML (Qwen2/2.5), Qwen3, Gemma",
         t.source_);
  }
  return t;
}

ChatTemplate ChatTemplate::load(const std::filesystem::path& model_dir) {
  const auto config_path = model_dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path)) fail("{}: file not found (needed for the chat template)", config_path.string());
  const auto jinja_path = model_dir / "chat_template.jinja";
  std::optional<std::string> jinja;
  if (std::filesystem::exists(jinja_path)) jinja = read_model_text_file(jinja_path);
  return from_config_json(read_model_text_file(config_path), config_path.string(), jinja, jinja_path.string());
}

ChatTemplate ChatTemplate::from_config_json(std::string_view config_json, std::string_view config_source,
                                            const std::optional<std::string>& jinja, std::string_view jinja_source) {
  const std::string source(config_source);
  const json config = parse_model_json(config_json, source);
  if (!config.is_object()) fail("{}: top level is not a JSON object", source);

  // Only a template that renders bos_token needs it (from_source says so); any other form is ignored, as
  // the tokenizer reports a malformed "bos_token" itself.
  std::string bos;
  if (const auto it = config.find("bos_token"); it != config.end()) {
    if (it->is_string()) bos = it->get<std::string>();
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) bos = (*it)["content"].get<std::string>();
  }

  std::string tmpl;
  std::string tmpl_source = source;
  const auto it = config.find("chat_template");
  if (it != config.end() && it->is_string()) {
    tmpl = it->get<std::string>();
  } else if (it != config.end() && it->is_array()) {
    // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]: every entry is checked, so a
    // malformed list is reported as such even when it has a usable "default".
    bool found = false;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& entry = (*it)[i];
      if (!entry.is_object())
        fail("{}: \"chat_template[{}]\" must be an object {{\"name\", \"template\"}}, found {}", source, i,
             describe(entry));
      for (const char* key : {"name", "template"}) {
        const auto field = entry.find(key);
        if (field == entry.end() || !field->is_string())
          fail("{}: \"chat_template[{}].{}\" must be a string, found {}", source, i, key,
               field == entry.end() ? std::string("nothing") : describe(*field));
      }
      if (entry["name"].get<std::string>() == "default") {
        tmpl = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) fail("{}: \"chat_template\" is a list without a \"default\" entry", source);
  } else if (it != config.end() && !it->is_null()) {
    fail("{}: \"chat_template\" must be a string or a list of {{\"name\", \"template\"}}, found {}", source,
         describe(*it));
  } else {
    if (!jinja) fail("{}: no \"chat_template\" and no {} next to it", source, std::filesystem::path(jinja_source).filename().string());
    tmpl = *jinja;
    tmpl_source = std::string(jinja_source);
  }
  return from_source(tmpl, bos, tmpl_source);
}

std::string_view ChatTemplate::format_name() const {
  switch (format_) {
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Llama31: return "llama3.1";
    case ChatFormat::ChatML: return "chatml";
    case ChatFormat::Qwen3: return "qwen3";
    case ChatFormat::Gemma: return "gemma";
  }
  return "?";
}

std::string_view ChatTemplate::end_of_turn() const {
  switch (format_) {
    case ChatFormat::Llama3:
    case ChatFormat::Llama31: return "<|eot_id|>";
    case ChatFormat::ChatML:
    case ChatFormat::Qwen3: return "<|im_end|>\n";
    case ChatFormat::Gemma: return "<end_of_turn>\n";
  }
  return {};
}

std::string ChatTemplate::date(const ChatOptions& options) const {
  if (options.date_string) return *options.date_string;
  if (!date_from_clock_) return default_date_;
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::snprintf(buf, sizeof(buf), "%02d %s %04d", tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900);  // "%d %b %Y", C locale
  return buf;
}

void ChatTemplate::check(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  if (messages.empty() && format_ != ChatFormat::Llama3)
    fail("{}: cannot render an empty conversation with the {} chat template", source_, format_name());
  if (!options.tools.empty() && tool_format_ == ToolCallFormat::None)
    fail("{}: the {} chat template renders no tools (it has no tool-call format)", source_, format_name());
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (!messages[i].tool_calls.empty()) {
      if (tool_format_ == ToolCallFormat::None)
        fail("{}: messages[{}]: the {} chat template renders no tool calls", source_, i, format_name());
      if (role != "assistant") fail("{}: messages[{}]: only an assistant message makes tool calls (role \"{}\")", source_, i, role);
      // {%- if not message.tool_calls|length == 1 %}{{- raise_exception(...) }}
      if (format_ == ChatFormat::Llama31 && messages[i].tool_calls.size() != 1)
        fail("{}: messages[{}]: This model only supports single tool-calls at once! ({} calls)", source_, i,
             messages[i].tool_calls.size());
    }
    if ((format_ == ChatFormat::ChatML || format_ == ChatFormat::Qwen3) && role != "system" && role != "user" &&
        role != "assistant" && role != "tool")
      fail("{}: messages[{}]: role \"{}\" is not rendered by the {} chat template (system, user, assistant, tool)",
           source_, i, role, format_name());
    if (format_ == ChatFormat::Gemma && role != "system" && role != "user" && role != "assistant")
      fail("{}: messages[{}]: role \"{}\" is not rendered by the gemma chat template (system, user, assistant)",
           source_, i, role);
  }
  if (format_ == ChatFormat::Gemma) {
    // {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}{{ raise_exception(...) }}, over the
    // messages after a leading system message.
    const size_t first = messages[0].role == "system" ? 1 : 0;
    for (size_t i = first; i < messages.size(); ++i)
      if ((messages[i].role == "user") != ((i - first) % 2 == 0))
        fail("{}: messages[{}]: role \"{}\": the gemma chat template needs the roles after an optional first system "
             "message to alternate user/assistant/user/assistant/...",
             source_, i, messages[i].role);
  }
}

// Text for each message (index-aligned with `messages`), with everything the template emits before the
// per-message loop (BOS, Llama 3.1 system block, ChatML system / default system) folded into the first
// entry, which the continuation never needs.
std::vector<PromptText> ChatTemplate::render_messages(const std::vector<ChatMessage>& messages,
                                                       const ChatOptions& options) const {
  check(messages, options);
  const size_t n = messages.size();
  std::vector<PromptText> out(n);
  // Each message's text goes in as text (PromptText::add_message_text), never as markup.
  switch (format_) {
    case ChatFormat::Llama3:
      // {% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'
      //    + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}
      for (size_t i = 0; i < n; ++i) {
        out[i] += (i == 0 ? bos_token_ : std::string()) + "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
        out[i].add_message_text(trim(messages[i].content));
        out[i] += "<|eot_id|>";
      }
      break;
    case ChatFormat::Llama31: {
      // {{- bos_token }} ... system block with "Environment: ipython" (with tools), "Cutting Knowledge Date"
      // and "Today Date", then each message:
      // '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'
      const bool has_system = messages[0].role == "system";
      const bool tools = !options.tools.empty();
      PromptText head;
      head += bos_token_ + "<|start_header_id|>system<|end_header_id|>\n\n" + (tools ? "Environment: ipython\n" : "") +
              "Cutting Knowledge Date: December 2023\n" + "Today Date: " + date(options) + "\n\n";
      if (has_system) head.add_message_text(trim(messages[0].content));
      head += "<|eot_id|>";
      size_t first = has_system ? 1 : 0;
      if (tools) {
        // tools_in_user_message: the first message after the system one carries the tools, as a user turn.
        if (first == n)
          fail("{}: Cannot put tools in the first user message when there's no first user message!", source_);
        out[first] += "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON "
                      "for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the "
                      "format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not "
                      "use variables.\n\n";
        for (const auto& tool : options.tools) out[first] += python_json(tool, 4) + "\n\n";
        out[first].add_message_text(trim(messages[first].content));
        out[first] += "<|eot_id|>";
        ++first;
      }
      for (size_t i = first; i < n; ++i) {
        const ChatMessage& m = messages[i];
        if (!m.tool_calls.empty()) {
          // '{"name": "' + tool_call.name + '", ' + '"parameters": ' + tool_call.arguments | tojson + "}"
          out[i] += "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"";
          out[i].add_message_text(m.tool_calls[0].name);
          out[i] += "\", \"parameters\": ";
          out[i].add_message_text(python_json(m.tool_calls[0].arguments));
          out[i] += "}<|eot_id|>";
        } else if (m.role == "tool" || m.role == "ipython") {
          // A string is iterable to Jinja: {{- message.content | tojson }}.
          out[i] += "<|start_header_id|>ipython<|end_header_id|>\n\n";
          out[i].add_message_text(python_json(m.content));
          out[i] += "<|eot_id|>";
        } else {
          out[i] += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
          out[i].add_message_text(trim(m.content));
          out[i] += "<|eot_id|>";
        }
      }
      head += out[0];
      out[0] = std::move(head);
      break;
    }
    case ChatFormat::ChatML:
    case ChatFormat::Qwen3: {
      const bool qwen3 = format_ == ChatFormat::Qwen3;
      PromptText head;
      if (!options.tools.empty()) {
        // {%- if tools %}: the system text (Qwen2.5: or its default; Qwen3: with "\n\n" after it), then the
        // tools block.
        head += "<|im_start|>system\n";
        if (messages[0].role == "system") {
          head.add_message_text(messages[0].content);
          head += "\n\n";
        } else if (!qwen3) {
          head += default_system_ + "\n\n";
        }
        head += hermes_tools_block(options.tools);
      } else if (messages[0].role == "system") {
        head += "<|im_start|>system\n";
        head.add_message_text(messages[0].content);
        head += "<|im_end|>\n";
      } else if (!default_system_.empty()) {
        head += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      }
      // Qwen3: {%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %} and the
      // reversed scan for the last user message that is not a wrapped <tool_response>.
      size_t last_query = n - 1;
      for (size_t k = n; k-- > 0;) {
        const std::string_view c = messages[k].content;
        const bool wrapped = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
        if (messages[k].role == "user" && !wrapped) {
          last_query = k;
          break;
        }
      }
      for (size_t i = 0; i < n; ++i) {
        const ChatMessage& m = messages[i];
        PromptText& s = out[i];
        if (m.role == "user" || (m.role == "system" && i != 0)) {
          s += "<|im_start|>" + m.role + "\n";
          s.add_message_text(m.content);
          s += "<|im_end|>\n";
        } else if (m.role == "assistant") {
          if (!qwen3) {
            if (m.tool_calls.empty()) {
              s += "<|im_start|>assistant\n";
              s.add_message_text(m.content);
            } else {
              // '<|im_start|>' + message.role, then '\n' + message.content if any, then each call.
              s += "<|im_start|>assistant";
              if (!m.content.empty()) {
                s += "\n";
                s.add_message_text(m.content);
              }
              for (const ChatToolCall& call : m.tool_calls) add_hermes_call(s, call, "\n", false);
            }
            s += "<|im_end|>\n";
            continue;
          }
          std::string_view content = m.content;
          std::string_view reasoning;
          if (contains(content, "</think>")) {
            // content = message.content.split('</think>')[-1].lstrip('\n')
            // reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
            content = lstrip_nl(after_last(m.content, "</think>"));
            reasoning = lstrip_nl(after_last(rstrip_nl(before_first(m.content, "</think>")), "<think>"));
          }
          if (i > last_query && (i + 1 == n || !reasoning.empty())) {
            s += "<|im_start|>assistant\n<think>\n";
            s.add_message_text(strip_nl(reasoning));
            s += "\n</think>\n\n";
            s.add_message_text(lstrip_nl(content));
          } else {
            s += "<|im_start|>assistant\n";
            s.add_message_text(content);
          }
          // {%- if (loop.first and content) or (not loop.first) %}{{- '\n' }}; a string's arguments as they are.
          for (size_t k = 0; k < m.tool_calls.size(); ++k)
            add_hermes_call(s, m.tool_calls[k], k > 0 || !content.empty() ? "\n" : "", true);
          s += "<|im_end|>\n";
        } else if (m.role == "tool") {
          if (i == 0 || messages[i - 1].role != "tool") s += "<|im_start|>user";
          s += "\n<tool_response>\n";
          s.add_message_text(m.content);
          s += "\n</tool_response>";
          if (i + 1 == n || messages[i + 1].role != "tool") s += "<|im_end|>\n";
        }
      }
      head += out[0];
      out[0] = std::move(head);
      break;
    }
    case ChatFormat::Gemma: {
      // {{ bos_token }}; a first system message becomes first_user_prefix = content + '\n\n' (untrimmed) in
      // front of the first turn; each turn is '<start_of_turn>' + role ('assistant' -> 'model') + '\n' +
      // message['content'] | trim + '<end_of_turn>\n'.
      const size_t first = messages[0].role == "system" ? 1 : 0;
      out[0] += bos_token_;
      for (size_t i = first; i < n; ++i) {
        const std::string& role = messages[i].role;
        out[i] += "<start_of_turn>" + (role == "assistant" ? std::string("model") : role) + "\n";
        if (i == first && first == 1) {
          out[i].add_message_text(messages[0].content);
          out[i] += "\n\n";
        }
        out[i].add_message_text(trim(messages[i].content));
        out[i] += "<end_of_turn>\n";
      }
      break;
    }
  }
  return out;
}

std::string ChatTemplate::generation_prompt(const ChatOptions& options) const {
  switch (format_) {
    case ChatFormat::Llama3:
    case ChatFormat::Llama31:
      return "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::ChatML:
      return "<|im_start|>assistant\n";
    case ChatFormat::Qwen3:
      // {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}
      return options.enable_thinking.has_value() && !*options.enable_thinking
                 ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                 : "<|im_start|>assistant\n";
    case ChatFormat::Gemma:
      return "<start_of_turn>model\n";
  }
  return {};
}

PromptText ChatTemplate::render_prompt(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                      const ChatOptions& options) const {
  PromptText out;
  for (const PromptText& s : render_messages(messages, options)) out += s;
  if (add_generation_prompt) out += generation_prompt(options);
  return out;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const ChatOptions& options) const {
  return render_prompt(messages, add_generation_prompt, options).text;
}

PromptText ChatTemplate::render_continuation_prompt(const std::vector<ChatMessage>& messages, size_t history_count,
                                                    bool add_generation_prompt, const ChatOptions& options) const {
  if (history_count == 0) return render_prompt(messages, add_generation_prompt, options);
  if (history_count > messages.size())
    fail("{}: render_continuation: history_count {} exceeds the {} messages", source_, history_count, messages.size());
  if (messages[history_count - 1].role != "assistant")
    fail("{}: render_continuation: messages[{}] (the last message already in the context) must be the assistant's "
         "reply, found role \"{}\"", source_, history_count - 1, messages[history_count - 1].role);
  const std::vector<PromptText> parts = render_messages(messages, options);
  PromptText out;
  out += end_of_turn();
  for (size_t i = history_count; i < parts.size(); ++i) out += parts[i];
  if (add_generation_prompt) out += generation_prompt(options);
  return out;
}

std::string ChatTemplate::render_continuation(const std::vector<ChatMessage>& messages, size_t history_count,
                                              bool add_generation_prompt, const ChatOptions& options) const {
  return render_continuation_prompt(messages, history_count, add_generation_prompt, options).text;
}

}  // namespace mk
