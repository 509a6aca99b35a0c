// The decode schedule: for one token step, the fused instructions each workgroup runs, in order, and what
// each waits for. Built on the host by laying out the model's step recipe (runtime/step_recipe.h);
// executed as data by the GPU kernel and by the CPU emulator.
//
// Synchronisation is by counters: an instruction signals (release-adds 1 to) one counter when it is done,
// and before it starts waits (acquire) until each of its counters reaches per_step * (step + 1 - lag).
// Counters only grow during a launch, so a target names "this step's producers are all done".
//
// Two forms of counter (issue 4; the schedule picks one per counter): a flat counter is one value that
// every producer adds to; a per-domain counter (ScheduleParams::sync_domains > 1, for the counters a whole
// stage signals) has one stripe per sync domain (a GPC / XCD group of workgroups): a producer adds to its
// own domain's stripe, and a waiter reads all stripes and waits until they sum to the target. The sum is
// the flat counter's value, so the targets are the same; what changes is that each stripe receives only
// its domain's release-adds. Every counter value (each stripe) lives on its own line: counter_line().
//
// One step of the Llama family's recipe, in canonical (sequential) order:
//   Embed                            x = embedding[token]                         (workgroup 0)
//   per layer l:
//     QKV      row blocks           qkv = (RMSNorm(x) * W_qkv + b); one block lies inside one kv group
//     Attention (kv group, split)   q/k norm + RoPE, append K/V at pos, partial attention over its
//                                   slice of the cache -> (m, l, o) per query head
//     OProj    row blocks           combine the partials, x += W_o * attn
//     GateUp   row blocks           h = silu(W_gate * RMSNorm(x)) * (W_up * RMSNorm(x))
//     Down     row blocks           x += W_down * h
//   LMHead     row blocks           logits = W_lm * RMSNorm(x); per-block (max, argmax)
//   Sample                          next token, stop checks, streaming           (workgroup 0)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/matrix_format.h"
#include "runtime/model_config.h"
#include "runtime/op_table.h"
#include "runtime/portability.h"

