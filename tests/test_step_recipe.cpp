// The step recipe (runtime/step_recipe.h): its chain and weights for every architecture, the schedule
// laid out from it, and the reference forward walking it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "runtime/reference.h"
#include "runtime/schedule.h"
#include "runtime/step_recipe.h"
#include "tests/helpers/error_of.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

using ::testing::HasSubstr;
using test::TinyModelSpec;
using LW = LayerWeights;
using MW = ModelWeights;

// Every tensor a model has is streamed by exactly one stage of a token step, and of a chunk step, and none
// that it lacks.
TEST(StepRecipe, EveryArchitectureNamesEachOfItsTensorsInExactlyOneTokenStepStage) {
  for (Arch arch : {Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3, Arch::Gemma3}) {
    SCOPED_TRACE(arch_name(arch));
    TinyModelSpec spec;
    spec.arch = arch;
    const auto model = test::load_tiny_model(spec, "recipe-weights");
    const StepRecipe r = build_step_recipe(model->config);
    ASSERT_EQ(r.layers.size(), size_t(model->config.num_layers));
    // A chunk step's layer (prefill) streams the same tensors, each in one stage too.
    for (size_t l = 0; l < r.layers.size(); ++l)
      for (const auto* stages : {&r.layers[l].step, &r.layers[l].chunk}) {
        const char* step = stages == &r.layers[l].step ? "token" : "chunk";
        std::vector<TensorView LW::*> uses;
        for (const Stage& st : *stages) uses.insert(uses.end(), st.layer_weights.begin(), st.layer_weights.end());
        for (auto m : LW::kAll) {
          const TensorView& t = model->weights.layers[l].*m;
          EXPECT_EQ(std::count(uses.begin(), uses.end(), m), t.present() ? 1 : 0)
              << step << " step, layer " << l << " tensor " << (t.present() ? t.name : "(absent)");
        }
      }
    std::vector<TensorView MW::*> head_uses;
    for (const auto* list : {&r.first, &r.last})
      for (const Stage& st : *list) head_uses.insert(head_uses.end(), st.model_weights.begin(), st.model_weights.end());
    for (auto m : {&MW::embed, &MW::final_norm, &MW::lm_head}) EXPECT_EQ(std::count(head_uses.begin(), head_uses.end(), m), 1);
    // Each layer's attention data is the config's; Gemma 3's tiny models slide a window of 6 in every
    // other layer (sliding_window_pattern 2), with their own RoPE base, and scale scores by
    // query_pre_attn_scalar^-0.5.
    const bool gemma = arch == Arch::Gemma3;
    for (size_t l = 0; l < r.layers.size(); ++l) {
      const LayerAttention& A = r.layers[l].attention;
      const bool slides = gemma && l % 2 == 0;
      EXPECT_EQ(A.qk_norm, arch == Arch::Qwen3 || gemma);
      EXPECT_EQ(A.qkv_bias, arch == Arch::Qwen2);
      EXPECT_FLOAT_EQ(A.scale, 1.0f / std::sqrt(float(spec.head_dim + (gemma ? 8 : 0))));
      EXPECT_FLOAT_EQ(A.rope_theta, slides ? 10000.0f : model->config.rope_theta);
      EXPECT_EQ(A.window, slides ? spec.sliding_window : 0);
      EXPECT_EQ(r.layers[l].activation, gemma ? Activation::GeluTanh : Activation::SiLU);
    }
    EXPECT_FLOAT_EQ(r.embed_scale, gemma ? std::sqrt(float(spec.hidden)) : 1.0f);
    EXPECT_FLOAT_EQ(r.norm_weight_offset, gemma ? 1.0f : 0.0f);
  }
}

ModelConfig small_config() {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 160;
  c.max_position = 512;
  return c;
}

