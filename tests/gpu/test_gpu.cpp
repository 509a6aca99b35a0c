// GPU correctness: the monokernel against the CPU emulator (same schedule) and against transformers'
// fixtures. Built with MK_GPU=nvidia|amd; run on a machine with a GPU (scripts/gpu_check.sh).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <nlohmann/json.hpp>
#include <thread>

#include "device/gpu_backend.h"
#include "host/emulator/emulator.h"
#include "runtime/error.h"
#include "runtime/quantize.h"
#include "runtime/synthetic_model.h"
#include "runtime/token_automaton.h"
#include "tests/helpers/logits_compare.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

using test::TinyModelSpec;

using test::load_tiny_model;

GenerateResult run(DecodeBackend& b, std::vector<int32_t> prompt, int n, SamplingParams s = {}) {
  GenerateRequest req;
  req.input = std::move(prompt);
  req.max_new_tokens = n;
  req.sampling = s;
  return b.generate(req, {});
}

// Compares GPU tokens with the emulator's; at the first difference, accepts it only if the emulator's
// top-2 logits there are within rounding (a margin of at most `tie` times their scale; and says so),
// since the sequences diverge from then on.
void expect_same_tokens(const std::vector<int32_t>& gpu, const std::vector<int32_t>& emu,
                        const std::vector<std::vector<float>>& emu_logits, const std::string& what, double tie = 2e-3) {
  ASSERT_EQ(gpu.size(), emu.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (gpu[i] == emu[i]) continue;
    const auto& l = emu_logits[i];
    const auto cmp = test::compare_logits(l, l);  // for the emulator's own top-2 margin and scale
    const double margin = cmp.reference_margin;
    if (margin <= tie * std::max(1.0, cmp.reference_scale)) {
      std::printf("note: %s: tokens differ at step %zu where the emulator's top-2 logits are within rounding (margin %.3g)\n",
                  what.c_str(), i, margin);
      return;
    }
    FAIL() << what << ": GPU token " << gpu[i] << " != emulator token " << emu[i] << " at step " << i
           << " (emulator top-2 margin " << margin << ")";
  }
}

// An emulator executing the very schedule the GPU runs (same workgroups, same splits), without the
// dependency checker (the emulator tests cover it), recording the logits of every sampled step.
std::unique_ptr<Emulator> emulator_of(const Model& model, const GpuBackend& gpu, int context) {
  EmulatorOptions opt;
  opt.num_workgroups = gpu.schedule().num_workgroups;
  opt.context = context;
  opt.record_logits = true;
  opt.check_dependencies = false;
  return std::make_unique<Emulator>(model, gpu.schedule(), opt);
}

// Greedy generation of `n` tokens from `prompt` on the GPU and on an emulator running the GPU's own
// schedule: the same tokens (expect_same_tokens), and, if they are identical, last-step logits within
// bf16 tolerance. Prints the comparison, labelled `what`.
void expect_gpu_matches_emulator(const Model& model, GpuBackend& gpu, int context, const std::vector<int32_t>& prompt,
                                 int n, const std::string& what, double tolerance = 1e-3) {
  auto emulator = emulator_of(model, gpu, context);
  const auto g = run(gpu, prompt, n), e = run(*emulator, prompt, n);
  expect_same_tokens(g.tokens, e.tokens, emulator->recorded_logits(), what);
  // The emulator keeps its last step's logits; the GPU's last_logits() are of the same step.
  const auto cmp = test::compare_logits(emulator->recorded_logits().back(), gpu.last_logits());
  if (g.tokens == e.tokens) {
    EXPECT_LT(cmp.relative_error, tolerance) << what << ": " << cmp.summary();
  }
  std::printf("%s: %d tokens, last-step logits vs emulator: %s\n", what.c_str(), n, cmp.summary().c_str());
}

// dtype of a quantized format (F8_E4M3 / U4): a bf16 checkpoint quantized to that format at load time, at
// widths of several 128-column scale groups with a short last one (intermediate 2 x 128 + 80 rounded up to
// the format's column multiple: 336 for fp8, 352 for int4); head16: the embedding and LM head kept in 16 bits,
// bf16, or fp16 when the checkpoint is fp16 (`fp16`).
struct ArchCase {
  Arch arch;
  DType dtype;
  bool tied;
  bool head16 = false;
  bool fp16 = false;
};

// The tiny model of one architecture case, generating without EOS.
std::unique_ptr<Model> tiny_of(const ArchCase& c, const std::string& tag) {
  TinyModelSpec spec;
  spec.arch = c.arch;
  spec.dtype = c.dtype;
  spec.tied = c.tied;
  spec.llama3_rope = spec.arch == Arch::Llama;
  spec.eos = {};
  if (spec.arch == Arch::Qwen3) spec.head_dim = 32;
  const MatrixFormat* quantized = std::find_if(std::begin(kMatrixFormats), std::end(kMatrixFormats), [&](MatrixFormat f) {
    return matrix_format_quantized(f) && matrix_format_dtype(f) == c.dtype;
  });
  if (quantized == std::end(kMatrixFormats)) return load_tiny_model(spec, tag);
  const int multiple = matrix_cols_multiple(*quantized);
  spec.dtype = c.fp16 ? DType::F16 : DType::BF16;
  spec.hidden = 256, spec.intermediate = 256 + (80 + multiple - 1) / multiple * multiple, spec.head_dim = 64;
  LoadOptions load;
  load.quantize = *quantized;
  load.quantize_head = !c.head16;
  return load_tiny_model(spec, tag, load);
}

class GpuVsEmulator : public ::testing::TestWithParam<ArchCase> {};

std::string arch_case_name(const ::testing::TestParamInfo<ArchCase>& info) {
  const ArchCase& c = info.param;
  return std::string(arch_name(c.arch)) + "_" + std::string(dtype_name(c.dtype)) + (c.head16 ? (c.fp16 ? "_head_fp16" : "_head16") : "");
}

TEST_P(GpuVsEmulator, SixtyFourGreedyTokens) {
  auto model = tiny_of(GetParam(), "gpu-emu");
  if (GetParam().head16) {  // the case runs the 16-bit head body inside the quantized kernel
    ASSERT_NE(model->formats.body, model->formats.head);
    ASSERT_EQ(model->formats.head, GetParam().fp16 ? MatrixFormat::F16 : MatrixFormat::BF16);
  }
  GpuOptions gopt;
  gopt.context = 256;
  auto gpu = create_gpu_backend(*model, gopt);
  expect_gpu_matches_emulator(*model, *gpu, 256, {1, 7, 42, 99, 3}, 64,
                              std::string(arch_name(GetParam().arch)) + " " + std::string(dtype_name(GetParam().dtype)));
}

