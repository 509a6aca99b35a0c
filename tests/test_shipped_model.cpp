// The model shipped in models/pystdlib-6m (scripts/train_tiny_model.py; models/pystdlib-6m/TRAINING.md):
// it loads, its tokenizer and chat template work, the emulator's greedy decoding follows the fp32
// reference on it, the reference's follows transformers' (recorded by the training script), and mk-chat
// opens it when no -m is given.
//
// Nothing here is tied to one weight file: a model retrained by the same script passes too. The greedy
// checks compare implementations (the emulator, runtime/reference.cpp, transformers' tokens that the
// training script stored next to the weights), not a recorded output of ours. Trained weights are the
// point: their logits are peaked, so a wrong kernel changes the argmax, where random weights' nearly flat
// logits can hide it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "host/emulator/emulator.h"
#include "host/tools/shipped_model.h"
#include "runtime/chat_template.h"
#include "runtime/reference.h"
#include "runtime/tokenizer.h"
#include "tests/helpers/logits_compare.h"
#include "tests/helpers/tiny_chat_model.h"

#ifndef MK_SHIPPED_MODEL_DIR
#error "MK_SHIPPED_MODEL_DIR (models/pystdlib-6m in the source tree) must be defined"
#endif
#ifndef MK_CHAT_BINARY
#error "MK_CHAT_BINARY (the path of mk-chat) must be defined"
#endif
#ifndef MK_SHIPPED_MODEL_FROM_BINDIR
#error "MK_SHIPPED_MODEL_FROM_BINDIR (where cmake --install puts the model, from mk-chat's directory) must be defined"
#endif

namespace mk {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const fs::path kModelDir = MK_SHIPPED_MODEL_DIR;

// The training script's own text prompt (TEXT_PROMPT in scripts/train_tiny_model.py): a document start, a
// module docstring and the start of a function, so the model writes Python.
constexpr const char* kTextPrompt = "<|endoftext|>\"\"\"Helpers for working with file paths.\"\"\"\n\nimport os\n\n\ndef ";
constexpr const char* kChatRequest = "Write a Python function is_palindrome(s). Return True if s reads the same forwards and backwards.";

// Python with indentation, strings, an f-string, a comment and non-ASCII text: what the tokenizer was
// trained on, plus characters it has rarely seen.
constexpr const char* kPythonSnippet =
    "import os\n"
    "\n"
    "\n"
    "def walk_sizes(root, *, follow_symlinks=False):\n"
    "    \"\"\"Yield (path, size) for every file below root.\"\"\"\n"
    "    for dirpath, dirnames, filenames in os.walk(root, followlinks=follow_symlinks):\n"
    "        for name in sorted(filenames):  # stable order\n"
    "            path = os.path.join(dirpath, name)\n"
    "            try:\n"
    "                yield path, os.stat(path).st_size\n"
    "            except OSError as e:\n"
    "                print(f\"skipping {path!r}: {e}\\t(\u00e9t\u00e9 \u2192 \u6587\u4ef6)\")\n";

const Model& shipped_model() {
  static const std::unique_ptr<Model> model = load_model(kModelDir);
  return *model;
}

const Tokenizer& shipped_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(kModelDir);
  return tokenizer;
}

std::string read_text(const fs::path& path) {
  std::stringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

std::string token_text(int32_t id) { return fmt::format("{} {:?}", id, std::string(shipped_tokenizer().token_bytes(id))); }

TEST(ShippedModel, IsASmallLlamaWithItsNote) {
  const Model& m = shipped_model();
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, Arch::Llama);
  // The limit, on what git stores (the file), not only on the tensors.
  EXPECT_LE(fs::file_size(kModelDir / "model.safetensors"), 16'000'000u);
  EXPECT_LE(m.weight_bytes(), 16'000'000u);
  EXPECT_GT(c.num_layers, 1);
  EXPECT_LT(c.num_kv_heads, c.num_heads) << "grouped-query attention: what the kernel most easily gets wrong";
  const std::string note = read_text(kModelDir / "TRAINING.md");
  EXPECT_THAT(note, HasSubstr("scripts/train_tiny_model.py"));
  EXPECT_THAT(note, HasSubstr("training loss"));
  EXPECT_THAT(note, HasSubstr("Held-out loss"));
}

