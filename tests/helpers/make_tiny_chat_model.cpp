// mk-tiny-chat-model DIR: writes the tiny chat model of tests/helpers/tiny_chat_model.h into DIR, for
// tests that drive installed programs (tests/install_example_test.cmake) and for trying mk-chat's
// interface without a real model (its weights are random: the replies are noise).
#include <cstdio>
#include <cstring>

#include "tests/helpers/tiny_chat_model.h"

namespace {

void usage(std::FILE* to, const char* program) {
  std::fprintf(to,
               "usage: %s DIR\n"
               "Writes a tiny random chat model (Qwen2-style, ChatML template, byte-level BPE tokenizer.json) into\n"
               "DIR, for tests and for trying mk-chat -m DIR on the CPU emulator. Its weights are random, so its\n"
               "replies are noise.\n",
               program);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    usage(stdout, argv[0]);
    return 0;
  }
  // A name starting with '-' is a mistyped option far more often than a directory.
  if (argc != 2 || argv[1][0] == '-' || argv[1][0] == '\0') {
    usage(stderr, argv[0]);
    return 2;
  }
  const auto m = mk::test::write_tiny_chat_model(argv[1]);
  std::printf("wrote %s (vocab %d, <|im_end|> = %d)\n", argv[1], m.vocab, m.im_end);
  return 0;
}