// The other engine configurations on the same check: weights through registers (the AMD path), the
// stage-barrier schedule on a weight stream of two 1 KiB slots that issues 3 instructions ahead, so the
// ring wraps many times per instruction and chunks are issued across step boundaries, and the profiling
// kernels (their own instantiations) with a trace, whose timestamps must be ordered for every instruction;
// and per-domain counters (issue 4), with workgroup % 5 as the domains, and with a unit -> domain table
// over 7 domains whose entries for units >= 100 are missing (those workgroups take the fallback). The
// profiling and per-domain kernels on the weight stream run attention's warp path (the long-context
// kernels; on tensor cores for Qwen3's head_dim 32 on NVIDIA), the others its tile path. The row stages:
// one block per workgroup (no narrow stages; the other variants take the engine's plan), and every row
// stage in 13 blocks. Post-norm layers (Gemma 3) fold their post-norms into the stage after each, but with
// per-domain counters and in the last variant, which run them as stages of their own.
TEST_P(GpuVsEmulator, OtherEngineConfigurations) {
  auto model = tiny_of(GetParam(), "gpu-emu-engines");
  for (int variant = 0; variant < 9; ++variant) {
    GpuOptions gopt;
    gopt.context = 128;
    if (variant == 0 || variant == 3) {
      gopt.stream_slots = 0;
    }
    if (variant >= 2) {
      gopt.profile = true;
      gopt.trace_step = 6;  // a generating step: the prompt has 5 tokens
    }
    if (variant == 1) {
      gopt.stage_barriers = true;
      gopt.stream_slots = 2;
      gopt.stream_slot_kib = 1;
      gopt.stream_lookahead = 3;
      gopt.stream_early = -1;
    }
    if (variant == 3) gopt.workgroups = 37;  // fewer workgroups than SMs, an odd count
    if (variant == 4) gopt.sync_domains = 5;
    if (variant == 2 || variant == 4) gopt.attention_path = AttentionPath::WarpChunks;
    if (variant == 5) {
      gopt.stream_slots = 0;
      gopt.sync_domains = 7;
      for (int unit = 0; unit < 256; ++unit) gopt.unit_domain.push_back(unit < 100 ? (unit / 3) % 7 : -1);
    }
    if (variant == 6) gopt.narrow_workgroups = 0;
    if (variant == 7) {
      gopt.narrow_workgroups = 13;
      gopt.narrow_ops = op_bit(Op::QKV) | op_bit(Op::OProj) | op_bit(Op::GateUp) | op_bit(Op::Down);
    }
    if (variant == 8) gopt.fold_post_norms = false;
    auto gpu = create_gpu_backend(*model, gopt);
    // Per-domain counters (variants 4, 5) have no folding kernels: the engine runs the post-norm stages.
    ASSERT_EQ(gpu->schedule().post_norms_folded, model->config.post_norms && variant != 8 && variant != 4 && variant != 5);
    if (variant == 4 || variant == 5) {
      ASSERT_GT(gpu->schedule().num_counters(), gpu->schedule().first_striped_counter);
    }
    if (variant == 6) {
      ASSERT_EQ(gpu->schedule().narrow_ops, 0u);
    }
    if (variant == 7) {
      ASSERT_EQ(gpu->schedule().narrow_workgroups, 13);
    }
    expect_gpu_matches_emulator(*model, *gpu, 128, {1, 7, 42, 99, 3}, 40,
                                std::string(arch_name(GetParam().arch)) + ", " + gpu->name());
    if (gopt.profile) {
      const auto& trace = gpu->profile().trace;
      ASSERT_EQ(trace.size(), gpu->schedule().instrs.size());
      for (size_t i = 0; i < trace.size(); ++i) {
        const auto& t = trace[i];
        SCOPED_TRACE(gpu->schedule().describe(gpu->schedule().instrs[i]));
        EXPECT_GT(t.start, 0.0);
        EXPECT_LE(t.start, t.ready);
        EXPECT_LE(t.ready, t.done);
        if (t.prologue_end > 0) {
          EXPECT_LE(t.ready, t.prologue_end);
          EXPECT_LE(t.prologue_end, t.done);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, GpuVsEmulator,
                         ::testing::Values(ArchCase{Arch::Llama, DType::BF16, true}, ArchCase{Arch::Mistral, DType::F16, false},
                                           ArchCase{Arch::Qwen2, DType::BF16, true}, ArchCase{Arch::Qwen3, DType::BF16, false},
                                           ArchCase{Arch::Llama, DType::F32, false},
                                           ArchCase{Arch::Qwen2, DType::F8_E4M3, false}, ArchCase{Arch::Qwen3, DType::F8_E4M3, false, true},
                                           ArchCase{Arch::Qwen2, DType::U4, false, true},
                                           ArchCase{Arch::Qwen3, DType::U4, false}, ArchCase{Arch::Mistral, DType::U4, false, true, true},
                                           ArchCase{Arch::Mistral, DType::F8_E4M3, false, true, true},
                                           ArchCase{Arch::Gemma3, DType::BF16, true}, ArchCase{Arch::Gemma3, DType::U4, true}),
                         arch_case_name);

// Every quantized format of runtime/matrix_format.h's list on Llama, so that a new format is run on the GPU
// by its line in the list.
std::vector<ArchCase> quantized_llama_cases() {
  std::vector<ArchCase> out;
  for (const MatrixFormat f : kMatrixFormats)
    if (matrix_format_quantized(f)) out.push_back(ArchCase{Arch::Llama, matrix_format_dtype(f), true});
  return out;
}
INSTANTIATE_TEST_SUITE_P(EveryQuantizedFormat, GpuVsEmulator, ::testing::ValuesIn(quantized_llama_cases()), arch_case_name);

// 700 positions on `model` (context 800) for each attention path and engine configuration: splits (0:
// the default), stream slots (-1: the default, 0: weights through registers), slot KiB, lookahead.
// chunk_tokens: the GPU options' (-1: the default chunk steps; 0: the prompt one token per step, so that
// token steps alone are compared, at the token steps' tolerance).
void expect_long_prompt_matches_emulator(const Model& model, const std::vector<AttentionPath>& paths, const std::string& what,
                                         int chunk_tokens = -1, double tolerance = 1e-3) {
  struct Config {
    int splits, slots, slot_kib, lookahead;
  };
  for (const AttentionPath path : paths)
    for (const Config cfg : {Config{0, -1, 0, 0}, Config{2, -1, 0, 0}, Config{2, 3, 1, 0}, Config{2, 0, 0, 0}, Config{2, -1, 0, 1}}) {
      if (path == AttentionPath::Tiles && cfg.lookahead > 0) continue;  // the tile path does not use the ring
      GpuOptions gopt;
      gopt.context = 800;
      gopt.attention_splits = cfg.splits;
      gopt.stream_slots = cfg.slots;
      gopt.stream_slot_kib = cfg.slot_kib;
      gopt.stream_lookahead = cfg.lookahead;
      gopt.attention_path = path;
      gopt.chunk_tokens = chunk_tokens;
      auto gpu = create_gpu_backend(model, gopt);
      const std::vector<int32_t> prompt = test::long_prompt(700);
      const int S = gpu->schedule().attention_splits;
      expect_gpu_matches_emulator(model, *gpu, 800, prompt, 32,
                                  fmt::format("{}: 700-token prompt, {} active splits of {}, {} attention, lookahead {}, {}", what,
                                              active_attention_splits(732, S, attention_split_positions_log2(model.config.head_dim)), S,
                                              path == AttentionPath::Tiles ? "tile" : "warp-chunk", cfg.lookahead, gpu->name()),
                                  tolerance);
    }
}

TEST(Gpu, LongPromptSeveralSplitsMatchesEmulator) {
  // 700 positions: attention runs over several active splits. With the default splits each is one
  // shared-memory tile (the first tile is staged before the wait); with 2 splits each walks 3 tiles and
  // the new position falls in a later tile (read back from the cache). Both on the default weight stream;
  // the 2 splits also with 1 KiB stream slots (the ring wraps many times per GEMV at this length's
  // schedule) and with weights through registers (the AMD path). Each on both attention paths: on the
  // warp path, 2 splits give every warp several chunks, which come through the idle weight-stream ring
  // on the default stream and are loaded by the warp itself with 1 KiB slots (too small for them), with
  // a stream that issues ahead (the ring is not idle then) and through registers. This model's head_dim
  // (16) takes the warp path's FMA form.
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "gpu-long");
  expect_long_prompt_matches_emulator(*model, {AttentionPath::Tiles, AttentionPath::WarpChunks}, "head_dim 16, 2 heads a kv head");
}

TEST(Gpu, Gemma3SlidingWindowsAndWideHeadsMatchEmulator) {
  // Gemma 3's layers with its head size (256, one kv head for 4 query heads): every other layer slides a
  // window of 96 positions with its own RoPE table, so at 700 positions its splits cover only the window
  // while the global layers' cover all; the post-norm stages follow o_proj and down. Both attention paths.
  TinyModelSpec spec;
  spec.arch = Arch::Gemma3;
  spec.hidden = 256, spec.intermediate = 512, spec.heads = 4, spec.kv_heads = 1, spec.head_dim = 256;
  spec.sliding_window = 96;
  spec.eos = {};
  auto model = load_tiny_model(spec, "gpu-gemma3");
  expect_long_prompt_matches_emulator(*model, {AttentionPath::Tiles, AttentionPath::WarpChunks}, "Gemma 3, head_dim 256, window 96");
}

TEST(Gpu, LlamaFamilyWindowsMatchEmulator) {
  // Mistral's window of 96 positions on every layer, Qwen2's on layer 1 only: at 700 positions the sliding
  // layers' splits cover only the window. Both attention paths; the prompt one token per step (token
  // steps only, at their tolerance), then through chunk steps, whose 16-bit activations the GPU and the
  // emulator may round apart (the prefill tests' tolerance, 5e-3).
  for (const Arch arch : {Arch::Mistral, Arch::Qwen2}) {
    TinyModelSpec spec;
    spec.arch = arch;
    spec.hidden = 256, spec.intermediate = 512, spec.heads = 4, spec.kv_heads = 1, spec.head_dim = 64;
    spec.family_window = 96;
    spec.max_window_layers = 1;
    spec.eos = {};
    auto model = load_tiny_model(spec, "gpu-family-window");
    const std::string what = fmt::format("{}, window 96", arch_name(arch));
    expect_long_prompt_matches_emulator(*model, {AttentionPath::Tiles, AttentionPath::WarpChunks}, what + ", token steps", 0);
    expect_long_prompt_matches_emulator(*model, {AttentionPath::Tiles}, what + ", chunk steps", -1, 5e-3);
  }
}

TEST(Gpu, LongPromptOnTensorCoreWarpPathMatchesEmulator) {
  // The warp path's tensor-core form (attention_warp_mma; NVIDIA): head_dim 64 with 4 query heads a kv
  // head (Llama-3.2-1B's), and head_dim 32 with 8 (the most the MMA's rows hold), in every configuration
  // of the test above.
  struct Shape {
    int heads, kv_heads, head_dim;
  };
  for (const Shape shape : {Shape{8, 2, 64}, Shape{8, 1, 32}}) {
    TinyModelSpec spec;
    spec.eos = {};
    spec.heads = shape.heads;
    spec.kv_heads = shape.kv_heads;
    spec.head_dim = shape.head_dim;
    auto model = load_tiny_model(spec, "gpu-long-mma");
    expect_long_prompt_matches_emulator(*model, {AttentionPath::WarpChunks},
                                        fmt::format("head_dim {}, {} heads a kv head", shape.head_dim, shape.heads / shape.kv_heads));
  }
}

TEST(Gpu, CombineOncePerKvGroupAndWideHeadsMatchEmulator) {
  // Attention's partials combined once per kv group by its last split (Schedule::combine_once, forced
  // here; Llama-3.1-8B's default) and in every o_proj workgroup, on both attention paths, on the weight
  // stream and through registers: head_dim 16, and head_dim 128 with 4 query heads a kv head (8B's) and
  // with 3 (3B's), whose splits are 64 positions (one tile of the tile path) while fewer than S are active.
  struct Shape {
    int heads, kv_heads, head_dim;
  };
  for (const Shape shape : {Shape{4, 2, 16}, Shape{8, 2, 128}, Shape{6, 2, 128}}) {
    TinyModelSpec spec;
    spec.eos = {};
    spec.heads = shape.heads;
    spec.kv_heads = shape.kv_heads;
    spec.head_dim = shape.head_dim;
    auto model = load_tiny_model(spec, "gpu-combine-once");
    for (const int combine : {1, 0})
      for (const AttentionPath path : {AttentionPath::Tiles, AttentionPath::WarpChunks})
        for (const int slots : {-1, 0}) {
          if (combine == 0 && shape.heads != 8) continue;  // in o_proj: LongPromptSeveralSplitsMatchesEmulator and 8B's shape here
          GpuOptions gopt;
          gopt.context = 800;
          gopt.attention_combine = combine;
          gopt.attention_path = path;
          gopt.stream_slots = slots;
          auto gpu = create_gpu_backend(*model, gopt);
          ASSERT_EQ(gpu->schedule().combine_once.enabled, combine == 1);
          const std::vector<int32_t> prompt = test::long_prompt(700);
          const int S = gpu->schedule().attention_splits;
          expect_gpu_matches_emulator(*model, *gpu, 800, prompt, 24,
                                      fmt::format("head_dim {}, combined {}, {} active splits of {}, {} attention, {}", shape.head_dim,
                                                  combine ? "once per kv group" : "in o_proj", active_attention_splits(724, S, attention_split_positions_log2(shape.head_dim)), S,
                                                  path == AttentionPath::Tiles ? "tile" : "warp-chunk", gpu->name()));
        }
  }
}

// A long prompt whose decode steps have more active attention splits than one batch of a combine's
// loads holds, against the emulator, on the weight stream and with weights through registers: S splits a
// kv head of 8 query heads over 2 kv heads of `head_dim`, combined as `combine` says (-1: the default).
void expect_combine_of_many_splits_matches_emulator(int head_dim, int S, int combine, int prompt_tokens, int active,
                                                    const std::string& what) {
  TinyModelSpec spec;
  spec.eos = {};
  spec.heads = 8;
  spec.kv_heads = 2;
  spec.head_dim = head_dim;
  spec.max_position = 2048;
  auto model = load_tiny_model(spec, "gpu-combine");
  const int context = prompt_tokens + 100;
  for (const int slots : {-1, 0}) {
    GpuOptions gopt;
    gopt.context = context;
    gopt.attention_splits = S;
    gopt.attention_combine = combine;
    gopt.stream_slots = slots;
    auto gpu = create_gpu_backend(*model, gopt);
    ASSERT_EQ(gpu->schedule().attention_splits, S);
    ASSERT_EQ(gpu->schedule().combine_once.enabled, combine == 1);
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 29 + 7) % 160);
    ASSERT_EQ(active_attention_splits(prompt_tokens, S, attention_split_positions_log2(head_dim)), active);
    expect_gpu_matches_emulator(*model, *gpu, context, prompt, 16, fmt::format("{}, {}", what, gpu->name()));
  }
}

TEST(Gpu, CombineOncePerKvGroupOfMoreSplitsThanOneBatchMatchesEmulator) {
  // The combining split keeps 16 splits' loads in flight (AttentionOp::kCombineBatch) and merges any
  // more batch by batch with the running max rescaled: 1,200 positions in 64-position splits make 19
  // active of 32.
  expect_combine_of_many_splits_matches_emulator(128, 32, 1, 1200, 19, "1,200-token prompt, 19 active splits combined once");
}

TEST(Gpu, CombineOfMoreSplitsThanRegistersHoldMatchesEmulator) {
  // o_proj combines the active attention splits with 11 in registers, and merges any more batch by batch
  // with the running max rescaled. 1,800 positions with 16 splits a kv head make 15 active (128 positions
  // a split): a second batch of 4.
  expect_combine_of_many_splits_matches_emulator(64, 16, -1, 1800, 15, "1,800-token prompt, 15 active splits");
}

// A model shape for the chunk-step tests below.
struct PrefillShape {
  Arch arch;
  int hidden, heads, kv_heads, head_dim;
  DType dtype;
  Quantize quantize = std::nullopt;
  int window = 6;  // Gemma 3's sliding layers'
  int family_window = 0;  // Mistral: every layer's window; Qwen2 / Qwen3: layer 1's (layer 0 global)
};

// Chunk steps (prefill) of a model of `sh` on the GPU against the emulator running the same schedule,
// over prompt lengths (up to 4,096 tokens, on head_dim 64) and chunk sizes that do and do not divide them,
// on the default grid and on 4 workgroups; and the greedy continuation against the GPU ingesting the same
// prompt one token per step.
void expect_prefill_matches_emulator(const PrefillShape& sh) {
  TinyModelSpec spec;
  spec.arch = sh.arch;
  spec.hidden = sh.hidden, spec.heads = sh.heads, spec.kv_heads = sh.kv_heads, spec.head_dim = sh.head_dim;
  spec.intermediate = 2 * sh.hidden + 64;
  spec.dtype = sh.dtype;
  spec.sliding_window = sh.window;
  spec.family_window = sh.family_window;
  spec.max_window_layers = 1;
  spec.max_position = 8192;
  spec.eos = {};
  LoadOptions load;
  load.quantize = sh.quantize;
  auto model = load_tiny_model(spec, "gpu-prefill", load);
  const char* quantized = sh.quantize == MatrixFormat::INT4 ? ", layers int4" : sh.quantize == MatrixFormat::FP8 ? ", layers fp8" : "";
  const std::string shape = fmt::format("{} head_dim {} x {} heads / {} kv heads, {}{}", arch_name(sh.arch), sh.head_dim, sh.heads,
                                        sh.kv_heads, dtype_name(sh.dtype), quantized);
  struct Run {
    int prompt, chunk, workgroups = 0;
  };
  // On 4 workgroups the wider shapes' qkv and gate_up stages have enough tiles for wide (256-column) ones
  // (16-bit layers; quantized ones keep 128 columns, chunk_gemm_wide_tiles).
  for (const Run r : {Run{7, 64}, Run{64, 64}, Run{511, 100}, Run{511, 1024}, Run{511, 1024, 4}, Run{4096, 1000}}) {
    if (sh.head_dim != 64 && r.prompt == 4096) continue;  // the longest prompt on the head_dim-64 shapes only keeps the test short
    const int context = r.prompt + 40;
    GpuOptions gopt;
    gopt.context = context;
    gopt.chunk_tokens = r.chunk;
    gopt.workgroups = r.workgroups;
    auto gpu = create_gpu_backend(*model, gopt);
    ASSERT_EQ(gpu->schedule().chunk.tokens, std::min(r.chunk, context));
    if (r.workgroups == 4 && sh.hidden >= 256) {  // quantized layers keep 128-column tiles
      bool wide = false;
      for (const Instr& in : gpu->schedule().chunk.instrs)
        wide |= in.op == Op::ChunkGateUp && int(in.end - in.begin) > kChunkMatrixCols / 2;
      ASSERT_EQ(wide, sh.quantize == std::nullopt) << "wide gate_up tiles";
    }
    std::vector<int32_t> prompt;
    for (int i = 0; i < r.prompt; ++i) prompt.push_back(int32_t((i * 53 + 5) % (spec.vocab - 3) + 3));
    const std::string what = fmt::format("{}: {}-token prompt in chunks of {}{}", shape, r.prompt, r.chunk,
                                         r.workgroups ? fmt::format(" on {} workgroups", r.workgroups) : "");
    // 5e-3: the chunk steps round activations to 16 bits, and the two sum in different orders, so a
    // value near a rounding boundary may round the other way (seen: 1.4e-3 at head_dim 128).
    expect_gpu_matches_emulator(*model, *gpu, context, prompt, 16, what, 5e-3);
    if (r.workgroups) continue;  // token-by-token ingestion on 4 workgroups would take minutes; the default grid's runs have it
    gpu->reset();
    const auto chunked = run(*gpu, prompt, 16);
    EXPECT_EQ(chunked.stats.chunked_tokens, r.prompt - 1) << what;
    gopt.chunk_tokens = 0;
    auto stepwise = create_gpu_backend(*model, gopt);
    const auto e = emulator_of(*model, *stepwise, context);
    const auto b = run(*stepwise, prompt, 16);
    run(*e, prompt, 16);  // the token-by-token logits, for the near-tie check
    // The chunk steps' matrix inputs are 16-bit (token steps keep fp32 activations): a near-tie here is
    // a margin within 1% of the logits' scale, the emulator tests' bound against the fp32 reference.
    expect_same_tokens(chunked.tokens, b.tokens, e->recorded_logits(), what + " against token-by-token ingestion", 1e-2);
  }
}

// The shapes that take chunk attention's tensor-core forms (head_dim 64 and 128, 4 and 8 query heads a kv
// head, Qwen3's 32, f16 weights) and its portable form (head_dim 16), and layers quantized to int4 and
// fp8 (expanded to bf16 on their way into the tiles; intermediate 576 = 4 x 128 + 64, a short last scale
// group).
TEST(Gpu, PrefillMatchesEmulatorAcrossPromptLengthsAndChunkSizes) {
  const PrefillShape shapes[] = {{Arch::Llama, 64, 4, 2, 16, DType::BF16},
                                 {Arch::Llama, 256, 8, 2, 64, DType::BF16},
                                 {Arch::Llama, 256, 4, 1, 128, DType::BF16},
                                 {Arch::Qwen3, 128, 8, 1, 32, DType::BF16},
                                 {Arch::Qwen2, 256, 4, 2, 64, DType::F16},
                                 {Arch::Llama, 256, 8, 2, 64, DType::BF16, MatrixFormat::INT4},
                                 {Arch::Qwen2, 256, 4, 1, 128, DType::F16, MatrixFormat::FP8}};
  for (const PrefillShape& sh : shapes) expect_prefill_matches_emulator(sh);
}

// Gemma 3's layers (post-norms, GELU-tanh, scaled embeddings, every other layer a sliding window of 100
// positions: its first key inside a 64-key tile, tiles wholly before some rows' windows) on chunk
// attention's tensor-core form (head_dim 64) and its portable form (Gemma 3's head_dim 256), bf16 and
// int4.
TEST(Gpu, PrefillOfGemma3MatchesEmulator) {
  const PrefillShape shapes[] = {{Arch::Gemma3, 256, 8, 2, 64, DType::BF16, std::nullopt, 100},
                                 {Arch::Gemma3, 256, 4, 1, 256, DType::BF16, std::nullopt, 100},
                                 {Arch::Gemma3, 256, 4, 1, 256, DType::BF16, MatrixFormat::INT4, 100}};
  for (const PrefillShape& sh : shapes) expect_prefill_matches_emulator(sh);
}

// The Llama family's windows of 100 positions, run past them: Mistral's on every layer (tensor-core chunk
// attention, head_dim 64), Qwen2's on layer 1 only (head_dim 128, f16).
TEST(Gpu, PrefillOfWindowedLlamaFamilyMatchesEmulator) {
  const PrefillShape shapes[] = {{Arch::Mistral, 256, 8, 2, 64, DType::BF16, std::nullopt, 6, 100},
                                 {Arch::Qwen2, 256, 4, 1, 128, DType::F16, std::nullopt, 6, 100}};
  for (const PrefillShape& sh : shapes) expect_prefill_matches_emulator(sh);
}

TEST(Gpu, TransformersFixturesGreedyAndLogits) {
  const char* root = std::getenv("MK_FIXTURES");
  ASSERT_NE(root, nullptr) << "MK_FIXTURES is not set";
  for (const char* name : {"llama3", "mistral", "qwen2", "qwen3", "gemma3"}) {
    SCOPED_TRACE(name);
    const auto dir = std::filesystem::path(root) / "hf" / name;
    auto model = load_model(dir);
    const auto expected = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
    const auto prompt = expected["prompt"].get<std::vector<int32_t>>();
    const auto hf_greedy = expected["greedy_tokens"].get<std::vector<int32_t>>();
    const auto margins = expected["greedy_top2_margins"].get<std::vector<double>>();
    GpuOptions gopt;
    gopt.context = 64;
    auto gpu = create_gpu_backend(*model, gopt);
    // Logits at the end of the prompt.
    run(*gpu, prompt, 0);
    const auto hf_last = expected["logits"].back().get<std::vector<float>>();
    const auto cmp = test::compare_logits(hf_last, gpu->last_logits());
    EXPECT_LT(cmp.relative_error, 2e-2) << cmp.summary();
    std::printf("%s: prompt logits vs transformers: %s\n", name, cmp.summary().c_str());
    gpu->reset();
    const auto g = run(*gpu, prompt, int(hf_greedy.size()));
    for (size_t i = 0; i < hf_greedy.size(); ++i) {
      if (g.tokens[i] == hf_greedy[i]) continue;
      if (margins[i] < 2e-2) {
        std::printf("note: %s: differs from transformers at step %zu where its top-2 margin is %.3g\n", name, i, margins[i]);
        break;
      }
      ADD_FAILURE() << name << " step " << i << ": GPU " << g.tokens[i] << " vs transformers " << hf_greedy[i];
      break;
    }
  }
}

TEST(Gpu, MultiTurnMatchesEmulator) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "gpu-turns");
  GpuOptions gopt;
  gopt.context = 128;
  auto gpu = create_gpu_backend(*model, gopt);
  auto emulator = emulator_of(*model, *gpu, 128);
  Emulator& emu = *emulator;
  for (auto* b : {static_cast<DecodeBackend*>(gpu.get()), static_cast<DecodeBackend*>(&emu)}) run(*b, {1, 2, 3}, 10);
  const auto g = run(*gpu, {50, 51}, 10), e = run(emu, {50, 51}, 10);
  EXPECT_EQ(g.stats.ingested_tokens, 3);
  EXPECT_EQ(gpu->position(), emu.position());
  EXPECT_EQ(g.tokens, e.tokens);
}

