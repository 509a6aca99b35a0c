// The decode state the CPU emulator keeps (what the GPU keeps in device memory) and the accessors through
// which every op reads and writes it, reporting each access to the happens-before checker. The ops
// (host/emulator/ops/) compute on it; the executor (emulator.cpp) decides who runs when.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "host/emulator/dependency_checker.h"
#include "host/emulator/emulator.h"
#include "runtime/token_automaton.h"
#include "runtime/decode_buffers.h"
#include "runtime/quantize.h"
#include "runtime/step_recipe.h"
#include "runtime/weight_layout.h"

namespace mk::emu {

inline constexpr uint32_t kGateIndex = 0xffffffffu;  // InstrRef.index of a step gate
// InstrRef.index of chunk-step instruction i: i | kChunkIndex (InstrRef.step is then the chunk).
inline constexpr uint32_t kChunkIndex = 0x80000000u;

// A shared buffer of the decode state, with its cell size for the dependency checker.
template <typename T>
struct Buffer {
  std::vector<T> data;
  size_t cell = 1;  // elements per checked cell
  int id = -1;      // checker buffer id
};

// Who is accessing: the workgroup and the instruction (for the checker's reports).
struct OpCtx {
  int wg;
  InstrRef ref;
};

struct EmulatorState {
  const Model& model;
  const ModelConfig& cfg;
  EmulatorOptions opt;
  Schedule schedule;
  WeightLayout layout;
  StepRecipe recipe;             // per-layer data the ops read (attention's window, scale, RoPE; activation)
  std::vector<uint8_t> weights;  // the packed device image
  // RoPE tables, one per distinct (base, scaling) of the layers, one after the other (rope_tables in
  // runtime/step_recipe.h), and which table each layer uses.
  std::vector<float> rope;
  std::vector<uint32_t> layer_rope;

  // Decode state: what the GPU keeps in device memory, one Buffer per entry of runtime/decode_buffers.h
  // (x, qkv, ..., k_cache, v_cache, tokens, the chunk steps' chunk_x, ..., chunk_tokens, projected). The
  // chunk steps' "16-bit" buffers hold the layers' weight type (bf16, or f16 for f16 weights): their matrix
  // ops multiply on tensor cores in it. `tokens` and `chunk_tokens` are sized per launch (the tokens it
  // runs). Besides them, the emulator's own stop flags: stop_at[s] = 1 when Sample at step s ended the
  // launch.
#define MK_EMULATOR_BUFFER(NAME, TYPE, ELEMENTS, CELL, WHAT) Buffer<TYPE> NAME;
  MK_DECODE_BUFFERS(MK_EMULATOR_BUFFER)
#undef MK_EMULATOR_BUFFER
  Buffer<uint8_t> stop_at;

  int position = 0;
  int32_t pending = -1;
  int draft_max = 0;  // check_speculation's: drafts a step, at most (0: no drafter)
  std::atomic<bool> cancel_flag{false};
  std::vector<std::vector<float>> recorded;

  // Per launch.
  struct Launch {
    int chunk_start = 0;  // position of the first chunk-step token
    int chunk_count = 0;  // prompt tokens the chunk steps run (0: none)
    int chunks = 0;       // chunk steps
    int start = 0;        // position of token step 0
    int ingest = 0;  // tokens to run before the first sample
    int next_index = 0;  // the launch's tokens kept in the cache after the last step that ran (its sample op's)
    int max_new = 0;
    SamplingParams sampling;
    LogitAdjustments adjust;                    // active(): the LM head adds logit_adjust, the sample op the penalties
    const LogprobCallback* on_logprobs = nullptr;
    int top_logprobs = 0;
    const TokenCallback* on_token = nullptr;
    const constraint::TokenAutomaton* constraint = nullptr;  // the LM head masks, the sample op advances
    GenerateResult result;
    std::chrono::steady_clock::time_point t0;
  } run;
  std::vector<unsigned> counters;  // one value per counter line (Schedule::counter_lines)
  // Per workgroup: the running sums of an instruction that reads its input slice by slice (a down block
  // with kWaitsHSlices), kept from one slice to the next as the kernel keeps them.
  std::vector<std::vector<float>> partial_sums;
  // The happens-before checker of the launch (none when it is off), shared by every device: it numbers the
  // workgroups and counter lines of device d after those of the devices before it (global_wg,
  // global_line), and watches every device's buffers.
  DependencyChecker* checker = nullptr;

  // Tensor parallel (runtime/tensor_parallel.h): this device's rank and every device's state, by rank
  // (this one's included; one entry without tensor parallel). Pushes write into the others' buffers
  // and signal their counters.
  int rank = 0;
  std::vector<EmulatorState*> devices{this};
  EmulatorState& home() const { return *devices.front(); }

