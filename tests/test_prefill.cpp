// Chunk steps (prefill) on the emulator: the schedule's shape, the logits at the last prompt position
// against the fp32 reference, greedy continuations against token-by-token ingestion, multi-turn, and the
// checker and the deadlock report on planted bugs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "host/emulator/emulator.h"
#include "runtime/error.h"
#include "runtime/model.h"
#include "runtime/prefill_flops.h"
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
using test::prompt_of;

TEST(ChunkSchedule, StagesCoverTheirOutputsOnceAndWaitForTheWholePreviousStage) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "chunk-sched");
  const ModelConfig& c = model->config;
  const int C = 300, W = 13;
  const Schedule s = build_schedule(c, ScheduleParams{W, 0, false, 1, 0, C});
  const ChunkSchedule& cs = s.chunk;
  ASSERT_TRUE(cs.enabled());
  EXPECT_EQ(cs.tokens, C);
  EXPECT_EQ(cs.first_line, s.step_counter_lines());
  EXPECT_EQ(s.counter_lines(), s.step_counter_lines() + cs.counter_names.size());
  ASSERT_EQ(cs.wg_begin.size(), size_t(W) + 1);
  EXPECT_EQ(cs.instrs.size(), size_t(cs.instrs_per_chunk));
  // Per (layer, op, token tile): the columns covered, each once.
  std::map<std::tuple<int, Op, int, int>, std::vector<std::pair<uint32_t, uint32_t>>> covered;
  std::map<uint32_t, int> producers;
  for (const Instr& in : cs.instrs) {
    ++producers[in.signal];
    const int which = in.op == Op::ChunkNorm ? in.slot : 0;
    const int tile = in.op == Op::ChunkNorm || in.op == Op::ChunkRope ? 0 : in.slot;
    covered[{in.layer, in.op, which, tile}].emplace_back(in.begin, in.end);
  }
  const uint32_t qkv_cols = uint32_t(c.q_dim() + 2 * c.num_kv_heads * c.head_dim);
  // A matrix stage's tiles are one width (the last may be narrower), narrow or chunk_tiles_wide's wide.
  std::map<std::pair<int, Op>, std::set<uint32_t>> widths;
  for (const auto& [key, ranges] : covered) {
    const Op op = std::get<1>(key);
    if (op != Op::ChunkQKV && op != Op::ChunkOProj && op != Op::ChunkGateUp && op != Op::ChunkDown) continue;
    uint32_t width = 0, last_end = 0;
    for (auto [b, e] : ranges) width = std::max(width, e - b), last_end = std::max(last_end, e);
    widths[{std::get<0>(key), op}].insert(width);
    for (auto [b, e] : ranges) {
      if (e - b != width) {
        EXPECT_EQ(e, last_end) << op_name(op) << ": a narrower tile that is not the last";
      }
    }
  }
  for (const auto& [key, set] : widths) {
    const Op op = key.second;
    const uint32_t narrow = op == Op::ChunkGateUp ? kChunkMatrixCols / 2 : kChunkMatrixCols;
    const uint32_t rows = op == Op::ChunkQKV ? qkv_cols : op == Op::ChunkGateUp ? uint32_t(c.intermediate_size) : uint32_t(c.hidden_size);
    ASSERT_EQ(set.size(), 1u) << op_name(op);
    const uint32_t w = *set.begin();
    EXPECT_TRUE(w == std::min(narrow, rows) || w == std::min(narrow * kChunkWideFactor, rows)) << op_name(op) << " " << w;
  }
  auto expect_cover = [&](int layer, Op op, int which, int tile, uint32_t total) {
    auto v = covered[{layer, op, which, tile}];
    std::sort(v.begin(), v.end());
    uint32_t at = 0;
    for (auto [b, e] : v) {
      EXPECT_EQ(b, at) << op_name(op) << " layer " << layer;
      at = e;
    }
    EXPECT_EQ(at, total) << op_name(op) << " layer " << layer << " tile " << tile;
  };
  const int token_tiles = (C + kChunkMatrixTokens - 1) / kChunkMatrixTokens;
  const int attention_tiles = (C + cs.attention_tokens - 1) / cs.attention_tokens;
  for (int l = 0; l < c.num_layers; ++l) {
    expect_cover(l, Op::ChunkNorm, kAttentionNorm, 0, uint32_t(C));
    expect_cover(l, Op::ChunkNorm, kMlpNorm, 0, uint32_t(C));
    expect_cover(l, Op::ChunkRope, 0, 0, uint32_t(C));
    for (int t = 0; t < token_tiles; ++t) {
      expect_cover(l, Op::ChunkQKV, 0, t, qkv_cols);
      expect_cover(l, Op::ChunkOProj, 0, t, uint32_t(c.hidden_size));
      expect_cover(l, Op::ChunkGateUp, 0, t, uint32_t(c.intermediate_size));
      expect_cover(l, Op::ChunkDown, 0, t, uint32_t(c.hidden_size));
    }
    for (int t = 0; t < attention_tiles; ++t) expect_cover(l, Op::ChunkAttention, 0, t, uint32_t(c.num_kv_heads));
  }
  // Every instruction waits for all producers of one counter (the previous stage); the first stage
  // waits for the previous chunk's last one (lag 1), the counter token step 0 waits for.
  for (const Instr& in : cs.instrs) {
    ASSERT_EQ(in.num_waits, 1) << s.describe(in);
    EXPECT_EQ(in.waits[0].per_step, uint32_t(producers[in.waits[0].counter])) << s.describe(in);
    const bool first = in.op == Op::ChunkNorm && in.layer == 0 && in.slot == kAttentionNorm;
    EXPECT_EQ(in.waits[0].lag, first ? 1u : 0u) << s.describe(in);
    if (first) {
      EXPECT_EQ(in.waits[0].counter, cs.final_counter);
    }
  }
  EXPECT_EQ(cs.final_per_step, uint32_t(producers[cs.final_counter]));
  EXPECT_THAT(cs.counter_names[cs.final_counter], HasSubstr("down"));
}

