// The emulator against the reference, across architectures, dtypes, workgroup counts and interleavings;
// and the dependency checker against schedules with planted bugs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "host/emulator/dependency_checker.h"
#include "host/emulator/emulator.h"
#include "runtime/step_recipe.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/presets.h"
#include "runtime/quantize.h"
#include "runtime/reference.h"
#include "tests/helpers/emulator_vs_reference.h"
#include "tests/helpers/error_of.h"
#include "tests/helpers/logits_compare.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

using ::testing::HasSubstr;
using test::TinyModelSpec;

using test::load_tiny_model;

using test::greedy;

using test::expect_emulator_matches_reference;

struct ArchCase {
  Arch arch;
  DType dtype;
  bool tied;
  bool llama3_rope;
};

class EmulatorVsReference : public ::testing::TestWithParam<ArchCase> {};

TEST_P(EmulatorVsReference, LogitsAndGreedyTokensMatch) {
  const ArchCase c = GetParam();
  TinyModelSpec spec;
  spec.arch = c.arch;
  spec.dtype = c.dtype;
  spec.tied = c.tied;
  spec.llama3_rope = c.llama3_rope;
  spec.eos = {};  // no EOS: run the full length
  if (c.arch == Arch::Qwen3) spec.head_dim = 32;  // Qwen3's head_dim differs from hidden/heads
  auto model = load_tiny_model(spec, "emu-ref");
  EmulatorOptions opt;
  opt.num_workgroups = 13;
  opt.context = 64;
  opt.record_logits = true;
  expect_emulator_matches_reference(*model, {1, 5, 9, 33, 7}, opt, 24);
}

INSTANTIATE_TEST_SUITE_P(
    AllArchitectures, EmulatorVsReference,
    ::testing::Values(ArchCase{Arch::Llama, DType::BF16, true, true}, ArchCase{Arch::Llama, DType::F32, false, false},
                      ArchCase{Arch::Mistral, DType::F16, false, false}, ArchCase{Arch::Qwen2, DType::BF16, true, false},
                      ArchCase{Arch::Qwen3, DType::BF16, false, false}, ArchCase{Arch::Qwen3, DType::F16, true, false},
                      // Gemma 3: every other layer slides a window of 6 over the 29 positions.
                      ArchCase{Arch::Gemma3, DType::BF16, true, false}, ArchCase{Arch::Gemma3, DType::F32, false, false}),
    [](const auto& test_info) {
      const ArchCase& c = test_info.param;
      return std::string(arch_name(c.arch)) + "_" + std::string(dtype_name(c.dtype)) + (c.tied ? "_tied" : "_untied");
    });

// Quantized weights (quantized at load): the reference computes on the dequantized weights, the emulator
// on the image's rows (codes, group scales and zero points), with the embedding and LM head quantized
// too or kept in bf16.
struct QuantizedCase {
  Quantize quantize;
  bool quantize_head;
  MatrixFormat format;
};

class EmulatorQuantized : public ::testing::TestWithParam<QuantizedCase> {};

TEST_P(EmulatorQuantized, MatchesTheReferenceOnTheDequantizedWeights) {
  const QuantizedCase& q = GetParam();
  for (Arch arch : {Arch::Llama, Arch::Qwen2, Arch::Qwen3}) {
    SCOPED_TRACE(arch_name(arch));
    TinyModelSpec spec;
    spec.arch = arch;
    spec.hidden = 256, spec.intermediate = 352, spec.heads = 4, spec.kv_heads = 2, spec.head_dim = 64;
    spec.tied = arch == Arch::Qwen2;
    spec.eos = {};
    auto dir = test::make_temp_dir("emu-quantized");
    test::write_tiny_model(dir, spec);
    LoadOptions load;
    load.quantize = q.quantize;
    load.quantize_head = q.quantize_head;
    const auto model = load_model(dir, load);
    ASSERT_EQ(model->formats.body, q.format);
    ASSERT_EQ(model->formats.head, q.quantize_head ? q.format : MatrixFormat::BF16);
    EmulatorOptions opt;
    opt.num_workgroups = 11;
    opt.context = 48;
    opt.record_logits = true;
    expect_emulator_matches_reference(*model, {1, 5, 9, 33, 7}, opt, 16);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, EmulatorQuantized,
                         ::testing::Values(QuantizedCase{MatrixFormat::FP8, true, MatrixFormat::FP8},
                                           QuantizedCase{MatrixFormat::FP8, false, MatrixFormat::FP8},
                                           QuantizedCase{MatrixFormat::INT4, true, MatrixFormat::INT4},
                                           QuantizedCase{MatrixFormat::INT4, false, MatrixFormat::INT4}),
                         [](const auto& test_info) {
                           return std::string(matrix_format_name(test_info.param.format)) + (test_info.param.quantize_head ? "_head_quantized" : "_head_bf16");
                         });

TEST(Emulator, GroupedQueryRatiosAndWorkgroupCounts) {
  for (auto [heads, kv] : {std::pair{4, 4}, std::pair{6, 2}, std::pair{8, 1}}) {
    TinyModelSpec spec;
    spec.heads = heads;
    spec.kv_heads = kv;
    spec.head_dim = 8;
    spec.eos = {};
    auto model = load_tiny_model(spec, "emu-gqa");
    for (int wgs : {1, 5, 132, 304}) {
      SCOPED_TRACE(testing::Message() << heads << " heads, " << kv << " kv heads, " << wgs << " workgroups");
      EmulatorOptions opt;
      opt.num_workgroups = wgs;
      opt.context = 40;
      opt.record_logits = true;
      opt.check_dependencies = wgs <= 132;  // keep the test fast
      expect_emulator_matches_reference(*model, {3, 4}, opt, 8);
    }
  }
}

TEST(Emulator, LongSequencesUseSeveralSplitsAndStillMatchTheReference) {
  // Past kPositionsPerSplit positions, attention is split over several workgroups and o_proj combines
  // their partials: a prompt of 300 tokens activates 3 splits of the 8 this schedule has.
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "emu-long");
  EmulatorOptions opt;
  opt.num_workgroups = 16;
  opt.context = 400;
  opt.record_logits = true;
  opt.check_dependencies = true;
  ASSERT_EQ(build_schedule(model->config, ScheduleParams{16, 0}).attention_splits, 8);
  EXPECT_EQ(active_attention_splits(300, 8, attention_split_positions_log2(model->config.head_dim)), 3);
  const std::vector<int32_t> prompt = test::long_prompt(300);
  expect_emulator_matches_reference(*model, prompt, opt, 12);
}

// Gemma 3's sliding layers attend to their last 96 positions, which their splits cut (3 of 8 active at
// 96 positions), while the global layers cover all 300; the post-norm stages sit between o_proj / down
// and the residual stream. Every interleaving, with the dependency checker on, matches the reference.
// 16 workgroups, a 320-position context, the checker on, the logits recorded, in `policy`'s order.
EmulatorOptions checked_interleaving(Interleaving policy, uint64_t seed) {
  EmulatorOptions opt;
  opt.num_workgroups = 16;
  opt.context = 320;
  opt.interleaving = policy;
  opt.interleave_seed = seed;
  opt.record_logits = true;
  opt.check_dependencies = true;
  return opt;
}

// A tiny Gemma 3 whose sliding layers attend to their last 96 positions, without EOS.
std::unique_ptr<Model> gemma3_windowed_model(const char* name) {
  TinyModelSpec spec;
  spec.arch = Arch::Gemma3;
  spec.sliding_window = 96;
  spec.eos = {};
  return load_tiny_model(spec, name);
}

TEST(Emulator, Gemma3SlidingLayersSplitTheirWindowUnderEveryInterleaving) {
  auto model = gemma3_windowed_model("emu-gemma3-window");
  const std::vector<int32_t> prompt = test::long_prompt(300);
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    SCOPED_TRACE(interleaving_name(policy));
    expect_emulator_matches_reference(*model, prompt, checked_interleaving(policy, 3), 6);
  }
}

// Gemma 3's post-norms folded into the stage after each (the default) or run as stages of their own: the
// same logits, bit for bit (the fold computes x + RMSNorm(projected) as the post_norm stage does), under
// every interleaving with the dependency checker watching the residual's two buffers; with steps of one
// token and of three (the fold in every column), and with the h slices between gate_up and down (gate_up,
// which folds, then signals slices). Both match the reference.
TEST(Emulator, Gemma3FoldedPostNormsGiveTheLogitsOfPostNormStages) {
  auto model = gemma3_windowed_model("emu-gemma3-fold");
  const std::vector<int32_t> prompt = test::long_prompt(40);
  for (int step_tokens : {1, 3})
    for (int h_slice_cols : {0, 16})
      for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
        SCOPED_TRACE(testing::Message() << interleaving_name(policy) << ", steps of " << step_tokens << ", h slices of "
                                        << h_slice_cols);
        std::vector<std::vector<float>> logits[2];
        for (bool fold : {false, true}) {
          EmulatorOptions opt = checked_interleaving(policy, 5);
          opt.context = 64;
          opt.chunk_tokens = 0;  // the prompt through token steps too
          opt.step_tokens = step_tokens;
          opt.h_slice_cols = h_slice_cols;
          opt.fold_post_norms = fold;
          Emulator emu(*model, opt);
          ASSERT_EQ(emu.schedule().post_norms_folded, fold);
          GenerateRequest req;
          req.input = prompt;
          req.max_new_tokens = 5;
          const GenerateResult result = emu.generate(req, {});
          ASSERT_EQ(result.tokens.size(), 5u) << stop_reason_name(result.stop);
          logits[fold] = emu.recorded_logits();
          if (policy == Interleaving::Random && h_slice_cols == 0) expect_emulator_matches_reference(*model, prompt, opt, 5);
        }
        ASSERT_EQ(logits[0].size(), logits[1].size());
        for (size_t i = 0; i < logits[0].size(); ++i) EXPECT_EQ(logits[0][i], logits[1][i]) << "step " << i;
      }
}