// A tiny model without EOS whose small weights make flat distributions: sampling has choices.
std::unique_ptr<Model> flat_tiny_model(float weight_scale, const std::string& tag) {
  TinyModelSpec spec;
  spec.eos = {};
  spec.weight_scale = weight_scale;
  return load_tiny_model(spec, tag);
}

TEST(Gpu, SeededSamplingIsReproducible) {
  auto model = flat_tiny_model(0.02f, "gpu-sampling");
  GpuOptions gopt;
  gopt.context = 128;
  auto gpu = create_gpu_backend(*model, gopt);
  for (SamplingParams s : {SamplingParams{0.8f, 0, 1.0f, 0.0f, 11}, SamplingParams{1.0f, 40, 0.9f, 0.05f, 12}}) {
    gpu->reset();
    const auto a = run(*gpu, {4, 5}, 40, s);
    gpu->reset();
    const auto b = run(*gpu, {4, 5}, 40, s);
    EXPECT_EQ(a.tokens, b.tokens);
    gpu->reset();
    s.seed += 100;
    const auto c = run(*gpu, {4, 5}, 40, s);
    EXPECT_NE(a.tokens, c.tokens);
    // The emulator implements the same rule; report how far it agrees (logits differ in rounding).
    auto emulator = emulator_of(*model, *gpu, 128);
    Emulator& emu = *emulator;
    s.seed -= 100;
    const auto e = run(emu, {4, 5}, 40, s);
    size_t same = 0;
    while (same < e.tokens.size() && e.tokens[same] == a.tokens[same]) ++same;
    std::printf("sampling T=%.1f top_k=%d top_p=%.2f: GPU and emulator agree on the first %zu of 40 tokens\n", s.temperature,
                s.top_k, s.top_p, same);
  }
}

