// Token steps of several tokens (ScheduleParams::step_tokens) on the emulator: prompts ingested M tokens
// a step match the fp32 reference and the one-token steps for every architecture and weight format, with
// the happens-before checker on; the spans' bookkeeping (multi-turn, cancel, the context's end); and the
// schedule's limits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "host/emulator/emulator.h"
#include "runtime/error.h"
#include "runtime/quantize.h"
#include "runtime/reference.h"
#include "runtime/speculation.h"
#include "runtime/token_automaton.h"
#include "tests/helpers/emulator_vs_reference.h"
#include "tests/helpers/error_of.h"
#include "tests/helpers/logits_compare.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

using ::testing::HasSubstr;
using test::TinyModelSpec;

using test::greedy;
using test::prompt_of;

EmulatorOptions options(int step_tokens, int context) {
  EmulatorOptions opt;
  opt.num_workgroups = 11;
  opt.context = context;
  opt.chunk_tokens = 0;  // the prompt goes through token steps
  opt.step_tokens = step_tokens;
  opt.record_logits = true;
  return opt;
}

struct StepCase {
  Arch arch;
  DType dtype;
  Quantize quantize;
  int step_tokens;
};

class StepTokensVsReference : public ::testing::TestWithParam<StepCase> {};

// A 37-token prompt ingested M tokens a step (the last step shorter unless M divides it), then greedy
// tokens, teacher-forced: every sampled step's logits within the reference's bounds. Gemma 3's sliding
// layers (a window of 6) put spans across the window's start.
TEST_P(StepTokensVsReference, PromptStepsAndGreedyTokens) {
  const StepCase sc = GetParam();
  TinyModelSpec spec;
  spec.arch = sc.arch;
  spec.dtype = sc.dtype;
  spec.eos = {};
  if (sc.arch == Arch::Qwen3) spec.head_dim = 32;
  if (sc.quantize != std::nullopt) spec.hidden = 256, spec.intermediate = 352, spec.head_dim = 64;
  LoadOptions load;
  load.quantize = sc.quantize;
  const auto model = test::load_tiny_model(spec, "step-tokens", load);
  test::expect_emulator_matches_reference(*model, prompt_of(37, model->config.vocab_size), options(sc.step_tokens, 64), 12);
}

INSTANTIATE_TEST_SUITE_P(
    FormatsAndSizes, StepTokensVsReference,
    ::testing::Values(StepCase{Arch::Llama, DType::BF16, std::nullopt, 1}, StepCase{Arch::Llama, DType::BF16, std::nullopt, 2},
                      StepCase{Arch::Llama, DType::BF16, std::nullopt, 5}, StepCase{Arch::Llama, DType::BF16, std::nullopt, 16},
                      StepCase{Arch::Llama, DType::F16, std::nullopt, 5}, StepCase{Arch::Llama, DType::F32, std::nullopt, 16},
                      StepCase{Arch::Llama, DType::BF16, MatrixFormat::FP8, 2}, StepCase{Arch::Llama, DType::BF16, MatrixFormat::FP8, 16},
                      StepCase{Arch::Llama, DType::BF16, MatrixFormat::INT4, 5}, StepCase{Arch::Llama, DType::BF16, MatrixFormat::INT4, 16},
                      StepCase{Arch::Qwen2, DType::BF16, std::nullopt, 5}, StepCase{Arch::Qwen3, DType::BF16, std::nullopt, 16},
                      StepCase{Arch::Gemma3, DType::BF16, std::nullopt, 5}, StepCase{Arch::Gemma3, DType::BF16, std::nullopt, 16}),
    [](const auto& param_info) {
      const StepCase& c = param_info.param;
      const char* q = c.quantize == MatrixFormat::FP8 ? "_fp8" : c.quantize == MatrixFormat::INT4 ? "_int4" : "";
      return fmt::format("{}_{}{}_M{}", arch_name(c.arch), dtype_name(c.dtype), q, c.step_tokens);
    });