TEST(StepRecipe, ABrokenChainIsRefusedNamingTheStage) {
  const ModelConfig c = small_config();
  StepRecipe r = build_step_recipe(c);
  // o_proj right after qkv: it reads attention's output, which nothing wrote.
  auto& steps = r.layers[1].step;
  steps.erase(steps.begin() + 1);
  EXPECT_THAT(test::error_of([&] { check_step_recipe(r); }),
              HasSubstr("layer 1 stage 'o_proj' reads the attention buffer, but the stage before it wrote qkv"));

  r = build_step_recipe(c);
  r.layers[2].chunk.pop_back();  // the chunk's layer ends with h, not the residual rows
  EXPECT_THAT(test::error_of([&] { check_step_recipe(r); }), HasSubstr("layer 2's chunk stages end with the chunk h buffer"));

  r = build_step_recipe(c);
  r.layers[0].step[2].spread = Spread::ChunkTiles;
  EXPECT_THAT(test::error_of([&] { check_step_recipe(r); }), HasSubstr("layer 0 stage 'o_proj' is laid out as a chunk step's"));

  r = build_step_recipe(c);
  r.layers[0].step[0].op = Op::Down;  // a row stage's op where kv-group rows are laid out
  EXPECT_THAT(test::error_of([&] { check_step_recipe(r); }), HasSubstr("layer 0 stage 'qkv' runs op down"));
}

// The ops of a schedule's instructions in canonical order, runs of one op collapsed: its stages.
std::vector<std::pair<int, Op>> stages_of(const std::vector<Instr>& instrs) {
  std::vector<Instr> sorted = instrs;
  std::sort(sorted.begin(), sorted.end(), [](const Instr& a, const Instr& b) { return a.seq < b.seq; });
  std::vector<std::pair<int, Op>> out;
  for (const Instr& in : sorted)
    if (out.empty() || out.back() != std::pair<int, Op>{in.layer, in.op}) out.emplace_back(in.layer, in.op);
  return out;
}

TEST(StepRecipe, TheScheduleLaysOutTheRecipesStagesInItsOrder) {
  const ModelConfig c = small_config();
  StepRecipe r = build_step_recipe(c);
  ScheduleParams p;
  p.num_workgroups = 6;
  p.chunk_tokens = 40;
  std::vector<std::pair<int, Op>> expected = {{0, Op::Embed}};
  for (int l = 0; l < c.num_layers; ++l)
    for (Op op : {Op::QKV, Op::Attention, Op::OProj, Op::GateUp, Op::Down}) expected.emplace_back(l, op);
  expected.emplace_back(0, Op::LMHead);
  expected.emplace_back(0, Op::Sample);
  const Schedule s = build_schedule(r, c, p);
  EXPECT_EQ(stages_of(s.instrs), expected);
  EXPECT_EQ(s.counter_names.size(), s.num_counters());
  EXPECT_THAT(s.counter_names, ::testing::Contains("layer 2 gate_up"));

  // A recipe whose layer 1 has no MLP: its schedule has no gate_up or down stage in layer 1, and the next
  // layer's qkv waits for layer 1's o_proj, the stage before it.
  auto& steps = r.layers[1].step;
  steps.erase(steps.begin() + 3, steps.end());
  auto& chunk = r.layers[1].chunk;
  chunk.erase(chunk.begin() + 5, chunk.end());
  check_step_recipe(r);
  const Schedule cut = build_schedule(r, c, p);
  expected.erase(std::find(expected.begin(), expected.end(), std::pair<int, Op>{1, Op::GateUp}),
                 std::find(expected.begin(), expected.end(), std::pair<int, Op>{2, Op::QKV}));
  EXPECT_EQ(stages_of(cut.instrs), expected);
  const auto oproj = std::find(cut.counter_names.begin(), cut.counter_names.end(), "layer 1 o_proj");
  ASSERT_NE(oproj, cut.counter_names.end());
  for (const Instr& in : cut.instrs)
    if (in.op == Op::QKV && in.layer == 2) {
      EXPECT_EQ(in.waits[0].counter, uint32_t(oproj - cut.counter_names.begin()));
    }
  const std::vector<Op> chunk_layer = {Op::ChunkNorm,  Op::ChunkQKV,  Op::ChunkRope,   Op::ChunkAttention,
                                       Op::ChunkOProj, Op::ChunkNorm, Op::ChunkGateUp, Op::ChunkDown};
  std::vector<std::pair<int, Op>> chunk_expected;
  for (int l = 0; l < c.num_layers; ++l)
    for (size_t k = 0; k < (l == 1 ? 5 : chunk_layer.size()); ++k) chunk_expected.emplace_back(l, chunk_layer[k]);
  EXPECT_EQ(stages_of(cut.chunk.instrs), chunk_expected);
}