TEST(ShippedModel, TokenizerFitsTheModelAndRoundTripsPython) {
  const Tokenizer& tok = shipped_tokenizer();
  const ModelConfig& c = shipped_model().config;
  EXPECT_LE(tok.vocab_size(), size_t(c.vocab_size));
  const std::vector<int32_t> ids = tok.encode(kPythonSnippet);
  for (int32_t id : ids) ASSERT_LT(id, c.vocab_size);
  EXPECT_EQ(tok.decode(ids), kPythonSnippet);
  // A BPE trained on Python needs far fewer tokens than bytes; one that fell back to single bytes (a
  // merges table not applied) would not.
  EXPECT_LT(ids.size() * 2, std::string(kPythonSnippet).size()) << ids.size() << " tokens";
  // The special tokens are single tokens, and the end of a turn stops generation.
  const int32_t im_start = tok.token_id("<|im_start|>"), im_end = tok.token_id("<|im_end|>");
  ASSERT_GE(im_start, 0);
  ASSERT_GE(im_end, 0);
  EXPECT_EQ(tok.encode("<|im_start|>user\nhi<|im_end|>").front(), im_start);
  EXPECT_EQ(tok.encode("<|im_start|>user\nhi<|im_end|>").back(), im_end);
  const auto eos = tok.eos_ids();
  EXPECT_NE(std::find(eos.begin(), eos.end(), im_end), eos.end());
  EXPECT_NE(std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), im_end), c.eos_token_ids.end());
}

TEST(ShippedModel, ChatTemplateRendersChatMLWithItsDefaultSystemPrompt) {
  const ChatTemplate tmpl = ChatTemplate::load(kModelDir);
  EXPECT_EQ(tmpl.format(), ChatFormat::ChatML);
  const std::string system(tmpl.default_system_prompt());
  EXPECT_THAT(system, HasSubstr("Python"));
  EXPECT_EQ(tmpl.render({{"user", "Write a function."}}, true),
            "<|im_start|>system\n" + system +
                "<|im_end|>\n<|im_start|>user\nWrite a function.<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tmpl.render({{"system", "Be brief."}, {"user", "Hi"}}, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  const Tokenizer& tok = shipped_tokenizer();
  const auto ids = tok.encode(tmpl.render({{"user", "Hi"}}, true));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.token_id("<|im_start|>")), 3);
}

// ---------------------------------------------------------------------------------------------------
// The emulator against the fp32 reference, 256 greedy steps past EOS.
//
// The emulator keeps the KV cache in bf16 (as the GPU does); the reference keeps it in fp32. Their logits
// differ by up to ~0.07 on this model, so at a step where the reference's best two tokens are closer than
// that, the two may pick differently, correctly. The reference is therefore teacher-forced with the
// emulator's tokens (so every one of the 256 steps is compared, also after such a step), every step must
// pick the reference's argmax, and a different pick is allowed only where the reference's logits of the
// two tokens are within kNearTie: then the step and the margins are printed. Free-running greedy decoding
// of the two is identical up to the first such step.
constexpr int kSteps = 256;
constexpr double kNearTie = 0.1;       // logits; several times the largest bf16-cache error seen (0.07)
constexpr int kMaxNearTieSteps = 4;    // of 256: more would mean a bias, not rounding
constexpr double kMaxRelativeError = 1e-2;  // of the logits; 0.006 at most on the shipped model

struct GreedyCase {
  const char* name;
  bool chat;  // kChatRequest through the chat template, else kTextPrompt
};

void PrintTo(const GreedyCase& c, std::ostream* os) { *os << c.name; }  // ctest's test names

class ShippedModelGreedy : public ::testing::TestWithParam<GreedyCase> {};