// The Llama family's windows, past them: Mistral's on every layer, Qwen2's from max_window_layers on (layer
// 0 global, layer 1 sliding). A 300-token prompt over windows of 40 positions: every interleaving, with
// the dependency checker on, matches the reference, which attends to each position's last 40.
TEST(Emulator, LlamaFamilyWindowsRunPastTheirLength) {
  for (const Arch arch : {Arch::Mistral, Arch::Qwen2}) {
    TinyModelSpec spec;
    spec.arch = arch;
    spec.family_window = 40;
    spec.max_window_layers = 1;
    spec.eos = {};
    auto model = load_tiny_model(spec, "emu-family-window");
    ASSERT_EQ(model->config.sliding_window, 40);
    const StepRecipe recipe = build_step_recipe(model->config);
    EXPECT_EQ(recipe.layers[0].attention.window, arch == Arch::Mistral ? 40 : 0);
    EXPECT_EQ(recipe.layers[1].attention.window, 40);
    const std::vector<int32_t> prompt = test::long_prompt(300);
    for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Random}) {
      SCOPED_TRACE(fmt::format("{} {}", arch_name(arch), interleaving_name(policy)));
      expect_emulator_matches_reference(*model, prompt, checked_interleaving(policy, 5), 6);
    }
  }
}

// Two schedules of one model, each run by the emulator with the dependency checker on: six greedy tokens
// from the same prompt, and the same tokens and logits bit for bit.
void expect_same_tokens_and_logits(const Model& model, const Schedule& a, const Schedule& b) {
  ASSERT_EQ(a.num_workgroups, b.num_workgroups);
  EmulatorOptions opt;
  opt.num_workgroups = a.num_workgroups;
  opt.context = 48;
  opt.record_logits = true;
  opt.check_dependencies = true;
  Emulator ea(model, a, opt), eb(model, b, opt);
  const auto ra = greedy(ea, {2, 7, 11}, 6), rb = greedy(eb, {2, 7, 11}, 6);
  ASSERT_EQ(ra.tokens.size(), 6u);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(ea.recorded_logits(), eb.recorded_logits());
}

TEST(Schedule, StageBarrierScheduleMakesAttentionWaitForEveryGroup) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "emu-flat");
  const Schedule dataflow = build_schedule(model->config, ScheduleParams{16, 0, false});
  const Schedule flat = build_schedule(model->config, ScheduleParams{16, 0, true});
  const int groups = model->config.num_kv_heads;
  ASSERT_GT(groups, 1);
  EXPECT_EQ(flat.num_counters() + uint32_t((groups - 1) * model->config.num_layers), dataflow.num_counters());
  for (size_t i = 0; i < flat.instrs.size(); ++i) {
    if (flat.instrs[i].op != Op::Attention) continue;
    ASSERT_EQ(flat.instrs[i].num_waits, 1);
    EXPECT_EQ(flat.instrs[i].waits[0].per_step, uint32_t(groups) * dataflow.instrs[i].waits[0].per_step);
  }
  // And it computes the same thing as the dataflow schedule, with every access ordered.
  expect_same_tokens_and_logits(*model, flat, dataflow);
}

// Every attention item of a kv group waits for all of the group's QKV blocks, so a workgroup holding two
// blocks of one layer would hold up its group. With at least as many workgroups as groups, none does.
TEST(Schedule, NoWorkgroupRunsTwoQkvBlocksOfALayer) {
  for (const std::string name : {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen3-1.7b"})
    for (int W : {8, 100, 114, 132, 304}) {
      const ModelConfig c = preset_config(name);
      const Schedule s = build_schedule(c, ScheduleParams{W, 0, false});
      for (int w = 0; w < W; ++w) {
        std::vector<int> qkv_blocks(size_t(c.num_layers), 0);
        for (uint32_t i = s.wg_begin[size_t(w)]; i < s.wg_begin[size_t(w) + 1]; ++i)
          if (s.instrs[i].op == Op::QKV) ++qkv_blocks[s.instrs[i].layer];
        for (int l = 0; l < c.num_layers; ++l)
          ASSERT_LE(qkv_blocks[size_t(l)], 1) << name << ", " << W << " workgroups: workgroup " << w << ", layer " << l;
      }
    }
}

// Row stages cut into fewer blocks than workgroups (ScheduleParams::narrow_workgroups): the narrowed
// stages have that many blocks a layer, the others one per workgroup, and the emulator computes the same
// tokens and logits as with the default schedule, with every access ordered.
TEST(Schedule, NarrowStagesComputeTheSameThingWithEveryAccessOrdered) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "emu-narrow");
  const int W = 16, narrow = 5;
  ScheduleParams np{W, 0, false};
  np.narrow_workgroups = narrow;
  np.narrow_ops = op_bit(Op::QKV) | op_bit(Op::OProj) | op_bit(Op::Down);
  const Schedule narrowed = build_schedule(model->config, np), wide = build_schedule(model->config, ScheduleParams{W, 0, false});
  const int layers = model->config.num_layers, groups = model->config.num_kv_heads;
  auto count = [](const Schedule& s, Op op) { return std::count_if(s.instrs.begin(), s.instrs.end(), [&](const Instr& in) { return in.op == op; }); };
  EXPECT_EQ(count(narrowed, Op::QKV), layers * groups * (narrow / groups));
  EXPECT_EQ(count(narrowed, Op::OProj), layers * narrow);
  EXPECT_EQ(count(narrowed, Op::Down), layers * narrow);
  EXPECT_EQ(count(narrowed, Op::GateUp), layers * W);
  EXPECT_EQ(count(wide, Op::OProj), layers * W);
  expect_same_tokens_and_logits(*model, narrowed, wide);

  np.narrow_workgroups = W + 1;
  EXPECT_THROW(build_schedule(model->config, np), Error);
  np.narrow_workgroups = narrow;
  np.narrow_ops = op_bit(Op::Attention);
  EXPECT_THROW(build_schedule(model->config, np), Error);
}

TEST(Schedule, SplitRangesCoverTheCacheExactlyOnce) {
  for (int hd : {64, 128, 256})
  for (int S : {1, 3, 8, 16, 32})
    for (int n : {1, 2, 63, 64, 65, 127, 128, 129, 300, 1000, 4097}) {
      std::vector<int> covered(size_t(n), 0);
      for (int split = 0; split < S; ++split) {
        int p0, p1;
        attention_split_range(n, S, attention_split_positions_log2(hd), split, &p0, &p1);
        ASSERT_LE(0, p0);
        ASSERT_LE(p0, p1);
        ASSERT_LE(p1, n);
        for (int p = p0; p < p1; ++p) ++covered[size_t(p)];
        if (split >= active_attention_splits(n, S, attention_split_positions_log2(hd))) {
          EXPECT_EQ(p0, p1) << "inactive split " << split;
        }
      }
      for (int p = 0; p < n; ++p) ASSERT_EQ(covered[size_t(p)], 1) << "head_dim " << hd << " S " << S << " n " << n << " position " << p;
    }
}

TEST(Schedule, ASplitOfAShortSequenceIsOneTile) {
  // Heads up to 64 wide: 128 positions a split, one tile; wider heads' tiles hold fewer, so their splits
  // halve until one fits: more workgroups share a short sequence instead of each walking two tiles.
  EXPECT_EQ(attention_split_positions_log2(64), 7);
  EXPECT_EQ(attention_split_positions_log2(128), 6);
  EXPECT_EQ(attention_split_positions_log2(256), 5);
  for (int hd : {32, 64, 96, 128, 256}) EXPECT_LE(1 << attention_split_positions_log2(hd), attention_tile_positions(hd)) << hd;
  EXPECT_EQ(active_attention_splits(1024, 16, attention_split_positions_log2(64)), 8);
  EXPECT_EQ(active_attention_splits(1024, 16, attention_split_positions_log2(128)), 16);
  int p0, p1;
  attention_split_range(1152, 16, attention_split_positions_log2(128), 15, &p0, &p1);
  EXPECT_LE(p1 - p0, attention_tile_positions(128));  // depth 1024 + 128 steps: still one tile a split
}

