// mk-tiny-chat-model DIR [--layers N] [--hidden N] [--intermediate N] [--heads N] [--kv-heads N]
//                        [--head-dim N] [--seed N] [--scripted-thinking]
// writes the tiny chat model of tests/helpers/tiny_chat_model.h into DIR, for tests that drive installed
// programs (tests/install_example_test.cmake, tests/server/), benchmarks that want its tokenizer at
// another shape (scripts/server_gpu_check.sh), and trying mk-chat's interface without a real model (its
// weights are random: the replies are noise).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/helpers/tiny_chat_model.h"

namespace {

void usage(std::FILE* to, const char* program) {
  std::fprintf(to,
               "usage: %s DIR [--layers N] [--hidden N] [--intermediate N] [--heads N] [--kv-heads N] [--head-dim N] "
               "[--seed N] [--scripted-thinking]\n"
               "Writes a tiny random chat model (Qwen2-style, ChatML template, byte-level BPE tokenizer.json) into\n"
               "DIR, for tests and for trying mk-chat -m DIR on the CPU emulator. Its weights are random, so its\n"
               "replies are noise. --scripted-thinking: a Qwen3-style model whose every reply is\n"
               "\"<think>Plan</think>OK\" (for the tests of reasoning output).\n",
               program);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    usage(stdout, argv[0]);
    return 0;
  }
  // A name starting with '-' is a mistyped option far more often than a directory.
  if (argc < 2 || argv[1][0] == '-' || argv[1][0] == '\0') {
    usage(stderr, argv[0]);
    return 2;
  }
  mk::test::TinyChatModelOptions o;
  for (int i = 2; i < argc; i += 2) {
    if (std::strcmp(argv[i], "--scripted-thinking") == 0) {
      o.scripted_thinking = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      usage(stderr, argv[0]);
      return 2;
    }
    char* end = nullptr;
    const long value = std::strtol(argv[i + 1], &end, 10);
    if (*end != '\0' || value <= 0 || value > (1L << 20)) {
      std::fprintf(stderr, "%s: %s needs a positive integer (got '%s')\n", argv[0], argv[i], argv[i + 1]);
      return 2;
    }
    const std::string flag = argv[i];
    if (flag == "--layers") o.layers = int(value);
    else if (flag == "--hidden") o.hidden = int(value);
    else if (flag == "--intermediate") o.intermediate = int(value);
    else if (flag == "--heads") o.heads = int(value);
    else if (flag == "--kv-heads") o.kv_heads = int(value);
    else if (flag == "--head-dim") o.head_dim = int(value);
    else if (flag == "--seed") o.seed = uint64_t(value);
    else {
      usage(stderr, argv[0]);
      return 2;
    }
  }
  const auto m = mk::test::write_tiny_chat_model(argv[1], o);
  std::printf("wrote %s (vocab %d, <|im_end|> = %d)\n", argv[1], m.vocab, m.im_end);
  return 0;
}
