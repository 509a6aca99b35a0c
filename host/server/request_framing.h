// Where one HTTP/1.1 request ends, from its bytes as they arrive: the end of its headers, then the
// Content-Length body after them. The request gate (request_gate.h) reads each connection through one,
// and hands the request to a worker once it is whole. Only what framing needs is read from the headers
// (the first Content-Length, Transfer-Encoding, Expect: 100-continue); the server parses the rest.
// Plain C++: no I/O, so it is tested and fuzzed on its own.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mk::server {

class RequestFraming {
 public:
  enum class State {
    NeedMore,         // the request has not arrived whole
    Whole,            // bytes() holds the whole request (and what the client sent after it)
    BodyTooLarge,     // the headers declare a body over max_body_bytes: the server refuses it from them (413)
    HeadersTooLarge,  // no end of the headers within max_header_bytes (431)
  };

  RequestFraming(size_t max_header_bytes, size_t max_body_bytes) : max_header_(max_header_bytes), max_body_(max_body_bytes) {}

  // Adds bytes; returns the state after them. Past NeedMore, the state no longer changes.
  State add(std::string_view more);
  State state() const { return state_; }
  // True once, right after the headers have ended, when the client waits for "100 Continue" before it
  // sends its body: the caller sends it. The Expect header is then taken out of bytes(), so that the
  // server does not send it a second time.
  bool take_continue();

  const std::string& bytes() const { return bytes_; }
  std::string take_bytes() { return std::move(bytes_); }

 private:
  State decide();

  size_t max_header_, max_body_;
  std::string bytes_;
  size_t scanned_ = 0;         // bytes searched for the headers' end so far
  size_t request_bytes_ = 0;   // once the headers have ended: headers + body
  bool headers_ended_ = false;
  bool continue_pending_ = false;
  State state_ = State::NeedMore;
};

}  // namespace mk::server