// Wide tiles where a stage takes fewer narrow tiles' time with them: its busiest workgroup's tiles, a
// wide one costing kChunkWideTileCost narrow ones (Llama-3.1-8B's stages at chunks of 1,024 over 132
// workgroups, then 1B's).
TEST(ChunkSchedule, WideTilesWhereTheStageTakesLessTime) {
  EXPECT_FALSE(chunk_tiles_wide(384, 192, 132));   // 8B qkv: 3 narrow rounds against 2 wide (3.2)
  EXPECT_TRUE(chunk_tiles_wide(256, 128, 132));    // o_proj, down: 2 against 1 (1.6)
  EXPECT_TRUE(chunk_tiles_wide(1792, 896, 132));   // gate_up: 14 against 7 (11.2)
  EXPECT_FALSE(chunk_tiles_wide(128, 64, 132));    // 1B o_proj: 1 against 1
  EXPECT_TRUE(chunk_tiles_wide(192, 96, 132));     // 1B qkv: 2 against 1
  EXPECT_FALSE(chunk_tiles_wide(3, 2, 0));         // no workgroups counts as one: 3 against 2 (3.2)

  // In the schedule: 300 tokens (3 token tiles) over 4 workgroups of the tiny model's gate_up.
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "chunk-wide");
  const ModelConfig& c = model->config;
  for (int W : {4, 1000}) {
    const Schedule s = build_schedule(c, ScheduleParams{W, 0, false, 1, 0, 300});
    const uint32_t rows = uint32_t(c.intermediate_size), narrow = kChunkMatrixCols / 2, wide = narrow * kChunkWideFactor;
    const uint32_t narrow_tiles = 3 * ((rows + narrow - 1) / narrow), wide_tiles = 3 * ((rows + wide - 1) / wide);
    const bool expect_wide = chunk_tiles_wide(narrow_tiles, wide_tiles, W);
    size_t gate_up = 0;
    for (const Instr& in : s.chunk.instrs)
      if (in.op == Op::ChunkGateUp && in.layer == 0) {
        ++gate_up;
        EXPECT_LE(in.end - in.begin, expect_wide ? wide : narrow);
      }
    EXPECT_EQ(gate_up, expect_wide ? wide_tiles : narrow_tiles) << "W = " << W;
  }
}

