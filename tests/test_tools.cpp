// What the command-line tools say when a value is wrong or does not fit: the real binaries (mk-run,
// mk-chat, mk-tiny-chat-model) run as a user runs them, on the CPU emulator, their messages checked.
//   MkRun.*, MkChat.*, MkTinyChatModel.*
// None of them allocates much: the memory checks refuse the huge contexts before allocating.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/helpers/run_command.h"
#include "tests/helpers/tiny_chat_model.h"

#if !defined(MK_RUN_BINARY) || !defined(MK_CHAT_BINARY) || !defined(MK_TINY_CHAT_MODEL_BINARY)
#error "MK_RUN_BINARY, MK_CHAT_BINARY and MK_TINY_CHAT_MODEL_BINARY (the tools' paths) must be defined"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using mk::test::Captured;

Captured mk_run(std::vector<std::string> args) {
  args.insert(args.begin(), {MK_RUN_BINARY, "--emulator", "--workgroups", "4"});
  return mk::test::run_command(args);
}

const std::filesystem::path& chat_model() {
  static const mk::test::ScopedTinyChatModel model("tools-chat");
  return model.dir;
}

Captured mk_chat(std::vector<std::string> args) {
  args.insert(args.begin(), {MK_CHAT_BINARY, "--emulator", "-m", chat_model().string()});
  return mk::test::run_command(args);
}

// The messages every tool gives for the same sampling mistakes (runtime/sampling.h's rule).
const std::vector<std::pair<std::vector<std::string>, std::string>> kBadSampling = {
    {{"--temp", "-1"}, "--temp -1: the temperature must be a finite number >= 0 (0: greedy)"},
    {{"--temp", "nan"}, "--temp nan: the temperature must be a finite number >= 0 (0: greedy)"},
    {{"--top-k", "-3"}, "--top-k -3: top-k must be >= 0 (0: off)"},
    {{"--min-p", "5"}, "--min-p 5: min-p must be between 0 and 1 (0: off)"},
    {{"--temp", "0", "--top-p", "2"}, "--top-p 2: top-p must be greater than 0 and at most 1 (1: off)"},
};

TEST(MkRun, AHugeContextIsRefusedNamingTheLimit) {
  const Captured r = mk_run({"-c", "2000000000", "-n", "1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("mk-run: error: emulator: context must be between 1 and 16777216 tokens (got 2000000000)"));
  EXPECT_THAT(r.err, Not(HasSubstr("bad_alloc")));
}

TEST(MkRun, InvalidSamplingValuesAreRejected) {
  for (const auto& [flags, message] : kBadSampling) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"-n", "1"});
    const Captured r = mk_run(args);
    EXPECT_EQ(r.status, 1) << message;
    EXPECT_EQ(r.err, "mk-run: error: " + message + "\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST(MkRun, RangeErrorsNameTheAcceptedRange) {
  Captured r = mk_run({"-c", "-5"});
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("--ctx-size: -5 is out of range: expected a whole number from 1 to 2147483647"));
  EXPECT_THAT(r.err, Not(HasSubstr("179769313")));  // CLI11's Range prints DBL_MAX in full
  r = mk_run({"-n", "99999999999"});
  EXPECT_THAT(r.err, HasSubstr("--n-predict: 99999999999 is out of range: expected a whole number from 0 to 2147483647"));
  r = mk_run({"-c", "many"});
  EXPECT_THAT(r.err, HasSubstr("--ctx-size: many is not a whole number (expected one from 1 to 2147483647)"));
}

