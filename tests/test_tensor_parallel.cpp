// Tensor parallel (runtime/tensor_parallel.h) on the emulator's virtual devices: the shards, the recipe and
// schedule of each device, the whole step against the fp32 reference and against one device, the
// happens-before checker across devices, and the errors for models that do not split.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "host/emulator/emulator.h"
#include "runtime/error.h"
#include "runtime/quantize.h"
#include "runtime/step_recipe.h"
#include "runtime/tensor_parallel.h"
#include "tests/helpers/emulator_vs_reference.h"
#include "tests/helpers/error_of.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

using ::testing::HasSubstr;
using test::error_of;
using test::load_tiny_model;
using test::TinyModelSpec;

// A tiny model with 4 kv heads of 2 query heads each and an MLP width that 4 devices divide.
TinyModelSpec splittable(Arch arch = Arch::Llama) {
  TinyModelSpec spec;
  spec.arch = arch;
  spec.heads = 8;
  spec.kv_heads = 4;
  spec.head_dim = 16;
  spec.hidden = 64;
  spec.intermediate = 128;
  spec.eos = {};
  return spec;
}

// A model whose shards' widths are whole scale groups of 128 columns, quantized at load to `format`.
std::unique_ptr<Model> quantized_splittable(MatrixFormat format, const std::string& tag) {
  TinyModelSpec spec = splittable();
  spec.hidden = 256, spec.intermediate = 512, spec.heads = 4, spec.kv_heads = 2, spec.head_dim = 64;
  LoadOptions load;
  load.quantize = format;
  return load_tiny_model(spec, tag, load);
}

EmulatorOptions options(int devices, int workgroups = 6) {
  EmulatorOptions opt;
  opt.tensor_parallel = devices;
  opt.num_workgroups = workgroups;
  opt.context = 48;
  opt.record_logits = true;
  return opt;
}

// ---------------------------------------------------------------------------------------------------
// Shards, recipes and schedules

TEST(TensorParallel, ShardsTakeTheirHeadsRowsAndColumnsAndTogetherHoldTheModel) {
  auto model = load_tiny_model(splittable(Arch::Qwen2), "tp-shards");  // Qwen2: q/k/v biases too
  const ModelConfig& c = model->config;
  const int D = 2;
  check_tensor_parallel(*model, D);
  for (int r = 0; r < D; ++r) {
    SCOPED_TRACE(r);
    const auto shard = shard_model(*model, D, r);
    EXPECT_EQ(shard->config.num_heads, c.num_heads / D);
    EXPECT_EQ(shard->config.num_kv_heads, c.num_kv_heads / D);
    EXPECT_EQ(shard->config.intermediate_size, c.intermediate_size / D);
    EXPECT_EQ(shard->config.hidden_size, c.hidden_size);
    EXPECT_EQ(shard->config.vocab_size, c.vocab_size);
    for (size_t l = 0; l < model->weights.layers.size(); ++l) {
      const LayerWeights& full = model->weights.layers[l];
      const LayerWeights& s = shard->weights.layers[l];
      const int64_t H = c.hidden_size, q = s.wq.shape[0], kv = s.wk.shape[0], I = s.w_gate.shape[0];
      ASSERT_EQ(q, int64_t(c.q_dim() / D));
      ASSERT_EQ(kv, int64_t(c.kv_dim() / D));
      ASSERT_EQ(s.wo.shape, (std::vector<int64_t>{H, q}));
      ASSERT_EQ(s.w_down.shape, (std::vector<int64_t>{H, I}));
      for (int64_t i = 0; i < q; ++i) {
        EXPECT_EQ(s.bq.at(i), full.bq.at(r * q + i));
        for (int64_t k = 0; k < H; k += 7) EXPECT_EQ(s.wq.at(i * H + k), full.wq.at((r * q + i) * H + k));
      }
      for (int64_t i = 0; i < kv; ++i) {
        EXPECT_EQ(s.bv.at(i), full.bv.at(r * kv + i));
        for (int64_t k = 0; k < H; k += 5) EXPECT_EQ(s.wk.at(i * H + k), full.wk.at((r * kv + i) * H + k));
      }
      for (int64_t row = 0; row < H; row += 3) {
        for (int64_t k = 0; k < q; ++k) EXPECT_EQ(s.wo.at(row * q + k), full.wo.at(row * c.q_dim() + r * q + k));
        for (int64_t k = 0; k < I; ++k) EXPECT_EQ(s.w_down.at(row * I + k), full.w_down.at(row * c.intermediate_size + r * I + k));
      }
      for (int64_t i = 0; i < I; i += 3) EXPECT_EQ(s.w_up.at(i * H + 1), full.w_up.at((r * I + i) * H + 1));
    }
  }
}

