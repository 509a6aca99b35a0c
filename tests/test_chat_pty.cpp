// mk-chat driven through a pseudo-terminal, as a person would use it: the real binary (MK_CHAT_BINARY) on a
// tiny chat model, on the CPU emulator. Every read has a deadline and the child is killed at the end, so
// a broken mk-chat fails the test instead of hanging it.
//   ChatPty.*  streaming, Ctrl-C during a reply and at the prompt, multi-turn KV reuse (through /stats),
//              /reset, /quit, end of input, the context-full messages, -p one-shot output, line editing
//              (arrows, Ctrl-A/Ctrl-E, history) and lines of spaces.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/chat_template.h"
#include "runtime/synthetic_model.h"
#include "runtime/tokenizer.h"
#include "tests/helpers/run_command.h"
#include "tests/helpers/tiny_chat_model.h"

#ifndef MK_CHAT_BINARY
#error "MK_CHAT_BINARY (the path of mk-chat) must be defined"
#endif

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;
using ::testing::Not;

const std::filesystem::path& model_dir() {
  static const mk::test::ScopedTinyChatModel model("chat-pty");
  return model.dir;
}

// The emulator, unless MK_CHAT_PTY_GPU is set: then mk-chat picks the GPU (scripts/gpu_check.sh-style
// runs on a GPU machine; the timings of the tests are chosen for the emulator).
std::vector<std::string> backend_args() {
  if (std::getenv("MK_CHAT_PTY_GPU")) return {};
  return {"--emulator"};
}

// mk-chat on the slave side of a pty; the test reads and writes the master side.
class Chat {
 public:
  explicit Chat(std::vector<std::string> extra_args) {
    std::vector<std::string> args = {MK_CHAT_BINARY, "-m", model_dir().string(), "--temp", "0"};
    for (const auto& a : backend_args()) args.push_back(a);
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    struct winsize size = {};
    size.ws_row = 40;
    size.ws_col = 200;
    pid_ = forkpty(&master_, nullptr, nullptr, &size);
    if (pid_ == 0) {
      setenv("TERM", "xterm", 1);  // a terminal as people have one, whatever the test runner's
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    if (pid_ < 0) ADD_FAILURE() << "forkpty failed: " << std::strerror(errno);
  }

  ~Chat() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }

  void send(std::string_view text) { ASSERT_EQ(write(master_, text.data(), text.size()), ssize_t(text.size())); }

  // Reads until `done(output since `from`)` holds; false at the deadline or when the child closed the pty.
  bool read_until(size_t from, const std::function<bool(std::string_view)>& done, Clock::duration timeout = 30s) {
    const auto deadline = Clock::now() + timeout;
    while (!done(std::string_view(output_).substr(std::min(from, output_.size())))) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      struct pollfd p = {master_, POLLIN, 0};
      if (poll(&p, 1, int(left)) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(master_, buf, sizeof buf);
      if (n <= 0) return done(std::string_view(output_).substr(std::min(from, output_.size())));  // EIO: child gone
      for (ssize_t i = 0; i < n; ++i)
        if (buf[i] != '\r') output_ += buf[i];  // the terminal's ONLCR turns "\n" into "\r\n"
    }
    return true;
  }

  // Waits for `needle` after `from`; returns the offset just past it (fails the test on timeout).
  size_t expect(std::string_view needle, size_t from, Clock::duration timeout = 30s) {
    const bool found = read_until(from, [&](std::string_view s) { return s.find(needle) != std::string_view::npos; }, timeout);
    EXPECT_TRUE(found) << "no \"" << needle << "\" within the timeout; output so far:\n" << output_;
    if (!found) return output_.size();
    return output_.find(needle, from) + needle.size();
  }

  // After a reply: the per-reply stats line on stderr, then the prompt.
  size_t expect_reply_end(size_t from, Clock::duration timeout = 60s) {
    const size_t stats = expect("tok/s", from, timeout);
    return expect("\n> ", stats);
  }

  size_t say(std::string_view line, size_t from) {
    send(std::string(line) + "\n");
    return expect(std::string(line) + "\n", from);  // the terminal's echo
  }