// The sampled token is runtime/sampling.h's rule applied to the GPU's own logits (the CPU's sample_token
// on them): device/select_top.h's K largest from the LM head's counts, and the rule's sums in one warp.
// Logits spread wide and bunched in a few bins (the select's pool too small for the crossing bin), K from
// 1 to the 1,024 cap, top-p and min-p; the last of several tokens, after the counts were cleared and
// counted again at every step.
TEST(Gpu, SampledTokenIsTheRuleAppliedToTheGpusLogits) {
  for (const float weight_scale : {0.08f, 0.004f}) {
    TinyModelSpec spec;
    spec.eos = {};
    spec.vocab = 50000;
    spec.weight_scale = weight_scale;
    auto model = load_tiny_model(spec, "gpu-sampled-rule");
    GpuOptions gopt;
    gopt.context = 64;
    auto gpu = create_gpu_backend(*model, gopt);
    const std::vector<SamplingParams> rules = {{1.0f, 0, 1.0f, 0.0f, 1}, {0.7f, 40, 1.0f, 0.0f, 2},  {1.3f, 1000, 1.0f, 0.0f, 3},
                                               {0.9f, 0, 0.9f, 0.0f, 4}, {1.0f, 0, 1.0f, 0.05f, 5}, {0.8f, 2, 0.95f, 0.0f, 6}};
    for (const SamplingParams& base : rules)
      for (uint64_t seed = 0; seed < 4; ++seed) {
        SamplingParams s = base;
        s.seed = base.seed * 100 + seed;
        const std::vector<int32_t> input = {3, int32_t(7 + seed), 11};
        const int n = 5;
        gpu->reset();
        const auto r = run(*gpu, input, n, s);
        ASSERT_EQ(int(r.tokens.size()), n);
        // The last token was drawn at the position of the token before it.
        const uint64_t counter = uint64_t(input.size()) - 1 + uint64_t(n - 1);
        EXPECT_EQ(r.tokens.back(), sample_token(gpu->last_logits(), s, counter))
            << "weight scale " << weight_scale << ", T " << s.temperature << ", top_k " << s.top_k << ", top_p " << s.top_p
            << ", min_p " << s.min_p << ", seed " << s.seed;
      }
  }
}