TEST_P(ShippedModelGreedy, EmulatorEqualsTheReferenceFor256Tokens) {
  auto model = load_model(kModelDir);
  model->config.eos_token_ids.clear();  // run all 256 steps (the reference never stops by itself)
  const Tokenizer& tok = shipped_tokenizer();
  const std::vector<int32_t> prompt =
      tok.encode(GetParam().chat ? ChatTemplate::load(kModelDir).render({{"user", kChatRequest}}, true) : kTextPrompt);

  EmulatorOptions opt;
  opt.num_workgroups = 132;  // an H100's grid: the schedule as the GPU runs it
  opt.context = int(prompt.size()) + kSteps + 8;
  opt.interleaving = Interleaving::Random;
  opt.check_dependencies = false;  // test_emulator checks the dependencies; this test checks the numbers
  opt.record_logits = true;
  Emulator emu(*model, opt);
  GenerateRequest req;
  req.input = prompt;
  req.max_new_tokens = kSteps;
  const GenerateResult result = emu.generate(req, {});
  ASSERT_EQ(int(result.tokens.size()), kSteps) << stop_reason_name(result.stop);
  ASSERT_EQ(int(emu.recorded_logits().size()), kSteps);

  ReferenceModel ref(*model, opt.context);
  std::vector<float> logits;
  for (int32_t t : prompt) logits = ref.forward(t);
  int near_ties = 0, first_difference = -1;
  double worst_rel = 0;
  for (int i = 0; i < kSteps; ++i) {
    const int32_t got = result.tokens[size_t(i)];
    const auto cmp = test::compare_logits(logits, emu.recorded_logits()[size_t(i)]);
    EXPECT_LT(cmp.relative_error, kMaxRelativeError) << "step " << i << ": " << cmp.summary();
    worst_rel = std::max(worst_rel, cmp.relative_error);
    if (got != cmp.reference_argmax) {
      const double gap = double(logits[size_t(cmp.reference_argmax)]) - double(logits[size_t(got)]);
      const std::string what = fmt::format(
          "step {} (after {} prompt tokens): the emulator picked {}, the reference {}; the reference's logit gap "
          "between them is {:.4g} (its top-2 margin {:.4g}); {}\ntext before this step: {:?}",
          i, prompt.size(), token_text(got), token_text(cmp.reference_argmax), gap, cmp.reference_margin,
          cmp.summary(), tok.decode(std::vector<int32_t>(result.tokens.begin(), result.tokens.begin() + i)));
      ASSERT_LT(gap, kNearTie) << "not a near-tie: " << what;
      std::printf("note: near-tie, %s\n", what.c_str());
      if (first_difference < 0) first_difference = i;
      ++near_ties;
    }
    logits = ref.forward(got);
  }
  EXPECT_LE(near_ties, kMaxNearTieSteps) << "steps where the emulator and the reference picked different tokens";
  std::printf("%d steps compared; %s; logits relative error at most %.3g\nemulator's text: %s\n", kSteps,
              first_difference < 0 ? "greedy tokens identical"
                                   : fmt::format("identical up to step {}, then {} near-tie step(s)", first_difference,
                                                 near_ties).c_str(),
              worst_rel, tok.decode(result.tokens).c_str());
}