  // /stats, parsed: {"context", "size", "turns", "ingested", "generated"}.
  std::map<std::string, int> stats(size_t& at) {
    const size_t start = say("/stats", at);
    at = expect("\nbackend: ", start);
    const std::string text = output_.substr(start, at - start);
    std::map<std::string, int> out;
    std::smatch m;
    if (std::regex_search(text, m, std::regex(R"(context: (\d+) / (\d+) tokens)"))) {
      out["context"] = std::stoi(m[1]);
      out["size"] = std::stoi(m[2]);
    }
    if (std::regex_search(text, m, std::regex(R"(turns: (\d+))"))) out["turns"] = std::stoi(m[1]);
    if (std::regex_search(text, m, std::regex(R"(ingested (\d+) tokens, generated (\d+))"))) {
      out["ingested"] = std::stoi(m[1]);
      out["generated"] = std::stoi(m[2]);
    }
    EXPECT_EQ(out.count("context"), 1u) << "unparsable /stats:\n" << text;
    at = expect("\n> ", at);
    return out;
  }

  // Exit status, or -1 if the process is still running at the deadline.
  int wait_exit(Clock::duration timeout = 20s) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      read_until(output_.size(), [](std::string_view) { return false; }, 50ms);  // drain the pty
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    return -1;
  }

  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int master_ = -1;
  bool exited_ = false;
  std::string output_;
};

// mk-chat without a terminal: stdout and stderr captured separately. `input`: its stdin.
mk::test::Captured run_captured(std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), MK_CHAT_BINARY);
  return mk::test::run_command(args, input);
}

std::vector<int32_t> encode(const std::string& text) {
  static const mk::Tokenizer tokenizer = mk::Tokenizer::load(model_dir());
  return tokenizer.encode(text, true);
}