// Greedy runs of one model under several emulator configurations: the first run's tokens and logits
// are the expectation, and every later run must give them bit for bit.
class SameAsFirstRun {
 public:
  SameAsFirstRun(const Model& model, int tokens) : model_(model), tokens_(tokens) {}
  void check(const EmulatorOptions& opt, const std::string& what) {
    Emulator emu(model_, opt);
    auto r = greedy(emu, {2, 8, 16}, tokens_);
    ASSERT_EQ(int(r.tokens.size()), tokens_) << what;
    if (tokens_seen_.empty()) {
      tokens_seen_ = r.tokens;
      logits_seen_ = emu.recorded_logits();
      return;
    }
    EXPECT_EQ(r.tokens, tokens_seen_) << what;
    EXPECT_EQ(emu.recorded_logits(), logits_seen_) << what;
  }

 private:
  const Model& model_;
  int tokens_;
  std::vector<int32_t> tokens_seen_;
  std::vector<std::vector<float>> logits_seen_;
};

TEST(Emulator, EveryInterleavingGivesBitIdenticalResults) {
  TinyModelSpec spec;
  spec.arch = Arch::Qwen3;
  spec.eos = {};
  auto model = load_tiny_model(spec, "emu-interleave");
  SameAsFirstRun runs(*model, 12);
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    for (uint64_t seed = 1; seed <= (policy == Interleaving::Random ? 6u : 1u); ++seed) {
      EmulatorOptions opt;
      opt.num_workgroups = 132;
      opt.context = 48;
      opt.attention_splits = 3;
      opt.interleaving = policy;
      opt.interleave_seed = seed;
      opt.record_logits = true;
      ASSERT_NO_FATAL_FAILURE(runs.check(opt, fmt::format("{} seed {}", interleaving_name(policy), seed)));
    }
  }
}

// Per-domain counters (issue 4): only the counters a whole stage signals get stripes, every stripe has a
// line of its own, and the schedule computes exactly what the flat one does under every interleaving,
// with every access ordered, for domain counts that do and do not divide the grid.
TEST(Schedule, PerDomainCountersAreTheStageCountersWithALineEach) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "sched-domains");
  const Schedule flat = build_schedule(model->config, ScheduleParams{16, 0, false, 1});
  const Schedule grouped = build_schedule(model->config, ScheduleParams{16, 0, false, 5});
  EXPECT_EQ(flat.first_striped_counter, flat.num_counters());
  EXPECT_EQ(flat.counter_lines(), flat.num_counters());
  ASSERT_EQ(grouped.num_counters(), flat.num_counters());
  ASSERT_EQ(grouped.sync_domains, 5);
  std::vector<std::string> striped;
  for (uint32_t c = grouped.first_striped_counter; c < grouped.num_counters(); ++c) striped.push_back(grouped.counter_names[c]);
  // 16 workgroups: attention (2 kv groups x 8 splits), o_proj, gate_up, down and the LM head have at least
  // 2 x 5 producers a step; embed, sample and each kv group's 8 QKV blocks do not.
  std::vector<std::string> expected;
  for (int l = 0; l < model->config.num_layers; ++l)
    for (const char* stage : {"attention", "o_proj", "gate_up", "down"}) expected.push_back(fmt::format("layer {} {}", l, stage));
  expected.push_back("lm_head");
  EXPECT_EQ(striped, expected);
  EXPECT_FALSE(grouped.striped(grouped.sample_counter));
  // Every (counter, stripe) has its own line, and the lines are exactly [0, counter_lines()).
  std::vector<int> used(grouped.counter_lines(), 0);
  for (uint32_t c = 0; c < grouped.num_counters(); ++c)
    for (uint32_t d = 0; d < (grouped.striped(c) ? 5u : 1u); ++d) ++used.at(grouped.line(c, d));
  EXPECT_EQ(std::count(used.begin(), used.end(), 1), std::ptrdiff_t(used.size()));
  // Same instructions, waits and targets; only the counter numbering differs.
  ASSERT_EQ(grouped.instrs.size(), flat.instrs.size());
  for (size_t i = 0; i < flat.instrs.size(); ++i) {
    const Instr &a = flat.instrs[i], &b = grouped.instrs[i];
    EXPECT_EQ(flat.counter_names[a.signal], grouped.counter_names[b.signal]);
    ASSERT_EQ(a.num_waits, b.num_waits);
    for (int w = 0; w < a.num_waits; ++w) {
      EXPECT_EQ(flat.counter_names[a.waits[w].counter], grouped.counter_names[b.waits[w].counter]);
      EXPECT_EQ(a.waits[w].per_step, b.waits[w].per_step);
    }
  }
  // Summing the stripes gives each counter's value.
  std::vector<unsigned> lines(grouped.counter_lines(), 1);
  const auto values = grouped.counter_values(lines);
  EXPECT_EQ(values[grouped.first_striped_counter], 5u);
  EXPECT_EQ(values[0], 1u);
  EXPECT_THROW(build_schedule(model->config, ScheduleParams{16, 0, false, 33}), Error);
}

TEST(Emulator, PerDomainCountersComputeWhatFlatCountersDo) {
  TinyModelSpec spec;
  spec.arch = Arch::Qwen3;
  spec.eos = {};
  auto model = load_tiny_model(spec, "emu-domains");
  SameAsFirstRun runs(*model, 10);
  for (int domains : {1, 4, 5, 12})
    for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
      EmulatorOptions opt;
      opt.num_workgroups = 40;
      opt.context = 48;
      opt.attention_splits = 3;
      opt.sync_domains = domains;
      opt.interleaving = policy;
      opt.interleave_seed = uint64_t(domains);
      opt.record_logits = true;
      ASSERT_NO_FATAL_FAILURE(runs.check(opt, fmt::format("{} domains, {}", domains, interleaving_name(policy))));
    }
}

// Removes the waits of the first instruction matching `pred` in the schedule.
template <typename Pred>
Schedule without_wait(Schedule s, Pred pred) {
  for (auto& in : s.instrs)
    if (pred(in)) {
      in.num_waits = 0;
      return s;
    }
  ADD_FAILURE() << "no instruction to break";
  return s;
}

std::string run_and_catch(const Model& model, Schedule s, EmulatorOptions opt) {
  try {
    Emulator emu(model, std::move(s), opt);
    greedy(emu, {1, 2, 3}, 4);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DependencyChecker, CatchesAMissingWaitOfOProjOnAttention) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "dep-oproj");
  EmulatorOptions opt;
  opt.num_workgroups = 16;
  opt.context = 32;
  auto good = build_schedule(model->config, ScheduleParams{16, 0});
  // The planted bug: layer 1's first o_proj block no longer waits for layer 1's attention.
  auto bad = without_wait(good, [](const Instr& in) { return in.op == Op::OProj && in.layer == 1; });
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    opt.interleaving = policy;
    const std::string msg = run_and_catch(*model, bad, opt);
    SCOPED_TRACE(interleaving_name(policy));
    EXPECT_THAT(msg, HasSubstr("dependency violation"));
    // The read of the partials before attention finished, named as consumer and producer.
    EXPECT_THAT(msg, ::testing::ContainsRegex("consumer: step 0, workgroup [0-9]+: layer 1 o_proj rows \\[[0-9]+, [0-9]+\\)\n"
                                              "  producer: step 0, workgroup [0-9]+: layer 1 attention \\(kv group [0-9], split [0-9]+\\)\n"
                                              "  buffer attention partial"));
  }
  // The intact schedule passes under the same interleavings.
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    opt.interleaving = policy;
    EXPECT_EQ(run_and_catch(*model, good, opt), "") << interleaving_name(policy);
  }
}

// Runs `s` under every interleaving policy and a few seeds until one run reports a violation; returns
// its message ("" if none did).
std::string first_violation(const Model& model, const Schedule& s, EmulatorOptions opt) {
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random})
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      opt.interleaving = policy;
      opt.interleave_seed = seed;
      std::string msg = run_and_catch(model, s, opt);
      if (!msg.empty()) return msg;
    }
  return "";
}

ScheduleParams combine_once_params(int workgroups, int splits) {
  ScheduleParams p{workgroups, splits};
  p.attention_combine = 1;
  return p;
}

TEST(Emulator, CombineOncePerKvGroupMatchesTheReference) {
  // Attention's partials combined by each kv group's last split (Schedule::combine_once, forced on a
  // tiny model), over several active splits, with the checker on, in every interleaving.
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "emu-combine-once");
  EmulatorOptions opt;
  opt.num_workgroups = 16;
  opt.context = 400;
  opt.attention_combine = 1;
  opt.record_logits = true;
  opt.check_dependencies = true;
  ASSERT_TRUE(build_schedule(model->config, combine_once_params(16, 0)).combine_once.enabled);
  ASSERT_FALSE(build_schedule(model->config, ScheduleParams{16, 0}).combine_once.enabled);  // the tiny model's default
  const std::vector<int32_t> prompt = test::long_prompt(300);
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    opt.interleaving = policy;
    SCOPED_TRACE(interleaving_name(policy));
    expect_emulator_matches_reference(*model, prompt, opt, 8);
  }
}

