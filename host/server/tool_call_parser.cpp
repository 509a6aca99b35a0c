#include "host/server/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace mk::server {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

std::string_view rstrip_space(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest end of `s` that begins `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
    if (tag.starts_with(s.substr(s.size() - k))) return k;
  return 0;
}

// Matching the head {"name": NAME, "arguments": of a call, on text that may still grow.
enum class HeadMatch { Ok, More, Fail };

struct HeadReader {
  std::string_view s;
  bool end;
  size_t i = 0;

  HeadMatch literal(std::string_view lit) {
    i = skip_space(s, i);
    const std::string_view have = s.substr(std::min(i, s.size()));
    if (have.size() < lit.size()) return lit.starts_with(have) && !end ? HeadMatch::More : HeadMatch::Fail;
    if (!have.starts_with(lit)) return HeadMatch::Fail;
    i += lit.size();
    return HeadMatch::Ok;
  }
  // A JSON string literal, decoded.
  HeadMatch string(std::string& out) {
    i = skip_space(s, i);
    if (i >= s.size()) return end ? HeadMatch::Fail : HeadMatch::More;
    if (s[i] != '"') return HeadMatch::Fail;
    for (size_t j = i + 1; j < s.size(); ++j) {
      if (s[j] == '\\') {
        ++j;
        continue;
      }
      if (s[j] != '"') continue;
      try {
        out = nlohmann::json::parse(s.substr(i, j + 1 - i)).get<std::string>();
      } catch (const nlohmann::json::exception&) {
        return HeadMatch::Fail;
      }
      i = j + 1;
      return HeadMatch::Ok;
    }
    return end ? HeadMatch::Fail : HeadMatch::More;
  }
};

}  // namespace

ToolCallParser::ToolCallParser(ToolCallFormat format, std::vector<std::string> names)
    : format_(format), syntax_(tool_call_syntax(format)), names_(std::move(names)) {}

std::vector<ToolCallEvent> ToolCallParser::push(std::string_view text) {
  std::vector<ToolCallEvent> out;
  held_ += text;
  run(out, false);
  return out;
}

std::vector<ToolCallEvent> ToolCallParser::finish() {
  std::vector<ToolCallEvent> out;
  run(out, true);
  return out;
}

void ToolCallParser::run(std::vector<ToolCallEvent>& out, bool end) {
  for (bool progress = true; progress;) {
    switch (state_) {
      case State::Text: progress = text_state(out, end); break;
      case State::Head: progress = head_state(out, end); break;
      case State::Arguments: progress = arguments_state(out, end); break;
      case State::Tail: progress = tail_state(out, end); break;
      case State::Rest:
        content(out, std::move(held_));
        held_.clear();
        progress = false;
        break;
    }
  }
}

void ToolCallParser::content(std::vector<ToolCallEvent>& out, std::string text) {
  if (after_call_) {
    text.erase(0, skip_space(text, 0));
    if (text.empty()) return;
    after_call_ = false;
  }
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == ToolCallEvent::Kind::Content) out.back().text += text;
  else out.push_back({ToolCallEvent::Kind::Content, 0, std::move(text)});
}

bool ToolCallParser::text_state(std::vector<ToolCallEvent>& out, bool end) {
  if (format_ == ToolCallFormat::Llama3Json) {
    // A call only when the whole reply is one: its first non-space character opens the object.
    const size_t i = skip_space(held_, 0);
    if (i == held_.size()) {
      if (end) state_ = State::Rest;
      return end;
    }
    constexpr std::string_view kPythonTag = "<|python_tag|>";  // Llama 3.1 may open a call with it
    const std::string_view rest = std::string_view(held_).substr(i);
    if (rest.size() < kPythonTag.size() && kPythonTag.starts_with(rest) && !end) return false;
    if (rest.starts_with(kPythonTag)) {
      held_.erase(i, kPythonTag.size());
      return true;
    }
    if (held_[i] == '{') {
      pending_space_ = held_.substr(0, i);
      held_.erase(0, i);
      state_ = State::Head;
    } else {
      state_ = State::Rest;
    }
    return true;
  }
  // Hermes: content up to the next <tool_call>, white space next to it dropped.
  const size_t p = held_.find(syntax_.open_tag);
  if (p != std::string::npos) {
    // The white space before the tag goes with it: dropped if the block is a call.
    const std::string before = pending_space_ + held_.substr(0, p);
    const std::string_view body = rstrip_space(before);
    content(out, std::string(body));
    pending_space_ = before.substr(body.size());
    held_.erase(0, p + syntax_.open_tag.size());
    state_ = State::Head;
    return true;
  }
  if (end) {
    content(out, pending_space_ + held_);
    pending_space_.clear();
    held_.clear();
    return false;
  }
  const size_t keep = partial_tag(held_, syntax_.open_tag);
  const std::string_view told = std::string_view(held_).substr(0, held_.size() - keep);
  const std::string_view body = rstrip_space(told);
  if (!body.empty()) {
    content(out, pending_space_ + std::string(body));
    pending_space_.clear();
  }
  pending_space_ += told.substr(body.size());
  held_.erase(0, told.size());
  return false;
}

bool ToolCallParser::head_state(std::vector<ToolCallEvent>& out, bool end) {
  HeadReader r{held_, end};
  std::string name, key;
  HeadMatch m = r.literal("{");
  if (m == HeadMatch::Ok) m = r.literal("\"name\"");
  if (m == HeadMatch::Ok) m = r.literal(":");
  if (m == HeadMatch::Ok) m = r.string(name);
  if (m == HeadMatch::Ok) m = r.literal(",");
  if (m == HeadMatch::Ok) m = r.string(key);
  if (m == HeadMatch::Ok && key != "arguments" && key != "parameters") m = HeadMatch::Fail;
  if (m == HeadMatch::Ok) m = r.literal(":");
  if (m == HeadMatch::Ok && std::find(names_.begin(), names_.end(), name) == names_.end()) m = HeadMatch::Fail;
  if (m == HeadMatch::More) return false;
  if (m == HeadMatch::Fail) {
    // Not a call: the text is content, the opening tag with it.
    content(out, pending_space_ + std::string(syntax_.open_tag) + held_);
    pending_space_.clear();
    held_.clear();
    state_ = format_ == ToolCallFormat::Llama3Json ? State::Rest : State::Text;
    return true;
  }
  pending_space_.clear();
  out.push_back({ToolCallEvent::Kind::Call, calls_, std::move(name)});
  ++calls_;
  held_.erase(0, r.i);
  depth_ = 0;
  in_string_ = escaped_ = value_begun_ = scalar_ = false;
  state_ = State::Arguments;
  return true;
}

bool ToolCallParser::arguments_state(std::vector<ToolCallEvent>& out, bool end) {
  std::string delta;
  size_t i = 0;
  bool done = false;
  for (; i < held_.size() && !done; ++i) {
    const char c = held_[i];
    if (!value_begun_) {
      if (is_space(c)) continue;
      value_begun_ = true;
      if (c == '{' || c == '[') depth_ = 1;
      else if (c == '"') in_string_ = true;
      else scalar_ = true;
      delta += c;
      continue;
    }
    if (scalar_) {
      if (is_space(c) || c == ',' || c == '}' || c == ']') {
        done = true;
        --i;  // not the value's: the tail reads it
        continue;
      }
      delta += c;
      continue;
    }
    delta += c;
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') {
        in_string_ = false;
        done = depth_ == 0;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      done = --depth_ == 0;
    }
  }
  held_.erase(0, i);
  if (!delta.empty()) out.push_back({ToolCallEvent::Kind::Arguments, calls_ - 1, std::move(delta)});
  if (done) state_ = State::Tail;
  return done;
}

bool ToolCallParser::tail_state(std::vector<ToolCallEvent>& out, bool end) {
  // The rest of the call up to its end ("}" and, for Hermes, the closing tag) is not told.
  const std::string_view close = format_ == ToolCallFormat::Llama3Json ? std::string_view("}") : syntax_.close_tag;
  const size_t p = held_.find(close);
  if (p == std::string::npos) {
    if (end) held_.clear();
    return false;
  }
  held_.erase(0, p + close.size());
  after_call_ = true;
  state_ = format_ == ToolCallFormat::Llama3Json ? State::Rest : State::Text;
  return true;
}

ParsedReply parse_tool_calls(ToolCallFormat format, const std::vector<std::string>& names, std::string_view reply) {
  ToolCallParser parser(format, names);
  std::vector<ToolCallEvent> events = parser.push(reply);
  for (ToolCallEvent& e : parser.finish()) events.push_back(std::move(e));
  ParsedReply out;
  for (ToolCallEvent& e : events) {
    switch (e.kind) {
      case ToolCallEvent::Kind::Content: out.content += e.text; break;
      case ToolCallEvent::Kind::Call: out.calls.push_back({std::move(e.text), ""}); break;
      case ToolCallEvent::Kind::Arguments: out.calls[e.index].arguments += e.text; break;
    }
  }
  return out;
}

}  // namespace mk::server
