#include "host/server/reasoning_split.h"

#include <algorithm>

namespace mk::server {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

// The length of the longest end of `s` that is a proper beginning of `tag`.
size_t partial_tag_at_end(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

// Drops the leading newlines of `held`; false when nothing else is held yet.
bool drop_leading_newlines(std::string& held) {
  const size_t begin = held.find_first_not_of('\n');
  if (begin == std::string::npos) {
    held.clear();
    return false;
  }
  held.erase(0, begin);
  return true;
}

}  // namespace

SplitText ReasoningSplitter::push(std::string_view text) {
  SplitText out;
  held_.append(text);
  for (;;) {
    switch (state_) {
      case State::Start: {
        const size_t begin = held_.find_first_not_of('\n');
        if (begin == std::string::npos) return out;  // only newlines so far
        const std::string_view rest = std::string_view(held_).substr(begin);
        if (rest.starts_with(kOpen)) {
          held_.erase(0, begin + kOpen.size());
          state_ = State::ReasoningStart;
          continue;
        }
        if (kOpen.starts_with(rest)) return out;  // may still become "<think>"
        state_ = State::Content;
        continue;
      }
      case State::ReasoningStart:
        if (!drop_leading_newlines(held_)) return out;
        state_ = State::Reasoning;
        continue;
      case State::Reasoning: {
        const size_t close = held_.find(kClose);
        if (close != std::string::npos) {
          const size_t end = held_.find_last_not_of('\n', close == 0 ? std::string::npos : close - 1);
          out.reasoning.append(held_, 0, close == 0 || end == std::string::npos ? 0 : end + 1);
          held_.erase(0, close + kClose.size());
          state_ = State::ContentStart;
          continue;
        }
        // Hold back a possible beginning of "</think>" and the newlines before it.
        size_t keep = partial_tag_at_end(held_, kClose);
        while (keep < held_.size() && held_[held_.size() - keep - 1] == '\n') ++keep;
        out.reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::ContentStart:
        if (!drop_leading_newlines(held_)) return out;
        state_ = State::Content;
        continue;
      case State::Content:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

SplitText ReasoningSplitter::finish() {
  SplitText out;
  switch (state_) {
    case State::Start: out.content = std::move(held_); break;      // a beginning of "<think>" that stopped there
    case State::Reasoning: out.reasoning = std::move(held_); break;  // "</think>" never came
    default: break;
  }
  if (state_ == State::Reasoning) {
    // A cut-off "</think>" or trailing newlines: the template's rstrip('\n') drops the newlines only.
    const size_t end = out.reasoning.find_last_not_of('\n');
    out.reasoning.resize(end == std::string::npos ? 0 : end + 1);
  }
  held_.clear();
  return out;
}

SplitText split_reasoning(std::string_view reply) {
  ReasoningSplitter splitter;
  SplitText parts = splitter.push(reply);
  const SplitText rest = splitter.finish();
  parts.reasoning += rest.reasoning;
  parts.content += rest.content;
  return parts;
}

}  // namespace mk::server