TEST(TensorParallel, QuantizedShardsKeepTheirScalesWithTheirRowsAndColumns) {
  for (MatrixFormat f : {MatrixFormat::FP8, MatrixFormat::INT4}) {
    SCOPED_TRACE(matrix_format_name(f));
    auto model = quantized_splittable(f, "tp-quantized-shards");
    const ModelConfig& c = model->config;
    for (int r = 0; r < 2; ++r) {
      const auto shard = shard_model(*model, 2, r);
      const LayerWeights& full = model->weights.layers[1];
      const LayerWeights& s = shard->weights.layers[1];
      const int64_t H = c.hidden_size, q = s.wo.shape[1], I = s.w_down.shape[1];
      for (int64_t row = 0; row < H; row += 17) {
        for (int64_t k = 0; k < q; ++k) ASSERT_EQ(s.wo.at(row * q + k), full.wo.at(row * c.q_dim() + r * q + k));
        for (int64_t k = 0; k < I; ++k) ASSERT_EQ(s.w_down.at(row * I + k), full.w_down.at(row * c.intermediate_size + r * I + k));
      }
      for (int64_t i = 0; i < I; i += 13)
        for (int64_t k = 0; k < H; ++k) ASSERT_EQ(s.w_gate.at(i * H + k), full.w_gate.at((r * I + i) * H + k));
    }
  }
}

TEST(TensorParallel, EachDevicesRecipeSumsItsRowStagesAndSharesTheVocabulary) {
  auto model = load_tiny_model(splittable(), "tp-recipe");
  const int D = 4;
  const ModelConfig shard = shard_config(model->config, D);
  uint32_t vocab_rows = 0;
  for (int r = 0; r < D; ++r) {
    SCOPED_TRACE(r);
    const StepRecipe recipe = tensor_parallel_recipe(shard, D, r);
    std::vector<std::string> names;
    for (const Stage& st : recipe.layers[0].step) names.push_back(st.name);
    EXPECT_THAT(names, ::testing::ElementsAre("qkv", "attention", "o_proj", "o_proj all_reduce", "gate_up", "down", "down all_reduce"));
    const Stage& o_proj = recipe.layers[0].step[2];
    EXPECT_TRUE(o_proj.pushes);
    EXPECT_EQ(o_proj.writes, Buffer::Partials);
    EXPECT_TRUE(recipe.layers[0].chunk.empty());
    const Stage& lm_head = recipe.last[0];
    EXPECT_EQ(lm_head.first_row, vocab_rows);
    vocab_rows += lm_head.rows;
    EXPECT_TRUE(recipe.last[1].home_only);

    const Schedule s = build_schedule(recipe, shard, ScheduleParams{6, 0});
    EXPECT_EQ(s.devices, D);
    EXPECT_EQ(s.rank, r);
    EXPECT_EQ(s.lm_head_slots, 6 * D);
    uint32_t o_proj_blocks = 0, samples = 0;
    for (const Instr& in : s.instrs) {
      if (in.op == Op::OProj && in.layer == 0) {
        ++o_proj_blocks;
        EXPECT_TRUE(in.flags & kPushes);
      }
      if (in.op == Op::Sample) ++samples;
      if (in.op == Op::LMHead) {
        EXPECT_GE(in.slot, r * 6);
        EXPECT_LT(in.slot, r * 6 + 6);
      }
    }
    EXPECT_EQ(samples, r == 0 ? 1u : 0u);  // the home device samples
    for (const Instr& in : s.instrs) {
      if (in.op == Op::AllReduce && in.layer == 0 && in.slot == 0) {
        EXPECT_EQ(in.waits[0].per_step, o_proj_blocks * D);
      }
    }
  }
  EXPECT_EQ(vocab_rows, uint32_t(model->config.vocab_size));
}