// Post-norm layers (Gemma 3): o_proj's and down's tiles write the chunk's projected rows instead of adding
// to the residual rows, and a post_norm stage over the chunk's tokens after each adds their norm.
TEST(ChunkSchedule, PostNormLayersWriteTheProjectedRowsAndAddTheirNorm) {
  TinyModelSpec spec;
  spec.arch = Arch::Gemma3;
  auto model = load_tiny_model(spec, "chunk-post-norm");
  ScheduleParams p;
  p.num_workgroups = 5;
  p.chunk_tokens = 200;
  const Schedule s = build_schedule(model->config, p);
  std::vector<Instr> sorted = s.chunk.instrs;
  std::sort(sorted.begin(), sorted.end(), [](const Instr& a, const Instr& b) { return a.seq < b.seq; });
  std::map<int, std::vector<Op>> stages;  // per layer, in order
  for (const Instr& in : sorted) {
    const bool writes_projected = in.flags & kWritesProjected;
    EXPECT_EQ(writes_projected, in.op == Op::ChunkOProj || in.op == Op::ChunkDown) << s.describe(in);
    std::vector<Op>& ops = stages[in.layer];
    if (ops.empty() || ops.back() != in.op) ops.push_back(in.op);
    if (in.op == Op::ChunkPostNorm) {
      EXPECT_EQ(in.slot, ops.size() < 7 ? kAttentionNorm : kMlpNorm) << s.describe(in);
    }
  }
  ASSERT_EQ(int(stages.size()), model->config.num_layers);
  for (const auto& [layer, ops] : stages)
    EXPECT_EQ(ops, (std::vector<Op>{Op::ChunkNorm, Op::ChunkQKV, Op::ChunkRope, Op::ChunkAttention, Op::ChunkOProj, Op::ChunkPostNorm,
                                    Op::ChunkNorm, Op::ChunkGateUp, Op::ChunkDown, Op::ChunkPostNorm}))
        << "layer " << layer;
  // The chunk's tokens are covered once by each post_norm stage.
  for (uint16_t slot : {kAttentionNorm, kMlpNorm}) {
    std::vector<int> covered(200, 0);
    for (const Instr& in : s.chunk.instrs)
      if (in.op == Op::ChunkPostNorm && in.layer == 1 && in.slot == slot)
        for (uint32_t t = in.begin; t < in.end; ++t) ++covered[t];
    EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), 200);
  }
}

TEST(ChunkSchedule, PlanningChecksTheModelAndTheSize) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "chunk-plan");
  EXPECT_EQ(plan_chunk_steps(model->config, -1, 64), 64);
  EXPECT_EQ(plan_chunk_steps(model->config, -1, 4096), 1024);
  EXPECT_EQ(plan_chunk_steps(model->config, 100, 4096), 100);
  EXPECT_EQ(plan_chunk_steps(model->config, 0, 4096), 0);
  EXPECT_EQ(plan_chunk_steps(model->config, 5000, 4096), 4096);
  EXPECT_THAT(test::error_of([&] { plan_chunk_steps(model->config, -2, 4096); }), HasSubstr("chunk tokens must be"));
  ModelConfig wide = model->config;
  wide.head_dim = 256;  // Gemma 3's: chunk attention's portable form
  EXPECT_EQ(plan_chunk_steps(wide, -1, 4096), 1024);
  wide.head_dim = 272;
  EXPECT_EQ(plan_chunk_steps(wide, -1, 4096), 0);
  ModelConfig odd = model->config;
  odd.head_dim = 24;
  EXPECT_EQ(plan_chunk_steps(odd, -1, 4096), 0);  // prompts go one token per step
  EXPECT_THAT(test::error_of([&] { plan_chunk_steps(odd, 64, 4096); }),
              HasSubstr("chunk steps (prefill) are not available for this model: head_dim 24"));
}