namespace mk {

#define MK_OP_ENUM(E, name) E,
enum class Op : uint8_t { MK_FOR_EACH_OP(MK_OP_ENUM) };
#undef MK_OP_ENUM
#define MK_OP_COUNT(E, name) +1
inline constexpr int kNumOps = 0 MK_FOR_EACH_OP(MK_OP_COUNT);
inline constexpr int kNumStepOps = 0 MK_FOR_EACH_STEP_OP(MK_OP_COUNT);  // the first kNumStepOps of Op
#undef MK_OP_COUNT
const char* op_name(Op op);

// Wait until counters[counter] >= per_step * (step + 1 - lag).
struct Wait {
  uint32_t counter = 0;
  uint32_t per_step = 0;
  uint32_t lag = 0;
};

// Instr::flags. Slice-level dataflow over the intermediate vector h (Schedule::h_slices):
// kSignalsHSlices: a gate_up block adds 1 to the counter of every h slice its rows touch (`signal` is
//   unused); kWaitsHSlices: a down block waits for each slice of h just before it reads it, not for the
//   whole gate_up stage (its `waits` then hold nothing for h).
inline constexpr uint8_t kSignalsHSlices = 1, kWaitsHSlices = 2;
// kClaimsRows: a block of a stage with run-time claimed rows (Schedule::claimed_rows): its [begin, end)
// is the whole stage's, of which it runs the share of the rank its workgroup claimed.
inline constexpr uint8_t kClaimsRows = 4;
// kWritesProjected: an o_proj or down block of a post-norm layer (its recipe stage does not add): it
// writes its rows to the projected buffer, which the post_norm stage after it normalises and adds to x.
// Chunk steps: a chunk_o_proj or chunk_down tile writes the chunk's projected rows (chunk_post_norm's).
inline constexpr uint8_t kWritesProjected = 8;
// A post-norm folded into the row stage after it (ScheduleParams::fold_post_norms): that stage's blocks
// each form x' = x + RMSNorm(projected) in their prologue before their own norm, and one of them writes x'
// for the stages after. x' goes to the other of the residual's two buffers (x, x_alt), as the other
// blocks are still reading the one it came from.
// kReadsResidualAlt: the instruction's residual input is x_alt, not x. kWritesResidual: the one block of
// a folding stage that writes x' (to x if it read x_alt, else to x_alt). kStartsFoldedStep: the embed of
// such a step, which writes x to x_alt and zeros to `projected`, so that layer 0's qkv folds a post-norm
// of zeros (x' = x) like every other layer's: in a folded step every GEMV behind an RMSNorm folds.
inline constexpr uint8_t kReadsResidualAlt = 16, kWritesResidual = 32, kStartsFoldedStep = 64;
// kPushes: tensor parallel (runtime/tensor_parallel.h): the instruction writes its output on other devices
// and signals its counter there: an o_proj or down block its partial rows into every device's partials
// (Instr::slot: the set), an LM head block its logits and partials to the home device, the sample op
// the token and the stop flag to every device.
inline constexpr uint8_t kPushes = 128;
// Instr::folds: which post-norm a folding instruction applies, the one of the recipe's stage just before
// its own: the attention's (the layer's post_attn_norm, before gate_up) or the MLP's (post_mlp_norm of the
// layer before: before the next layer's qkv, or the last layer's, before the LM head; layer 0's qkv folds
// embed's zeros, with layer 0's weight).
inline constexpr uint8_t kFoldsNoNorm = 0, kFoldsAttentionPostNorm = 1, kFoldsMlpPostNorm = 2;

struct Instr {
  Op op = Op::Embed;
  uint8_t num_waits = 0;
  uint16_t layer = 0;
  // Output rows [begin, end); Attention: begin = kv group, end = split. Chunk steps: ChunkNorm and
  // ChunkRope, ChunkPostNorm: the chunk's tokens [begin, end); the matrix ops: output columns [begin, end);
  // ChunkAttention: begin = kv group.
  uint32_t begin = 0, end = 0;
  // LMHead: its partial-argmax slot. PostNorm: which norm (kAttentionNorm, kMlpNorm). Pushing o_proj and
  // down, AllReduce: the set of partials (0: o_proj's, 1: down's). Chunk steps: the matrix ops' and ChunkAttention's token tile (tokens
  // [slot * tile, (slot + 1) * tile) of the chunk); ChunkNorm, ChunkPostNorm: which norm (kAttentionNorm,
  // kMlpNorm).
  uint16_t slot = 0;
  uint8_t flags = 0;  // kSignalsHSlices, kWaitsHSlices, kClaimsRows, kWritesProjected, kReadsResidualAlt, kWritesResidual, kPushes
  uint8_t folds = kFoldsNoNorm;  // the post-norm it folds into its prologue (kFoldsAttentionPostNorm, kFoldsMlpPostNorm)
  Wait waits[2];
  uint32_t signal = 0;  // counter this instruction adds 1 to when done
  uint32_t seq = 0;     // position in the canonical order of one step (for diagnostics and checking)
};
static_assert(sizeof(Instr) == 48, "Instr is shared with the GPU: keep its layout fixed");

// The layer whose post-norm weight a folding instruction (Instr::folds) applies: its own for the
// attention's post-norm; for the MLP's, the layer before its own (layer 0's own: it folds zeros), or the
// last layer for the LM head (whose Instr::layer is 0).
MK_HD_INLINE uint32_t folded_norm_layer(const Instr& in, uint32_t num_layers) {
  if (in.folds == kFoldsAttentionPostNorm) return in.layer;
  if (in.op == Op::LMHead) return num_layers - 1u;
  return in.layer > 0 ? uint32_t(in.layer) - 1u : 0u;
}

struct ScheduleParams {
  int num_workgroups = 132;
  int attention_splits = 0;  // splits of the KV cache per kv head; 0: one per workgroup per kv head (max 32)
  // true: every instruction waits for the whole previous stage (the flat-barrier schedule, kept as the
  // baseline that issue 4 measures against); false: attention waits only for its kv group's QKV rows.
  bool stage_barriers = false;
  // Sync domains: 1 = every counter flat; D > 1: counters with at least 2 * D producers a step (a whole
  // stage) get D stripes. Which workgroup is in which domain is decided where it runs (the GPU: the
  // topology probe's map of its SM; the emulator: workgroup % D); any assignment is correct.
  int sync_domains = 1;
  // Slice-level dataflow between gate_up and down: h is cut into slices of this many columns (a multiple
  // of 8; the last slice may be shorter); each down block waits for a slice just before reading it.
  // 0: down waits for the whole gate_up stage.
  int h_slice_cols = 0;
  // Prompt tokens a chunk step runs through the layers at once (prefill); 0: no chunk steps, prompts go
  // through token steps one token at a time.
  int chunk_tokens = 0;
  // Whether chunk stages may take wide tiles (chunk_tiles_wide decides where); false: 128 columns
  // throughout, and the chunk kernel's shared memory sized for those (more L1 for its other ops).
  bool chunk_wide_tiles = true;
  // The row stages of the ops in `narrow_ops` (a bit per Op, op_bit: QKV, OProj, GateUp, Down) are cut
  // into this many blocks instead of one per workgroup (0: one per workgroup): fewer, fuller workgroups in
  // a latency-bound stage, the others going on to their next instruction.
  int narrow_workgroups = 0;
  uint32_t narrow_ops = 0;
  // Where attention's split partials are combined: -1 where the model's default puts it
  // (attention_combine_once_default), 0 in every o_proj workgroup, 1 once per kv group by the group's
  // last split (Schedule::combine_once).
  int attention_combine = -1;
  // Run-time claimed rows (issue 13, item 5) in the row stages of `claimed_ops` (op_bit: OProj, GateUp,
  // Down; 0: none): a stage's rows go to ranks handed out in arrival order, not to fixed workgroups. A
  // workgroup claims its rank (an atomic add) as the instruction before the stage starts, before that
  // one waits for its inputs, and runs the rank's rows; the last `claim_late_ranks` ranks get
  // `claim_shrink_percent` percent fewer rows than an even share, so the workgroups still busy with the
  // stage before get less of it. A row's value does not depend on who computes it. The emulator runs
  // such schedules; the GPU kernel runs static rows (every form of claims measured on an H100 was as
  // fast or slower: docs/log.md, 2026-11-25, run-time claims).
  uint32_t claimed_ops = 0;
  int claim_late_ranks = 8;
  int claim_shrink_percent = 30;
  // Tokens a token step can run (1..kMaxStepTokens): a step runs up to this many consecutive positions with
  // one pass over the weights (StepSpan below). Each step decides how many the next one runs.
  int step_tokens = 1;
  // Post-norm layers (Gemma 3): each post-norm stage of the recipe is folded into the row stage after it
  // (qkv, gate_up, the LM head: kReadsResidualAlt above), which removes the post-norm's own stage and its
  // hand-off; false: a post_norm stage of its own, as the recipe lists it. Folded only where every
  // post-norm of the step is followed by a stage that can fold it, and every stage that reads x is one.
  bool fold_post_norms = true;
};

// Token steps of several tokens (ScheduleParams::step_tokens). A launch's tokens are indexed from its
// first token step's position: token i sits at position start + i. Step s runs the tokens
// [index, index + count) of its span, each its own column of the step's buffers (x, qkv, h, logits, ...):
// column j at position start + index + j attends to the cache up to itself. Token `ingest - 1` is the last
// prompt token, whose logits give the first reply token; the columns from it on yield distributions (with
// drafted tokens in the span, one per drafted token and one past them). The sample op writes the next
// step's span; a span that starts before drafted positions it did not accept discards them (the next step
// writes its own K/V there before anything reads them): the cache's length is the span's index, a value on
// the device.
inline constexpr int kMaxStepTokens = 16;
struct StepSpan {
  int32_t index = 0;  // the first token's index in the launch
  int32_t count = 1;  // tokens (columns) it runs, 1..step_tokens
};
// The span of the step after one whose last kept token is `next_index - 1`: prompt tokens, as many as fit
// (up to step_tokens), else the one token sampled last; never past the context (`room` positions are
// left from the launch's start: context - start).
MK_HD_INLINE StepSpan next_step_span(int32_t next_index, int32_t ingest, int32_t step_tokens, int32_t room) {
  StepSpan s;
  s.index = next_index;
  int32_t count = next_index < ingest ? ingest - next_index : 1;
  if (count > step_tokens) count = step_tokens;
  if (count > room - next_index) count = room - next_index;
  s.count = count < 1 ? 1 : count;
  return s;
}
// The first column of a span that yields a distribution (columns before it ingest prompt tokens only).
MK_HD_INLINE int32_t first_sampling_column(StepSpan span, int32_t ingest) {
  const int32_t j = ingest - 1 - span.index;
  return j < 0 ? 0 : j;
}

static_assert(kNumOps <= 32, "op_bit: one bit per op in a uint32_t");
inline constexpr uint32_t op_bit(Op op) { return 1u << unsigned(op); }
// The names of the ops in a mask of op_bit (comma-separated, table order), or "none".
std::string op_names(uint32_t ops);

// A launch runs chunk steps when at least this many prompt tokens come before its last (which a token
// step runs, sampling the first reply token from its logits); shorter prompts go one token per step.
inline constexpr int kMinChunkedTokens = 4;
// Of `ingest` tokens to run, those that go through chunk steps of `chunk_tokens` (0: none): all but the
// last when at least kMinChunkedTokens precede it, else none. Both backends plan a launch with it.
inline int chunked_prompt_tokens(int chunk_tokens, int ingest) {
  return chunk_tokens > 0 && ingest - 1 >= kMinChunkedTokens ? ingest - 1 : 0;
}
// Chunk-step tokens: `requested` (-1: the default, 1,024; 0: none), capped at the context; checked.
int plan_chunk_tokens(int requested, int context);
// The same where the model has chunk steps (its recipe has chunk stages; hidden, q_dim and intermediate
// sizes multiples of 32; head_dim a multiple of 16, at most 128; layers of any matrix format), else 0,
// or, if chunk steps were asked for explicitly (requested > 0), an error naming the reason. The GPU
// kernel and the emulator both plan so.
int plan_chunk_steps(const ModelConfig& c, int requested, int context);

// ChunkNorm's Instr::slot: which of a layer's norms it applies.
inline constexpr uint16_t kAttentionNorm = 0, kMlpNorm = 1;
// Tokens of one matrix-op instruction's tile in a chunk step (its M), and output columns (its N; gate_up:
// kChunkMatrixCols / 2 columns of h, a gate and an up row each). Fixed by the device's tile
// (device/chunk_gemm.h), which checks them. A stage's tiles are twice as wide (kChunkWideFactor) where
// that takes less time by the device's rate for them: a wide tile costs kChunkWideTileCost narrow ones
// (H200, tests/gpu/chunk_gemm_check.cu: 548 against 429 TFLOPS a workgroup's worth, 2 x 429 / 548 = 1.57),
// and a stage lasts as many tiles as its busiest workgroup runs (chunk_tiles_wide decides).
inline constexpr int kChunkMatrixTokens = 128, kChunkMatrixCols = 128, kChunkWideFactor = 2;
inline constexpr double kChunkWideTileCost = 1.6;
// Whether a chunk stage of `tiles` narrow tiles (`wide_tiles` when wide) over `workgroups` runs wide.
inline bool chunk_tiles_wide(uint32_t tiles, uint32_t wide_tiles, int workgroups) {
  const uint32_t w = uint32_t(workgroups > 0 ? workgroups : 1);
  return double((wide_tiles + w - 1) / w) * kChunkWideTileCost < double((tiles + w - 1) / w);
}
// Query tokens of one chunk attention instruction (device/chunk_attention.h). Head sizes with a
// tensor-core form (32, 64, 128): 16 per warp task, as many tasks as 16 warps take for a group of G query
// heads. Others take the portable form, which runs 32 query rows a pass: one pass's tokens, so that a
// chunk's attention spreads over as many workgroups as it can (Gemma 3's one kv head of 256: 8 tokens, 128
// instructions a 1,024-token chunk, where 64-token ones made 16 and left the other workgroups waiting).
MK_HD_INLINE constexpr int chunk_attention_tokens(int group_size, int head_dim) {
  if (head_dim == 32 || head_dim == 64 || head_dim == 128) return 16 * (group_size >= 16 ? 1 : 16 / group_size);
  return group_size >= 32 ? 1 : (32 + group_size - 1) / group_size;
}

// The chunk steps of a launch (prefill), a program of their own that every workgroup runs before its
// token steps: chunk k runs tokens [k * tokens, ...) of the prompt. Their counters are flat and follow
// the token steps' counter lines (chunk counter c is line first_line + c); a wait's target counts chunks
// as a token step's counts steps. Token step 0 waits until the last chunk's last stage is done
// (final_counter reaches final_per_step * chunks), which orders it after every chunk step's cache write.
struct ChunkSchedule {
  int tokens = 0;  // C; 0: no chunk steps
  int attention_tokens = 0;  // query tokens per attention instruction
  std::vector<Instr> instrs;
  std::vector<uint32_t> wg_begin;
  std::vector<std::string> counter_names;
  uint32_t first_line = 0;
  uint32_t final_counter = 0, final_per_step = 0;
  int instrs_per_chunk = 0;
  bool enabled() const { return tokens > 0; }
};

// The slices of h (ScheduleParams::h_slice_cols). Their counters are flat and consecutive: slice k of
// layer l is counter first_counter + l * count + k, and a step is done with it when it reached
// producers[k] (the gate_up blocks whose rows touch it) times the steps.
struct HSlices {
  uint32_t cols = 0;   // columns per slice; 0: no slices
  uint32_t count = 0;  // slices per layer
  uint32_t first_counter = 0;
  std::vector<uint32_t> producers;