// ---------------------------------------------------------------------------------------------------
// The step on 2 and 4 devices

struct SplitCase {
  Arch arch;
  DType dtype;
  bool tied;
  int devices;
};

class TensorParallelVsReference : public ::testing::TestWithParam<SplitCase> {};

TEST_P(TensorParallelVsReference, LogitsAndGreedyTokensMatch) {
  const SplitCase c = GetParam();
  TinyModelSpec spec = splittable(c.arch);
  spec.dtype = c.dtype;
  spec.tied = c.tied;
  if (c.arch == Arch::Qwen3) spec.head_dim = 32;
  auto model = load_tiny_model(spec, "tp-ref");
  test::expect_emulator_matches_reference(*model, {1, 5, 9, 33, 7}, options(c.devices), 20);
}

INSTANTIATE_TEST_SUITE_P(
    ArchitecturesAndDevices, TensorParallelVsReference,
    ::testing::Values(SplitCase{Arch::Llama, DType::BF16, true, 2}, SplitCase{Arch::Llama, DType::F32, false, 4},
                      SplitCase{Arch::Qwen2, DType::BF16, false, 2}, SplitCase{Arch::Qwen3, DType::F16, true, 4},
                      SplitCase{Arch::Gemma3, DType::BF16, true, 2}, SplitCase{Arch::Gemma3, DType::F32, false, 4}),
    [](const auto& test_info) {
      const SplitCase& c = test_info.param;
      return fmt::format("{}_{}_{}_{}devices", arch_name(c.arch), dtype_name(c.dtype), c.tied ? "tied" : "untied", c.devices);
    });

TEST(TensorParallel, QuantizedModelsMatchTheReference) {
  for (MatrixFormat f : {MatrixFormat::FP8, MatrixFormat::INT4}) {
    SCOPED_TRACE(matrix_format_name(f));
    auto model = quantized_splittable(f, "tp-quantized");
    test::expect_emulator_matches_reference(*model, {1, 5, 9, 33, 7}, options(2, 5), 12);
  }
}

// The devices' sums differ from one device's only in the order of their additions: the logits agree to
// rounding, and so do the greedy tokens.
TEST(TensorParallel, TwoAndFourDevicesGiveOneDevicesLogits) {
  auto model = load_tiny_model(splittable(), "tp-vs-one");
  auto run = [&](int devices) {
    Emulator emu(*model, options(devices));
    auto tokens = test::greedy(emu, {3, 4, 5, 6}, 16).tokens;
    return std::make_pair(tokens, emu.recorded_logits());
  };
  const auto one = run(1);
  for (int devices : {2, 4}) {
    SCOPED_TRACE(devices);
    const auto split = run(devices);
    EXPECT_EQ(split.first, one.first);
    ASSERT_EQ(split.second.size(), one.second.size());
    for (size_t i = 0; i < one.second.size(); ++i) {
      float scale = 0.f, diff = 0.f;
      for (size_t k = 0; k < one.second[i].size(); ++k)
        scale = std::max(scale, std::abs(one.second[i][k])), diff = std::max(diff, std::abs(one.second[i][k] - split.second[i][k]));
      EXPECT_LT(diff, 1e-4f * scale) << "step " << i;
    }
  }
}

// Every device sums the partials in device order, so the result does not depend on who ran when: the same
// tokens under every interleaving, sampled from the same seed, with the checker on.
TEST(TensorParallel, EveryInterleavingSamplesTheSameTokens) {
  TinyModelSpec spec = splittable();
  spec.weight_scale = 0.02f;  // flatter distributions: sampling has choices
  auto model = load_tiny_model(spec, "tp-sampling");
  auto run = [&](Interleaving policy, uint64_t seed, uint64_t sampling_seed) {
    EmulatorOptions opt = options(2, 5);
    opt.interleaving = policy;
    opt.interleave_seed = seed;
    Emulator emu(*model, opt);
    GenerateRequest req;
    req.input = {1, 2, 3};
    req.max_new_tokens = 16;
    req.sampling = SamplingParams{0.9f, 40, 0.95f, 0.02f, sampling_seed};
    return emu.generate(req, {}).tokens;
  };
  const auto first = run(Interleaving::Random, 1, 7);
  ASSERT_EQ(first.size(), 16u);
  EXPECT_EQ(run(Interleaving::Random, 2, 7), first);
  EXPECT_EQ(run(Interleaving::RoundRobin, 1, 7), first);
  EXPECT_EQ(run(Interleaving::Eager, 1, 7), first);
  EXPECT_NE(run(Interleaving::Random, 1, 8), first);
}

