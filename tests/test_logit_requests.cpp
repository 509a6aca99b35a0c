// The logit adjustments (logit_bias, frequency and presence penalties), the constraint's mask and the
// log-probabilities of the sampled tokens, on the emulator: against the fp32 reference's logits with
// OpenAI's definitions applied here, independently of runtime/sampling.cpp.
#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "host/emulator/emulator.h"
#include "runtime/reference.h"
#include "runtime/token_automaton.h"
#include "tests/helpers/error_of.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

using ::testing::HasSubstr;
using test::TinyModelSpec;

// log_softmax in double.
std::vector<double> log_softmax(const std::vector<double>& logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double v : logits) sum += std::exp(v - mx);
  std::vector<double> out;
  for (double v : logits) out.push_back(v - mx - std::log(sum));
  return out;
}

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
};

Generated generate(Emulator& emu, GenerateRequest req) {
  Generated g;
  std::vector<int32_t> passed;
  req.on_logprobs = [&](const TokenLogprobs& r) { g.logprobs.push_back(r); };
  g.tokens = emu.generate(req, [&](int32_t t) { passed.push_back(t); }).tokens;
  EXPECT_EQ(passed, g.tokens);
  return g;
}

// Each token's record against the reference teacher-forced on the generated tokens, its logits adjusted
// by `bias` and the penalties over the tokens sampled before it, and -inf for the tokens the request's
// constraint does not allow in its state then: the sampled token's log-probability and the i-th largest
// log-probability within `tolerance` (as many as asked for, or as the constraint allows), and each listed
// alternative's own value too.
void expect_logprobs_match_reference(const Model& model, int context, const std::vector<int32_t>& prompt, const GenerateRequest& req,
                                     const Generated& g, double tolerance) {
  ASSERT_EQ(g.logprobs.size(), g.tokens.size());
  ReferenceModel ref(model, context);
  std::vector<float> logits;
  for (int32_t t : prompt) logits = ref.forward(t);
  std::map<int32_t, int> counts;
  int state = req.constraint ? req.constraint->dfa.start : -1;
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    std::vector<double> adjusted(logits.begin(), logits.end());
    for (const auto& [token, bias] : req.adjust.bias) adjusted[size_t(token)] += bias;
    for (const auto& [token, c] : counts)
      adjusted[size_t(token)] -= c * double(req.adjust.frequency_penalty) + double(req.adjust.presence_penalty);
    if (state >= 0) {  // the set for the tokens left (docs/structured_output.md), this one included
      const int32_t budget = constraint::constraint_budget(req.max_new_tokens, int32_t(i), context, int32_t(prompt.size() - 1 + i));
      for (size_t t = 0; t < adjusted.size(); ++t)
        if (!req.constraint->allowed(state, budget, int32_t(t))) adjusted[t] = -INFINITY;
      ASSERT_TRUE(req.constraint->allowed(state, budget, g.tokens[i])) << "token " << i;
      if (i + 1 < g.tokens.size()) state = req.constraint->advance(state, g.tokens[i]);
    }
    const std::vector<double> lp = log_softmax(adjusted);
    std::vector<double> sorted = lp;
    std::sort(sorted.rbegin(), sorted.rend());
    const TokenLogprobs& r = g.logprobs[i];
    EXPECT_EQ(r.token, g.tokens[i]);
    EXPECT_NEAR(r.logprob, lp[size_t(r.token)], tolerance) << "token " << i;
    // Fewer alternatives than asked for where the constraint allows fewer tokens.
    const int possible = int(std::count_if(lp.begin(), lp.end(), [](double v) { return v > -INFINITY; }));
    ASSERT_EQ(r.top_count, std::min(req.top_logprobs, possible)) << "token " << i;
    for (int k = 0; k < r.top_count; ++k) {
      EXPECT_NEAR(r.top_logprobs[k], sorted[size_t(k)], tolerance) << "token " << i << ", alternative " << k;
      EXPECT_NEAR(r.top_logprobs[k], lp[size_t(r.top_ids[k])], tolerance) << "token " << i << ", alternative " << k;
      if (k > 0) {
        EXPECT_GE(r.top_logprobs[k - 1], r.top_logprobs[k]);
      }
    }
    ++counts[g.tokens[i]];
    logits = ref.forward(g.tokens[i]);
  }
}