// Logit adjustments and log-probabilities (runtime/sampling.h) on the GPU against the emulator running
// its schedule: the same tokens and records while the two sequences agree (sampled ones may part where
// the logits' rounding differs), greedy and sampled, with top_k above and below the alternatives asked
// for; each last record against the GPU's own logits; a +100 bias decides every greedy token, and the
// next request without adjustments is as if none had come before.
TEST(Gpu, LogprobsBiasAndPenaltiesMatchTheEmulator) {
  auto model = flat_tiny_model(0.05f, "gpu-logprobs");
  GpuOptions gopt;
  gopt.context = 128;
  auto gpu = create_gpu_backend(*model, gopt);
  auto emulator = emulator_of(*model, *gpu, 128);
  struct Case {
    const char* what;
    SamplingParams sampling;
    LogitAdjustments adjust;
    int top;
  };
  const std::vector<Case> cases = {
      {"greedy, top 20", {}, {}, 20},
      {"sampled, top_k 0, top 5, bias and penalties", {0.9f, 0, 1.0f, 0.0f, 21}, {{{7, 2.0f}, {12, -100.0f}}, 0.8f, 0.6f}, 5},
      {"sampled, top_k 8, top 20, penalties", {1.0f, 8, 1.0f, 0.0f, 22}, {{}, 1.5f, -0.5f}, 20},
      {"greedy, top 0, penalties", {}, {{}, 2.0f, 2.0f}, 0},
  };
  for (const Case& c : cases) {
    std::vector<TokenLogprobs> g_records, e_records;
    const auto generate = [&](DecodeBackend& b, std::vector<TokenLogprobs>& records) {
      b.reset();
      GenerateRequest req;
      req.input = {1, 5, 9, 33};
      req.max_new_tokens = 32;
      req.sampling = c.sampling;
      req.adjust = c.adjust;
      req.top_logprobs = c.top;
      req.on_logprobs = [&](const TokenLogprobs& r) { records.push_back(r); };
      return b.generate(req, {}).tokens;
    };
    const auto g = generate(*gpu, g_records), e = generate(*emulator, e_records);
    ASSERT_EQ(g_records.size(), g.size()) << c.what;
    ASSERT_EQ(e_records.size(), e.size()) << c.what;
    size_t same = 0;
    while (same < g.size() && same < e.size() && g[same] == e[same]) ++same;
    EXPECT_GE(same, c.sampling.greedy() ? g.size() : size_t(4)) << c.what;
    for (size_t i = 0; i < same; ++i) {
      const TokenLogprobs &a = g_records[i], &b = e_records[i];
      EXPECT_EQ(a.token, g[i]) << c.what << ", token " << i;
      EXPECT_NEAR(a.logprob, b.logprob, 2e-3) << c.what << ", token " << i;
      ASSERT_EQ(a.top_count, c.top);
      for (int k = 0; k < a.top_count; ++k) {
        EXPECT_NEAR(a.top_logprobs[k], b.top_logprobs[k], 2e-3) << c.what << ", token " << i << ", alternative " << k;
        // The ids where no neighbour is within rounding (near-ties may swap places).
        const bool apart_below = k + 1 == a.top_count || a.top_logprobs[k] - a.top_logprobs[k + 1] > 1e-2;
        const bool apart_above = k == 0 || a.top_logprobs[k - 1] - a.top_logprobs[k] > 1e-2;
        if (apart_below && apart_above) {
          EXPECT_EQ(a.top_ids[k], b.top_ids[k]) << c.what << ", token " << i << ", alternative " << k;
        }
      }
    }
    // The last record against the GPU's own last logits (its log-softmax, computed here in double).
    const std::vector<float> last = gpu->last_logits();
    const TokenLogprobs expected = token_logprobs(last.data(), int(last.size()), g.back(), c.top);
    EXPECT_NEAR(g_records.back().logprob, expected.logprob, 1e-4) << c.what;
    for (int k = 0; k < c.top; ++k) EXPECT_NEAR(g_records.back().top_logprobs[k], expected.top_logprobs[k], 1e-4) << c.what;
    std::printf("%s: GPU and emulator agree on %zu of %zu tokens and their records\n", c.what, same, g.size());
  }
  // A bias of +100 decides every greedy token; the request after it, without one, is a plain greedy one.
  GenerateRequest forced;
  forced.input = {1, 5, 9, 33};
  forced.max_new_tokens = 8;
  forced.adjust.bias = {{42, 100.0f}};
  gpu->reset();
  EXPECT_EQ(gpu->generate(forced, {}).tokens, std::vector<int32_t>(8, 42));
  gpu->reset();
  emulator->reset();
  EXPECT_EQ(run(*gpu, {1, 5, 9, 33}, 16).tokens, run(*emulator, {1, 5, 9, 33}, 16).tokens);
}

