// What the command-line tools say and do as a user runs them: the real binaries (mk-run, mk-chat,
// mk-server, mk-tiny-chat-model) on the CPU emulator, their messages, exit statuses and outputs checked.
//   MkRun.*, MkChat.*, MkServer.*, Tools.*, MkTinyChatModel.*
// None of them allocates much: the memory checks refuse the huge contexts before allocating.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "host/tools/cli_checks.h"
#include "runtime/tokenizer.h"
#include "tests/helpers/run_command.h"
#include "tests/helpers/tiny_chat_model.h"

#if !defined(MK_RUN_BINARY) || !defined(MK_CHAT_BINARY) || !defined(MK_SERVER_BINARY) || !defined(MK_TINY_CHAT_MODEL_BINARY)
#error "MK_RUN_BINARY, MK_CHAT_BINARY, MK_SERVER_BINARY and MK_TINY_CHAT_MODEL_BINARY (the tools' paths) must be defined"
#endif
#ifndef MK_SHIPPED_MODEL_DIR
#error "MK_SHIPPED_MODEL_DIR (models/pystdlib-6m in the source tree) must be defined"
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

Captured mk_chat(std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), {MK_CHAT_BINARY, "--emulator", "-m", chat_model().string()});
  return mk::test::run_command(args, input);
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
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--ctx-size: 2000000000 is out of range: expected a whole number from 0 to 16777216"));
  EXPECT_THAT(r.err, Not(HasSubstr("bad_alloc")));
}

TEST(MkRun, InvalidSamplingValuesAreRejected) {
  for (const auto& [flags, message] : kBadSampling) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"-n", "1"});
    const Captured r = mk_run(args);
    EXPECT_EQ(r.status, 2) << message;
    EXPECT_EQ(r.err, "mk-run: error: " + message + "\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST(MkRun, RangeErrorsNameTheAcceptedRange) {
  Captured r = mk_run({"-c", "-5"});
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("--ctx-size: -5 is out of range: expected a whole number from 0 to 16777216"));
  EXPECT_THAT(r.err, Not(HasSubstr("179769313")));  // CLI11's Range prints DBL_MAX in full
  r = mk_run({"-n", "99999999999"});
  EXPECT_THAT(r.err, HasSubstr("--n-predict: 99999999999 is out of range: expected a whole number from 0 to 2147483647"));
  r = mk_run({"-c", "many"});
  EXPECT_THAT(r.err, HasSubstr("--ctx-size: many is not a whole number (expected one from 0 to 16777216)"));
}