TEST(TensorParallel, TurnsContinueFromEveryDevicesCache) {
  auto model = load_tiny_model(splittable(), "tp-turns");
  Emulator split(*model, options(2)), one(*model, options(1));
  for (const std::vector<int32_t>& turn : {std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{9, 8}, std::vector<int32_t>{4}}) {
    EXPECT_EQ(test::greedy(split, turn, 5).tokens, test::greedy(one, turn, 5).tokens);
    EXPECT_EQ(split.position(), one.position());
  }
  EXPECT_THAT(split.name(), HasSubstr("2 virtual devices"));
}

// Steps of several tokens, prompt tokens and verified drafts: the home device's sample op writes the next
// step's span and drafts on every device. A repetitive prompt gives the drafter matches; the reply is the
// one device's, token for token, with the checker on under two interleavings.
TEST(TensorParallel, StepsOfSeveralTokensAndDraftsGiveOneDevicesTokens) {
  auto model = load_tiny_model(splittable(), "tp-steps");
  std::vector<int32_t> prompt;
  for (int i = 0; i < 18; ++i) prompt.push_back(int32_t(3 + i % 6));
  Emulator one_device(*model, options(1));
  const auto one = test::greedy(one_device, prompt, 20).tokens;
  for (Interleaving policy : {Interleaving::Random, Interleaving::RoundRobin}) {
    EmulatorOptions opt = options(2);
    opt.interleaving = policy;
    opt.step_tokens = 4;
    opt.speculation.drafter = Drafter::Lookup;
    Emulator split(*model, opt);
    const GenerateResult r = test::greedy(split, prompt, 20);
    EXPECT_EQ(r.tokens, one) << interleaving_name(policy);
    EXPECT_GT(r.stats.drafted_tokens, 0);
    EXPECT_LE(r.stats.steps, 5 + 19);  // the prompt in 5 steps of up to 4 tokens; at most a step per later token
    std::printf("note: %s: %d steps, %d of %d drafts kept\n", interleaving_name(policy), r.stats.steps, r.stats.accepted_tokens,
                r.stats.drafted_tokens);
  }
}

// ---------------------------------------------------------------------------------------------------
// The checker and the deadlock report across devices

std::string run_and_catch(const Model& model, std::vector<Schedule> schedules, const EmulatorOptions& opt) {
  try {
    Emulator emu(model, std::move(schedules), opt);
    test::greedy(emu, {1, 2, 3}, 4);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallel, TheCheckerCatchesAnAllReduceThatDoesNotWaitForTheOtherDevices) {
  auto model = load_tiny_model(splittable(), "tp-missing-wait");
  const EmulatorOptions opt = options(2, 5);
  const std::vector<Schedule> good = emulator_schedules(*model, opt);
  // The planted bug: on device 1, layer 1's o_proj all_reduce counts its own device's o_proj blocks only.
  std::vector<Schedule> bad = good;
  int broken = 0;
  for (Instr& in : bad[1].instrs)
    if (in.op == Op::AllReduce && in.layer == 1 && in.slot == 0) in.waits[0].per_step /= 2, ++broken;
  ASSERT_GT(broken, 0);
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    SCOPED_TRACE(interleaving_name(policy));
    EmulatorOptions o = opt;
    o.interleaving = policy;
    const std::string msg = run_and_catch(*model, bad, o);
    EXPECT_THAT(msg, HasSubstr("dependency violation"));
    EXPECT_THAT(msg, ::testing::ContainsRegex("consumer: gpu 1, step [0-9]+, workgroup [0-9]+: layer 1 all_reduce rows"));
    EXPECT_THAT(msg, ::testing::ContainsRegex("producer: gpu [01], step [0-9]+, workgroup [0-9]+: layer 1 o_proj rows"));
    EXPECT_THAT(msg, HasSubstr("buffer gpu 1 all-reduce partials"));
    EXPECT_EQ(run_and_catch(*model, good, o), "");
  }
}