struct LogitRequests : ::testing::Test {
  void SetUp() override {
    TinyModelSpec spec;
    spec.eos = {};
    spec.weight_scale = 0.05f;  // distributions with choices, so that the penalties change the draws
    model = test::load_tiny_model(spec, "logit-requests");
    opt.num_workgroups = 7;
    opt.context = 64;
    opt.interleaving = Interleaving::Random;
  }
  std::unique_ptr<Model> model;
  EmulatorOptions opt;
  const std::vector<int32_t> prompt = {1, 5, 9, 33};
};

TEST_F(LogitRequests, LogprobsAreTheReferencesLogSoftmaxGreedyAndSampled) {
  for (const float temperature : {0.0f, 0.9f}) {
    Emulator emu(*model, opt);
    GenerateRequest req;
    req.input = prompt;
    req.max_new_tokens = 16;
    req.sampling = SamplingParams{temperature, 0, 1.0f, 0.0f, 11};
    req.top_logprobs = kMaxTopLogprobs;
    const Generated g = generate(emu, req);
    ASSERT_EQ(g.tokens.size(), 16u);
    expect_logprobs_match_reference(*model, opt.context, prompt, req, g, 1e-3);
    if (temperature == 0.0f) {  // greedy: the sampled token is the most likely one
      for (const TokenLogprobs& r : g.logprobs) EXPECT_EQ(r.top_ids[0], r.token);
    }
  }
}

TEST_F(LogitRequests, BiasAndPenaltiesFollowOpenAIsDefinitionEveryStep) {
  Emulator emu(*model, opt);
  GenerateRequest req;
  req.input = prompt;
  req.max_new_tokens = 24;
  req.sampling = SamplingParams{1.0f, 0, 1.0f, 0.0f, 5};
  req.adjust.bias = {{7, 1.5f}, {12, -100.0f}, {7, 0.5f}};  // token 7 listed twice: +2
  req.adjust.frequency_penalty = 0.8f;
  req.adjust.presence_penalty = 0.6f;
  req.top_logprobs = 5;
  const Generated g = generate(emu, req);
  ASSERT_EQ(g.tokens.size(), 24u);
  expect_logprobs_match_reference(*model, opt.context, prompt, req, g, 1e-3);
  EXPECT_EQ(std::count(g.tokens.begin(), g.tokens.end(), 12), 0);

  // The same request on a fresh emulator: counts start from zero each request, nothing carries over.
  Emulator again(*model, opt);
  EXPECT_EQ(generate(again, req).tokens, g.tokens);
}

TEST_F(LogitRequests, AStrongBiasDecidesGreedyTokensAndTheNextRequestIsUnaffected) {
  Emulator emu(*model, opt);
  GenerateRequest req;
  req.input = prompt;
  req.max_new_tokens = 6;
  req.adjust.bias = {{42, 100.0f}};
  EXPECT_EQ(generate(emu, req).tokens, std::vector<int32_t>(6, 42));
  // A positive presence penalty with it: 42 first, then its penalty cannot outweigh +100 either.
  // Without the bias, a new request from the same cache gives what a plain emulator gives.
  emu.reset();
  GenerateRequest plain;
  plain.input = prompt;
  plain.max_new_tokens = 6;
  Emulator fresh(*model, opt);
  EXPECT_EQ(generate(emu, plain).tokens, generate(fresh, plain).tokens);
}