TEST(Schedule, CombinesOnceWhereO_projWouldRead192KiBOfPartials) {
  ModelConfig c;
  c.num_heads = 32, c.head_dim = 128;  // Llama-3.1-8B: 4,096 x 16 splits x 4 bytes = 256 KiB
  EXPECT_TRUE(attention_combine_once_default(c, 16));
  c.num_heads = 24;  // Llama-3.2-3B: 3,072 x 16 x 4 = 192 KiB
  EXPECT_TRUE(attention_combine_once_default(c, 16));
  EXPECT_FALSE(attention_combine_once_default(c, 15));
  c.num_heads = 16;  // Qwen3-1.7B: 128 KiB
  EXPECT_FALSE(attention_combine_once_default(c, 16));
  c.num_heads = 32, c.head_dim = 64;  // Llama-3.2-1B: 128 KiB
  EXPECT_FALSE(attention_combine_once_default(c, 16));
}

// o_proj waiting for one attention split fewer than there are: it can run before the split that combines
// a kv group's partials (the last to arrive, whichever that is) has written the output.
TEST(DependencyChecker, CatchesAnOProjThatCanRunBeforeTheCombiningSplit) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "dep-combine");
  EmulatorOptions opt;
  opt.num_workgroups = 16;
  opt.context = 32;
  auto s = build_schedule(model->config, combine_once_params(16, 0));
  for (auto& in : s.instrs)
    if (in.op == Op::OProj && in.layer == 1) in.waits[0].per_step -= 1;
  const std::string msg = first_violation(*model, s, opt);
  EXPECT_THAT(msg, HasSubstr("dependency violation"));
  EXPECT_THAT(msg, ::testing::ContainsRegex("consumer: step [0-9]+, workgroup [0-9]+: layer 1 o_proj rows \\[[0-9]+, [0-9]+\\)\n"
                                            "  producer: step [0-9]+, workgroup [0-9]+: layer 1 attention \\(kv group [0-9], split [0-9]+\\)\n"
                                            "  buffer attention output"));
  EXPECT_EQ(first_violation(*model, build_schedule(model->config, combine_once_params(16, 0)), opt), "");
}

// The checker's model of an add with acquire and release: the add that completes a count is ordered after
// every earlier adder's writes; a plain release-add (no acquire) orders nothing for the adder.
TEST(DependencyChecker, AnAddWithAcquireOrdersTheLastArriverAfterEveryAdder) {
  auto describe = [](const emu::InstrRef& r) { return fmt::format("instruction {}", r.index); };
  for (bool acquire : {true, false}) {
    emu::DependencyChecker checker(3, 1, describe);
    const int buffer = checker.add_buffer("partials", 3);
    for (int wg = 0; wg < 2; ++wg) {
      checker.write(wg, emu::InstrRef{0, uint32_t(wg), uint32_t(wg)}, buffer, size_t(wg), size_t(wg) + 1);
      checker.read_modify_write(wg, 0, uint32_t(wg));
    }
    if (acquire) checker.read_modify_write(2, 0, 2);
    else checker.release(2, 0);
    checker.read(2, emu::InstrRef{0, 2, 2}, buffer, 0, 2);
    if (acquire) EXPECT_NO_THROW(checker.throw_if_violations());
    else EXPECT_THAT(test::error_of([&] { checker.throw_if_violations(); }), HasSubstr("partials"));
  }
}

// Atomic adds into one sum (the LM head blocks' first-digit counts): unordered adds are fine together, a
// read must follow every add, and the next adds must follow the write that cleared the sum.
TEST(DependencyChecker, AddsMayRaceEachOtherButNotTheirReaderOrTheClear) {
  auto describe = [](const emu::InstrRef& r) { return fmt::format("instruction {}", r.index); };
  for (const bool reader_waits : {true, false}) {
    emu::DependencyChecker checker(3, 1, describe);
    const int buffer = checker.add_buffer("counts", 4);
    for (int wg = 0; wg < 2; ++wg) {
      checker.accumulate(wg, emu::InstrRef{0, uint32_t(wg), uint32_t(wg)}, buffer, 0, 4);
      checker.release(wg, 0);
    }
    EXPECT_NO_THROW(checker.throw_if_violations());
    if (reader_waits) checker.acquire(2, 0, 2);
    else checker.acquire(2, 0, 1);  // one adder short
    checker.read(2, emu::InstrRef{0, 2, 2}, buffer, 0, 4);
    checker.write(2, emu::InstrRef{0, 2, 2}, buffer, 0, 4);
    if (reader_waits) EXPECT_NO_THROW(checker.throw_if_violations());
    else EXPECT_THAT(test::error_of([&] { checker.throw_if_violations(); }), HasSubstr("counts"));
  }
  // The next step's add, not ordered after the clear.
  emu::DependencyChecker checker(2, 1, describe);
  const int buffer = checker.add_buffer("counts", 1);
  checker.write(1, emu::InstrRef{0, 1, 1}, buffer, 0, 1);
  checker.accumulate(0, emu::InstrRef{1, 0, 0}, buffer, 0, 1);
  EXPECT_THAT(test::error_of([&] { checker.throw_if_violations(); }), HasSubstr("counts"));
}

TEST(DependencyChecker, CatchesAnAttentionThatWaitsForTooFewQkvBlocks) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "dep-qkv");
  EmulatorOptions opt;
  opt.num_workgroups = 24;
  opt.context = 32;
  auto s = build_schedule(model->config, ScheduleParams{24, 0});
  for (auto& in : s.instrs)
    if (in.op == Op::Attention && in.layer == 0 && in.begin == 1) in.waits[0].per_step -= 1;  // one block short
  const std::string msg = run_and_catch(*model, s, opt);
  EXPECT_THAT(msg, HasSubstr("dependency violation"));
  EXPECT_THAT(msg, ::testing::ContainsRegex("consumer: step 0, workgroup [0-9]+: layer 0 attention \\(kv group 1, split [0-9]+\\)\n"
                                            "  producer: step 0, workgroup [0-9]+: layer 0 qkv rows \\[[0-9]+, [0-9]+\\)\n"
                                            "  buffer qkv"));
}

// A per-domain counter waited for one producer short: some stripe can be read before its last producer
// released it, and the checker must see the unordered read (it acquires each stripe only as far as the
// sum guarantees).
TEST(DependencyChecker, CatchesAPerDomainWaitOneProducerShort) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "dep-domains");
  EmulatorOptions opt;
  opt.num_workgroups = 16;
  opt.context = 32;
  opt.sync_domains = 4;
  auto s = build_schedule(model->config, ScheduleParams{16, 0, false, 4});
  for (auto& in : s.instrs)
    if (in.op == Op::GateUp && in.layer == 0) {
      ASSERT_TRUE(s.striped(in.waits[0].counter));
      in.waits[0].per_step -= 1;
    }
  bool caught = false;
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random})
    for (uint64_t seed = 1; seed <= 4 && !caught; ++seed) {
      opt.interleaving = policy;
      opt.interleave_seed = seed;
      const std::string msg = run_and_catch(*model, s, opt);
      if (msg.empty()) continue;
      EXPECT_THAT(msg, HasSubstr("dependency violation"));
      EXPECT_THAT(msg, ::testing::ContainsRegex("consumer: step 0, workgroup [0-9]+: layer 0 gate_up rows"));
      caught = true;
    }
  EXPECT_TRUE(caught) << "no interleaving exposed the missing producer";
}

// Slice-level dataflow between gate_up and down (issue 13, item 3): the gate_up blocks signal the h slices
// their rows touch, each down block waits for each slice in turn, and the slice counters stay flat and
// consecutive when the stage counters are striped.
TEST(Schedule, HSlicesCountEveryGateUpBlockThatTouchesASlice) {
  TinyModelSpec spec;
  spec.intermediate = 96;
  auto model = load_tiny_model(spec, "sched-slices");
  for (int domains : {1, 4})
    for (auto [W, cols] : {std::pair{16, 24}, std::pair{7, 40}, std::pair{40, 8}, std::pair{5, 96}, std::pair{5, 200}}) {
      SCOPED_TRACE(fmt::format("{} workgroups, {} columns a slice, {} domains", W, cols, domains));
      const Schedule s = build_schedule(model->config, ScheduleParams{W, 0, false, domains, cols});
      const HSlices& hs = s.h_slices;
      const uint32_t n = 96, width = uint32_t(std::min(cols, 96));
      ASSERT_EQ(hs.cols, width);
      ASSERT_EQ(hs.count, (n + width - 1) / width);
      // Count, from the instructions, which gate_up blocks touch each slice of layer 1.
      std::vector<uint32_t> touching(hs.count, 0);
      int downs = 0;
      for (const Instr& in : s.instrs) {
        if (in.layer != 1) continue;
        if (in.op == Op::GateUp) {
          EXPECT_EQ(in.flags, kSignalsHSlices);
          for (uint32_t r = in.begin; r < in.end; ++r)
            if (r == in.begin || r % width == 0) ++touching[r / width];
        }
        if (in.op == Op::Down) {
          EXPECT_EQ(in.flags, kWaitsHSlices);
          EXPECT_EQ(in.num_waits, 0);
          ++downs;
        }
      }
      EXPECT_EQ(touching, hs.producers);
      EXPECT_EQ(downs, std::min(W, 64));
      for (int l = 0; l < model->config.num_layers; ++l)
        for (uint32_t k = 0; k < hs.count; ++k) {
          EXPECT_FALSE(s.striped(hs.counter(l, k)));
          EXPECT_EQ(s.counter_names[hs.counter(l, k)], fmt::format("layer {} h slice {}", l, k));
        }
    }
  EXPECT_THROW(build_schedule(model->config, ScheduleParams{16, 0, false, 1, 12}), Error);  // not a multiple of 8
}