  uint32_t counter(int layer, uint32_t k) const { return first_counter + uint32_t(layer) * count + k; }
  // What slice k's counter reaches once step `step`'s producers are all done.
  uint32_t target(uint32_t k, uint32_t step) const { return producers[k] * (step + 1); }
  uint32_t begin(uint32_t k) const { return k * cols; }
  // The slices that rows [r0, r1) of h touch: first_touched(r0) .. last_touched(r1), both included.
  uint32_t first_touched(uint32_t r0) const { return r0 / cols; }
  uint32_t last_touched(uint32_t r1) const { return (r1 - 1) / cols; }
};

// Attention's splits combined once per kv group (ScheduleParams::attention_combine): every split adds 1
// to its group's arrival counter after writing its partial (an acquire-release add that nothing waits
// on), and the add that completes the step's count (attention_last_arrival) combines the group's
// partials into the attention output before its split signals; o_proj then reads that output instead of
// combining every head's partials itself. The counters are flat and consecutive: layer l's group g is
// first_counter + l * groups + g.
struct CombineOnce {
  bool enabled = false;
  uint32_t first_counter = 0, groups = 0;
  uint32_t counter(int layer, uint32_t g) const { return first_counter + uint32_t(layer) * groups + g; }
};

// Run-time claimed rows (ScheduleParams::claimed_ops). A stage with claimed rows has one block per
// workgroup (kClaimsRows), each spanning the stage; a workgroup claims a rank with an add to the stage's
// claim counter while its instruction before the block waits, and runs that rank's rows. Every workgroup
// claims exactly once per step in each such stage, and every claim of step s happens before any of step
// s + 1 (each workgroup's blocks of step s, which the next step's gate waits for, follow its claims), so
// the counter stands at step x workgroups when a step's claims begin and an add that found `before`
// holds rank before - step x workgroups: no reset. Stages qualify where every rank gets a row and every
// workgroup has an instruction before the stage in its list to claim in. The claim counters are flat and
// consecutive: layer l's o_proj, gate_up and down (kClaimableOps order) are first_counter + 3l + 0, 1, 2.
struct ClaimedRows {
  uint32_t ops = 0;  // ScheduleParams::claimed_ops; 0: none
  uint32_t late = 0, shrink = 0;
  uint32_t first_counter = 0;
  static constexpr Op kClaimableOps[3] = {Op::OProj, Op::GateUp, Op::Down};