// A vocabulary for the tiny model's 160 ids: 0 and 1 special, 2 the EOS, the rest pieces of a, b, c, d.
std::shared_ptr<const constraint::TokenVocabulary> abcd_vocabulary() {
  const char* pieces[] = {"a", "b", "c", "d", "ab", "ba", "cd", "dab", "abc", "bb", "ca", "dd", "aab"};
  std::vector<std::string> bytes(160);
  for (size_t t = 3; t < bytes.size(); ++t) bytes[t] = pieces[t % std::size(pieces)];
  return std::make_shared<constraint::TokenVocabulary>(bytes, std::vector<int32_t>{2});
}

TEST_F(LogitRequests, AConstraintMasksBeforeTheLogprobsAndTheDrawAndEndsWhereItIsComplete) {
  TinyModelSpec spec;
  spec.eos = {2};
  spec.weight_scale = 0.05f;
  const auto eos_model = test::load_tiny_model(spec, "logit-requests-eos");
  const std::string re = "(ab|c){0,6}d(a|b){2,5}";  // at most 18 bytes: it ends within max_new_tokens
  const auto automaton = constraint::compile_token_constraint({constraint::ConstraintSpec::Kind::Regex, re}, abcd_vocabulary(), "--regex");
  for (const float temperature : {0.0f, 0.9f, 1.5f})
    for (const uint64_t seed : {1, 2, 3}) {
      Emulator emu(*eos_model, opt);
      GenerateRequest req;
      req.input = prompt;
      req.max_new_tokens = 40;
      req.sampling = SamplingParams{temperature, 0, 1.0f, 0.0f, seed};
      req.top_logprobs = kMaxTopLogprobs;
      req.constraint = automaton;
      const Generated g = generate(emu, req);
      expect_logprobs_match_reference(*eos_model, opt.context, prompt, req, g, 1e-3);
      // The text (an EOS token is none) matches the regex, whole, by std::regex: the generation ended
      // with EOS where the regex accepts, or where nothing else was left.
      std::string text;
      for (const int32_t t : g.tokens)
        if (t != 2) text += automaton->vocabulary->bytes(t);
      EXPECT_TRUE(std::regex_match(text, std::regex(re))) << text << " (T " << temperature << ", seed " << seed << ")";
      if (g.tokens.back() != 2) {  // ended by the constraint: five a/b after the d, no room for more
        const size_t d = text.rfind('d');
        EXPECT_EQ(text.size() - d - 1, 5u) << text;
      }
      // The next request without a constraint runs unmasked from the same cache.
      GenerateRequest plain;
      plain.input = prompt;
      plain.max_new_tokens = 4;
      emu.reset();
      Emulator fresh(*eos_model, opt);
      EXPECT_EQ(generate(emu, plain).tokens, generate(fresh, plain).tokens);
    }
}