// Gemma 3's post-norms folded (ScheduleParams::fold_post_norms): no post_norm stage or counter; embed
// writes x to x_alt (kStartsFoldedStep); every qkv folds the MLP post-norm of the layer before (layer 0's:
// embed's zeros), reading x_alt and writing x' to x; gate_up folds its layer's attention post-norm,
// reading x and writing x_alt; the LM head folds the last MLP post-norm from x_alt and writes nothing;
// one block of each writing stage writes; each folding stage waits for the stage before the post-norm.
// Not folded when asked so, or when a post-norm is not followed by a stage that can fold it.
TEST(StepRecipe, PostNormsAreFoldedIntoTheStageAfterEach) {
  TinyModelSpec spec;
  spec.arch = Arch::Gemma3;
  spec.layers = 3;
  const auto model = test::load_tiny_model(spec, "recipe-fold");
  const ModelConfig& c = model->config;
  ScheduleParams p;
  p.num_workgroups = 6;
  const Schedule s = build_schedule(c, p);
  ASSERT_TRUE(s.post_norms_folded);
  std::vector<std::pair<int, Op>> expected = {{0, Op::Embed}};
  for (int l = 0; l < c.num_layers; ++l)
    for (Op op : {Op::QKV, Op::Attention, Op::OProj, Op::GateUp, Op::Down}) expected.emplace_back(l, op);
  expected.emplace_back(0, Op::LMHead);
  expected.emplace_back(0, Op::Sample);
  EXPECT_EQ(stages_of(s.instrs), expected);
  for (const std::string& name : s.counter_names) EXPECT_THAT(name, ::testing::Not(HasSubstr("post_norm")));
  auto counter = [&](const std::string& name) {
    const auto it = std::find(s.counter_names.begin(), s.counter_names.end(), name);
    EXPECT_NE(it, s.counter_names.end()) << name;
    return uint32_t(it - s.counter_names.begin());
  };
  std::map<std::pair<int, Op>, int> writers;
  for (const Instr& in : s.instrs) {
    SCOPED_TRACE(testing::Message() << "layer " << in.layer << " " << op_name(in.op));
    const bool writes = in.flags & kWritesResidual, alt = in.flags & kReadsResidualAlt;
    if (writes) ++writers[{in.layer, in.op}];
    if (in.op == Op::Embed) {
      EXPECT_EQ(in.flags & kStartsFoldedStep, kStartsFoldedStep);
    } else if (in.op == Op::GateUp) {
      EXPECT_EQ(in.folds, kFoldsAttentionPostNorm);
      EXPECT_FALSE(alt);
      EXPECT_EQ(in.waits[0].counter, counter(fmt::format("layer {} o_proj", in.layer)));
    } else if (in.op == Op::QKV) {
      EXPECT_EQ(in.folds, kFoldsMlpPostNorm);
      EXPECT_TRUE(alt);
      EXPECT_EQ(folded_norm_layer(in, uint32_t(c.num_layers)), uint32_t(in.layer > 0 ? in.layer - 1 : 0));
      EXPECT_EQ(in.waits[0].counter, counter(in.layer > 0 ? fmt::format("layer {} down", in.layer - 1) : "embed"));
    } else if (in.op == Op::LMHead) {
      EXPECT_EQ(in.folds, kFoldsMlpPostNorm);
      EXPECT_TRUE(alt);
      EXPECT_FALSE(writes);
      EXPECT_EQ(folded_norm_layer(in, uint32_t(c.num_layers)), uint32_t(c.num_layers - 1));
      EXPECT_EQ(in.waits[0].counter, counter(fmt::format("layer {} down", c.num_layers - 1)));
    } else {
      EXPECT_EQ(in.folds, kFoldsNoNorm);
      EXPECT_FALSE(alt);
      EXPECT_FALSE(writes);
    }
  }
  for (int l = 0; l < c.num_layers; ++l) {
    EXPECT_EQ((writers[{l, Op::GateUp}]), 1) << "layer " << l;
    EXPECT_EQ((writers[{l, Op::QKV}]), 1) << "layer " << l;
  }

  // Asked for post-norm stages: they are there, and nothing folds.
  p.fold_post_norms = false;
  const Schedule stages = build_schedule(c, p);
  EXPECT_FALSE(stages.post_norms_folded);
  EXPECT_EQ(std::count_if(stages.instrs.begin(), stages.instrs.end(), [](const Instr& in) { return in.op == Op::PostNorm; }),
            2 * c.num_layers * p.num_workgroups);
  for (const Instr& in : stages.instrs) EXPECT_EQ(in.folds | (in.flags & (kReadsResidualAlt | kWritesResidual)), 0);

  // Layer 1 without its MLP: its attention post-norm is followed by layer 2's qkv, which cannot fold it
  // (qkv folds the MLP's post-norm of the layer before): no post-norm of the step is folded.
  p.fold_post_norms = true;
  StepRecipe r = build_step_recipe(c);
  auto& steps = r.layers[1].step;
  steps.erase(steps.begin() + 4, steps.end());
  check_step_recipe(r);
  const Schedule cut = build_schedule(r, c, p);
  EXPECT_FALSE(cut.post_norms_folded);
  for (const Instr& in : cut.instrs) EXPECT_EQ(in.folds, kFoldsNoNorm);

  // A model without post-norms has nothing to fold.
  EXPECT_FALSE(build_schedule(small_config(), p).post_norms_folded);
}