INSTANTIATE_TEST_SUITE_P(Prompts, ShippedModelGreedy,
                         ::testing::Values(GreedyCase{"PythonText", false}, GreedyCase{"ChatTurn", true}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// ---------------------------------------------------------------------------------------------------
// The reference against transformers: the training script ran transformers (fp32, CPU) on the saved
// weights and stored its prompt ids and 256 greedy tokens, with their top-2 margins, in training.json
// next to them. Both sides are fp32 math on the same bf16 weights, so they agree except at a tie within
// float rounding. This checks the tokenizer too: the prompt's ids come from Hugging Face tokenizers.
TEST(ShippedModel, ReferenceGreedyEqualsTransformersRecordedAtTraining) {
  const fs::path path = kModelDir / "training.json";
  ASSERT_TRUE(fs::exists(path)) << path << " is missing: scripts/train_tiny_model.py writes it next to the weights "
                                << "(copy it with them); it holds transformers' greedy tokens that this test checks";
  const auto j = nlohmann::json::parse(std::ifstream(path));
  const auto& check = j.at("self_check");
  const auto prompt_text = check.at("text_prompt").get<std::string>();
  const auto prompt = check.at("text_prompt_ids").get<std::vector<int32_t>>();
  const auto expected = check.at("greedy_256").get<std::vector<int32_t>>();
  const auto margins = check.at("greedy_256_top2_margins").get<std::vector<double>>();
  ASSERT_EQ(expected.size(), margins.size());
  ASSERT_GE(expected.size(), 200u);
  EXPECT_EQ(shipped_tokenizer().encode(prompt_text), prompt) << "our tokenizer against Hugging Face tokenizers";

  ReferenceModel ref(shipped_model(), int(prompt.size() + expected.size()));
  std::vector<float> logits;
  for (int32_t t : prompt) logits = ref.forward(t);
  for (size_t i = 0; i < expected.size(); ++i) {
    const int32_t token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (token != expected[i]) {
      ASSERT_LT(margins[i], 1e-3) << fmt::format(
          "step {}: the reference picks {}, transformers picked {} with a top-2 margin of {:.4g}; text before: {:?}", i,
          token_text(token), token_text(expected[i]), margins[i],
          shipped_tokenizer().decode(std::vector<int32_t>(expected.begin(), expected.begin() + long(i))));
      std::printf("note: step %zu: transformers' top-2 margin %.3g is within float rounding; compared up to here\n", i,
                  margins[i]);
      return;
    }
    logits = ref.forward(token);
  }
}

// ---------------------------------------------------------------------------------------------------
// mk-chat without -m (host/tools/shipped_model.h).

struct Captured {
  int status = -1;
  std::string out, err;
};

// Runs mk-chat (`binary`) with `args`, stdin from /dev/null; `env`: "NAME=value" settings for it
// ("NAME=" unsets NAME).
Captured run_mk_chat(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                     const std::string& binary = MK_CHAT_BINARY) {
  const test::ScopedTempDir dir("shipped-chat");
  const auto quote = [](const std::string& s) {
    std::string q = "'";
    for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::vector<std::string> words = {"env", "-u", "MK_DEFAULT_MODEL"};
  words.insert(words.end(), env.begin(), env.end());
  words.push_back(binary);
  words.insert(words.end(), args.begin(), args.end());
  std::string cmd;
  for (const auto& w : words) cmd.append(quote(w)).append(" ");
  cmd.append("> ").append(quote((dir.path / "out").string())).append(" 2> ").append(quote((dir.path / "err").string()));
  cmd.append(" < /dev/null");
  Captured c;
  const int raw = std::system(cmd.c_str());
  c.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  c.out = read_text(dir.path / "out");
  c.err = read_text(dir.path / "err");
  return c;
}

const std::vector<std::string> kOneShot = {"--emulator", "--temp", "0", "-n", "12", "-p", "Write a Python function add(a, b)."};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(MkChatDefaultModel, OpensTheShippedModelAndSaysSo) {
  const Captured r = run_mk_chat(kOneShot);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("model: " + kModelDir.string() + " (shipped with monokernel"));
  // The same reply as with -m pointing at the model: it opened that model, not another one.
  const Captured explicit_m = run_mk_chat(with({"-m", kModelDir.string()}, kOneShot));
  ASSERT_EQ(explicit_m.status, 0) << explicit_m.err;
  EXPECT_THAT(explicit_m.err, Not(HasSubstr("shipped with monokernel")));
  EXPECT_GT(r.out.size(), 1u);
  EXPECT_EQ(r.out, explicit_m.out);
}

TEST(MkChatDefaultModel, FindsTheModelWhereCmakeInstallPutsIt) {
  // An installed layout: bin/mk-chat and the model at MK_SHIPPED_MODEL_FROM_BINDIR from it. It comes
  // before the source tree, so the message names the installed copy.
  const test::ScopedTempDir prefix("shipped-install");
  fs::create_directories(prefix.path / "bin");
  const fs::path binary = prefix.path / "bin" / "mk-chat";
  fs::copy_file(MK_CHAT_BINARY, binary);
  const fs::path installed = (prefix.path / "bin" / MK_SHIPPED_MODEL_FROM_BINDIR).lexically_normal();
  fs::create_directories(installed.parent_path());
  fs::create_directory_symlink(kModelDir, installed);
  const Captured r = run_mk_chat(kOneShot, {}, binary.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("model: " + installed.string() + " ("));
}

TEST(MkChatDefaultModel, AMissingModelNamesThePlacesLookedAt) {
  ::unsetenv("MK_DEFAULT_MODEL");
  const test::ScopedTempDir root("shipped-missing");
  const fs::path exe_dir = root.path / "build" / "host" / "tools";
  try {
    tools::find_default_model("/nonexistent/source", "../share/nowhere", exe_dir);
    FAIL() << "found a model where there is none";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no -m given, and the model shipped with monokernel (pystdlib-6m) is not where"));
    EXPECT_THAT(e.what(), HasSubstr("\n  " + (root.path / "build/host/share/nowhere").string() + "\n"));
    EXPECT_THAT(e.what(), HasSubstr("\n  /nonexistent/source/models/pystdlib-6m\n"));
    EXPECT_THAT(e.what(), HasSubstr("\n  " + (root.path / "models/pystdlib-6m").string() + "\n"));
    EXPECT_THAT(e.what(), HasSubstr("Give a model directory with -m, or set MK_DEFAULT_MODEL to one."));
  }
  // The source tree the binary was built from.
  EXPECT_EQ(tools::find_default_model(kModelDir.parent_path().parent_path(), "../share/nowhere", exe_dir).dir, kModelDir);
  // A build directory inside a copied source tree, whose original is gone.
  fs::create_directories(root.path / "models");
  fs::create_directory_symlink(kModelDir, root.path / "models" / "pystdlib-6m");
  EXPECT_EQ(tools::find_default_model("/nonexistent/source", "../share/nowhere", exe_dir).dir,
            root.path / "models" / "pystdlib-6m");
}

TEST(MkChatDefaultModel, TheEnvironmentChoosesAnotherAndAWrongValueIsAnError) {
  const test::ScopedTinyChatModel tiny("shipped-env");
  const Captured r = run_mk_chat(kOneShot, {"MK_DEFAULT_MODEL=" + tiny.dir.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("model: " + tiny.dir.string() + " (from $MK_DEFAULT_MODEL"));

  const Captured bad = run_mk_chat(kOneShot, {"MK_DEFAULT_MODEL=/nonexistent/model"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("MK_DEFAULT_MODEL=/nonexistent/model has no config.json"));
  EXPECT_EQ(bad.out, "");
}

}  // namespace
}  // namespace mk