// M-token prompt steps compute each column as a one-token step at its position does: the same logits, bit
// for bit, and the same tokens, in every interleaving.
TEST(StepTokens, SameTokensAsOneTokenStepsInEveryInterleaving) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = test::load_tiny_model(spec, "step-tokens-interleavings");
  const auto prompt = prompt_of(37, model->config.vocab_size);
  Emulator one(*model, options(1, 64));
  const GenerateResult base = greedy(one, prompt, 10);
  ASSERT_EQ(base.tokens.size(), 10u);
  for (int M : {2, 5, 16}) {
    for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
      SCOPED_TRACE(fmt::format("M = {}, {}", M, interleaving_name(policy)));
      EmulatorOptions opt = options(M, 64);
      opt.interleaving = policy;
      Emulator emu(*model, opt);
      const GenerateResult r = greedy(emu, prompt, 10);
      EXPECT_EQ(r.tokens, base.tokens);
      EXPECT_EQ(emu.position(), 37 + 10 - 1);
      EXPECT_EQ(r.stats.ingested_tokens, 37);
      ASSERT_EQ(emu.recorded_logits().size(), 10u);
      EXPECT_EQ(emu.recorded_logits(), one.recorded_logits());
    }
  }
}

// Spans never run past the context: a 37-token prompt in a 44-position context stops where one-token
// steps stop, with the same tokens; and a launch that only ingests leaves the prompt in the cache for
// the next, whose reply matches one launch over the whole history.
TEST(StepTokens, ContextEndIngestOnlyAndASecondTurn) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = test::load_tiny_model(spec, "step-tokens-turns");
  const auto prompt = prompt_of(37, model->config.vocab_size);
  Emulator one(*model, options(1, 44));
  const GenerateResult a = greedy(one, prompt, 20);
  EXPECT_EQ(a.stop, StopReason::ContextFull);
  Emulator sixteen(*model, options(16, 44));
  const GenerateResult b = greedy(sixteen, prompt, 20);
  EXPECT_EQ(b.stop, StopReason::ContextFull);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_EQ(sixteen.position(), one.position());

  Emulator turns(*model, options(5, 128));
  const GenerateResult ingest = greedy(turns, prompt, 0);
  EXPECT_TRUE(ingest.tokens.empty());
  EXPECT_EQ(turns.position(), 37);
  const auto second = prompt_of(23, model->config.vocab_size - 7);
  const GenerateResult reply = greedy(turns, second, 6);
  ASSERT_EQ(reply.tokens.size(), 6u);
  EXPECT_EQ(turns.position(), 37 + 23 + 6 - 1);
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), second.begin(), second.end());
  Emulator whole(*model, options(1, 128));
  EXPECT_EQ(greedy(whole, history, 6).tokens, reply.tokens);
  ReferenceModel ref(*model, 128);
  std::vector<float> ref_logits;
  for (int32_t t : history) ref_logits = ref.forward(t);
  const auto cmp = test::compare_logits(ref_logits, turns.recorded_logits()[0]);
  EXPECT_LT(cmp.relative_error, 2e-2) << cmp.summary();
}

// Prompts of a phrase said three times, then a different tail: prompt lookup finds matches in them, and
// the tiny random models' replies repeat themselves, so drafts are accepted; where a reply leaves the
// phrase or its own loop they are rejected.
std::vector<int32_t> repetitive_prompt(int vocab, int variant) {
  std::vector<int32_t> p;
  const int phrase = 5 + variant % 7;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < phrase; ++i) p.push_back(int32_t((i * 29 + 5 + variant * 17) % (vocab - 3) + 3));
  for (int i = 0; i < 4; ++i) p.push_back(int32_t((i * 13 + 101 + variant) % (vocab - 3) + 3));
  return p;
}

struct SpecCase {
  Arch arch;
  int step_tokens;
  bool sampled;
};

class Speculation : public ::testing::TestWithParam<SpecCase> {};

