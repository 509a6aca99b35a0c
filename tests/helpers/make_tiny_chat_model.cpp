// mk-tiny-chat-model DIR [--layers N] [--hidden N] [--intermediate N] [--heads N] [--kv-heads N]
//                        [--head-dim N] [--seed N]
// writes the tiny chat model of tests/helpers/tiny_chat_model.h into DIR, for tests that drive installed
// programs (tests/install_example_test.cmake, tests/server/) and benchmarks that want its tokenizer at
// another shape (scripts/server_gpu_check.sh).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/helpers/tiny_chat_model.h"

int main(int argc, char** argv) {
  const auto usage = [&] {
    std::fprintf(stderr, "usage: %s DIR [--layers N] [--hidden N] [--intermediate N] [--heads N] [--kv-heads N] "
                         "[--head-dim N] [--seed N]\n", argv[0]);
    return 2;
  };
  if (argc < 2 || argv[1][0] == '-') return usage();
  mk::test::TinyChatModelOptions o;
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) return usage();
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
    else return usage();
  }
  const auto m = mk::test::write_tiny_chat_model(argv[1], o);
  std::printf("wrote %s (vocab %d, <|im_end|> = %d)\n", argv[1], m.vocab, m.im_end);
  return 0;
}