// Reading h slice by slice sums each row in the same order as reading it whole, so the results are bit
// for bit those of the whole-stage wait, under every interleaving and slice width.
TEST(Emulator, HSlicesComputeWhatTheWholeStageWaitDoes) {
  TinyModelSpec spec;
  spec.arch = Arch::Qwen2;
  spec.intermediate = 136;
  spec.eos = {};
  auto model = load_tiny_model(spec, "emu-slices");
  SameAsFirstRun runs(*model, 10);
  for (int cols : {0, 8, 24, 64, 136})
    for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
      EmulatorOptions opt;
      opt.num_workgroups = 12;
      opt.context = 40;
      opt.h_slice_cols = cols;
      opt.sync_domains = cols == 24 ? 3 : 1;
      opt.interleaving = policy;
      opt.interleave_seed = uint64_t(cols + 1);
      opt.record_logits = true;
      ASSERT_NO_FATAL_FAILURE(runs.check(opt, fmt::format("{} columns a slice, {}", cols, interleaving_name(policy))));
    }
}

// A planted missing slice wait: one slice's target is zero, so every down block reads that slice of h
// without waiting for the gate_up blocks that write it. The checker names the down block, the gate_up
// block and the buffer, under every interleaving (the slice counters carry the ordering of all the others).
// A tiny model whose h (96) is three slices of 32, on `workgroups` workgroups: the model, emulator
// options and the schedule with those slices.
struct ThreeSlices {
  std::unique_ptr<Model> model;
  EmulatorOptions opt;
  Schedule schedule;
};
ThreeSlices three_slices(const std::string& tag, int workgroups, int context) {
  TinyModelSpec spec;
  spec.intermediate = 96;
  ThreeSlices t;
  t.model = load_tiny_model(spec, tag);
  t.opt.num_workgroups = workgroups;
  t.opt.context = context;
  t.schedule = build_schedule(t.model->config, ScheduleParams{workgroups, 0, false, 1, 32});
  return t;
}

TEST(DependencyChecker, CatchesAMissingSliceWait) {
  ThreeSlices t = three_slices("dep-slices", 12, 32);
  const Model* model = t.model.get();
  EmulatorOptions& opt = t.opt;
  const Schedule& good = t.schedule;
  ASSERT_EQ(good.h_slices.count, 3u);
  Schedule bad = good;
  bad.h_slices.producers[1] = 0;
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    opt.interleaving = policy;
    SCOPED_TRACE(interleaving_name(policy));
    const std::string msg = run_and_catch(*model, bad, opt);
    EXPECT_THAT(msg, HasSubstr("dependency violation"));
    EXPECT_THAT(msg, ::testing::ContainsRegex("consumer: step [0-9]+, workgroup [0-9]+: layer [01] down rows \\[[0-9]+, [0-9]+\\)\n"
                                              "  producer: step [0-9]+, workgroup [0-9]+: layer [01] gate_up rows \\[(3[2-9]|[4-5][0-9]|6[0-3]), [0-9]+\\)\n"
                                              "  buffer mlp activations"));
    EXPECT_EQ(run_and_catch(*model, good, opt), "");
  }
  // A down block that skips its slice waits altogether is caught the same way.
  Schedule unflagged = good;
  for (auto& in : unflagged.instrs)
    if (in.op == Op::Down && in.layer == 0) {
      in.flags = 0;
      break;
    }
  EXPECT_THAT(run_and_catch(*model, unflagged, opt), ::testing::ContainsRegex("consumer: step 0, workgroup [0-9]+: layer 0 down rows"));
}

// A slice whose producers never all come: a deadlock naming the slice counter the down blocks wait for.
TEST(Emulator, ReportsADeadlockOnAnHSlice) {
  ThreeSlices t = three_slices("deadlock-slices", 6, 16);
  t.schedule.h_slices.producers[2] += 1;
  const std::string msg = run_and_catch(*t.model, t.schedule, t.opt);
  EXPECT_THAT(msg, HasSubstr("deadlock"));
  EXPECT_THAT(msg, HasSubstr("layer 0 down rows"));
  EXPECT_THAT(msg, HasSubstr("the first incomplete one: counter 'layer 0 h slice 2'"));
}

// Run-time claimed rows (issue 13, item 5): each claimed stage gives every workgroup one block spanning
// the stage, whose rows come from the rank it claims; the ranks cover the stage once, the last ones with
// fewer rows, and the consumers wait for one signal per workgroup as before.
ScheduleParams claimed_params(int workgroups, uint32_t ops, int late, int shrink) {
  ScheduleParams p{workgroups, 0};
  p.claimed_ops = ops;
  p.claim_late_ranks = late;
  p.claim_shrink_percent = shrink;
  return p;
}

TEST(Schedule, ClaimedRowsGiveEveryWorkgroupOneBlockPerStageAndTheRanksCoverTheRowsOnce) {
  const ModelConfig c = preset_config("llama-3.2-1b");
  const uint32_t W = 132, all = op_bit(Op::OProj) | op_bit(Op::GateUp) | op_bit(Op::Down);
  const Schedule s = build_schedule(c, claimed_params(int(W), all, 8, 30));
  const Schedule plain = build_schedule(c, ScheduleParams{int(W), 0});
  EXPECT_EQ(s.num_counters(), plain.num_counters() + 3u * uint32_t(c.num_layers));  // a claim counter per stage
  ASSERT_EQ(s.instrs.size(), plain.instrs.size());
  const ClaimedRows& cr = s.claimed_rows;
  for (Op op : {Op::OProj, Op::GateUp, Op::Down}) {
    SCOPED_TRACE(op_name(op));
    const uint32_t rows = uint32_t(op == Op::GateUp ? c.intermediate_size : c.hidden_size);
    Instr block;
    for (int w = 0; w < int(W); ++w) {
      int blocks = 0;
      for (uint32_t i = s.wg_begin[size_t(w)]; i < s.wg_begin[size_t(w) + 1]; ++i) {
        const Instr& in = s.instrs[i];
        if (in.op != op || in.layer != 3) continue;
        ++blocks;
        EXPECT_EQ(in.flags, kClaimsRows);
        EXPECT_EQ(in.begin, 0u);
        EXPECT_EQ(in.end, rows);
        EXPECT_GT(i, s.wg_begin[size_t(w)]) << "no instruction before it to claim in";
        block = in;
      }
      EXPECT_EQ(blocks, 1) << "workgroup " << w;
    }
    EXPECT_FALSE(s.striped(cr.counter(3, op)));
    EXPECT_EQ(s.counter_names[cr.counter(3, op)], fmt::format("layer 3 {} claims", op_name(op)));
    std::vector<int> covered(rows, 0);
    const double share = double(rows) / W;
    for (uint32_t rank = 0; rank < W; ++rank) {
      const Instr r = cr.resolve(block, rank, W);
      EXPECT_EQ(r.flags, 0) << "a resolved block runs plain rows";
      ASSERT_LT(r.begin, r.end) << "rank " << rank;
      for (uint32_t row = r.begin; row < r.end; ++row) ++covered[row];
      if (rank < W - 8) {
        EXPECT_GE(r.end - r.begin, uint32_t(std::floor(share))) << "rank " << rank;
      } else {
        EXPECT_EQ(r.end - r.begin, uint32_t(std::floor(rows * 0.7 / W))) << "rank " << rank;
      }
    }
    EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), std::ptrdiff_t(rows));
    const Instr past = cr.resolve(block, W, W);
    EXPECT_EQ(past.begin, past.end) << "a rank past the last gets no rows";
  }
  // The waits are those of static rows: one signal per workgroup.
  for (size_t i = 0; i < s.instrs.size(); ++i) {
    const Instr& a = s.instrs[i];
    const Instr& b = plain.instrs[i];
    EXPECT_EQ(a.num_waits, b.num_waits) << s.describe(a);
    if (a.num_waits > 0) {
      EXPECT_EQ(a.waits[0].per_step, b.waits[0].per_step) << s.describe(a);
    }
  }
  // A stage too small for every rank to get a row keeps static rows.
  ModelConfig small = c;
  small.hidden_size = 128;
  for (const Instr& in : build_schedule(small, claimed_params(int(W), all, 8, 30)).instrs)
    if (in.op == Op::OProj || in.op == Op::Down) {
      EXPECT_EQ(in.flags & kClaimsRows, 0) << "only 128 rows for 132 ranks";
    }
  // Bad parameters are refused, naming the limit.
  EXPECT_THAT(test::error_of([&] { build_schedule(c, claimed_params(int(W), all, 8, 100)); }),
              HasSubstr("shrink must be a percentage from 0 to 99 (got 100)"));
  EXPECT_THAT(test::error_of([&] { build_schedule(c, claimed_params(int(W), all, 132, 30)); }),
              HasSubstr("late ranks of claimed rows must number from 0 to 131 (got 132)"));
  EXPECT_THAT(test::error_of([&] { build_schedule(c, claimed_params(int(W), op_bit(Op::QKV), 8, 30)); }),
              HasSubstr("o_proj, gate_up and down stages only (asked for qkv)"));
  ScheduleParams narrow = claimed_params(int(W), all, 8, 30);
  narrow.narrow_workgroups = 66;
  narrow.narrow_ops = op_bit(Op::OProj);
  EXPECT_THAT(test::error_of([&] { build_schedule(c, narrow); }), HasSubstr("o_proj stage cannot be both narrow and claimed"));
  ScheduleParams sliced = claimed_params(int(W), op_bit(Op::Down), 8, 30);
  sliced.h_slice_cols = 64;
  EXPECT_THAT(test::error_of([&] { build_schedule(c, sliced); }), HasSubstr("cannot be combined with them"));
}

