#include "host/server/request_gate.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

namespace mk::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kHeaderEnd = "\r\n\r\n";
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr auto kLinger = std::chrono::seconds(1);

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
        facts.expect_line_begin = line_begin;
        facts.expect_line_end = line_end + 1;
      }
    }
    line_begin = line_end < head.size() ? line_end : std::string_view::npos;
  }
  if (chunked) facts.body_bytes = 0;
  return facts;
}

void set_blocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

// Best effort on a socket whose send buffer is empty: a short answer fits at once.
void send_all_now(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;
    bytes.remove_prefix(size_t(n));
  }
}

}  // namespace

struct RequestGate::Impl {
  struct Connection {
    Clock::time_point opened;
    std::string bytes;
    std::optional<size_t> request_bytes;  // once the headers have ended: headers + body
    size_t scanned = 0;                   // bytes searched for the headers' end so far
    // Refused: answered and shut for writing. What the client still sends is read and dropped until it
    // closes or this time comes, so that the close does not reset the connection and lose the answer.
    std::optional<Clock::time_point> closing_until;
  };

  GateLimits limits;
  Ready ready;
  Refusal refusal;
  int epoll = -1, wake = -1;
  std::thread thread;
  std::mutex mutex;              // guards admitted and stopped
  std::vector<int> admitted;     // handed over by admit(), not yet watched
  bool stopped = false;
  std::atomic<size_t> watched{0};
  std::unordered_map<int, Connection> connections;  // the gate's thread only