// Llama-3.1-8B's shape (32 layers, hidden 4,096, 32 query and 8 kv heads of 128, MLP 14,336), counted
// by hand: a matrix op is 2 x tokens x K x N per layer.
TEST(PrefillFlops, MatrixOpsAndCausalAttentionAtLlama8B) {
  ModelConfig c;
  c.num_layers = 32, c.hidden_size = 4096, c.num_heads = 32, c.num_kv_heads = 8, c.head_dim = 128, c.intermediate_size = 14336;
  EXPECT_DOUBLE_EQ(chunk_op_flops(c, Op::ChunkQKV, 0, 4096), 6597069766656.0);      // 2 * 4096 * 4096 * 6144 * 32
  EXPECT_DOUBLE_EQ(chunk_op_flops(c, Op::ChunkOProj, 0, 4096), 4398046511104.0);    // 2 * 4096 * 4096 * 4096 * 32
  EXPECT_DOUBLE_EQ(chunk_op_flops(c, Op::ChunkGateUp, 0, 4096), 30786325577728.0);  // 2 * 4096 * 4096 * 28672 * 32
  EXPECT_DOUBLE_EQ(chunk_op_flops(c, Op::ChunkDown, 0, 4096), 15393162788864.0);    // 2 * 4096 * 14336 * 4096 * 32
  // 4 * 4096 (q_dim) * (1 + 2 + ... + 4096) * 32 layers; a chunk after 4,096 cached positions adds
  // 4,096 pairs for each of its tokens.
  EXPECT_DOUBLE_EQ(chunk_op_flops(c, Op::ChunkAttention, 0, 4096), 4.0 * 4096 * (4096.0 * 4097 / 2) * 32);
  EXPECT_DOUBLE_EQ(chunk_op_flops(c, Op::ChunkAttention, 4096, 1), 4.0 * 4096 * 4097 * 32);
  // A sliding-window layer attends min(p + 1, window) positions at position p: layers of window 3 and
  // global, positions 0..4: (1 + 2 + 3 + 3 + 3) + (1 + 2 + 3 + 4 + 5) pairs; positions 2..4: 9 + 12.
  ModelConfig g = c;
  g.num_layers = 2, g.sliding_window = 3, g.sliding_layers = {1, 0};
  EXPECT_DOUBLE_EQ(chunk_op_flops(g, Op::ChunkAttention, 0, 5), 4.0 * 4096 * (12 + 15));
  EXPECT_DOUBLE_EQ(chunk_op_flops(g, Op::ChunkAttention, 2, 3), 4.0 * 4096 * (9 + 12));
  EXPECT_EQ(chunk_op_flops(c, Op::ChunkNorm, 0, 4096), 0.0);
  EXPECT_EQ(chunk_op_flops(c, Op::ChunkPostNorm, 0, 4096), 0.0);
  EXPECT_EQ(chunk_op_flops(c, Op::GateUp, 0, 4096), 0.0);
}

struct PrefillCase {
  int prompt;
  int chunk;
  Arch arch = Arch::Llama;
  Quantize quantize = std::nullopt;  // the layers quantized at load time (their matrices at widths of several scale groups)
  int window = 6;                      // Gemma 3: its sliding layers' window (every other layer slides)
};

class PrefillVsReference : public ::testing::TestWithParam<PrefillCase> {};