// Whoever claims which rank, the results are those of static rows, bit for bit, under every
// interleaving, with the checker on (which also checks that each step's claims follow the last's): a
// rank run twice or not at all would be an unordered double write or wrong logits.
TEST(Emulator, ClaimedRowsComputeExactlyWhatStaticRowsDo) {
  TinyModelSpec spec;
  spec.arch = Arch::Qwen3;
  spec.eos = {};
  auto model = load_tiny_model(spec, "emu-claims");
  SameAsFirstRun runs(*model, 10);
  for (int shrink : {0, 30, 60})
    for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random})
      for (uint64_t seed = 1; seed <= (policy == Interleaving::Random ? 3u : 1u); ++seed) {
        EmulatorOptions opt;
        opt.num_workgroups = 16;
        opt.context = 48;
        opt.attention_splits = 3;
        opt.claimed_ops = shrink == 0 ? 0 : op_bit(Op::OProj) | op_bit(Op::GateUp) | op_bit(Op::Down);
        opt.claim_late_ranks = 4;
        opt.claim_shrink_percent = shrink;
        opt.interleaving = policy;
        opt.interleave_seed = seed;
        opt.record_logits = true;
        ASSERT_NO_FATAL_FAILURE(runs.check(opt, fmt::format("shrink {}, {} seed {}", shrink, interleaving_name(policy), seed)));
      }
  EmulatorOptions opt;
  opt.num_workgroups = 13;
  opt.context = 64;
  opt.claimed_ops = op_bit(Op::GateUp) | op_bit(Op::Down);
  opt.claim_late_ranks = 3;
  opt.claim_shrink_percent = 50;
  opt.record_logits = true;
  {
    Emulator emu(*model, opt);
    int claiming = 0;
    for (const Instr& in : emu.schedule().instrs) claiming += (in.flags & kClaimsRows) != 0;
    ASSERT_EQ(claiming, 13 * 2 * spec.layers);  // gate_up and down of every layer
  }
  test::expect_emulator_matches_reference(*model, {1, 5, 9, 33, 7}, opt, 16);
}

// A stage after one with claimed rows waits for one block short: some rank's rows can be read before
// they were written, whichever workgroup claimed them.
TEST(DependencyChecker, CatchesAWaitOneBlockShortAfterClaimedRows) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "dep-claims");
  EmulatorOptions opt;
  opt.num_workgroups = 16;
  opt.context = 32;
  const Schedule good = build_schedule(model->config, claimed_params(16, op_bit(Op::GateUp) | op_bit(Op::Down), 4, 40));
  Schedule bad = good;
  for (Instr& in : bad.instrs)
    if (in.op == Op::Down && in.layer == 0) {
      ASSERT_EQ(in.flags, kClaimsRows);
      ASSERT_EQ(in.waits[0].per_step, 16u);
      in.waits[0].per_step -= 1;
    }
  const std::string msg = first_violation(*model, bad, opt);
  EXPECT_THAT(msg, HasSubstr("dependency violation"));
  EXPECT_THAT(msg, ::testing::ContainsRegex("consumer: step [0-9]+, workgroup [0-9]+: layer 0 down claimed rows \\(a rank's share of \\[0, [0-9]+\\)\\)\n"
                                            "  producer: step [0-9]+, workgroup [0-9]+: layer 0 gate_up claimed rows"));
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    opt.interleaving = policy;
    EXPECT_EQ(run_and_catch(*model, good, opt), "") << interleaving_name(policy);
  }
}

// A claim's value names a rank only if every claim of the step before happened before it.
TEST(DependencyChecker, ClaimsOfOneStepMustFollowAllClaimsOfTheStepBefore) {
  auto describe = [](const emu::InstrRef& r) { return fmt::format("step {} instruction {}", r.step, r.index); };
  {  // ordered through a counter: no violation
    emu::DependencyChecker c(2, 2, describe);
    c.claim(0, {0, 10, 1}, 1, 2);
    c.claim(1, {0, 20, 1}, 1, 2);
    c.release(0, 0);
    c.release(1, 0);
    c.acquire(1, 0, 2);
    c.claim(1, {1, 20, 1}, 1, 2);
    EXPECT_NO_THROW(c.throw_if_violations());
  }
  {  // workgroup 1 claims again at step 1 having seen only its own release: workgroup 0's claim is unordered
    emu::DependencyChecker c(2, 2, describe);
    c.claim(0, {0, 10, 1}, 1, 2);
    c.claim(1, {0, 20, 1}, 1, 2);
    c.release(1, 0);
    c.acquire(1, 0, 1);
    c.claim(1, {1, 20, 1}, 1, 2);
    EXPECT_THAT(test::error_of([&] { c.throw_if_violations(); }),
                ::testing::AllOf(HasSubstr("two steps' claims on one counter with nothing ordering them"), HasSubstr("claim: step 1 instruction 20"),
                      HasSubstr("earlier claim: step 0 instruction 10")));
  }
  {  // a claim of step 1 before workgroup 1 had made its claim of step 0
    emu::DependencyChecker c(2, 2, describe);
    c.claim(0, {0, 10, 1}, 1, 2);
    c.claim(0, {1, 10, 1}, 1, 2);
    EXPECT_THAT(test::error_of([&] { c.throw_if_violations(); }), HasSubstr("a claim of step 1 came before all 2 claims of step 0 (1 made)"));
  }
  {  // a claim of step 0 after step 1's had begun
    emu::DependencyChecker c(1, 2, describe);
    c.claim(0, {0, 10, 1}, 1, 1);
    c.claim(0, {1, 10, 1}, 1, 1);
    c.claim(0, {0, 11, 1}, 1, 1);
    EXPECT_THAT(test::error_of([&] { c.throw_if_violations(); }), HasSubstr("a claim of step 0 came after claims of step 1 had begun"));
  }
}

TEST(DependencyChecker, CatchesAWriteAfterReadAcrossLayers) {
  // If layer 1's QKV no longer waits for layer 0's down projection, it overwrites nothing it should not,
  // but it reads x while down still writes it: caught as an unordered read of the residual stream.
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "dep-war");
  EmulatorOptions opt;
  opt.num_workgroups = 8;
  opt.context = 32;
  auto s = without_wait(build_schedule(model->config, ScheduleParams{8, 0}),
                        [](const Instr& in) { return in.op == Op::QKV && in.layer == 1; });
  const std::string msg = run_and_catch(*model, s, opt);
  EXPECT_THAT(msg, HasSubstr("dependency violation"));
  EXPECT_THAT(msg, HasSubstr("layer 1 qkv rows"));
  EXPECT_THAT(msg, HasSubstr("x (residual stream)"));
}

TEST(Emulator, ReportsADeadlockNamingTheStuckInstruction) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "deadlock");
  EmulatorOptions opt;
  opt.num_workgroups = 4;
  opt.context = 16;
  auto s = build_schedule(model->config, ScheduleParams{4, 0});
  for (auto& in : s.instrs)
    if (in.op == Op::GateUp && in.layer == 0) in.waits[0].per_step += 1;  // waits for a block that never comes
  const std::string msg = run_and_catch(*model, s, opt);
  EXPECT_THAT(msg, HasSubstr("deadlock"));
  EXPECT_THAT(msg, HasSubstr("layer 0 gate_up rows"));
  EXPECT_THAT(msg, HasSubstr("counter 'layer 0 o_proj'"));
}

// A deadlock is a HangError (the GPU watchdog's error too) that leaves the backend as it was: nothing of
// the launch is committed, so the next generate() runs from the same state (and deadlocks the same way).
TEST(Emulator, ADeadlockIsAStoppedHangThatChangesNothing) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "deadlock-state");
  EmulatorOptions opt;
  opt.num_workgroups = 4;
  opt.context = 16;
  auto s = build_schedule(model->config, ScheduleParams{4, 0});
  for (auto& in : s.instrs)
    if (in.op == Op::GateUp && in.layer == 1) in.waits[0].per_step += 1;
  Emulator emu(*model, s, opt);
  GenerateRequest req;
  req.input = {1, 2, 3};
  req.max_new_tokens = 4;
  std::string first;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      emu.generate(req, {});
      FAIL() << "no hang";
    } catch (const HangError& e) {
      EXPECT_TRUE(e.stopped());
      EXPECT_THAT(e.what(), HasSubstr("layer 1 gate_up rows"));
      if (attempt == 0) first = e.what();
      else EXPECT_EQ(e.what(), first);
    }
    EXPECT_EQ(emu.position(), 0);
  }
}