// A constraint (runtime/token_automaton.h) on the GPU: every token and every listed alternative is one the
// state allows with the budget left (the states walked here on the host), a reply that ends by the
// constraint matches the regex whole (std::regex), and the tokens, records and stop are the emulator's
// while the two agree; over a vocabulary of 160 tokens (one LM head block) and of 50,000 (many blocks, a
// mask word per 32). A regex of bounded length with room to spare, and one of unbounded length whose
// budget of 6 tokens the closing sets must keep (docs/structured_output.md): it still ends with EOS.
TEST(Gpu, AConstraintMasksAndEndsAsOnTheEmulator) {
  struct Case {
    std::string re;
    int max_new;
  };
  for (const Case& c : {Case{"(ab|c){0,6}d(a|b){2,5}", 40}, Case{"(ab|c)*d(a|b){2,}", 6}})
    for (const int vocab : {160, 50000}) {
      const std::string& re = c.re;
      TinyModelSpec spec;
      spec.eos = {2};
      spec.vocab = vocab;
      spec.weight_scale = 0.05f;
      auto model = load_tiny_model(spec, "gpu-constraint-" + std::to_string(vocab));
      const char* pieces[] = {"a", "b", "c", "d", "ab", "ba", "cd", "dab", "abc", "bb", "ca", "dd", "aab"};
      std::vector<std::string> bytes(static_cast<size_t>(vocab));
      for (size_t t = 3; t < bytes.size(); ++t) bytes[t] = pieces[(t * 7919) % std::size(pieces)];
      const auto automaton = constraint::compile_token_constraint(
          {constraint::ConstraintSpec::Kind::Regex, re}, std::make_shared<constraint::TokenVocabulary>(bytes, std::vector<int32_t>{2}), "--regex");
      GpuOptions gopt;
      gopt.context = 128;
      auto gpu = create_gpu_backend(*model, gopt);
      auto emulator = emulator_of(*model, *gpu, 128);
      for (const SamplingParams& sampling : {SamplingParams{}, SamplingParams{0.9f, 0, 1.0f, 0.0f, 31}, SamplingParams{1.2f, 5, 0.9f, 0.0f, 32}}) {
        const std::string what = fmt::format("{}, max_new {}, vocab {}, T {}", re, c.max_new, vocab, sampling.temperature);
        std::vector<TokenLogprobs> g_records, e_records;
        StopReason g_stop, e_stop;
        const auto generate = [&](DecodeBackend& b, std::vector<TokenLogprobs>& records, StopReason& stop) {
          b.reset();
          GenerateRequest req;
          req.input = {1, 5, 9, 33};
          req.max_new_tokens = c.max_new;
          req.sampling = sampling;
          req.top_logprobs = 20;
          req.on_logprobs = [&](const TokenLogprobs& r) { records.push_back(r); };
          req.constraint = automaton;
          const GenerateResult r = b.generate(req, {});
          stop = r.stop;
          return r.tokens;
        };
        const auto g = generate(*gpu, g_records, g_stop), e = generate(*emulator, e_records, e_stop);
        ASSERT_EQ(g_records.size(), g.size()) << what;
        int state = automaton->dfa.start;
        std::string text;
        for (size_t i = 0; i < g.size(); ++i) {  // each token's set for the tokens left (4-token prompt, 40 new)
          const int32_t budget = constraint::constraint_budget(c.max_new, int32_t(i), 128, 3 + int32_t(i));
          ASSERT_TRUE(automaton->allowed(state, budget, g[i])) << what << ", token " << i;
          for (int k = 0; k < g_records[i].top_count; ++k)
            EXPECT_TRUE(automaton->allowed(state, budget, g_records[i].top_ids[k])) << what << ", token " << i << ", alternative " << k;
          if (g[i] == 2) break;
          text += automaton->vocabulary->bytes(g[i]);
          state = automaton->advance(state, g[i]);
        }
        EXPECT_EQ(g_stop, StopReason::Eos) << what << ": " << text;
        EXPECT_LE(g.size(), size_t(c.max_new)) << what;
        EXPECT_TRUE(std::regex_match(text, std::regex(re))) << what << ": " << text;
        size_t same = 0;
        while (same < g.size() && same < e.size() && g[same] == e[same]) ++same;
        EXPECT_GE(same, sampling.greedy() ? g.size() : std::min<size_t>(4, g.size())) << what;
        if (same == g.size() && same == e.size()) {
          EXPECT_EQ(g_stop, e_stop) << what;
        }
        for (size_t i = 0; i < same; ++i) {
          EXPECT_NEAR(g_records[i].logprob, e_records[i].logprob, 2e-3) << what << ", token " << i;
          EXPECT_EQ(g_records[i].top_count, e_records[i].top_count) << what << ", token " << i;
        }
        std::printf("%s: \"%s\" (%zu tokens, %s); the emulator agrees on %zu\n", what.c_str(), text.c_str(), g.size(),
                    stop_reason_name(g_stop), same);
      }
      // The next request without a constraint is as if none had come before.
      gpu->reset();
      emulator->reset();
      EXPECT_EQ(run(*gpu, {1, 5, 9, 33}, 12).tokens, run(*emulator, {1, 5, 9, 33}, 12).tokens);
    }
}

