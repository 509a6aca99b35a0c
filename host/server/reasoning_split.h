// Qwen3-style reasoning apart from the answer, over streamed text. A reply that begins with "<think>" has
// its text up to "</think>" returned as reasoning and the rest as content, with the newlines around them
// dropped as the Qwen3 chat template drops them when it renders an earlier reply:
//   reasoning = text.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
//   content   = text.split('</think>')[-1].lstrip('\n')
// A reply that does not begin with "<think>" (leading newlines aside) is all content; one whose
// "</think>" never comes is all reasoning. Text that could still be part of a tag, or newlines that could
// still be dropped, are held back until the next piece decides.
#pragma once

#include <string>
#include <string_view>

namespace mk::server {

struct SplitText {
  std::string reasoning, content;
};

// The split of a whole reply at once.
SplitText split_reasoning(std::string_view reply);

class ReasoningSplitter {
 public:
  // Adds generated text; returns what may be shown now.
  SplitText push(std::string_view text);
  // The reply ended: what was held back.
  SplitText finish();

 private:
  enum class State { Start, ReasoningStart, Reasoning, ContentStart, Content };
  State state_ = State::Start;
  std::string held_;
};

}  // namespace mk::server
