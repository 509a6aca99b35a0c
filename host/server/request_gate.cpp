#include "host/server/request_gate.h"

#include "host/server/request_framing.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
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

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr auto kLinger = std::chrono::seconds(1);

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
    RequestFraming request;
    size_t received = 0;  // bytes read from the client, counted in `buffered` until it leaves
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
  size_t buffered = 0;                              // the connections' bytes (received), all together

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

  // The connection leaves the gate (the socket stays open); returns the bytes it had sent.
  std::string release(int fd) {
    epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
    Connection& c = connections.at(fd);
    buffered -= c.received;
    std::string bytes = c.request.take_bytes();
    connections.erase(fd);
    watched = connections.size();
    return bytes;
  }

  void drop(int fd) {
    release(fd);
    ::close(fd);
  }

  void refuse(int fd, int status) {
    send_all_now(fd, refusal(status));
    ::shutdown(fd, SHUT_WR);
    Connection& c = connections.at(fd);
    c.closing_until = Clock::now() + kLinger;
    c.request = RequestFraming(0, 0);  // its bytes are not needed any more
    buffered -= c.received;
    c.received = 0;
  }

  void hand_over(int fd) {
    std::string bytes = release(fd);
    set_blocking(fd, true);
    ready(fd, std::move(bytes));
  }

  // Full: the connection that has waited longest leaves for the new one (a refused one first, else it
  // gets 503). The slowest clients go, so that a flood of them cannot keep a prompt request out.
  void evict_oldest() {
    int oldest = -1;
    std::pair<bool, Clock::time_point> oldest_key{false, Clock::time_point::max()};
    for (const auto& [fd, c] : connections) {
      const std::pair<bool, Clock::time_point> key{!c.closing_until, c.opened};  // lingering ones first
      if (oldest < 0 || key < oldest_key) oldest = fd, oldest_key = key;
    }
    if (oldest < 0) return;
    if (!connections.at(oldest).closing_until) send_all_now(oldest, refusal(503));
    drop(oldest);
  }

  void watch(int fd) {
    if (connections.size() >= limits.max_pending) evict_oldest();
    set_blocking(fd, false);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = fd;
    if (epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &e) != 0) {
      ::close(fd);
      return;
    }
    connections.emplace(fd, Connection{Clock::now(), RequestFraming(limits.max_header_bytes, limits.max_body_bytes), 0, std::nullopt});
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
        if (buffered + size_t(n) > limits.max_buffered_bytes) {
          refuse(fd, 503);
          return;
        }
        buffered += size_t(n), c.received += size_t(n);
        c.request.add(std::string_view(chunk, size_t(n)));
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
    if (c.request.take_continue()) send_all_now(fd, kContinue);
    switch (c.request.state()) {
      case RequestFraming::State::NeedMore: return false;
      case RequestFraming::State::HeadersTooLarge: refuse(fd, 431); return true;
      case RequestFraming::State::Whole:
      case RequestFraming::State::BodyTooLarge: hand_over(fd); return true;  // the server answers the latter (413)
    }
    return false;
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
      if (c.received == 0 && now >= first) late.emplace_back(fd, 0);
      else if (now >= whole) late.emplace_back(fd, 408);
      else next = std::min(next, c.received == 0 ? std::min(first, whole) : whole);
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
            buffered = 0;
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