// Prompt-lookup drafts verified M at a time give exactly the tokens and logits (bit for bit) of one-token
// steps, greedy and sampled (the same seed). Some drafts are rejected: the steps after a rejection read a
// cache whose rejected positions were written again, so their logits show any K/V a rejected draft left
// behind. Every interleaving, with the checker.
TEST_P(Speculation, GivesTheTokensOfOneTokenSteps) {
  const SpecCase sc = GetParam();
  TinyModelSpec spec;
  spec.arch = sc.arch;
  spec.eos = {};
  if (sc.arch == Arch::Qwen3) spec.head_dim = 32;
  auto model = test::load_tiny_model(spec, "speculation");
  const int n = 40;
  int drafted = 0, accepted = 0;
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE(fmt::format("prompt {}", variant));
    GenerateRequest req;
    req.input = repetitive_prompt(model->config.vocab_size, variant);
    req.max_new_tokens = n;
    if (sc.sampled) req.sampling.temperature = 0.5f, req.sampling.top_k = 20, req.sampling.seed = uint64_t(7 + variant);
    Emulator one(*model, options(1, 128));
    const GenerateResult base = one.generate(req, {});
    ASSERT_EQ(int(base.tokens.size()), n);
    for (Interleaving policy : {Interleaving::Random, Interleaving::RoundRobin, Interleaving::Eager}) {
      SCOPED_TRACE(interleaving_name(policy));
      EmulatorOptions opt = options(sc.step_tokens, 128);
      opt.interleaving = policy;
      opt.speculation.drafter = Drafter::Lookup;
      Emulator emu(*model, opt);
      const GenerateResult r = emu.generate(req, {});
      EXPECT_EQ(r.tokens, base.tokens);
      EXPECT_EQ(emu.position(), one.position());
      EXPECT_LE(r.stats.steps, base.stats.steps);
      EXPECT_LE(r.stats.accepted_tokens, r.stats.drafted_tokens);
      if (policy == Interleaving::Random) drafted += r.stats.drafted_tokens, accepted += r.stats.accepted_tokens;
      EXPECT_EQ(emu.recorded_logits(), one.recorded_logits());  // bit for bit
      // The next turn starts from the cache the speculative launch left.
      GenerateRequest next = req;
      next.input = prompt_of(6, model->config.vocab_size);
      next.max_new_tokens = 8;
      Emulator one_more(*model, options(1, 128));
      one_more.generate(req, {});
      EXPECT_EQ(emu.generate(next, {}).tokens, one_more.generate(next, {}).tokens);
    }
  }
  std::printf("note: %d drafts, %d accepted\n", drafted, accepted);
  // Both paths ran: drafts kept, and drafts rejected (their positions written again by later steps).
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

INSTANTIATE_TEST_SUITE_P(Drafts, Speculation,
                         ::testing::Values(SpecCase{Arch::Llama, 5, false}, SpecCase{Arch::Llama, 16, false},
                                           SpecCase{Arch::Llama, 4, true}, SpecCase{Arch::Qwen3, 8, false},
                                           SpecCase{Arch::Gemma3, 5, false}, SpecCase{Arch::Gemma3, 6, true}),
                         [](const auto& param_info) {
                           const SpecCase& c = param_info.param;
                           return fmt::format("{}_M{}_{}", arch_name(c.arch), c.step_tokens, c.sampled ? "sampled" : "greedy");
                         });

// Every stop applies to each kept token in order, as in one-token steps: an EOS inside a verified span,
// max_new_tokens, the context's end and a cancel from the token callback end the reply at the same token,
// with the same position (the cache holds what one-token steps leave). The EOS ids are tokens of the
// prompt that the reply says later (lookup can draft them), and the cancels fall on each of 20 tokens,
// so that some stops land inside spans.
TEST(Speculation, StopsApplyToEachKeptToken) {
  TinyModelSpec spec;
  spec.eos = {};
  auto free_running = test::load_tiny_model(spec, "speculation-stops");
  // The phrase prompt and a reply to it: a prompt whose own reply says tokens it holds.
  auto prompt = repetitive_prompt(free_running->config.vocab_size, 1);
  Emulator first_reply(*free_running, options(1, 128));
  const GenerateResult seed = greedy(first_reply, prompt, 24);
  prompt.insert(prompt.end(), seed.tokens.begin(), seed.tokens.end());
  Emulator probe(*free_running, options(1, 128));
  const GenerateResult all = greedy(probe, prompt, 40);
  std::vector<int32_t> eos_ids;
  for (size_t i = 1; i < all.tokens.size(); ++i) {
    const int32_t t = all.tokens[i];
    const bool first = std::find(all.tokens.begin(), all.tokens.begin() + std::ptrdiff_t(i), t) == all.tokens.begin() + std::ptrdiff_t(i);
    if (first && std::find(prompt.begin(), prompt.end(), t) != prompt.end()) eos_ids.push_back(t);
  }
  ASSERT_FALSE(eos_ids.empty());

  auto compare = [&](const Model& model, int context, int max_new, int cancel_after) {
    auto run = [&](EmulatorOptions opt) {
      Emulator emu(model, opt);
      GenerateRequest req;
      req.input = prompt;
      req.max_new_tokens = max_new;
      int seen = 0;
      const GenerateResult r = emu.generate(req, [&](int32_t) {
        if (++seen == cancel_after) emu.cancel();
      });
      return std::make_tuple(r.tokens, r.stop, emu.position());
    };
    EmulatorOptions opt = options(8, context);
    opt.speculation.drafter = Drafter::Lookup;
    EXPECT_EQ(run(opt), run(options(1, context))) << "context " << context << ", max_new " << max_new << ", cancel after " << cancel_after;
  };
  for (int32_t eos : eos_ids) {
    spec.eos = {eos};
    compare(*test::load_tiny_model(spec, "speculation-stops-eos"), 128, 40, 0);
  }
  for (int cancel_after = 10; cancel_after < 30; ++cancel_after) compare(*free_running, 128, 40, cancel_after);
  for (int max_new : {17, 29}) compare(*free_running, 128, max_new, 0);
  for (int context : {47, 52}) compare(*free_running, context, 40, 0);
}

