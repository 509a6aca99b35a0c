// Reads each accepted connection's request whole - its headers and its Content-Length body, as
// request_framing.h finds where they end - on one thread, before a worker thread sees it. A client that sends its request slowly then holds a file
// descriptor and a buffer, never a worker: the workers serve only requests that have fully arrived, so
// slow or idle clients cannot starve /health or a completion. A request must arrive whole within a deadline
// counted from the connection's opening; the gate answers those that do not itself (408), and the ones
// whose headers never end (431), and, past its capacity, the connection that has waited longest or a read
// past its byte budget (503).
//
// Linux (epoll). Sockets are stream sockets of any family; the tests use socketpairs.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace mk::server {

struct GateLimits {
  // From the connection's opening until the request (headers and body) has arrived.
  std::chrono::milliseconds whole_request{5000};
  // A connection that has sent nothing by then is closed without an answer.
  std::chrono::milliseconds first_byte{2000};
  size_t max_header_bytes = 64 << 10;  // the request line and headers, up to and with the empty line
  // A body declared larger is not read here: the request goes on at its headers, and the server refuses it.
  size_t max_body_bytes = 4 << 20;
  // Connections whose request is still arriving. One more makes the one that has waited longest leave
  // (503), so that slow clients cannot keep a prompt one out.
  size_t max_pending = 1024;
  // The bytes of all connections whose request is still arriving, together; a read past it is refused (503).
  size_t max_buffered_bytes = size_t(256) << 20;
};

class RequestGate {
 public:
  // ready(socket, bytes): the request has arrived; `bytes` holds it from its first byte (and whatever the
  // client sent after it). The socket is blocking again and belongs to the callee.
  using Ready = std::function<void(int socket, std::string bytes)>;
  // refusal(status): the whole HTTP response the gate sends before closing a connection it refuses
  // (408, 431 or 503); called on the gate's thread.
  using Refusal = std::function<std::string(int status)>;

  RequestGate(const GateLimits& limits, Ready ready, Refusal refusal);
  ~RequestGate();  // stop()
  RequestGate(const RequestGate&) = delete;
  RequestGate& operator=(const RequestGate&) = delete;

  // From any thread: the gate takes the connection (and closes it on every path but ready()).
  void admit(int socket);
  // Closes every connection still arriving and ends the gate's thread; admit() then closes at once.
  void stop();
  size_t pending() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mk::server