// The logits at the last prompt position (the first sampled step's) against the reference, and the
// greedy continuation against the same emulator ingesting the prompt one token per step.
TEST_P(PrefillVsReference, LastPositionLogitsAndContinuation) {
  const PrefillCase pc = GetParam();
  TinyModelSpec spec;
  spec.arch = pc.arch;
  spec.eos = {};
  spec.max_position = 8192;
  if (pc.arch == Arch::Qwen3) spec.head_dim = 32;
  spec.sliding_window = pc.window;
  if (pc.quantize != std::nullopt) spec.hidden = 256, spec.intermediate = 352, spec.head_dim = 64;
  LoadOptions load;
  load.quantize = pc.quantize;
  auto model = load_tiny_model(spec, "prefill-ref", load);
  ASSERT_EQ(matrix_format_quantized(model->formats.body), pc.quantize != std::nullopt);
  const auto prompt = prompt_of(pc.prompt, model->config.vocab_size);
  const int n = 6;
  EmulatorOptions opt;
  opt.num_workgroups = 11;
  opt.context = pc.prompt + n + 2;
  opt.record_logits = true;
  opt.check_dependencies = pc.prompt <= 600;  // the checker's bookkeeping grows with the cache
  opt.chunk_tokens = pc.chunk;
  Emulator chunked(*model, opt);
  const GenerateResult a = greedy(chunked, prompt, n);
  ASSERT_EQ(int(a.tokens.size()), n) << stop_reason_name(a.stop);
  EXPECT_EQ(a.stats.chunked_tokens, pc.prompt - 1 >= kMinChunkedTokens ? pc.prompt - 1 : 0);
  EXPECT_EQ(a.stats.ingested_tokens, pc.prompt);
  EXPECT_EQ(chunked.position(), pc.prompt + n - 1);

  opt.chunk_tokens = 0;
  Emulator stepwise(*model, opt);
  const GenerateResult b = greedy(stepwise, prompt, n);
  EXPECT_EQ(b.stats.chunked_tokens, 0);

  ReferenceModel ref(*model, opt.context);
  std::vector<float> ref_logits;
  for (int32_t t : prompt) ref_logits = ref.forward(t);
  const auto cmp = test::compare_logits(ref_logits, chunked.recorded_logits()[0]);
  EXPECT_LT(cmp.relative_error, 2e-2) << cmp.summary();
  if (cmp.reference_margin > 1e-2 * cmp.reference_scale) {
    EXPECT_EQ(a.tokens[0], cmp.reference_argmax) << cmp.summary();
  }
  // The continuations agree until a step where the reference's top two are within rounding; the
  // reference follows the chunked run's tokens.
  for (int i = 0; i < n; ++i) {
    const auto step = test::compare_logits(ref_logits, chunked.recorded_logits()[size_t(i)]);
    if (a.tokens[size_t(i)] != b.tokens[size_t(i)]) {
      EXPECT_LE(step.reference_margin, 1e-2 * step.reference_scale)
          << "step " << i << ": the prefilled and the token-by-token runs differ away from a near-tie: " << step.summary();
      std::printf("note: step %d: near-tie, continuations part here (%s)\n", i, step.summary().c_str());
      break;
    }
    ref_logits = ref.forward(a.tokens[size_t(i)]);
  }
}

INSTANTIATE_TEST_SUITE_P(PromptLengthsAndChunkSizes, PrefillVsReference,
                         ::testing::Values(PrefillCase{1, 64}, PrefillCase{7, 64}, PrefillCase{7, 3}, PrefillCase{64, 64},
                                           PrefillCase{64, 100}, PrefillCase{511, 64}, PrefillCase{511, 100},
                                           PrefillCase{4096, 1024}, PrefillCase{4096, 1000}, PrefillCase{100, 32, Arch::Qwen2},
                                           PrefillCase{100, 48, Arch::Qwen3}, PrefillCase{300, 128, Arch::Llama, MatrixFormat::FP8},
                                           PrefillCase{300, 128, Arch::Qwen2, MatrixFormat::INT4}, PrefillCase{300, 64, Arch::Gemma3},
                                           PrefillCase{300, 128, Arch::Gemma3, std::nullopt, 100},
                                           PrefillCase{200, 100, Arch::Gemma3, MatrixFormat::INT4, 70}),
                         [](const auto& param_info) {
                           const PrefillCase& p = param_info.param;
                           const std::string q = p.quantize ? "_" + std::string(matrix_format_name(*p.quantize)) : "";
                           const std::string window = p.arch == Arch::Gemma3 ? fmt::format("_window{}", p.window) : "";
                           return fmt::format("prompt{}_chunk{}_{}{}{}", p.prompt, p.chunk, arch_name(p.arch), q, window);
                         });

TEST(Prefill, IsTheDefaultAndEveryInterleavingGivesTheSameTokens) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "prefill-default");
  const auto prompt = prompt_of(40, model->config.vocab_size);
  std::vector<int32_t> first;
  for (Interleaving policy : {Interleaving::RoundRobin, Interleaving::Eager, Interleaving::Random}) {
    EmulatorOptions opt;  // chunk_tokens left at its default
    opt.num_workgroups = 9;
    opt.context = 64;
    opt.interleaving = policy;
    Emulator emu(*model, opt);
    ASSERT_EQ(emu.schedule().chunk.tokens, 64);
    const GenerateResult r = greedy(emu, prompt, 8);
    EXPECT_EQ(r.stats.chunked_tokens, 39);
    if (first.empty()) first = r.tokens;
    EXPECT_EQ(r.tokens, first) << interleaving_name(policy);
  }
}