// Logit bias, frequency and presence penalties and a constraint move with every kept token: a column
// after drafts sees them as they will be once the drafts are kept, so speculative replies are the
// one-token steps' replies and logits, bit for bit, greedy and sampled, with each and with all of them;
// with a budget that leaves the constraint room (48) and one that makes its closing sets apply (9).
TEST(Speculation, LogitAdjustmentsAndConstraintsKeepTheReply) {
  TinyModelSpec spec;
  spec.eos = {2};
  auto model = test::load_tiny_model(spec, "speculation-adjust");
  const char* pieces[] = {"a", "b", "c", "d", "ab", "ba", "cd", "dab", "abc", "bb", "ca", "dd", "aab"};
  std::vector<std::string> bytes(160);
  for (size_t t = 3; t < bytes.size(); ++t) bytes[t] = pieces[t % std::size(pieces)];
  const auto vocabulary = std::make_shared<constraint::TokenVocabulary>(bytes, std::vector<int32_t>{2});
  const auto automaton =
      constraint::compile_token_constraint({constraint::ConstraintSpec::Kind::Regex, "(abcd){1,30}"}, vocabulary, "--regex");
  int drafted = 0, kept = 0;
  for (int what = 0; what < 3; ++what)
    for (const float temperature : {0.0f, 0.8f})
      for (const int max_new : {48, 9}) {
        SCOPED_TRACE(fmt::format("{}, T {}, max_new {}", what == 0 ? "adjustments" : what == 1 ? "constraint" : "both", temperature,
                                 max_new));
        GenerateRequest req;
        req.input = repetitive_prompt(model->config.vocab_size, 2);
        req.max_new_tokens = max_new;
        req.sampling = SamplingParams{temperature, 0, 1.0f, 0.0f, 5};
        if (what != 1) {
          req.adjust.bias = {{17, 2.5f}, {40, -1.0f}, {101, 1.5f}};
          req.adjust.frequency_penalty = 0.04f;
          req.adjust.presence_penalty = 0.03f;
        }
        if (what != 0) req.constraint = automaton;
        Emulator one(*model, options(1, 128));
        const GenerateResult base = one.generate(req, {});
        EmulatorOptions opt = options(6, 128);
        opt.speculation.drafter = Drafter::Lookup;
        Emulator emu(*model, opt);
        const GenerateResult r = emu.generate(req, {});
        EXPECT_EQ(r.tokens, base.tokens);
        EXPECT_EQ(r.stop, base.stop);
        EXPECT_EQ(emu.recorded_logits(), one.recorded_logits());
        EXPECT_EQ(emu.position(), one.position());
        drafted += r.stats.drafted_tokens, kept += r.stats.accepted_tokens;
      }
  std::printf("note: %d drafts, %d kept\n", drafted, kept);
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, drafted);
}

