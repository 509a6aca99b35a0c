// mk-tiny-chat-model DIR: writes the tiny chat model of tests/helpers/tiny_chat_model.h into DIR, for
// tests that drive installed programs (tests/install_example_test.cmake).
#include <cstdio>

#include "tests/helpers/tiny_chat_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const auto m = mk::test::write_tiny_chat_model(argv[1]);
  std::printf("wrote %s (vocab %d, <|im_end|> = %d)\n", argv[1], m.vocab, m.im_end);
  return 0;
}