// A one-layer model's last position with a sliding window of w positions sees only the last w tokens,
// at relative positions RoPE makes position-free: the same logits as a model without the window fed
// those w tokens alone.
TEST(StepRecipe, TheReferenceWithASlidingWindowAttendsToTheLastWindowOfPositionsOnly) {
  TinyModelSpec spec;
  spec.arch = Arch::Mistral;
  spec.layers = 1;
  spec.dtype = DType::F32;
  const auto model = test::load_tiny_model(spec, "recipe-window");
  const std::vector<int32_t> tokens = {5, 17, 3, 99, 42, 7, 150, 8, 61};
  constexpr int kWindow = 4;

  ReferenceModel full(*model, 64);
  std::vector<float> unwindowed;
  for (int32_t t : tokens) unwindowed = full.forward(t);

  model->config.sliding_window = kWindow;
  ReferenceModel windowed(*model, 64);
  std::vector<float> got;
  for (int32_t t : tokens) got = windowed.forward(t);

  model->config.sliding_window = 0;
  ReferenceModel tail(*model, 64);
  std::vector<float> want;
  for (size_t i = tokens.size() - kWindow; i < tokens.size(); ++i) want = tail.forward(tokens[i]);

  ASSERT_EQ(got.size(), want.size());
  float max_diff = 0, max_change = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
    max_change = std::max(max_change, std::fabs(unwindowed[i] - want[i]));
  }
  EXPECT_LT(max_diff, 1e-4f);
  EXPECT_GT(max_change, 100 * max_diff) << "the window must change the logits for the check to mean anything";
}

}  // namespace
}  // namespace mk