  Impl(const GateLimits& l, Ready r, Refusal f) : limits(l), ready(std::move(r)), refusal(std::move(f)) {
    epoll = epoll_create1(EPOLL_CLOEXEC);
    wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll < 0 || wake < 0) throw std::system_error(errno, std::generic_category(), "the request gate's epoll");
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = wake;
    epoll_ctl(epoll, EPOLL_CTL_ADD, wake, &e);
    thread = std::thread([this] { loop(); });
  }

  ~Impl() {
    stop();
    ::close(wake);
    ::close(epoll);
  }

  void notify() const {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake, &one, sizeof one);
  }

  void admit(int fd) {
    {
      std::lock_guard lock(mutex);
      if (!stopped) {
        admitted.push_back(fd);
        notify();
        return;
      }
    }
    ::close(fd);
  }

  void stop() {
    {
      std::lock_guard lock(mutex);
      if (stopped) return;
      stopped = true;
    }
    notify();
    thread.join();
  }

  void drop(int fd) {
    epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
    connections.erase(fd);
    watched = connections.size();
    ::close(fd);
  }

  void refuse(int fd, int status) {
    send_all_now(fd, refusal(status));
    ::shutdown(fd, SHUT_WR);
    Connection& c = connections.at(fd);
    c.closing_until = Clock::now() + kLinger;
    std::string().swap(c.bytes);
  }

  void hand_over(int fd) {
    epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
    std::string bytes = std::move(connections.at(fd).bytes);
    connections.erase(fd);
    watched = connections.size();
    set_blocking(fd, true);
    ready(fd, std::move(bytes));
  }

  void watch(int fd) {
    if (connections.size() >= limits.max_pending) {
      send_all_now(fd, refusal(503));
      ::close(fd);
      return;
    }
    set_blocking(fd, false);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = fd;
    if (epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &e) != 0) {
      ::close(fd);
      return;
    }
    Connection c;
    c.opened = Clock::now();
    connections.emplace(fd, std::move(c));
    watched = connections.size();
  }

  // Reads what has arrived; hands the request over once whole, or refuses it.
  void on_readable(int fd) {
    Connection& c = connections.at(fd);
    char chunk[16384];
    for (;;) {
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n > 0 && c.closing_until) continue;
      if (n > 0) {
        c.bytes.append(chunk, size_t(n));
        if (decide(fd, c)) return;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      drop(fd);  // the client closed (before its request was whole, or after a refusal), or the connection failed
      return;
    }
  }

  // true: the connection has left the gate (handed over or closed).
  bool decide(int fd, Connection& c) {
    if (!c.request_bytes) {
      const size_t from = c.scanned >= kHeaderEnd.size() ? c.scanned - (kHeaderEnd.size() - 1) : 0;
      const size_t end = c.bytes.find(kHeaderEnd, from);
      if (end == std::string::npos) {
        c.scanned = c.bytes.size();
        if (c.bytes.size() > limits.max_header_bytes) {
          refuse(fd, 431);
          return true;
        }
        return false;
      }
      const size_t head_bytes = end + kHeaderEnd.size();
      if (head_bytes > limits.max_header_bytes) {
        refuse(fd, 431);
        return true;
      }
      const HeaderFacts facts = header_facts(std::string_view(c.bytes).substr(0, head_bytes));
      // Too large: the server answers from the headers alone (413, before "100 Continue" for a client that
      // waits for it).
      if (facts.body_bytes > limits.max_body_bytes) {
        hand_over(fd);
        return true;
      }
      size_t head = head_bytes;
      if (facts.expects_continue && c.bytes.size() < head_bytes + facts.body_bytes) {
        // The body comes only after "100 Continue". The gate says it, and takes the header out so that the
        // server does not say it a second time.
        send_all_now(fd, kContinue);
        c.bytes.erase(facts.expect_line_begin, facts.expect_line_end - facts.expect_line_begin);
        head -= facts.expect_line_end - facts.expect_line_begin;
      }
      c.request_bytes = head + facts.body_bytes;
    }
    if (c.bytes.size() < *c.request_bytes) return false;
    hand_over(fd);
    return true;
  }

  // Closes the connections past their deadline; returns the time until the next one, in ms (-1: none).
  int expire() {
    const auto now = Clock::now();
    std::vector<std::pair<int, int>> late;  // socket, status (0: close without an answer)
    auto next = Clock::time_point::max();
    for (const auto& [fd, c] : connections) {
      if (c.closing_until) {
        if (now >= *c.closing_until) late.emplace_back(fd, 0);
        else next = std::min(next, *c.closing_until);
        continue;
      }
      const auto first = c.opened + limits.first_byte, whole = c.opened + limits.whole_request;
      if (c.bytes.empty() && now >= first) late.emplace_back(fd, 0);
      else if (now >= whole) late.emplace_back(fd, 408);
      else next = std::min(next, c.bytes.empty() ? std::min(first, whole) : whole);
    }
    for (const auto& [fd, status] : late) {
      if (status) refuse(fd, status);
      else drop(fd);
    }
    if (next == Clock::time_point::max()) return -1;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
    return int(std::clamp<int64_t>(ms, 1, 60000));
  }

  void loop() {
    std::vector<epoll_event> events(64);
    for (;;) {
      const int timeout = expire();
      const int n = epoll_wait(epoll, events.data(), int(events.size()), timeout);
      for (int i = 0; i < n; ++i) {
        const int fd = events[size_t(i)].data.fd;
        if (fd == wake) {
          uint64_t count;
          [[maybe_unused]] const ssize_t r = ::read(wake, &count, sizeof count);
          std::vector<int> fresh;
          bool stopping;
          {
            std::lock_guard lock(mutex);
            fresh.swap(admitted);
            stopping = stopped;
          }
          for (int s : fresh) watch(s);
          if (stopping) {
            for (const auto& entry : connections) ::close(entry.first);
            connections.clear();
            watched = 0;
            return;
          }
        } else if (connections.count(fd)) {
          on_readable(fd);
        }
      }
    }
  }
};

RequestGate::RequestGate(const GateLimits& limits, Ready ready, Refusal refusal)
    : impl_(std::make_unique<Impl>(limits, std::move(ready), std::move(refusal))) {}

RequestGate::~RequestGate() = default;

void RequestGate::admit(int socket) { impl_->admit(socket); }

void RequestGate::stop() { impl_->stop(); }

size_t RequestGate::pending() const { return impl_->watched; }

}  // namespace mk::server