TEST(MkRun, ATokenIdOutOfRangeIsCalledThat) {
  Captured r = mk_run({"-t", "99999999999", "-n", "1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("--tokens: token id 99999999999 is out of range: this model's ids are 0 to 1023"));
  EXPECT_THAT(r.err, Not(HasSubstr("comma-separated")));
  r = mk_run({"-t", "1024", "-n", "1"});
  EXPECT_THAT(r.err, HasSubstr("--tokens: token id 1024 is out of range: this model's ids are 0 to 1023"));
  r = mk_run({"-t", "1,x", "-n", "1"});
  EXPECT_THAT(r.err, HasSubstr("--tokens 1,x: 'x' is not a token id"));
}

TEST(MkRun, AFailedGenerationPrintsNoTokensLine) {
  const Captured r = mk_run({"-t", "1,2,3,4", "-c", "2", "-n", "1"});  // the prompt does not fit the context
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("does not fit the context"));
  EXPECT_EQ(r.out, "") << "stdout of a failed run";
  const Captured ok = mk_run({"-n", "3"});
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_THAT(ok.out, ::testing::StartsWith("tokens: "));
}

// --quantize int4 with the head kept in 16 bits runs (the built-in model: hidden 256, intermediate 512),
// with progress on stderr; unknown values name the option.
TEST(MkRun, QuantizeOptions) {
  const Captured ok = mk_run({"--quantize", "int4", "--quantize-head", "no", "-n", "3"});
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_THAT(ok.out, ::testing::StartsWith("tokens: "));
  EXPECT_THAT(ok.err, HasSubstr("quantizing the weight matrices to int4: "));
  Captured r = mk_run({"--quantize", "int3", "-n", "1"});
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("--quantize"));
  EXPECT_THAT(r.err, HasSubstr("int3"));
  r = mk_run({"--quantize", "int4", "--quantize-head", "maybe", "-n", "1"});
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("--quantize-head"));
}

TEST(MkChat, AHugeContextIsRefusedNamingTheLimit) {
  const Captured r = mk_chat({"-c", "2000000000", "-p", "hi"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("mk-chat: error: context must be between 1 and 16777216 tokens"));
  EXPECT_THAT(r.err, Not(HasSubstr("bad_alloc")));
}

TEST(MkChat, InvalidSamplingValuesAreRejectedBeforeLoading) {
  for (const auto& [flags, message] : kBadSampling) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"-p", "hi"});
    const Captured r = mk_chat(args);
    EXPECT_EQ(r.status, 1) << message;
    EXPECT_EQ(r.err, "mk-chat: error: " + message + "\n") << "the model was loaded before the values were checked";
  }
}

TEST(MkChat, RangeErrorsNameTheAcceptedRange) {
  Captured r = mk_chat({"-c", "0", "-p", "hi"});
  EXPECT_THAT(r.err, HasSubstr("--ctx-size: 0 is out of range: expected a whole number from 1 to 2147483647"));
  r = mk_chat({"-n", "-7", "-p", "hi"});
  EXPECT_THAT(r.err, HasSubstr("--n-predict: -7 is out of range: expected a whole number from -1 to 2147483647"));
  r = mk_chat({"-n", "0", "-p", "hi"});
  EXPECT_THAT(r.err, HasSubstr("-n 0: must be positive, or -1 for no limit"));
}

TEST(MkTinyChatModel, HelpPrintsUsageAndWritesNothing) {
  const mk::test::ScopedTempDir cwd("tiny-help");
  for (const char* flag : {"--help", "-h", "--bogus"}) {
    const Captured r = mk::test::run_command({MK_TINY_CHAT_MODEL_BINARY, flag}, "", cwd.path);
    EXPECT_EQ(r.status, std::string(flag) == "--bogus" ? 2 : 0) << flag;
    EXPECT_THAT(r.out + r.err, HasSubstr("usage: ")) << flag;
    EXPECT_TRUE(std::filesystem::is_empty(cwd.path)) << flag << " created " << std::filesystem::directory_iterator(cwd.path)->path();
  }
  const Captured r = mk::test::run_command({MK_TINY_CHAT_MODEL_BINARY, "model"}, "", cwd.path);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(cwd.path / "model" / "tokenizer.json"));
}

}  // namespace