  // (build_schedule claims only in kClaimableOps' stages.)
  uint32_t counter(int layer, Op op) const {
    uint32_t k = 0;
    while (k + 1 < 3 && kClaimableOps[k] != op) ++k;
    return first_counter + 3u * uint32_t(layer) + k;
  }
  // The rank held by a claim that found the counter at `before` in step `step`.
  static uint32_t rank(uint32_t before, uint32_t step, uint32_t workgroups) { return before - step * workgroups; }
  // Rank r of `workgroups` runs rows [row_start(r), row_start(r + 1)) of a stage of `rows` rows: the last
  // `late` ranks get (100 - shrink)% of an even share each, the others split the rest as split_range
  // does. A rank past the last gets none.
  uint32_t row_start(uint32_t rows, uint32_t r, uint32_t workgroups) const;
  // Instr `in` (kClaimsRows) as the block of rank r.
  Instr resolve(const Instr& in, uint32_t r, uint32_t workgroups) const;
};

struct Schedule {
  int num_workgroups = 0;
  int num_layers = 0;
  int attention_splits = 0;
  int lm_head_slots = 0;
  int instrs_per_step = 0;
  std::vector<Instr> instrs;      // the lists of all workgroups, concatenated
  std::vector<uint32_t> wg_begin;  // workgroup w runs instrs[wg_begin[w] .. wg_begin[w+1])
  std::vector<std::string> counter_names;
  uint32_t sample_counter = 0;  // signalled once per step by Sample: the step gate
  // Counters [0, first_striped_counter) are flat; the rest have sync_domains stripes each.
  int sync_domains = 1;
  uint32_t first_striped_counter = 0;
  // The row stages cut into fewer blocks than workgroups (ScheduleParams::narrow_ops), and into how many.
  uint32_t narrow_ops = 0;
  int narrow_workgroups = 0;
  int step_tokens = 1;  // ScheduleParams::step_tokens: the columns of a step's buffers
  // Tensor parallel (StepRecipe::devices, rank): the devices and this schedule's; a pushed counter
  // (kPushes) counts every device's instructions.
  int devices = 1, rank = 0;
  bool post_norms_folded = false;  // ScheduleParams::fold_post_norms took effect (Instr::folds)
  HSlices h_slices;
  CombineOnce combine_once;
  ClaimedRows claimed_rows;
  ChunkSchedule chunk;

