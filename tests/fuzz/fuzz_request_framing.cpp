// libFuzzer target for mk-server's request framing (host/server/request_framing.h), which reads bytes
// from any client before anything else does (built by scripts/run_fuzz.sh request_framing).
// Input: one byte that seeds the piece sizes, then the bytes a client sends.
//
// Invariants (a violation aborts, so libFuzzer keeps the input as a crash):
//   - fed in pieces or whole, the framing ends in the same state; its bytes are the same unless the piece
//     run answered "100 Continue" (only then is the Expect header taken out);
//   - once past NeedMore the state never changes, and "100 Continue" is asked for at most once;
//   - Whole: the headers end within the limit, and the bytes hold at least the headers and the declared
//     body; HeadersTooLarge: no end of the headers within the limit.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "host/server/request_framing.h"

namespace {

using mk::server::RequestFraming;
constexpr size_t kMaxHeader = 512, kMaxBody = 1024;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "invariant violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint32_t seed = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);

  RequestFraming whole(kMaxHeader, kMaxBody);
  whole.add(input);
  (void)whole.take_continue();

  RequestFraming pieces(kMaxHeader, kMaxBody);
  uint32_t state = seed * 2654435761u + 1;
  int continues = 0;
  RequestFraming::State last = RequestFraming::State::NeedMore;
  for (size_t at = 0; at < input.size();) {
    state = state * 1103515245u + 12345u;
    const size_t len = 1 + (state >> 16) % 64;
    const RequestFraming::State now = pieces.add(input.substr(at, len));
    check(last == RequestFraming::State::NeedMore || now == last, "a decided state changed");
    last = now;
    continues += pieces.take_continue() ? 1 : 0;
    at += len;
  }
  check(continues <= 1, "100 Continue asked for twice");
  check(pieces.state() == whole.state(), "pieces and whole input end in different states");
  check(continues == 1 || pieces.bytes() == whole.bytes(), "pieces and whole input keep different bytes");

  const std::string& bytes = pieces.bytes();
  const size_t end = bytes.find("\r\n\r\n");
  if (pieces.state() == RequestFraming::State::Whole) {
    check(end != std::string::npos && end + 4 <= kMaxHeader, "whole without an end of the headers within the limit");
  }
  if (pieces.state() == RequestFraming::State::HeadersTooLarge) {
    check(whole.bytes().find("\r\n\r\n") == std::string::npos || whole.bytes().find("\r\n\r\n") + 4 > kMaxHeader,
          "headers refused although they end within the limit");
  }
  return 0;
}