TEST(Gpu, StopsCancelsAndRejectsCleanly) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "gpu-stops");
  GpuOptions gopt;
  gopt.context = 12;
  auto gpu = create_gpu_backend(*model, gopt);
  const auto r = run(*gpu, {1, 2, 3, 4}, 100);
  EXPECT_EQ(r.stop, StopReason::ContextFull);
  EXPECT_EQ(int(r.tokens.size()), 12 - 4 + 1);
  EXPECT_THROW(run(*gpu, {5}, 1), Error);
  gpu->reset();
  EXPECT_THROW(run(*gpu, std::vector<int32_t>(13, 1), 1), Error);
  GpuOptions too_many;
  too_many.workgroups = 100000;
  EXPECT_THROW(create_gpu_backend(*model, too_many), Error);

  GpuOptions big;
  big.context = 4096;
  auto gpu2 = create_gpu_backend(*model, big);
  GenerateRequest req;
  req.input = {1, 2};
  req.max_new_tokens = 4000;
  size_t seen = 0;
  const auto c = gpu2->generate(req, [&](int32_t) {
    if (++seen == 5) gpu2->cancel();
  });
  EXPECT_EQ(c.stop, StopReason::Cancelled);
  EXPECT_GE(c.tokens.size(), 5u);
  EXPECT_LT(c.tokens.size(), 4000u);
  EXPECT_EQ(run(*gpu2, {9}, 3).tokens.size(), 3u);  // the session goes on
}