TEST(Emulator, MultiTurnContinuesFromTheCache) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "multiturn");
  EmulatorOptions opt;
  opt.num_workgroups = 9;
  opt.context = 64;
  Emulator two_turns(*model, opt);
  auto a = greedy(two_turns, {1, 2, 3}, 5);
  EXPECT_EQ(two_turns.position(), 3 + 5 - 1);  // the last sampled token is not in the cache yet
  auto b = greedy(two_turns, {40, 41}, 6);
  EXPECT_EQ(b.stats.ingested_tokens, 3);  // the pending token + 2 new ones: the first turn is not re-run
  EXPECT_EQ(two_turns.position(), 3 + 5 + 2 + 6 - 1);

  // The same conversation as one prompt on a fresh emulator gives the same second reply.
  Emulator one_shot(*model, opt);
  std::vector<int32_t> all = {1, 2, 3};
  all.insert(all.end(), a.tokens.begin(), a.tokens.end());
  all.insert(all.end(), {40, 41});
  auto c = greedy(one_shot, all, 6);
  EXPECT_EQ(b.tokens, c.tokens);
}

TEST(Emulator, StopsAtEosMaxTokensAndAFullContext) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "stops");
  EmulatorOptions opt;
  opt.num_workgroups = 6;
  opt.context = 10;
  {
    Emulator emu(*model, opt);
    auto r = greedy(emu, {1, 2, 3, 4}, 100);
    EXPECT_EQ(r.stop, StopReason::ContextFull);
    EXPECT_EQ(int(r.tokens.size()), 10 - 4 + 1);  // one token per free slot, plus the one sampled at the last
    EXPECT_EQ(emu.position(), 10);
    EXPECT_THROW(greedy(emu, {5}, 1), Error);  // no room left: a clear error, not a crash
  }
  {
    Emulator emu(*model, opt);
    auto first = greedy(emu, {1, 2}, 3);
    EXPECT_EQ(first.stop, StopReason::MaxTokens);
    // Make the second token of that reply an EOS id: generation stops right there.
    spec.eos = {first.tokens[1]};
    auto model2 = load_tiny_model(spec, "stops-eos");
    Emulator emu2(*model2, opt);
    auto r = greedy(emu2, {1, 2}, 8);
    EXPECT_EQ(r.stop, StopReason::Eos);
    EXPECT_EQ(r.tokens.size(), 2u);
  }
}

TEST(Emulator, RejectsAPromptLongerThanTheContext) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "long-prompt");
  EmulatorOptions opt;
  opt.num_workgroups = 4;
  opt.context = 8;
  Emulator emu(*model, opt);
  try {
    greedy(emu, std::vector<int32_t>(9, 1), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("prompt of 9 tokens does not fit the context"));
    EXPECT_THAT(e.what(), HasSubstr("> 8"));
  }
  EXPECT_EQ(emu.position(), 0);
  EXPECT_THROW(greedy(emu, {1, 999999}, 1), Error);  // outside the vocabulary
}

TEST(Emulator, SeededSamplingIsReproducible) {
  TinyModelSpec spec;
  spec.eos = {};
  spec.weight_scale = 0.02f;  // flatter distributions: sampling has choices
  auto model = load_tiny_model(spec, "sampling");
  EmulatorOptions opt;
  opt.num_workgroups = 7;
  opt.context = 64;
  auto run = [&](uint64_t seed, Interleaving policy) {
    opt.interleaving = policy;
    Emulator emu(*model, opt);
    GenerateRequest req;
    req.input = {1, 2, 3};
    req.max_new_tokens = 20;
    req.sampling = SamplingParams{0.9f, 40, 0.95f, 0.02f, seed};
    return emu.generate(req, {}).tokens;
  };
  const auto a = run(7, Interleaving::Random), b = run(7, Interleaving::RoundRobin), c = run(8, Interleaving::Random);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Emulator, CancelStopsAtTheNextToken) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "cancel");
  EmulatorOptions opt;
  opt.num_workgroups = 5;
  opt.context = 64;
  Emulator emu(*model, opt);
  GenerateRequest req;
  req.input = {1, 2};
  req.max_new_tokens = 30;
  int seen = 0;
  auto r = emu.generate(req, [&](int32_t) {
    if (++seen == 4) emu.cancel();
  });
  EXPECT_EQ(r.stop, StopReason::Cancelled);
  EXPECT_EQ(r.tokens.size(), 4u);
  // The session survives: the next turn continues after the cancelled reply.
  req.input = {9};
  req.max_new_tokens = 2;
  EXPECT_EQ(emu.generate(req, {}).tokens.size(), 2u);
}

// ---------------------------------------------------------------------------------------------------
// Limits: memory for the context, non-finite weights and logits

TEST(Emulator, AContextTooLargeForTheHostIsRefusedBeforeAllocating) {
  TinyModelSpec spec;
  spec.layers = 16;
  spec.kv_heads = 4;
  spec.head_dim = 64;  // q_dim 256 != hidden 64: written to config.json
  auto model = load_tiny_model(spec, "huge-context");
  EmulatorOptions opt;
  opt.num_workgroups = 4;
  opt.context = 1 << 24;  // the largest context allowed (runtime/limits.h): 16 x 4 x 64 x 2 bytes x 2 (K, V) a token
  opt.check_dependencies = false;
  try {
    Emulator emu(*model, opt);
    FAIL() << "a context needing 256 GiB of KV cache was accepted";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("context of 16777216 tokens"));
    EXPECT_THAT(e.what(), HasSubstr("KV cache for 16777216 tokens 256.0 GiB"));
    EXPECT_THAT(e.what(), HasSubstr("is available ("));  // the limit and where it comes from
    EXPECT_THAT(e.what(), HasSubstr("lower the context size (-c)"));
  }
}

TEST(Emulator, AContextOverTheLimitIsRefused) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "over-limit-context");
  EmulatorOptions opt;
  opt.num_workgroups = 4;
  opt.context = 2000000000;
  EXPECT_THAT([&] { Emulator emu(*model, opt); },
              ::testing::ThrowsMessage<Error>(HasSubstr("context must be between 1 and 16777216 tokens (got 2000000000)")));
}

TEST(HostMemory, ReadsMemAvailableAndNamesEveryPartOfARequest) {
  EXPECT_EQ(parse_mem_available("MemTotal:  1000 kB\nMemFree:  10 kB\nMemAvailable:   2048 kB\nBuffers: 1 kB\n"),
            uint64_t(2048) * 1024);
  EXPECT_FALSE(parse_mem_available("MemTotal: 1000 kB\n").has_value());
  const HostMemory m = available_host_memory();
  EXPECT_GT(m.available_bytes, 0u);
  EXPECT_FALSE(m.source.empty());

  const HostMemory two_gib{uint64_t(2) << 30, "a test limit"};
  EXPECT_NO_THROW(check_host_memory("x", {{"a", uint64_t(1) << 30}, {"b", uint64_t(1) << 30}}, two_gib, "hint"));
  try {
    check_host_memory("the thing", {{"KV cache", uint64_t(3) << 30}, {"table", 512}}, two_gib, "use less");
    FAIL();
  } catch (const OutOfMemoryError& e) {
    EXPECT_STREQ(e.what(), "the thing needs 3.0 GiB of host memory (KV cache 3.0 GiB, table 512 bytes) but 2.0 GiB "
                           "is available (a test limit); use less");
  }
}

// The tiny model with `edit` applied to its tensors, rewritten.
std::unique_ptr<Model> tiny_edited(TinyModelSpec spec, const std::string& tag,
                                   const std::function<void(std::vector<test::TensorBytes>&)>& edit) {
  auto dir = test::make_temp_dir(tag);
  auto tensors = test::write_tiny_model(dir, spec);
  edit(tensors);
  test::write_safetensors(dir / "model.safetensors", tensors);
  return load_model(dir);
}

// Sets element `index` of tensor `name` (F32) to `value`.
void plant(std::vector<test::TensorBytes>& tensors, const std::string& name, size_t index, float value) {
  for (auto& t : tensors)
    if (t.name == name) {
      ASSERT_EQ(t.dtype, "F32");
      std::memcpy(t.bytes.data() + 4 * index, &value, 4);
      return;
    }
  FAIL() << "no tensor " << name;
}

