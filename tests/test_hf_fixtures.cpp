// The outside oracle: tiny models whose logits were computed by Hugging Face transformers
// (scripts/make_hf_fixtures.py, versions recorded in each expected.json). The fp32 CPU reference must
// match them to float rounding; the emulator (bf16 KV cache, the kernel's schedule) within bf16 tolerance,
// with the same greedy tokens wherever transformers' top two logits are not within rounding.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "host/emulator/emulator.h"
#include "runtime/reference.h"
#include "tests/helpers/logits_compare.h"

namespace mk {
namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt, greedy;
  std::vector<std::vector<float>> logits;
  std::vector<double> margins;
};

Fixture load_fixture(const std::string& name) {
  const char* root = std::getenv("MK_FIXTURES");
  if (!root) throw std::runtime_error("MK_FIXTURES is not set (ctest sets it)");
  const auto dir = std::filesystem::path(root) / "hf" / name;
  Fixture f;
  f.model = load_model(dir);
  const auto j = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
  f.prompt = j["prompt"].get<std::vector<int32_t>>();
  f.greedy = j["greedy_tokens"].get<std::vector<int32_t>>();
  f.logits = j["logits"].get<std::vector<std::vector<float>>>();
  f.margins = j["greedy_top2_margins"].get<std::vector<double>>();
  return f;
}

class TransformersFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformersFixture, ReferenceMatchesEveryPosition) {
  const Fixture f = load_fixture(GetParam());
  ReferenceModel ref(*f.model, 64);
  for (size_t i = 0; i < f.prompt.size(); ++i) {
    const auto cmp = test::compare_logits(f.logits[i], ref.forward(f.prompt[i]));
    EXPECT_LT(cmp.relative_error, 1e-4) << "position " << i << ": " << cmp.summary();
    EXPECT_EQ(cmp.got_argmax, cmp.reference_argmax) << "position " << i;
  }
}

TEST_P(TransformersFixture, ReferenceGreedyContinuationMatches) {
  const Fixture f = load_fixture(GetParam());
  ReferenceModel ref(*f.model, 64);
  std::vector<float> logits;
  for (int32_t t : f.prompt) logits = ref.forward(t);
  for (size_t i = 0; i < f.greedy.size(); ++i) {
    const int32_t token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (token != f.greedy[i]) {
      ASSERT_LT(f.margins[i], 1e-3) << "step " << i << ": reference " << token << " vs transformers " << f.greedy[i];
      std::printf("note: step %zu: transformers' top-2 margin %.3g is within rounding\n", i, f.margins[i]);
      return;
    }
    logits = ref.forward(token);
  }
}

TEST_P(TransformersFixture, EmulatorMatchesLogitsAndGreedyTokens) {
  const Fixture f = load_fixture(GetParam());
  EmulatorOptions opt;
  opt.num_workgroups = 132;
  opt.context = 64;
  opt.record_logits = true;
  Emulator emu(*f.model, opt);
  GenerateRequest req;
  req.input = f.prompt;
  req.max_new_tokens = int(f.greedy.size());
  const auto result = emu.generate(req, {});
  // The first sampled step's logits are transformers' logits at the last prompt position.
  const auto cmp = test::compare_logits(f.logits.back(), emu.recorded_logits().front());
  EXPECT_LT(cmp.relative_error, 2e-2) << cmp.summary();
  for (size_t i = 0; i < f.greedy.size(); ++i) {
    if (result.tokens[i] == f.greedy[i]) continue;
    ASSERT_LT(f.margins[i], 2e-2) << "step " << i << ": emulator " << result.tokens[i] << " vs transformers " << f.greedy[i];
    std::printf("note: step %zu: transformers' top-2 margin %.3g is within bf16 rounding\n", i, f.margins[i]);
    return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, TransformersFixture, ::testing::Values("llama3", "mistral", "qwen2", "qwen3", "gemma3"));

}  // namespace
}  // namespace mk