// Finite weights whose activations overflow (a final norm weight of 3e38: the normalised hidden state and
// so the logits are infinite or NaN) stop the generation with the emulator's error, naming the position,
// and no token comes from them, greedy or sampled; the backend goes on after it.
TEST(Gpu, NonFiniteLogitsStopGenerationNamingThePosition) {
  TinyModelSpec spec;
  spec.dtype = DType::F32;
  spec.eos = {};
  const auto dir = test::make_temp_dir("gpu-inf-logits");
  std::vector<synthetic::TensorBytes> tensors = test::write_tiny_model(dir, spec);
  for (synthetic::TensorBytes& t : tensors)
    if (t.name == "model.norm.weight") {
      std::vector<float> v(t.bytes.size() / 4);
      std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
      for (size_t i = 0; i < 64; ++i) v[i] = 3e38f;
      t.bytes = synthetic::encode(v, DType::F32);
    }
  synthetic::write_safetensors(dir / "model.safetensors", tensors);
  auto model = load_model(dir);
  GpuOptions gopt;
  gopt.context = 32;
  auto gpu = create_gpu_backend(*model, gopt);
  for (const float temperature : {0.f, 0.8f}) {
    gpu->reset();
    GenerateRequest req;
    req.input = {1, 2, 3, 4};
    req.max_new_tokens = 8;
    req.sampling.temperature = temperature;
    int tokens = 0;
    std::string message = "no error";
    try {
      gpu->generate(req, [&](int32_t) { ++tokens; });
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_THAT(message, ::testing::HasSubstr("the logits are not finite at position 3 (reply token 1)")) << temperature;
    EXPECT_THAT(message, ::testing::HasSubstr("of 160 are NaN or infinite"));
    EXPECT_EQ(tokens, 0) << "a token was emitted from non-finite logits";
  }
}

TEST(Gpu, OutOfMemoryIsAClearError) {
  TinyModelSpec spec;
  spec.layers = 16;
  spec.kv_heads = 4;
  spec.head_dim = 64;
  auto model = load_tiny_model(spec, "gpu-oom");
  GpuOptions gopt;
  gopt.context = 1 << 24;  // the largest context allowed, and a 256 GiB KV cache no GPU has room for
  try {
    create_gpu_backend(*model, gopt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("not enough device memory"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("KV cache for 16777216 tokens"));
  }
}

// A planted hang (layer 1's gate_up waits for one o_proj block more than there is, for the first two
// launches): the watchdog aborts the launch, generate() throws HangError naming the stuck instruction,
// the process lives on, and once the schedule is whole again the backend gives the tokens a fresh one
// gives, for this call and the next turn.
TEST(Gpu, APlantedHangIsAnErrorAndTheBackendRecovers) {
  TinyModelSpec spec;
  spec.eos = {};
  auto model = load_tiny_model(spec, "gpu-watchdog");
  GpuOptions gopt;
  gopt.context = 32;
  gopt.watchdog_seconds = 1.0;
  gopt.debug_edit_launches = 2;
  gopt.debug_edit_schedule = [](Schedule& s) {
    for (auto& in : s.instrs)
      if (in.op == Op::GateUp && in.layer == 1) in.waits[0].per_step += 1;  // never satisfied
  };
  auto gpu = create_gpu_backend(*model, gopt);
  for (int attempt = 0; attempt < 2; ++attempt) {  // twice: an aborted launch leaves nothing behind
    const auto t0 = std::chrono::steady_clock::now();
    try {
      run(*gpu, {1, 2}, 4);
      ADD_FAILURE() << "no hang reported";
    } catch (const HangError& e) {
      EXPECT_TRUE(e.stopped()) << e.what();
      EXPECT_THAT(e.what(), ::testing::ContainsRegex("watchdog(.|\n)*layer 1 gate_up rows[^\n]*<- earliest blocked "
                                                     "instruction\n    waits for counter 'layer 1 o_proj'"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("the kernel left after"));
      std::printf("attempt %d: %s\n", attempt, e.what());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 1.0 + 2.0) << "the abort took longer than the watchdog plus 2 s";
    EXPECT_EQ(gpu->position(), 0);
  }
  GpuOptions plain;
  plain.context = 32;
  auto fresh = create_gpu_backend(*model, plain);
  const auto expected = run(*fresh, {1, 2}, 8), recovered = run(*gpu, {1, 2}, 8);
  EXPECT_EQ(recovered.tokens, expected.tokens);
  EXPECT_EQ(run(*gpu, {3}, 4).tokens, run(*fresh, {3}, 4).tokens);
  EXPECT_EQ(gpu->position(), fresh->position());
}

}  // namespace
}  // namespace mk