// A second turn is prefilled from the position the first left: its K/V join the cache after the
// first turn's, and the reply matches a single launch over the whole history.
TEST(Prefill, MultiTurnPrefillsTheNewTurnAfterTheCache) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "prefill-turns");
  EmulatorOptions opt;
  opt.num_workgroups = 7;
  opt.context = 200;
  opt.chunk_tokens = 32;
  opt.record_logits = true;
  const auto p1 = prompt_of(50, model->config.vocab_size), p2 = prompt_of(70, model->config.vocab_size - 5);
  Emulator two(*model, opt);
  const GenerateResult r1 = greedy(two, p1, 5);
  const GenerateResult r2 = greedy(two, p2, 5);
  EXPECT_EQ(r2.stats.chunked_tokens, 70);  // the pending reply token and the new turn but its last token
  EXPECT_EQ(two.position(), 50 + 5 + 70 + 4);
  std::vector<int32_t> history = p1;
  history.insert(history.end(), r1.tokens.begin(), r1.tokens.end());
  history.insert(history.end(), p2.begin(), p2.end());
  ReferenceModel ref(*model, opt.context);
  std::vector<float> ref_logits;
  for (int32_t t : history) ref_logits = ref.forward(t);
  const auto cmp = test::compare_logits(ref_logits, two.recorded_logits()[0]);
  EXPECT_LT(cmp.relative_error, 2e-2) << cmp.summary();
}

TEST(DependencyChecker, CatchesAChunkAttentionThatDoesNotWaitForRope) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "chunk-dep");
  EmulatorOptions opt;
  opt.num_workgroups = 12;
  opt.context = 64;
  opt.chunk_tokens = 32;
  Schedule s = build_schedule(model->config, ScheduleParams{12, 0, false, 1, 0, 32});
  for (Instr& in : s.chunk.instrs)
    if (in.op == Op::ChunkAttention && in.layer == 1) in.num_waits = 0;  // the planted bug
  std::string msg;
  try {
    Emulator emu(*model, s, opt);
    greedy(emu, prompt_of(40, model->config.vocab_size), 2);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_THAT(msg, HasSubstr("dependency violation"));
  EXPECT_THAT(msg, ::testing::ContainsRegex("consumer: chunk step [0-9]+, workgroup [0-9]+: layer 1 chunk_attention \\(kv group [0-9]\\)"
                                            " tokens \\[[0-9]+, [0-9]+\\)\n"
                                            "  producer: chunk step [0-9]+, workgroup [0-9]+: layer 1 chunk_rope tokens"));
}

TEST(Emulator, ReportsADeadlockInAChunkStep) {
  TinyModelSpec spec;
  auto model = load_tiny_model(spec, "chunk-deadlock");
  EmulatorOptions opt;
  opt.num_workgroups = 6;
  opt.context = 64;
  opt.chunk_tokens = 16;
  Schedule s = build_schedule(model->config, ScheduleParams{6, 0, false, 1, 0, 16});
  for (Instr& in : s.chunk.instrs)
    if (in.op == Op::ChunkDown && in.layer == 0) in.waits[0].per_step += 1;  // one gate_up tile too many
  Emulator emu(*model, s, opt);
  const auto prompt = prompt_of(30, model->config.vocab_size);
  try {
    greedy(emu, prompt, 2);
    FAIL() << "no deadlock reported";
  } catch (const HangError& e) {
    EXPECT_TRUE(e.stopped());
    EXPECT_THAT(std::string(e.what()), ::testing::ContainsRegex("workgroup [0-9]+ chunk step 0: layer 0 chunk_down tokens \\[0, 128\\) "
                                                                "columns \\[[0-9]+, [0-9]+\\)   <- earliest blocked instruction\n"
                                                                "    waits for counter 'chunk layer 0 gate_up' to reach [0-9]+ \\(now [0-9]+\\)"));
  }
  EXPECT_EQ(emu.position(), 0);  // nothing committed
}

}  // namespace
}  // namespace mk