// A regex with no length bound ("(ab|c)*", and "(a|b){2,}" before an EOS) under budgets from its shortest
// sure reply (d, a, b and EOS: 4 tokens) up: every reply ends complete (EOS where the regex accepts) within
// max_new_tokens, whatever the temperature, and the log-probabilities are those of the reference masked
// with the closing sets where the budget is low. Where the budget is no longer binding (64), some reply
// runs past the short budgets: the closing sets, not the model, end the short ones.
TEST_F(LogitRequests, AConstrainedReplyEndsWithinItsBudget) {
  TinyModelSpec spec;
  spec.eos = {2};
  spec.weight_scale = 0.05f;
  const auto eos_model = test::load_tiny_model(spec, "logit-requests-eos");
  const std::string re = "(ab|c)*d(a|b){2,}";
  const auto automaton = constraint::compile_token_constraint({constraint::ConstraintSpec::Kind::Regex, re}, abcd_vocabulary(), "--regex");
  ASSERT_TRUE(automaton->closes_within_budget);
  ASSERT_EQ(automaton->completion_bound[size_t(automaton->dfa.start)], 4);
  size_t longest_unbound = 0;
  for (const int max_new : {4, 5, 7, 12, 64})
    for (const float temperature : {0.0f, 0.9f, 1.5f})
      for (const uint64_t seed : {1, 2}) {
        Emulator emu(*eos_model, opt);
        GenerateRequest req;
        req.input = prompt;
        req.max_new_tokens = max_new;
        req.sampling = SamplingParams{temperature, 0, 1.0f, 0.0f, seed};
        req.top_logprobs = 5;
        req.constraint = automaton;
        Generated g;
        req.on_logprobs = [&](const TokenLogprobs& r) { g.logprobs.push_back(r); };
        const GenerateResult r = emu.generate(req, {});
        g.tokens = r.tokens;
        const std::string what = fmt::format("max_new {}, T {}, seed {}", max_new, temperature, seed);
        if (max_new == 64) {
          longest_unbound = std::max(longest_unbound, g.tokens.size());
          continue;
        }
        expect_logprobs_match_reference(*eos_model, opt.context, prompt, req, g, 1e-3);
        EXPECT_EQ(r.stop, StopReason::Eos) << what;
        EXPECT_LE(g.tokens.size(), size_t(max_new)) << what;
        ASSERT_FALSE(g.tokens.empty()) << what;
        EXPECT_EQ(g.tokens.back(), 2) << what;  // the regex never ends by itself: an EOS ends it
        std::string text;
        for (const int32_t t : g.tokens)
          if (t != 2) text += automaton->vocabulary->bytes(t);
        EXPECT_TRUE(std::regex_match(text, std::regex(re))) << what << ": " << text;
      }
  EXPECT_GT(longest_unbound, 12u);
}

TEST_F(LogitRequests, AConstraintForAnotherVocabularyIsRefused) {
  Emulator emu(*model, opt);
  GenerateRequest req;
  req.input = prompt;
  req.max_new_tokens = 2;
  std::vector<std::string> bytes(100, "a");
  req.constraint = constraint::compile_token_constraint({constraint::ConstraintSpec::Kind::Regex, "a+"},
                                                        std::make_shared<constraint::TokenVocabulary>(bytes, std::vector<int32_t>{}), "--regex");
  EXPECT_THAT(test::error_of([&] { emu.generate(req, {}); }),
              HasSubstr("the constraint was compiled for a vocabulary of 100 tokens; the model has 160"));
}

TEST_F(LogitRequests, BadValuesAreRefusedNamingTheField) {
  Emulator emu(*model, opt);
  const auto error = [&](auto edit) {
    GenerateRequest req;
    req.input = prompt;
    req.max_new_tokens = 2;
    edit(req);
    return test::error_of([&] { emu.generate(req, {}); });
  };
  EXPECT_THAT(error([](GenerateRequest& r) { r.adjust.bias = {{160, 1.0f}}; }), HasSubstr("logit_bias: token 160 is outside the vocabulary [0, 160)"));
  EXPECT_THAT(error([](GenerateRequest& r) { r.adjust.bias = {{3, 101.0f}}; }), HasSubstr("logit_bias: the bias 101 of token 3 must be between -100 and 100"));
  EXPECT_THAT(error([](GenerateRequest& r) { r.adjust.bias = {{3, std::nanf("")}}; }), HasSubstr("logit_bias: the bias nan of token 3"));
  EXPECT_THAT(error([](GenerateRequest& r) { r.adjust.frequency_penalty = 2.5f; }), HasSubstr("frequency_penalty 2.5 must be between -2 and 2"));
  EXPECT_THAT(error([](GenerateRequest& r) { r.adjust.presence_penalty = -3.0f; }), HasSubstr("presence_penalty -3 must be between -2 and 2"));
  EXPECT_THAT(error([](GenerateRequest& r) { r.top_logprobs = 21; }), HasSubstr("top_logprobs must be between 0 and 20 (got 21)"));
  EXPECT_EQ(emu.position(), 0);
}

}  // namespace
}  // namespace mk