  uint32_t num_counters() const { return uint32_t(counter_names.size()); }
  bool striped(uint32_t counter) const { return counter >= first_striped_counter; }
  uint32_t stripes(uint32_t counter) const { return striped(counter) ? uint32_t(sync_domains) : 1u; }
  // The line of a counter's stripe (counter_line below).
  uint32_t line(uint32_t counter, uint32_t stripe) const;
  // Lines (counter values) in all: flat counters one each, per-domain counters sync_domains each, then
  // the chunk steps' counters one each.
  uint32_t counter_lines() const;
  uint32_t step_counter_lines() const;  // the token steps' part
  // A counter's value (per-domain counters: their stripes summed) from the values of all lines; and
  // every counter's (the token steps' counters, then the chunk steps').
  unsigned counter_value(const std::vector<unsigned>& lines, uint32_t counter) const;
  std::vector<unsigned> counter_values(const std::vector<unsigned>& lines) const;
  // "layer 3 attention (kv group 2, split 1)"; "lm_head rows [0, 972)"; chunk-step instructions
  // "layer 0 chunk_qkv tokens [0, 128) columns [0, 128)".
  std::string describe(const Instr& instr) const;
  // Workgroup that owns instrs[index].
  int workgroup_of(size_t index) const;
};

struct StepRecipe;  // runtime/step_recipe.h
// Lays out a model's step recipe (runtime/step_recipe.h): the first form builds the recipe of the
// config's architecture.
Schedule build_schedule(const ModelConfig& config, const ScheduleParams& params);
Schedule build_schedule(const StepRecipe& recipe, const ModelConfig& config, const ScheduleParams& params);
// Whether a model's attention partials are combined once per kv group unless asked otherwise: where
// every o_proj workgroup would read at least 192 KiB of partials with all S splits active (Llama-3.2-3B:
// 24 heads of 128 x 16 splits; Llama-3.1-8B: 32 x 128 x 16, 256 KiB). Smaller models combine in o_proj:
// the last split's round trips on the critical path cost them more than the redundant reads (measured on
// an H100: Llama-3.2-1B +0.8% at depth 1024, Qwen3-1.7B's 128 KiB even; docs/log.md,
// 2026-11-25 and 2026-11-26/27: the combine once per kv group, its loads in registers).
bool attention_combine_once_default(const ModelConfig& config, int splits);

// The line of stripe `stripe` of counter c (flat counters: stripe is ignored): the flat counters first,
// one line each, then the per-domain counters, `domains` lines each. Shared by the kernel and the emulator.
MK_HD_INLINE uint32_t counter_line(uint32_t c, uint32_t stripe, uint32_t first_striped, uint32_t domains) {
  return c < first_striped ? c : first_striped + (c - first_striped) * domains + stripe;
}
// The domain (stripe) of a workgroup when nothing better is known: the emulator's, and the GPU's when the
// topology probe's map does not cover its unit.
MK_HD_INLINE uint32_t fallback_sync_domain(uint32_t workgroup, uint32_t domains) { return workgroup % domains; }

// Staged K/V rows are padded by 8 elements: every row starts 16-byte aligned (one 16-byte load per 8
// elements), and rows 16 bytes apart modulo 128 keep a quarter-warp's 16-byte loads of 8 rows on
// distinct banks.
MK_HD_INLINE int attention_row_stride(int head_dim) { return head_dim + 8; }

// Positions of K/V staged in shared memory per tile of attention's tile path (device/ops/attention.h): up
// to ~40 KiB of K plus V, at most 128.
MK_HD_INLINE int attention_tile_positions(int head_dim) {
  const int t = (40 * 1024) / (2 * 2 * attention_row_stride(head_dim));
  return t > 128 ? 128 : t;
}

// Which positions of an n-position cache attention split `split` of S covers. The active splits grow
// with the sequence, 1 << attention_split_positions_log2 positions each, up to S: a short sequence has few partials to
// combine, a long one keeps the whole grid busy. Inactive splits cover nothing. Shared by the emulator
// and the GPU kernel.
inline constexpr int kPositionsPerSplit = 128;
// A split's positions while fewer than S are active, as a power of two (its log2): kPositionsPerSplit,
// halved until the split is one tile of the tile path (head_dim 128: 64), so that a wide head's split is
// one tile, not two, and twice as many workgroups share a short sequence (docs/log.md, 2026-11-26:
// a wide head's split is one tile). The kernel takes it from ModelDims::split_positions_log2, computed once on the host.
MK_HD_INLINE int attention_split_positions_log2(int head_dim) {
  int log2 = 0;
  while ((2 << log2) <= kPositionsPerSplit) ++log2;  // kPositionsPerSplit, a power of two
  while (log2 > 3 && (1 << log2) > attention_tile_positions(head_dim)) --log2;
  return log2;
}
MK_HD_INLINE int active_attention_splits(int n, int S, int split_positions_log2) {
  const int a = (n + (1 << split_positions_log2) - 1) >> split_positions_log2;
  return a < 1 ? 1 : (a > S ? S : a);
}
// Whether an attention split's add to its kv group's arrival counter, which found `before`, was the last
// of step `step`'s `splits` adds (counters only grow during a launch). Shared by the kernel and the
// emulator.
MK_HD_INLINE bool attention_last_arrival(uint32_t before, uint32_t splits, uint32_t step) {
  return before + 1 == splits * (step + 1);
}
MK_HD_INLINE void attention_split_range(int n, int S, int split_positions_log2, int split, int* p0, int* p1) {
  const int active = active_attention_splits(n, S, split_positions_log2);
  const int chunk = (n + active - 1) / active;
  const int first = split < active ? split * chunk : n;
  *p0 = first < n ? first : n;
  *p1 = first + chunk < n ? first + chunk : n;
  if (*p1 < *p0) *p1 = *p0;
}

// The positions a layer attends to at position `pos`: [attention_first_position, pos], the last `window`
// of them (0: all). A sliding layer's splits cut that range, so they stay on its window. Shared by the
// emulator and the GPU kernel.
MK_HD_INLINE int attention_first_position(int pos, int window) { return window > 0 && pos + 1 > window ? pos + 1 - window : 0; }
MK_HD_INLINE void attention_window_split_range(int pos, int window, int S, int split_positions_log2, int split, int* p0, int* p1) {
  const int first = attention_first_position(pos, window);
  attention_split_range(pos + 1 - first, S, split_positions_log2, split, p0, p1);
  *p0 += first;
  *p1 += first;
}
MK_HD_INLINE int active_window_splits(int pos, int window, int S, int split_positions_log2) {
  return active_attention_splits(pos + 1 - attention_first_position(pos, window), S, split_positions_log2);
}

// Splits [0, total) into `parts` contiguous ranges whose sizes differ by at most one.
std::vector<std::pair<uint32_t, uint32_t>> split_range(uint32_t total, uint32_t parts);

}  // namespace mk