// Chunk steps (prefill) take all but the last prompt token; steps of several tokens and their drafts go on
// from the cache the chunk steps wrote, with the lookup reading the prompt the chunk steps ran.
TEST(Speculation, AfterChunkSteps) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = test::load_tiny_model(spec, "speculation-chunks");
  const auto prompt = repetitive_prompt(model->config.vocab_size, 3);
  EmulatorOptions plain = options(1, 128);
  plain.chunk_tokens = 16;
  Emulator one(*model, plain);
  const GenerateResult base = greedy(one, prompt, 40);
  EmulatorOptions opt = options(5, 128);
  opt.chunk_tokens = 16;
  opt.speculation.drafter = Drafter::Lookup;
  Emulator emu(*model, opt);
  const GenerateResult r = greedy(emu, prompt, 40);
  EXPECT_EQ(r.stats.chunked_tokens, int(prompt.size()) - 1);
  EXPECT_EQ(r.tokens, base.tokens);
  EXPECT_EQ(emu.recorded_logits(), one.recorded_logits());
  EXPECT_EQ(emu.position(), one.position());
  EXPECT_GT(r.stats.accepted_tokens, 0);
}

// The lookup rule: the latest earlier occurrence of the longest n-gram that has one, its continuation k
// tokens, past the history's end copied from the drafts before (the text repeating).
TEST(Speculation, LookupTakesTheLatestLongestMatch) {
  int32_t d[8] = {};
  using V = std::vector<int32_t>;
  const V h = {1, 2, 3, 9, 1, 2, 3, 7, 5, 2, 3};
  // "5 2 3" (n = 3) never occurred before; "2 3" last did at 5: its continuation 7 5 2 3, then again.
  ASSERT_EQ(lookup_drafts(h.data(), int(h.size()), 1, 3, 8, d), 8);
  EXPECT_EQ(V(d, d + 8), (V{7, 5, 2, 3, 7, 5, 2, 3}));
  ASSERT_EQ(lookup_drafts(h.data(), int(h.size()), 1, 3, 2, d), 2);
  EXPECT_EQ(V(d, d + 2), (V{7, 5}));
  const V h2 = {4, 1, 2, 3, 8, 1, 2, 3};  // "1 2 3" occurred at 1
  ASSERT_EQ(lookup_drafts(h2.data(), int(h2.size()), 2, 3, 5, d), 5);
  EXPECT_EQ(V(d, d + 5), (V{8, 1, 2, 3, 8}));
  const V h3 = {6, 7, 7, 7};  // "7 7" last occurred at 1, just before the end: 7, then the draft before it
  ASSERT_EQ(lookup_drafts(h3.data(), int(h3.size()), 1, 3, 4, d), 4);
  EXPECT_EQ(V(d, d + 4), (V{7, 7, 7, 7}));
  const V h4 = {4, 5, 6};
  EXPECT_EQ(lookup_drafts(h4.data(), 3, 1, 3, 8, d), 0);  // no n-gram repeats
  EXPECT_EQ(lookup_drafts(h4.data(), 3, 3, 3, 8, d), 0);  // n must leave an earlier place
}

TEST(Speculation, ParametersAreChecked) {
  TinyModelSpec spec;
  auto model = test::load_tiny_model(spec, "speculation-params");
  EmulatorOptions opt = options(1, 64);
  opt.speculation.drafter = Drafter::Lookup;
  EXPECT_THAT(test::error_of([&] { Emulator e(*model, opt); }), HasSubstr("needs token steps of at least 2 tokens"));
  opt.step_tokens = 4;
  opt.speculation.draft_max = 4;
  EXPECT_THAT(test::error_of([&] { Emulator e(*model, opt); }), HasSubstr("4 drafts a step (must be between 1 and step tokens - 1 = 3"));
  opt.speculation.draft_max = 0;
  opt.speculation.lookup_min = 3, opt.speculation.lookup_max = 2;
  EXPECT_THAT(test::error_of([&] { Emulator e(*model, opt); }), HasSubstr("lookup n-grams of 3 to 2 tokens"));
}

TEST(StepTokens, TheScheduleRefusesSizesOutOfRange) {
  TinyModelSpec spec;
  auto model = test::load_tiny_model(spec, "step-tokens-limits");
  for (int M : {0, kMaxStepTokens + 1}) {
    ScheduleParams p{8, 0};
    p.step_tokens = M;
    EXPECT_THAT(test::error_of([&] { build_schedule(model->config, p); }),
                HasSubstr(fmt::format("token steps of {} tokens (must be between 1 and 16)", M)));
  }
  ScheduleParams p{8, 0};
  p.step_tokens = 16;
  EXPECT_EQ(build_schedule(model->config, p).step_tokens, 16);
}

}  // namespace
}  // namespace mk