  // The checker's numbers of a workgroup (of the device c.ref names) and of one of this device's counter
  // lines.
  int global_wg(const OpCtx& c) const { return int(c.ref.device) * schedule.num_workgroups + c.wg; }
  uint32_t global_line(uint32_t line) const { return uint32_t(rank) * schedule.counter_lines() + line; }


  EmulatorState(const Model& m, Schedule s, const EmulatorOptions& o);
  void size_buffers(const DecodeShapes& s);  // every decode buffer at its size in runtime/decode_buffers.h

  // ---- accessors that report to the dependency checker ----
  // (A buffer of another device's state is accessed through that state's accessors, with the OpCtx of
  // the instruction that runs: its device is c.ref.device.)
  template <typename T>
  const T* read(const OpCtx& c, const Buffer<T>& b, size_t begin, size_t end) {
    if (checker) checker->read(global_wg(c), c.ref, b.id, begin / b.cell, (end + b.cell - 1) / b.cell);
    return b.data.data() + begin;
  }
  template <typename T>
  T* write(const OpCtx& c, Buffer<T>& b, size_t begin, size_t end) {
    if (checker) checker->write(global_wg(c), c.ref, b.id, begin / b.cell, (end + b.cell - 1) / b.cell);
    return b.data.data() + begin;
  }

  template <typename T>
  T* accumulate(const OpCtx& c, Buffer<T>& b, size_t begin, size_t end) {
    if (checker) checker->accumulate(global_wg(c), c.ref, b.id, begin / b.cell, (end + b.cell - 1) / b.cell);
    return b.data.data() + begin;
  }

  // An add with acquire and release to a flat counter, as the kernel's fetch_add_acq_rel: returns the
  // value it found.
  uint32_t read_modify_write(const OpCtx& c, uint32_t counter) {
    const uint32_t line = schedule.line(counter, 0);
    if (checker) checker->read_modify_write(global_wg(c), global_line(line), counters[line]);
    return counters[line]++;
  }

  std::string describe(const InstrRef& r) const {
    if (devices.size() > 1) return fmt::format("gpu {}, {}", rank, describe_on_device(r));
    return describe_on_device(r);
  }
  std::string describe_on_device(const InstrRef& r) const {
    if (r.index & kChunkIndex)
      return fmt::format("chunk step {}, workgroup {}: {}", r.step, chunk_workgroup_of(r.index & ~kChunkIndex),
                         schedule.describe(schedule.chunk.instrs[r.index & ~kChunkIndex]));
    if (r.index == kGateIndex) return fmt::format("step {}, workgroup {}: step gate (reads the stop flag)", r.step, r.seq);
    return fmt::format("step {}, workgroup {}: {}", r.step, schedule.workgroup_of(r.index), schedule.describe(schedule.instrs[r.index]));
  }

  int chunk_workgroup_of(uint32_t index) const {
    const auto& b = schedule.chunk.wg_begin;
    return int(std::upper_bound(b.begin(), b.end(), index) - b.begin()) - 1;
  }