TEST(Emulator, NonFiniteWeightsAreRejectedAtLoadNamingTheTensor) {
  TinyModelSpec spec;
  spec.dtype = DType::F32;
  EmulatorOptions opt;
  opt.num_workgroups = 4;
  opt.context = 32;
  // A NaN in layer 1's down projection [hidden 64, intermediate 96]: element 3 * 96 + 5 is [3, 5].
  auto nan_model = tiny_edited(spec, "nan-weight", [](auto& t) {
    plant(t, "model.layers.1.mlp.down_proj.weight", 3 * 96 + 5, std::numeric_limits<float>::quiet_NaN());
  });
  try {
    Emulator emu(*nan_model, opt);
    FAIL() << "a NaN weight was accepted";
  } catch (const BadModelError& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor model.layers.1.mlp.down_proj.weight: element [3, 5] is nan"));
  }
  // An infinity in a norm weight (a vector).
  auto inf_model = tiny_edited(spec, "inf-weight", [](auto& t) {
    plant(t, "model.norm.weight", 7, -std::numeric_limits<float>::infinity());
  });
  EXPECT_THAT(test::error_of([&] { Emulator emu(*inf_model, opt); }), HasSubstr("tensor model.norm.weight: element [7] is -inf"));
  // A finite F32 value that BF16 (the matrix dtype the kernels read) cannot hold.
  auto overflow_model = tiny_edited(spec, "overflow-weight", [](auto& t) {
    plant(t, "model.layers.0.self_attn.q_proj.weight", 0, 3.4e38f);
  });
  EXPECT_THAT(test::error_of([&] { Emulator emu(*overflow_model, opt); }),
              HasSubstr("tensor model.layers.0.self_attn.q_proj.weight: element [0, 0] is 3.4e+38, which overflows BF16"));
}

TEST(Emulator, NonFiniteLogitsStopGenerationNamingThePosition) {
  // Finite weights whose activations overflow: a final norm weight of 3e38 makes the normalised hidden
  // state, and so the logits, infinite or NaN - as an activation overflow in a real model would.
  TinyModelSpec spec;
  spec.dtype = DType::F32;
  spec.eos = {};
  auto model = tiny_edited(spec, "inf-logits", [](auto& t) {
    for (size_t i = 0; i < 64; ++i) plant(t, "model.norm.weight", i, 3e38f);
  });
  EmulatorOptions opt;
  opt.num_workgroups = 4;
  opt.context = 32;
  for (const float temperature : {0.f, 0.8f}) {
    Emulator emu(*model, opt);
    GenerateRequest req;
    req.input = {1, 2, 3, 4};
    req.max_new_tokens = 8;
    req.sampling.temperature = temperature;
    int tokens = 0;
    const std::string message = test::error_of([&] { emu.generate(req, [&](int32_t) { ++tokens; }); });
    EXPECT_THAT(message, HasSubstr("the logits are not finite at position 3 (reply token 1)")) << "temperature " << temperature;
    EXPECT_THAT(message, HasSubstr("of 160 are NaN or infinite"));
    EXPECT_EQ(tokens, 0) << "a token was emitted from non-finite logits";
  }
}

TEST(Emulator, InvalidSamplingValuesAreRejectedEvenWhenGreedy) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "bad-sampling");
  EmulatorOptions opt;
  opt.num_workgroups = 4;
  opt.context = 32;
  Emulator emu(*model, opt);
  GenerateRequest req;
  req.input = {1, 2};
  req.max_new_tokens = 2;
  req.sampling.temperature = 0.f;
  req.sampling.top_p = 2.f;
  EXPECT_THAT(test::error_of([&] { emu.generate(req, {}); }), HasSubstr("top_p 2: top-p must be greater than 0 and at most 1"));
  EXPECT_EQ(emu.position(), 0);
}

TEST(Sampling, OneRuleWithMessagesNamingTheValue) {
  const auto error = [](SamplingParams p, const SamplingNames& names = {}) { return sampling_error(p, names); };
  EXPECT_EQ(error({}), "");
  EXPECT_EQ(error({0.8f, 40, 0.95f, 0.05f, 1}), "");
  EXPECT_EQ(error({0.f, 0, 1.f, 0.f, 0}), "");
  EXPECT_EQ(error({-1.f, 0, 1.f, 0.f, 0}, kSamplingFlags), "--temp -1: the temperature must be a finite number >= 0 (0: greedy)");
  EXPECT_EQ(error({std::nanf(""), 0, 1.f, 0.f, 0}, kSamplingFlags), "--temp nan: the temperature must be a finite number >= 0 (0: greedy)");
  EXPECT_EQ(error({std::numeric_limits<float>::infinity(), 0, 1.f, 0.f, 0}), "temperature inf: the temperature must be a finite number >= 0 (0: greedy)");
  EXPECT_EQ(error({0.f, -3, 1.f, 0.f, 0}, kSamplingFlags), "--top-k -3: top-k must be >= 0 (0: off)");
  EXPECT_EQ(error({0.f, 0, 2.f, 0.f, 0}, kSamplingFlags), "--top-p 2: top-p must be greater than 0 and at most 1 (1: off)");
  EXPECT_EQ(error({0.f, 0, 0.f, 0.f, 0}), "top_p 0: top-p must be greater than 0 and at most 1 (1: off)");
  EXPECT_EQ(error({0.f, 0, std::nanf(""), 0.f, 0}), "top_p nan: top-p must be greater than 0 and at most 1 (1: off)");
  EXPECT_EQ(error({0.f, 0, 1.f, 5.f, 0}, kSamplingFlags), "--min-p 5: min-p must be between 0 and 1 (0: off)");
  EXPECT_EQ(error({0.f, 0, 1.f, -0.1f, 0}), "min_p -0.1: min-p must be between 0 and 1 (0: off)");
  EXPECT_THROW(validate_sampling({0.f, 0, 1.f, 5.f, 0}), Error);
}

// runtime/sampling.h's rule, against what it means: draws follow softmax(logits / T) over the kept
// candidates; top-k, top-p and min-p keep what they say; the chunked running sums are prefix sums.
TEST(Sampling, MaskedTokensAreNoCandidates) {
  // A constraint's masked tokens (-inf) are not among the candidates, so that even a draw at the top of
  // the running sum's rounding cannot fall on one.
  SamplingParams s{1.0f, 0, 1.0f, 0.0f, 1};
  EXPECT_EQ(s.candidate_count(100, 7), 7);
  EXPECT_EQ(s.candidate_count(100, 100), 100);
  EXPECT_EQ(s.candidate_count(5000, 4000), kMaxCandidates);
  s.top_k = 3;
  EXPECT_EQ(s.candidate_count(100, 2), 2);
  std::vector<float> logits(50, -INFINITY);
  logits[9] = 1.0f, logits[31] = 1.0f;
  for (uint64_t d = 0; d < 2000; ++d) {
    const int32_t t = sample_token(logits, SamplingParams{1.0f, 0, 1.0f, 0.0f, d}, d);
    ASSERT_TRUE(t == 9 || t == 31) << t;
  }
}

TEST(Sampling, TheRuleDrawsFromTheKeptPartOfTheSoftmax) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at T 1, the tokens in a shuffled order of ids.
  const std::vector<int32_t> ids = {7, 2, 5, 0};
  std::vector<float> logits(9, -30.0f);
  const double p[4] = {0.5, 0.3, 0.15, 0.05};
  for (int i = 0; i < 4; ++i) logits[size_t(ids[size_t(i)])] = float(std::log(p[i]));
  const auto frequencies = [&](SamplingParams s) {
    std::vector<double> f(logits.size(), 0.0);
    const int draws = 40000;
    for (int d = 0; d < draws; ++d) f[size_t(sample_token(logits, s, uint64_t(d)))] += 1.0 / draws;
    return f;
  };
  const auto expect_kept = [&](SamplingParams s, std::vector<double> kept_p, const char* what) {
    double total = 0;
    for (double x : kept_p) total += x;
    const auto f = frequencies(s);
    for (size_t i = 0; i < 4; ++i) {
      const double want = i < kept_p.size() ? kept_p[i] / total : 0.0;
      EXPECT_NEAR(f[size_t(ids[i])], want, 0.01) << what << ", candidate " << i;
    }
  };
  expect_kept({1.0f, 0, 1.0f, 0.0f, 3}, {0.5, 0.3, 0.15, 0.05}, "T 1");
  expect_kept({1.0f, 2, 1.0f, 0.0f, 3}, {0.5, 0.3}, "top-k 2");
  expect_kept({1.0f, 0, 0.7f, 0.0f, 3}, {0.5, 0.3}, "top-p 0.7");  // 0.5 < 0.7 <= 0.8
  expect_kept({1.0f, 0, 0.9f, 0.0f, 3}, {0.5, 0.3, 0.15}, "top-p 0.9");
  expect_kept({1.0f, 0, 1.0f, 0.2f, 3}, {0.5, 0.3, 0.15}, "min-p 0.2");  // 0.05 < 0.2 x 0.5 <= 0.15
  // T 0.5 squares the odds: 0.25, 0.09, 0.0225, 0.0025.
  expect_kept({0.5f, 0, 1.0f, 0.0f, 3}, {0.25, 0.09, 0.0225, 0.0025}, "T 0.5");

  // The running sums across chunk boundaries against a double-precision prefix sum.
  std::vector<float> w(1000), running(1000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::exp(-0.01f * float(i)) * (1.0f + 0.5f * float(i % 7));
  chunked_running_sums(w.data(), int(w.size()), running.data());
  double prefix = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    prefix += double(w[i]);
    ASSERT_NEAR(running[i], prefix, 1e-5 * prefix) << i;
  }
}

}  // namespace
}  // namespace mk