TEST(ChatPty, StreamsTheReplyWhileItIsGenerated) {
  Chat chat({"-n", "5000", "-c", "8192"});  // a few seconds of output on the emulator
  size_t at = chat.expect("> ", 0);
  at = chat.say("hello", at);
  // Some of the reply is on the screen while the reply is not finished (no stats line yet).
  ASSERT_TRUE(chat.read_until(at, [](std::string_view s) { return !s.empty(); }));
  const std::string first_chunk = chat.output().substr(at);
  EXPECT_THAT(first_chunk, Not(HasSubstr("tok/s"))) << "the whole reply arrived at once: not streamed";
  at = chat.expect_reply_end(at, 120s);
  chat.send("/quit\n");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatPty, CtrlCStopsTheReplyAndTheSessionGoesOn) {
  Chat chat({"-c", "16384"});  // -n -1: only Ctrl-C (or, after many seconds, the context) ends a reply
  size_t at = chat.expect("> ", 0);
  at = chat.say("tell me everything", at);
  ASSERT_TRUE(chat.read_until(at, [](std::string_view out) { return out.size() > 20; }));
  chat.send("\x03");
  at = chat.expect("[stopped", at, 20s);
  at = chat.expect("\n> ", at);
  auto s = chat.stats(at);
  EXPECT_EQ(s["turns"], 1);
  EXPECT_LT(s["generated"], 10000) << "Ctrl-C did not stop the reply";

  // The next prompt works, in the same conversation (it is interrupted too, to keep the test short).
  at = chat.say("go on", at);
  ASSERT_TRUE(chat.read_until(at, [](std::string_view out) { return out.size() > 20; }));
  chat.send("\x03");
  at = chat.expect("[stopped", at, 20s);
  at = chat.expect("\n> ", at);
  s = chat.stats(at);
  EXPECT_EQ(s["turns"], 2);
  EXPECT_LT(s["ingested"], 40) << "the second turn re-ingested the first";

  // At the prompt: the first Ctrl-C explains, the second quits.
  chat.send("\x03");
  at = chat.expect("Ctrl-C again to quit", at);
  chat.send("\x03");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatPty, TheSecondTurnIngestsOnlyItsOwnTokens) {
  Chat chat({"-n", "8", "--system", "You are a test."});
  size_t at = chat.expect("> ", 0);
  at = chat.expect_reply_end(chat.say("hello", at));
  auto first = chat.stats(at);
  const auto prompt = encode("<|im_start|>system\nYou are a test.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
                             "<|im_start|>assistant\n");
  EXPECT_EQ(first["ingested"], int(prompt.size()));
  EXPECT_EQ(first["generated"], 8);
  EXPECT_EQ(first["context"], int(prompt.size()) + 8 - 1);  // the last token waits to be fed next turn

  at = chat.expect_reply_end(chat.say("again", at));
  auto second = chat.stats(at);
  // The reply was cut at 8 tokens: its last token, then the continuation (the turn's end, the new message).
  const auto continuation = encode("<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(second["ingested"], 1 + int(continuation.size()));
  EXPECT_EQ(second["context"], first["context"] + second["ingested"] + 8 - 1);
  EXPECT_EQ(second["turns"], 2);
  chat.send("/quit\n");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatPty, ResetStartsOverAndQuitExits) {
  Chat chat({"-n", "6"});
  size_t at = chat.expect("> ", 0);
  at = chat.expect_reply_end(chat.say("hello", at));
  const int ingested_first = chat.stats(at)["ingested"];
  at = chat.say("/reset", at);
  at = chat.expect("> ", at);
  auto s = chat.stats(at);
  EXPECT_EQ(s["context"], 0);
  EXPECT_EQ(s["turns"], 0);
  at = chat.expect_reply_end(chat.say("hello", at));
  EXPECT_EQ(chat.stats(at)["ingested"], ingested_first) << "after /reset the same message is a fresh prompt";
  at = chat.say("/nonsense", at);
  at = chat.expect("unknown command /nonsense", at);
  chat.send("/quit\n");
  EXPECT_EQ(chat.wait_exit(), 0);
}

// Ctrl-D sent as soon as the prompt shows: the terminal must already be in the editor's mode then (a
// Ctrl-D that the terminal's cooked mode takes becomes a NUL that libedit quote-inserts: seen about once
// in 12 runs under load before the fix).
TEST(ChatPty, EndOfInputExits) {
  Chat chat({"-n", "4"});
  chat.expect("> ", 0);
  chat.send("\x04");  // Ctrl-D on an empty line
  EXPECT_EQ(chat.wait_exit(), 0) << "output:\n" << chat.output();
}

TEST(ChatPty, AFullContextIsExplained) {
  Chat chat({"-c", "64", "-n", "-1"});
  size_t at = chat.expect("> ", 0);
  at = chat.say(std::string(100, 'x'), at);  // does not fit at all
  at = chat.expect("context holds 64 tokens", at);
  at = chat.expect("/reset", at);
  at = chat.expect("> ", at);
  at = chat.say("hi", at);  // fits, and the reply runs into the end of the context
  at = chat.expect("[the context is full (64 tokens)", at, 60s);
  at = chat.expect("> ", at);
  at = chat.say("more", at);
  at = chat.expect("the context is full", at);
  at = chat.expect("> ", at);
  at = chat.say("/reset", at);
  at = chat.expect("> ", at);
  EXPECT_EQ(chat.stats(at)["context"], 0);
  chat.send("/quit\n");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatPty, FallsBackToTheEmulatorWithAWarning) {
  // Without --emulator: on a machine without a GPU (or a build without GPU support) mk-chat says so.
  const mk::test::Captured r = run_captured({"-m", model_dir().string(), "-p", "hi", "-n", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  if (r.err.find("gpu monokernel") != std::string::npos) GTEST_SKIP() << "ran on a GPU";
  EXPECT_THAT(r.err, HasSubstr("warning: no GPU"));
  EXPECT_THAT(r.err, HasSubstr("CPU emulator"));
}

// -p: stdout is the reply and nothing else (scriptable); the rest is on stderr.
TEST(ChatPty, OneShotPromptPrintsOnlyTheReply) {
  std::vector<std::string> args = {"-m", model_dir().string(), "--temp", "0", "-n", "12", "-p", "Say something"};
  for (const auto& a : backend_args()) args.push_back(a);
  const mk::test::Captured r = run_captured(args);
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_THAT(r.out, Not(HasSubstr("tok/s")));
  EXPECT_THAT(r.out, Not(HasSubstr("backend")));
  EXPECT_THAT(r.err, HasSubstr("tok/s"));
  EXPECT_THAT(r.err, HasSubstr("first token"));
  EXPECT_EQ(run_captured(args).out, r.out) << "greedy one-shot runs differ";
}

TEST(ChatPty, MissingModelDirectoryIsAnError) {
  const mk::test::Captured r = run_captured({"-m", "/nonexistent/model", "-p", "hi"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/model does not exist"));
  EXPECT_EQ(r.out, "");
}

// The keys of a terminal: what a person types to edit a line (line editing through libedit).
TEST(ChatPty, LinesAreEditedWithArrowsCtrlAEAndHistory) {
  Chat chat({"-n", "4"});
  size_t at = chat.expect("> ", 0);
  // Ctrl-A / Ctrl-E: type "bc", go to the start, type "/a", go to the end, type "d", Enter.
  chat.send("bc\x01/a\x05" "d\r");  // (split: "\x05d" would be one hex escape)
  at = chat.expect("unknown command /abcd ", at);  // an unknown command is echoed: it shows the line as edited
  at = chat.expect("> ", at);
  // Left and right arrows: "/xz", left, "y", right, "w".
  chat.send("/xz\x1b[Dy\x1b[Cw\r");
  at = chat.expect("unknown command /xyzw ", at);
  at = chat.expect("> ", at);
  // History, newest first: up twice is "/abcd"; edited, it is a new line.
  chat.send("\x1b[A\x1b[A!\r");
  at = chat.expect("unknown command /abcd! ", at);
  at = chat.expect("> ", at);
  // Up three times ("/abcd"), down once ("/xyzw"); the arrows in application mode (ESC O) too.
  chat.send("\x1b[A\x1bOA\x1b[A\x1bOB\r");
  at = chat.expect("unknown command /xyzw ", at);
  at = chat.expect("> ", at);
  // A recalled command runs as typed.
  at = chat.say("/stats", at);
  at = chat.expect("turns: 0", at);
  at = chat.expect("> ", at);
  chat.send("\x1b[A\r");
  at = chat.expect("turns: 0", at);
  at = chat.expect("> ", at);
  chat.send("/quit\r");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatPty, ALineOfSpacesIsNotSent) {
  Chat chat({"-n", "4"});
  size_t at = chat.expect("> ", 0);
  chat.send("    \r");
  at = chat.expect("\n> ", at);
  const auto s = chat.stats(at);
  EXPECT_EQ(s.at("turns"), 0);
  EXPECT_EQ(s.at("context"), 0);
  EXPECT_THAT(chat.output(), Not(HasSubstr("tok/s"))) << "a reply was generated";
  chat.send("/quit\r");
  EXPECT_EQ(chat.wait_exit(), 0);

  // Without a terminal (a script feeding stdin) the same holds, tabs included.
  std::vector<std::string> args = {"-m", model_dir().string(), "-n", "4"};
  for (const auto& a : backend_args()) args.push_back(a);
  const mk::test::Captured r = run_captured(args, "  \t \n\n/stats\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("context: 0 / "));
  EXPECT_THAT(r.out, HasSubstr("turns: 0"));
}

TEST(ChatPty, OneShotReplyThatFillsTheContextSuggestsNoReset) {
  std::vector<std::string> args = {"-m", model_dir().string(), "-c", "64", "-n", "-1", "-p", "hi"};
  for (const auto& a : backend_args()) args.push_back(a);
  const mk::test::Captured r = run_captured(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("[the context is full (64 tokens): use a larger -c for a longer reply]"));
  EXPECT_THAT(r.err, Not(HasSubstr("/reset"))) << "-p has no /reset";
  EXPECT_FALSE(r.out.empty());
}

TEST(ChatPty, OneShotPromptTooLongSuggestsNoReset) {
  std::vector<std::string> args = {"-m", model_dir().string(), "-c", "64", "-p", std::string(100, 'x')};
  for (const auto& a : backend_args()) args.push_back(a);
  const mk::test::Captured r = run_captured(args);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("the context holds 64 tokens"));
  EXPECT_THAT(r.err, HasSubstr("[use a shorter prompt, or a larger context (-c)]"));
  EXPECT_THAT(r.err, Not(HasSubstr("/reset"))) << "-p has no /reset";
  EXPECT_EQ(r.out, "");
}

}  // namespace
