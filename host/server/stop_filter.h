// Stop strings over streamed text. Generated text arrives piece by piece; a stop string may span pieces.
// Text that could still turn out to be the start of a stop string is held back, so a client never sees
// part of one, and the text before a completed stop string is the last that is released.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mk::server {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops);  // non-empty strings

  // Adds generated text; returns what may be shown now. Once a stop string is complete, stopped() is
  // true, the text before it has been returned and everything after is dropped.
  std::string push(std::string_view text);
  // The reply ended without a stop string: the held-back text is shown after all.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace mk::server
