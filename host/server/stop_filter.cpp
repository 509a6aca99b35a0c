#include "host/server/stop_filter.h"

#include <algorithm>
#include <utility>

namespace mk::server {

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopFilter::push(std::string_view text) {
  if (stopped_) return {};
  held_ += text;
  // The earliest stop string wins: its start ends the reply.
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string. Stop strings are whole UTF-8
  // and the text arrives in whole characters, so the cut falls between characters.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(held_.size(), s.size() - 1); n > hold; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopFilter::finish() {
  if (stopped_) return {};
  return std::exchange(held_, {});
}

}  // namespace mk::server
