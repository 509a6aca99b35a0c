#include "host/server/request_framing.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>

namespace mk::server {
namespace {

constexpr std::string_view kHeaderEnd = "\r\n\r\n";

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(uint8_t(x)) == std::tolower(uint8_t(y)); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// What the gate needs from a request's headers: how many body bytes follow, and whether the client waits
// for "100 Continue" before sending them (and where that header's line is, to take it out once answered).
struct HeaderFacts {
  size_t body_bytes = 0;
  bool expects_continue = false;
  size_t expect_line_begin = 0, expect_line_end = 0;
};

// `head` is the request line and the headers with their final CRLF. Only the first Content-Length counts,
// as for the server's parser; a body sent in chunks is not read here (the server refuses it, 411), and a
// value that is not a number leaves the body to the server too.
HeaderFacts header_facts(std::string_view head) {
  HeaderFacts facts;
  bool length_seen = false, chunked = false;
  size_t line_begin = head.find('\n');  // past the request line
  while (line_begin != std::string_view::npos && line_begin + 1 < head.size()) {
    ++line_begin;
    const size_t line_end = std::min(head.find('\n', line_begin), head.size());
    const std::string_view line = head.substr(line_begin, line_end - line_begin);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      const std::string_view name = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
      if (equal_ignoring_case(name, "Content-Length") && !length_seen) {
        length_seen = true;
        uint64_t n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec == std::errc() && end == value.data() + value.size()) facts.body_bytes = n;
      } else if (equal_ignoring_case(name, "Transfer-Encoding")) {
        chunked = true;
      } else if (equal_ignoring_case(name, "Expect") && equal_ignoring_case(value, "100-continue")) {
        facts.expects_continue = true;
        // Taken out only where it is a whole CRLF line after another: then the headers' "\r\n\r\n" stays
        // where it was (a bare LF before it and the terminator could straddle the line).
        if (line_begin >= 2 && head[line_begin - 2] == '\r' && line_end < head.size() && line_end >= 1 && head[line_end - 1] == '\r') {
          facts.expect_line_begin = line_begin;
          facts.expect_line_end = line_end + 1;
        }
      }
    }
    line_begin = line_end < head.size() ? line_end : std::string_view::npos;
  }
  if (chunked) facts.body_bytes = 0;
  return facts;
}

}  // namespace

RequestFraming::State RequestFraming::add(std::string_view more) {
  bytes_.append(more);
  if (state_ == State::NeedMore) state_ = decide();
  return state_;
}

bool RequestFraming::take_continue() {
  const bool pending = continue_pending_;
  continue_pending_ = false;
  return pending;
}

RequestFraming::State RequestFraming::decide() {
  if (!headers_ended_) {
    const size_t from = scanned_ >= kHeaderEnd.size() ? scanned_ - (kHeaderEnd.size() - 1) : 0;
    const size_t end = bytes_.find(kHeaderEnd, from);
    if (end == std::string::npos) {
      scanned_ = bytes_.size();
      return bytes_.size() > max_header_ ? State::HeadersTooLarge : State::NeedMore;
    }
    const size_t head_bytes = end + kHeaderEnd.size();
    if (head_bytes > max_header_) return State::HeadersTooLarge;
    headers_ended_ = true;
    const HeaderFacts facts = header_facts(std::string_view(bytes_).substr(0, head_bytes));
    if (facts.body_bytes > max_body_) return State::BodyTooLarge;
    size_t head = head_bytes;
    if (facts.expects_continue && bytes_.size() < head_bytes + facts.body_bytes) {
      continue_pending_ = true;
      // Else the header stays, and the server says "100 Continue" a second time (clients take several 1xx).
      bytes_.erase(facts.expect_line_begin, facts.expect_line_end - facts.expect_line_begin);
      head -= facts.expect_line_end - facts.expect_line_begin;
    }
    request_bytes_ = head + size_t(facts.body_bytes);
  }
  return bytes_.size() >= request_bytes_ ? State::Whole : State::NeedMore;
}

}  // namespace mk::server