  // Whether a token is one of the model's EOS ids.
  bool is_eos(int32_t token) const {
    return std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), token) != cfg.eos_token_ids.end();
  }

  // ---- token steps ----
  // The tokens step `step` runs: with steps of several tokens (Schedule::step_tokens) its span, which the
  // sample op of the step before wrote (the host, step 0's); otherwise token `step`.
  StepSpan span(const OpCtx& c, uint32_t step) {
    if (schedule.step_tokens == 1) return StepSpan{int32_t(step), 1};
    return *read(c, step_spans, step, step + 1);
  }

  // Tensor parallel: where device `device`'s partial of set `set` (0: o_proj's, 1: down's), column j of
  // the step, starts in a device's `partials` ([set][device][column][hidden]: runtime/decode_buffers.h).
  size_t partials_at(uint32_t set, size_t device, int j) const {
    return ((size_t(set) * devices.size() + device) * size_t(schedule.step_tokens) + size_t(j)) * size_t(cfg.hidden_size);
  }

  // ---- chunk steps ----
  // Position of token t of chunk k.
  int chunk_position(uint32_t chunk, uint32_t t) const { return run.chunk_start + int(chunk) * schedule.chunk.tokens + int(t); }
  // Tokens chunk k runs: C, or fewer in the last.
  uint32_t chunk_length(uint32_t chunk) const {
    return uint32_t(std::min(schedule.chunk.tokens, run.chunk_count - int(chunk) * schedule.chunk.tokens));
  }
  // The 16-bit type of the matrix ops' inputs (the layers' weight type) and its conversions.
  bool chunk_f16() const { return layout.format == MatrixFormat::F16; }
  uint16_t to_act16(float v) const { return chunk_f16() ? float_to_fp16(v) : float_to_bf16(v); }
  float act16(uint16_t v) const { return chunk_f16() ? fp16_to_float(v) : bf16_to_float(v); }
  // Columns of a row of chunk_act: the larger of the norms' output (hidden) and attention's (q_dim).
  size_t chunk_act_cols() const { return size_t(std::max(cfg.hidden_size, cfg.q_dim())); }

  // dot(row r of the matrix at `offset` with `cols` columns, a 16-bit activation row): the product of a
  // chunk step's matrix op, fp32 sums of exact products as the tensor cores form them. The tensor cores
  // multiply 16-bit operands: a quantized weight counts as its element rounded to bf16 (the activations'
  // type for quantized layers; device/weight_pieces.h expands it so).
  float dot_row_act16(uint64_t offset, size_t r, size_t cols, const uint16_t* act) const {
    const MatrixFormat f = format_of(offset);
    const bool round = matrix_format_quantized(f);
    const uint8_t* row = matrix_row(offset, cols, r);
    float acc = 0.f;
    for (size_t c = 0; c < cols; ++c) {
      const float w = matrix_row_element(f, row, int(cols), int(c));
      acc += (round ? bf16_to_float(float_to_bf16(w)) : w) * act16(act[c]);
    }
    return acc;
  }

  // Registers every buffer of this device with the launch's checker (named after the device with tensor
  // parallel) and uses it.
  void watch_buffers(DependencyChecker& checker);
  // A context the host cannot hold is refused before anything is allocated.
  void check_memory() const;
  // Stops the launch with an error naming the position when the logits (of one column) hold NaN or infinity
  // (with a constraint, in state `state` >= 0: among the tokens it allows; the others are -inf by design).
  void check_finite(const float* logits, int at, int32_t constraint_set = -1) const;

  // ---- weights ----
  // The format of the matrix at `offset`: the head's (embedding, LM head) or the layers'.
  MatrixFormat format_of(uint64_t offset) const {
    return offset == layout.embed || offset == layout.lm_head ? layout.head_format : layout.format;
  }
  // Element c of row r of the matrix at `offset` with `cols` columns (runtime/matrix_format.h).
  float wt(uint64_t offset, size_t cols, size_t r, size_t c) const {
    return matrix_row_element(format_of(offset), matrix_row(offset, cols, r), int(cols), int(c));
  }
  const float* f32(uint64_t offset) const { return reinterpret_cast<const float*>(weights.data() + offset); }
  // dot(row `r` of matrix at `offset` with `cols` columns, v), accumulated in fp32 like the kernel.
  float dot_row(uint64_t offset, size_t r, size_t cols, const float* v) const { return dot_row_part(offset, r, cols, 0, cols, v, 0.f); }
  // The same sum continued over columns [c0, c1) from `acc` (v holds those columns): summing a row slice
  // by slice, in order, gives dot_row's value bit for bit.
  float dot_row_part(uint64_t offset, size_t r, size_t cols, size_t c0, size_t c1, const float* v, float acc) const {
    const MatrixFormat f = format_of(offset);
    const uint8_t* row = matrix_row(offset, cols, r);
    for (size_t c = c0; c < c1; ++c) acc += matrix_row_element(f, row, int(cols), int(c)) * v[c - c0];
    return acc;
  }
  const uint8_t* matrix_row(uint64_t offset, size_t cols, size_t r) const {
    return weights.data() + offset + r * uint64_t(matrix_row_bytes(format_of(offset), int(cols)));
  }
  std::vector<float> rms_norm(const float* v, size_t n, const float* weight) const {
    float ss = 0.f;
    for (size_t i = 0; i < n; ++i) ss += v[i] * v[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + cfg.rms_norm_eps);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = v[i] * inv * weight[i];
    return out;
  }
  void rope_inplace(float* head, int pos, int layer) const {
    const size_t half = size_t(cfg.head_dim / 2);
    const float* table = rope.data() + size_t(layer_rope[size_t(layer)]) * 2 * size_t(opt.context) * half;
    const float* cs = table + size_t(pos) * half;
    const float* sn = table + size_t(opt.context) * half + size_t(pos) * half;
    for (size_t i = 0; i < half; ++i) {
      const float a = head[i], b = head[i + half];
      head[i] = a * cs[i] - b * sn[i];
      head[i + half] = b * cs[i] + a * sn[i];
    }
  }

};

}  // namespace mk::emu