TEST(MkRun, ATokenIdOutOfRangeIsCalledThat) {
  Captured r = mk_run({"-t", "99999999999", "-n", "1"});
  EXPECT_EQ(r.status, 2);
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

// --logprobs prints a line per token after the reply (the values against the reference: test_logit_requests);
// a +100 --logit-bias decides every greedy token, with a log-probability of 0 to six places; bad values
// are usage errors naming the flag.
TEST(MkRun, LogprobsAndLogitBias) {
  const Captured r = mk_run({"-n", "3", "--logprobs", "2", "--logit-bias", "5=100", "--presence-penalty", "0.5"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith("tokens: 5 5 5\nlogprob: 5 0.000000 5:0.000000 "));
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 5) << r.out;  // tokens, 3 logprob lines, the summary
  Captured bad = mk_run({"-n", "1", "--logit-bias", "5"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("--logit-bias 5: expected ID=BIAS, such as 13=-100"));
  bad = mk_run({"-n", "1", "--logit-bias", "1024=1"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("logit_bias: token 1024 is outside the vocabulary [0, 1024)"));
  bad = mk_run({"-n", "1", "--logit-bias", "3=-101"});
  EXPECT_THAT(bad.err, HasSubstr("logit_bias: the bias -101 of token 3 must be between -100 and 100"));
  bad = mk_run({"-n", "1", "--frequency-penalty", "3"});
  EXPECT_THAT(bad.err, HasSubstr("frequency_penalty 3 must be between -2 and 2"));
  bad = mk_run({"-n", "1", "--logprobs", "21"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("--logprobs: 21 is out of range"));
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

// --spec lookup: the same tokens as without it (greedy and sampled), the drafts counted in the summary;
// its flags' mistakes named.
TEST(MkRun, SpeculationGivesTheSameTokensAndCountsItsDrafts) {
  const std::vector<std::string> prompt = {"-t", "5,6,7,8,5,6,7,8,5,6,7,8,5,6", "-n", "24", "--ids"};
  for (const std::vector<std::string>& sampling : {std::vector<std::string>{}, std::vector<std::string>{"--temp", "0.9", "--seed", "7"}}) {
    std::vector<std::string> plain = prompt, spec = prompt;
    plain.insert(plain.end(), sampling.begin(), sampling.end());
    spec.insert(spec.end(), sampling.begin(), sampling.end());
    spec.insert(spec.end(), {"--spec", "lookup", "--draft-max", "5"});
    const Captured a = mk_run(plain), b = mk_run(spec);
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    const auto tokens_line = [](const std::string& out) { return out.substr(0, out.find('\n')); };
    EXPECT_THAT(tokens_line(a.out), ::testing::StartsWith("tokens: "));
    EXPECT_EQ(tokens_line(a.out), tokens_line(b.out));
    EXPECT_THAT(a.out, Not(HasSubstr("drafts kept")));
    EXPECT_THAT(b.out, ::testing::ContainsRegex(", [0-9]+ of [1-9][0-9]* drafts kept"));
  }
  Captured bad = mk_run({"-n", "1", "--spec", "lookup", "--lookup-min", "4", "--lookup-max", "2"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("--lookup-min 4 is above --lookup-max 2"));
  bad = mk_run({"-n", "1", "--spec", "lookup", "--draft-max", "16"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("--draft-max: 16 is out of range"));
  bad = mk_run({"-n", "1", "--spec", "draft"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("--spec"));
}

// --tensor-parallel 2: the built-in model's step over two virtual devices gives one device's greedy tokens
// (the prompt short enough that one device runs it through token steps too: tensor parallel has no chunk
// steps yet, whose tensor-core sums round otherwise), and sampled ones that its seed reproduces (not one
// device's: the random model's flat distributions order near-equal logits by their last bits, which the
// devices' sums round differently); a split the model does not allow, or too many devices, named.
TEST(MkRun, TensorParallelGivesOneDevicesGreedyTokensOnTwoDevices) {
  const std::vector<std::string> prompt = {"--emulator", "-t", "5,6,7,8", "-n", "16", "--ids"};
  const auto tokens_line = [](const std::string& out) { return out.substr(0, out.find('\n')); };
  std::vector<std::string> two = prompt;
  two.insert(two.end(), {"-tp", "2"});
  const Captured a = mk_run(prompt), b = mk_run(two);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_THAT(tokens_line(a.out), ::testing::StartsWith("tokens: "));
  EXPECT_EQ(tokens_line(a.out), tokens_line(b.out));
  EXPECT_THAT(b.err, HasSubstr("on 2 virtual devices"));
  two.insert(two.end(), {"--temp", "0.9", "--seed", "7"});
  const Captured c = mk_run(two), d = mk_run(two);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(tokens_line(c.out), tokens_line(d.out));
  EXPECT_NE(tokens_line(c.out), tokens_line(b.out));
  Captured bad = mk_run({"--emulator", "-n", "1", "--tensor-parallel", "3"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("num_key_value_heads (2) is not a multiple of 3"));
  bad = mk_run({"--emulator", "-n", "1", "-tp", "9"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("--tensor-parallel: 9 is out of range"));
}

TEST(MkChat, SpeculationGivesTheSameReplyAndStatsCountItsDrafts) {
  const std::string input = "say it again and again\n/stats\n/quit\n";
  const Captured a = mk_chat({"--seed", "3", "--temp", "0.8", "-n", "24"}, input);
  const Captured b = mk_chat({"--seed", "3", "--temp", "0.8", "-n", "24", "--spec", "lookup"}, input);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  const auto reply = [](const std::string& out) { return out.substr(0, out.find("context:")); };
  EXPECT_EQ(reply(a.out), reply(b.out));
  EXPECT_THAT(a.out, Not(HasSubstr("speculation")));
  EXPECT_THAT(b.out, ::testing::ContainsRegex("last turn's speculation: [1-9][0-9]* tokens drafted, [0-9]+ kept"));
}

// The shipped model's greedy reply over two virtual devices is the reply on one (whose chunk steps run the
// prompt with other rounding; the trained model's margins absorb it); a split it does not allow is
// refused when the model opens.
TEST(MkChat, TensorParallelGivesTheSameReply) {
  const std::string input = "say it again and again\n/quit\n";
  const Captured a = mk_chat({"--temp", "0", "-n", "24"}, input);
  const Captured b = mk_chat({"--temp", "0", "-n", "24", "-tp", "2"}, input);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  const auto reply = [](const std::string& out) { return out.substr(0, out.find("context:")); };
  EXPECT_EQ(reply(a.out), reply(b.out));
  EXPECT_THAT(b.out + b.err, HasSubstr("on 2 virtual devices"));
  const Captured bad = mk_chat({"-n", "4", "-tp", "4"}, input);
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.err, HasSubstr("num_key_value_heads (2) is not a multiple of 4"));
}

TEST(MkChat, AHugeContextIsRefusedNamingTheLimit) {
  for (const char* c : {"2000000000", "100000000"}) {
    const Captured r = mk_chat({"-c", c, "-p", "hi"});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(fmt::format("--ctx-size: {} is out of range: expected a whole number from 0 to 16777216", c)));
    EXPECT_THAT(r.err, Not(HasSubstr("bad_alloc")));
  }
}

TEST(MkChat, InvalidSamplingValuesAreRejectedBeforeLoading) {
  for (const auto& [flags, message] : kBadSampling) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"-p", "hi"});
    const Captured r = mk_chat(args);
    EXPECT_EQ(r.status, 2) << message;
    EXPECT_EQ(r.err, "mk-chat: error: " + message + "\n") << "the model was loaded before the values were checked";
  }
}

TEST(MkChat, RangeErrorsNameTheAcceptedRange) {
  Captured r = mk_chat({"-c", "-1", "-p", "hi"});
  EXPECT_THAT(r.err, HasSubstr("--ctx-size: -1 is out of range: expected a whole number from 0 to 16777216"));
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

// ---------------------------------------------------------------------------------------------------
// The commands a newcomer types first, on the model shipped in models/pystdlib-6m.

const std::filesystem::path kShipped = MK_SHIPPED_MODEL_DIR;

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// max_position_embeddings as config.json says it (read here, not through the runtime's parser).
int shipped_trained_length() { return read_json(kShipped / "config.json").at("max_position_embeddings").get<int>(); }

Captured shipped_chat(std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), {MK_CHAT_BINARY, "--emulator", "-m", kShipped.string()});
  return mk::test::run_command(args, input);
}

// What mk-server says when it starts: run until it prints "listening on" (or exits), then stopped as a
// user stops it (SIGTERM); its stderr and exit status. It listens on a free loopback port and serves nothing.
Captured server_start(const std::vector<std::string>& args) {
  std::string cmd = std::string("'") + MK_SERVER_BINARY + "' --emulator --port 0 -q";
  for (const auto& a : args) cmd += " '" + a + "'";
  const std::string sh = "log=$(mktemp); " + cmd + " 2>\"$log\" & pid=$!; "
                         "for i in $(seq 600); do grep -q 'listening on' \"$log\" && break; kill -0 $pid 2>/dev/null || break; "
                         "sleep 0.1; done; kill -TERM $pid 2>/dev/null; wait $pid; status=$?; cat \"$log\" >&2; rm -f \"$log\"; "
                         "exit $status";
  return mk::test::run_command({"bash", "-c", sh});
}

TEST(Tools, TheContextDefaultsToTheTrainedLengthUpTo4096AndWarnsBeyondIt) {
  const int trained = shipped_trained_length();
  ASSERT_LT(trained, 4096) << "the check needs a model trained on fewer than 4096 positions";
  for (const std::vector<std::string>& c : {std::vector<std::string>{}, std::vector<std::string>{"-c", "0"}}) {
    std::vector<std::string> args = c;
    args.insert(args.end(), {"--temp", "0", "-n", "1", "-p", "hi"});
    const Captured r = shipped_chat(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr(fmt::format("/{}]", trained))) << "mk-chat's context, after the reply";
    EXPECT_THAT(r.err, Not(HasSubstr("warning")));
  }
  const std::string beyond =
      fmt::format("warning: context 8192 > the model's trained length {} (max_position_embeddings): output past it may degrade",
                  trained);
  Captured r = shipped_chat({"-c", "8192", "--temp", "0", "-n", "1", "-p", "hi"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(beyond));
  EXPECT_THAT(r.err, HasSubstr("/8192]"));

  r = mk_run({"-m", kShipped.string(), "-n", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(fmt::format("context {} tokens", trained)));
  r = mk_run({"-m", kShipped.string(), "-c", "8192", "-n", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(beyond));
  EXPECT_THAT(r.err, HasSubstr("context 8192 tokens"));

  r = server_start({"-m", kShipped.string()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(fmt::format("context {} tokens", trained)));
  r = server_start({"-m", kShipped.string(), "-c", "8192"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(beyond));
  EXPECT_THAT(r.err, HasSubstr("context 8192 tokens"));
}

// "(seed N)" at the end of mk-run's summary when it drew a random seed.
std::string drawn_seed(const Captured& r) {
  std::smatch m;
  if (!std::regex_search(r.out, m, std::regex(R"(\(seed (\d+)\))"))) return "";
  return m[1];
}

std::string tokens_line(const Captured& r) { return r.out.substr(0, r.out.find('\n')); }

TEST(Tools, SeedMinusOneMeansARandomSeed) {
  const std::vector<std::string> sample = {"--temp", "1", "-n", "16"};
  std::vector<std::string> random = sample;
  random.insert(random.end(), {"--seed", "-1"});
  const Captured a = mk_run(random), b = mk_run(random);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  const std::string seed = drawn_seed(a);
  ASSERT_NE(seed, "") << "mk-run names the seed it drew:\n" << a.out;
  EXPECT_NE(drawn_seed(b), seed) << "two runs with --seed -1 drew the same seed";
  std::vector<std::string> fixed = sample;
  fixed.insert(fixed.end(), {"--seed", seed});
  const Captured again = mk_run(fixed);
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_THAT(tokens_line(a), ::testing::StartsWith("tokens: "));
  EXPECT_EQ(tokens_line(again), tokens_line(a)) << "the drawn seed does not reproduce its tokens";
  EXPECT_EQ(drawn_seed(again), "") << "a given seed is not a drawn one";

  for (const char* bad : {"-2", "1.5", "18446744073709551616", "x"}) {
    const std::string message =
        fmt::format("--seed: {} is not a seed: expected -1 (a random seed) or a whole number from 0 to 18446744073709551615", bad);
    Captured r = mk_run({"--seed", bad, "-n", "1"});
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr(message));
    r = mk_chat({"--seed", bad, "-p", "hi"});
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr(message));
  }
  const Captured chat = mk_chat({"--seed", "-1", "-n", "2", "-p", "hi"});
  EXPECT_EQ(chat.status, 0) << chat.err;
  const Captured largest = mk_run({"--seed", "18446744073709551615", "-n", "1"});
  EXPECT_EQ(largest.status, 0) << largest.err;
}

TEST(Tools, TheWatchdogLimitIsBounded) {
  for (const char* bad : {"0.5", "90000", "soon"}) {
    const Captured run = mk_run({"--watchdog", bad, "-n", "1"});
    EXPECT_EQ(run.status, 2) << bad;
    EXPECT_THAT(run.err, HasSubstr(fmt::format("--watchdog: {} is not a number of seconds from 1 to 86400", bad)));
    const Captured chat = mk_chat({"--watchdog", bad, "-p", "hi"});
    EXPECT_EQ(chat.status, 2) << bad;
  }
  EXPECT_EQ(mk_run({"--watchdog", "2.5", "-n", "1"}).status, 0);
}

TEST(Tools, HelpShowsTheChoicesOfAnOptionPlainly) {
  for (const char* tool : {MK_RUN_BINARY, MK_CHAT_BINARY, MK_SERVER_BINARY}) {
    const Captured r = mk::test::run_command({tool, "--help"});
    EXPECT_EQ(r.status, 0) << tool;
    EXPECT_THAT(r.out, HasSubstr("--quantize none|fp8|int4")) << tool;
    EXPECT_THAT(r.out, HasSubstr("--quantize-head yes|no")) << tool;
    EXPECT_THAT(r.out, HasSubstr("--seed SEED")) << tool;
    EXPECT_THAT(r.out, Not(HasSubstr("ENUM"))) << tool;
    EXPECT_THAT(r.out, Not(HasSubstr("->"))) << tool;
  }
}

// 0 success, 1 an error, 2 a bad command-line argument (CLI11's own 104-106 folded into it).
TEST(Tools, ExitStatuses) {
  for (const char* tool : {MK_RUN_BINARY, MK_CHAT_BINARY, MK_SERVER_BINARY}) {
    Captured r = mk::test::run_command({tool, "-m", kShipped.string(), "--bogus"});
    EXPECT_EQ(r.status, 2) << tool << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("--bogus")) << tool;
    r = mk::test::run_command({tool, "--emulator", "-m", kShipped.string(), "-n", "many"});
    EXPECT_EQ(r.status, 2) << tool << ": " << r.err;
  }
  for (const char* tool : {MK_RUN_BINARY, MK_CHAT_BINARY}) {
    const Captured r = mk::test::run_command({tool, "--emulator", "-m", "/nonexistent/model", "-p", "hi"});
    EXPECT_EQ(r.status, 1) << tool << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("/nonexistent/model")) << tool;
  }
  const Captured server = mk::test::run_command({MK_SERVER_BINARY, "--emulator", "-m", kShipped.string(), "--host", "256.0.0.1"});
  EXPECT_EQ(server.status, 1) << server.err;
  EXPECT_THAT(server.err, HasSubstr("mk-server: error: cannot listen on 256.0.0.1"));
}

// mk-run -p: raw completion in text, as llama-cli does it. The expected tokens are transformers' own:
// scripts/train_tiny_model.py ran transformers' greedy decoding on its text prompt and stored the prompt's
// ids (Hugging Face's tokenizer) and 256 tokens in training.json.
TEST(MkRun, TextInTextOutFollowsTransformers) {
  const nlohmann::json check = read_json(kShipped / "training.json").at("self_check");
  const std::string prompt = check.at("text_prompt").get<std::string>();
  const std::vector<int32_t> prompt_ids = check.at("text_prompt_ids").get<std::vector<int32_t>>();
  std::vector<int32_t> expected = check.at("greedy_256").get<std::vector<int32_t>>();
  // Steps whose top-2 margin in transformers is over 0.2 logits: the emulator's bf16 cache cannot flip them.
  const std::vector<double> margins = check.at("greedy_256_top2_margins").get<std::vector<double>>();
  size_t n = 0;
  while (n < 8 && margins.at(n) > 0.2) ++n;
  ASSERT_GE(n, 2u);
  expected.resize(n);
  std::string expected_ids = "tokens:";
  for (int32_t t : expected) expected_ids += fmt::format(" {}", t);
  const std::string steps = std::to_string(n);

  Captured r = mk_run({"-m", kShipped.string(), "-p", prompt, "-n", steps, "--temp", "0", "--ids"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(tokens_line(r), expected_ids) << "-p encodes as transformers' tokenizer, and generates as transformers";
  std::string ids_text;
  for (int32_t t : prompt_ids) {
    if (!ids_text.empty()) ids_text += ',';
    ids_text += std::to_string(t);
  }
  r = mk_run({"-m", kShipped.string(), "-t", ids_text, "-n", steps, "--temp", "0", "--ids"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(tokens_line(r), expected_ids) << "-t with transformers' prompt ids";

  r = mk_run({"-m", kShipped.string(), "-p", prompt, "-n", steps, "--temp", "0"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string text = mk::Tokenizer::load(kShipped).decode(expected);
  if (text.empty() || text.back() != '\n') text += '\n';
  EXPECT_EQ(r.out, text) << "stdout is the continuation's text and nothing else";
  EXPECT_THAT(r.err, HasSubstr(fmt::format("{} prompt tokens, {} generated (max_tokens)", prompt_ids.size(), n)));

  r = mk_run({"-m", kShipped.string(), "-p", "", "-n", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("-p: the prompt is empty"));
  r = mk_run({"-p", "hello", "-n", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("-p needs a model with a tokenizer"));
  r = mk_run({"-m", kShipped.string(), "-p", "x", "-t", "1", "-n", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("excludes"));
}

TEST(MkChat, AnEmptyPromptIsRefused) {
  for (const char* p : {"", " \n"}) {
    const Captured r = mk_chat({"-p", p});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr("mk-chat: error: -p: the prompt is empty"));
    EXPECT_EQ(r.out, "");
  }
}

TEST(MkChat, HelpListsTheCommands) {
  const Captured r = mk_chat({}, "/help\n/quit\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("unknown command")));
  const size_t banner = r.err.find("commands: /reset");
  ASSERT_NE(banner, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("commands: /reset", banner + 1), std::string::npos) << "/help printed nothing:\n" << r.err;
  EXPECT_THAT(r.err, HasSubstr("/stats"));
  EXPECT_THAT(r.err, HasSubstr("/quit"));
}

// A GPU backend's name (as an H100 prints it) wrapped for a 120-column terminal: every word kept, in order.
TEST(Tools, LongInfoLinesAreWrappedAtSpaces) {
  const std::string line =
      "backend: gpu monokernel on NVIDIA H100 80GB HBM3 (132 workgroups x 512 threads, weight stream 3 x 55 KiB, "
      "lookahead 0, early 2, flat counters, qkv,o_proj,gate_up,down on 66 workgroups), context 2048 tokens";
  const std::string wrapped = mk::cli::wrap_info(line);
  std::istringstream lines(wrapped);
  std::string words;
  int count = 0;
  for (std::string l; std::getline(lines, l); ++count) {
    EXPECT_LE(l.size(), 120u) << l;
    if (count > 0) {
      EXPECT_EQ(l.substr(0, 2), "  ") << l;
    }
    words += (words.empty() ? "" : " ") + l.substr(count > 0 ? 2 : 0);
  }
  EXPECT_EQ(count, 2);
  EXPECT_EQ(words, line);
  EXPECT_EQ(wrapped.back(), '\n');
  EXPECT_EQ(mk::cli::wrap_info("short"), "short\n");
}

// What mk-chat and mk-run print about themselves fits a 120-column terminal (a path is as long as it is).
TEST(Tools, InfoLinesFit120Columns) {
  const Captured chat = mk::test::run_command({MK_CHAT_BINARY, "--emulator", "--temp", "0", "-n", "4", "-p", "hi"});
  ASSERT_EQ(chat.status, 0) << chat.err;
  const Captured run = mk_run({"-m", kShipped.string(), "-p", "def f(", "-n", "4"});
  ASSERT_EQ(run.status, 0) << run.err;
  for (const std::string& text : {chat.err, run.err}) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      size_t width = line.size();
      if (const size_t at = line.find(kShipped.string()); at != std::string::npos) width -= kShipped.string().size();
      EXPECT_LE(width, 120u) << line;
    }
  }
}

}  // namespace

namespace mk {
namespace {

// A model whose tokenizer.json this build cannot read (the Llama 2 / Mistral SentencePiece form, with a
// "Prepend" normalizer) runs from ids with -t and --ids; asked for text, mk-run names the tokenizer's problem.
TEST(Tools, MkRunTakesIdsInAndOutWithoutLoadingTheTokenizer) {
  const char* root = std::getenv("MK_FIXTURES");
  ASSERT_NE(root, nullptr) << "MK_FIXTURES is not set (ctest sets it)";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("mk-run-ids-{}", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::copy(std::filesystem::path(root) / "hf" / "gemma3", dir);
  std::ofstream(dir / "tokenizer.json")
      << R"({"version": "1.0", "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}, "pre_tokenizer": null,
            "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}})";
  std::ofstream(dir / "tokenizer_config.json") << "{}";
  Captured r = mk_run({"-m", dir.string(), "-t", "1,17,33", "-n", "4", "--ids"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tokens:"));
  r = mk_run({"-m", dir.string(), "-t", "1,17,33", "-n", "4"});
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("tokenizer.json: unsupported decoder"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mk