// Why down's partials have a set of their own: with one set, a device's down overwrites the partials of
// its o_proj that a slower device's all_reduce has yet to read (nothing orders the two), and the checker
// says so.
TEST(TensorParallel, TheCheckerShowsWhyDownsPartialsNeedASetOfTheirOwn) {
  auto model = load_tiny_model(splittable(), "tp-one-set");
  const EmulatorOptions opt = options(2, 5);
  std::vector<Schedule> one_set = emulator_schedules(*model, opt);
  for (Schedule& s : one_set)
    for (Instr& in : s.instrs)
      if ((in.op == Op::Down || in.op == Op::AllReduce) && in.slot == 1) in.slot = 0;
  std::string msg;
  for (uint64_t seed = 1; seed <= 4 && msg.empty(); ++seed) {
    EmulatorOptions o = opt;
    o.interleave_seed = seed;
    msg = run_and_catch(*model, one_set, o);
  }
  EXPECT_THAT(msg, HasSubstr("overwrote data that an earlier instruction still had to read"));
  EXPECT_THAT(msg, ::testing::ContainsRegex("producer: gpu [01], step [0-9]+, workgroup [0-9]+: layer [01] down rows"));
}

TEST(TensorParallel, ADeadlockNamesTheDevice) {
  auto model = load_tiny_model(splittable(), "tp-deadlock");
  const EmulatorOptions opt = options(2, 4);
  std::vector<Schedule> s = emulator_schedules(*model, opt);
  for (Instr& in : s[1].instrs)
    if (in.op == Op::GateUp && in.layer == 0) in.waits[0].per_step += 1;  // waits for a block that never comes
  const std::string msg = run_and_catch(*model, s, opt);
  EXPECT_THAT(msg, HasSubstr("deadlock"));
  EXPECT_THAT(msg, ::testing::ContainsRegex("gpu 1:(.|\n)*layer 0 gate_up rows"));
}

// ---------------------------------------------------------------------------------------------------
// Models and options that do not split

TEST(TensorParallel, ModelsThatDoNotSplitAreRefusedNamingWhy) {
  TinyModelSpec spec = splittable();
  spec.kv_heads = 2;
  auto two_kv = load_tiny_model(spec, "tp-kv");
  EXPECT_THAT(error_of([&] { Emulator emu(*two_kv, options(4)); }), HasSubstr("num_key_value_heads (2) is not a multiple of 4"));
  spec = splittable();
  spec.heads = 6, spec.kv_heads = 3;  // 3 devices take a kv head each, but not a third of 128 MLP rows
  auto odd_mlp = load_tiny_model(spec, "tp-mlp");
  EXPECT_THAT(error_of([&] { Emulator emu(*odd_mlp, options(16)); }), HasSubstr("1 to 8 are supported"));
  EXPECT_THAT(error_of([&] { Emulator emu(*odd_mlp, options(3)); }), HasSubstr("intermediate_size (128) is not a multiple of 3"));

  auto model = load_tiny_model(splittable(), "tp-options");
  EmulatorOptions chunked = options(2);
  chunked.chunk_tokens = 16;
  EXPECT_THAT(error_of([&] { Emulator emu(*model, chunked); }), HasSubstr("chunk steps (prefill) are not built for tensor parallel"));
}

// An int4 shard of 192 MLP columns would cut the 128-column scale groups of down_proj in two.
TEST(TensorParallel, AQuantizedShardThatCutsAScaleGroupIsRefused) {
  TinyModelSpec spec = splittable();
  spec.hidden = 256, spec.intermediate = 384, spec.heads = 4, spec.kv_heads = 2, spec.head_dim = 64;
  LoadOptions load;
  load.quantize = MatrixFormat::INT4;
  auto model = load_tiny_model(spec, "tp-cut-scales", load);
  const std::string msg = error_of([&] { Emulator emu(*model, options(2)); });
  EXPECT_THAT(msg, HasSubstr("tensor model.layers.0.mlp.down_proj.weight: a device's columns [0, 192) cut its scale blocks of 128 columns"));
}

}  // namespace
}  // namespace mk
