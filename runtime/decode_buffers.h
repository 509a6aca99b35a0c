// The decode state's buffers, listed once. Everything that holds them is made from these lists: the
// kernel's parameter block declares a pointer for each (device/kernel_params.h), the GPU backend allocates
// and binds each (device/gpu_backend.cu), device_memory_need adds them up (device/kernel_plan.cpp), and the
// CPU emulator keeps each as a vector its happens-before checker watches (host/emulator/emulator_state.h).
// A new buffer is one line here.
//
// X(NAME, TYPE, ELEMENTS, CELL, WHAT): the buffer, its element type, its elements and its checker cell
// (expressions over `const DecodeShapes& s`), and what it is (in messages). A buffer of 0 elements is not
// used by the model: the GPU leaves it unallocated, the emulator empty. The checker cell is the unit the
// emulator's happens-before checker tracks (the row one write or read covers). Four lists because the
// parameter block's order matters: its fields are placed as the lists are, around the fields that are
// not decode buffers, and a field moved among the others has made kernels spill.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/model_config.h"
#include "runtime/portability.h"
#include "runtime/sampling.h"
#include "runtime/schedule.h"
#include "runtime/weight_layout.h"

namespace mk {

// Floats of attention's (m, l) partials of all (head, split), in whole 16-byte pieces (o_proj copies them
// into shared memory 16 bytes at a time): the att_ml buffer, and o_proj's shared-memory area for it.
MK_HD_INLINE constexpr size_t attention_ml_floats(size_t heads, size_t splits) { return (heads * splits * 2 + 3) / 4 * 4; }

// What the buffers' sizes depend on.
struct DecodeShapes {
  size_t hidden = 0, intermediate = 0, vocab = 0, heads = 0, head_dim = 0, q_dim = 0, qkv_rows = 0;
  size_t attention_splits = 0, lm_head_slots = 0;
  size_t kv_rows = 0;    // layers x kv heads x context: rows of head_dim in each of the K and V caches
  size_t context = 0;
  size_t chunk = 0;      // tokens a chunk step runs (0: no chunk steps)
  size_t chunk_act_cols = 0;
  size_t columns = 1;    // tokens a token step runs at most (Schedule::step_tokens): the step buffers' columns
  size_t spans = 0;      // step spans kept (steps of several tokens), else 0
  bool combine_once = false, post_norms = false;
  size_t devices = 1;    // tensor parallel: the devices a step is split over (runtime/tensor_parallel.h)

  static DecodeShapes of(const ModelConfig& c, const WeightLayout& layout, const Schedule& schedule, int context) {
    DecodeShapes s;
    s.hidden = size_t(c.hidden_size);
    s.intermediate = size_t(c.intermediate_size);
    s.vocab = size_t(c.vocab_size);
    s.heads = size_t(c.num_heads);
    s.head_dim = size_t(c.head_dim);
    s.q_dim = size_t(c.q_dim());
    s.qkv_rows = size_t(layout.qkv_rows);
    s.attention_splits = size_t(schedule.attention_splits);
    s.lm_head_slots = size_t(schedule.lm_head_slots);
    s.kv_rows = size_t(c.num_layers) * size_t(c.num_kv_heads) * size_t(context);
    s.context = size_t(context);
    s.chunk = schedule.chunk.enabled() ? size_t(schedule.chunk.tokens) : 0;
    s.chunk_act_cols = s.hidden > s.q_dim ? s.hidden : s.q_dim;
    s.columns = size_t(schedule.step_tokens);
    s.spans = schedule.step_tokens > 1 ? size_t(context) + 1 : 0;
    s.combine_once = schedule.combine_once.enabled;
    s.post_norms = layout.has_post_norms;
    s.devices = size_t(schedule.devices);
    return s;
  }
};

// The token steps' state.
// The token steps' state. A step of several tokens (Schedule::step_tokens) has a column per token in the
// buffers that depend on it, one after the other (column j of x at x + j * hidden); the K/V caches are
// indexed by position.
#define MK_DECODE_STEP_BUFFERS(X)                                                                                   \
  X(x, float, s.columns * s.hidden, 1, "x (residual stream)")                                                      \
  X(qkv, float, s.columns * s.qkv_rows, 1, "qkv")                                                                  \
  X(att_o, float, s.columns * s.heads * s.attention_splits * s.head_dim, s.head_dim, "attention partial outputs")  \
  X(att_ml, float, s.columns * attention_ml_floats(s.heads, s.attention_splits), 2, "attention partial max/sum")      \
  X(att, float, s.combine_once ? s.columns * s.heads * s.head_dim : 0, s.head_dim, "attention output")            \
  X(h, float, s.columns * s.intermediate, 1, "mlp activations")                                                    \
  X(logits, float, s.columns * s.vocab, 1, "logits")                                                               \
  X(lm_best_value, float, s.columns * s.lm_head_slots, 1, "lm_head partial argmax values")                         \
  X(lm_best_index, int32_t, s.columns * s.lm_head_slots, 1, "lm_head partial argmax indices")                      \
  X(k_cache, uint16_t, s.kv_rows * s.head_dim, s.head_dim, "K cache")                                             \
  X(v_cache, uint16_t, s.kv_rows * s.head_dim, s.head_dim, "V cache")

// The token of each step of a launch (its prompt part written by the host).
#define MK_DECODE_TOKEN_BUFFERS(X) X(tokens, int32_t, s.context + 1, 1, "tokens")

// The chunk steps' (prefill; runtime/schedule.h's ChunkSchedule), chunk tokens each: the residual stream
// (fp32), qkv (fp32), the 16-bit input of the next matrix op, the RoPE'd queries (bf16), the MLP
// activations (16-bit); the prompt tokens they run; and for post-norm layers the matrix ops' rows before
// their post-norm (fp32). Every chunk op reads and writes whole multiples of 8 columns: cells of 8. Two
// lists, for the parameter block (its last field is the second's).
#define MK_DECODE_CHUNK_FIRST_BUFFERS(X)                                                                            \
  X(chunk_x, float, s.chunk * s.hidden, 8, "chunk residual stream")                                                \
  X(chunk_qkv, float, s.chunk * s.qkv_rows, 8, "chunk qkv")                                                        \
  X(chunk_act, uint16_t, s.chunk * s.chunk_act_cols, 8, "chunk matrix input")                                      \
  X(chunk_q, uint16_t, s.chunk * s.q_dim, 8, "chunk queries")                                                      \
  X(chunk_h, uint16_t, s.chunk * s.intermediate, 8, "chunk mlp activations")                                       \
  X(chunk_tokens, int32_t, s.chunk > 0 ? s.context : 0, 1, "prompt tokens of the chunk steps")
#define MK_DECODE_CHUNK_LAST_BUFFERS(X) \
  X(chunk_projected, float, s.post_norms ? s.chunk * s.hidden : 0, 8, "chunk projected rows (before their post-norm)")
#define MK_DECODE_CHUNK_BUFFERS(X) MK_DECODE_CHUNK_FIRST_BUFFERS(X) MK_DECODE_CHUNK_LAST_BUFFERS(X)

// Placed last in the parameter block.
#define MK_DECODE_LATE_BUFFERS(X)                                                                                   \
  X(projected, float, s.post_norms ? s.columns * s.hidden : 0, 1, "projected rows (before their post-norm)")      \
  X(logit_adjust, float, s.vocab, 1, "logit adjustments (logit_bias, penalties)")                                  \
  X(token_counts, uint32_t, s.vocab, 1, "sampled-token counts (penalties)")                                        \
  X(lm_logsumexp, float, s.columns * 2 * s.lm_head_slots, 2, "lm_head partial log-sum-exp")                         \
  X(lm_top, TokenComposite, s.columns * s.lm_head_slots * kMaxTopLogprobs, kMaxTopLogprobs, "lm_head partial top tokens") \
  X(lm_key_counts, uint32_t, s.columns * kSampleBins, 1, "lm_head counts of the logits' first digit (sampling)") \
  X(constraint_state, int32_t, 2, 1, "constrained decoding's automaton state and token budget")                   \
  X(step_spans, StepSpan, s.spans, 1, "step spans (the tokens each step runs)")                                   \
  X(history, int32_t, s.spans > 0 ? s.context : 0, 1, "token history (drafting)")                              \
  X(x_alt, float, s.post_norms ? s.columns * s.hidden : 0, 1, "x's second buffer (folded post-norms)")

// Tensor parallel (runtime/tensor_parallel.h): every device's partial of o_proj's (set 0) and down's (set
// 1) rows, [set][device][column][hidden]; the devices push into each other's. Placed at the very end of
// the parameter block.
#define MK_DECODE_DEVICE_BUFFERS(X) \
  X(partials, float, s.devices > 1 ? 2 * s.devices * s.columns * s.hidden : 0, 1, "all-reduce partials")

#define MK_DECODE_BUFFERS(X)                                                                                 \
  MK_DECODE_STEP_BUFFERS(X) MK_DECODE_TOKEN_BUFFERS(X) MK_DECODE_CHUNK_BUFFERS(X) MK_DECODE_LATE_BUFFERS(X) \
  MK_DECODE_DEVICE_BUFFERS(X)

// Bytes of all of them; of the K and V caches alone; of the chunk steps' alone.
struct DecodeBufferBytes {
  size_t total = 0, kv_cache = 0, chunk = 0;
};
inline DecodeBufferBytes decode_buffer_bytes(const DecodeShapes& s) {
  DecodeBufferBytes b;
#define MK_ADD_BYTES(NAME, TYPE, ELEMENTS, CELL, WHAT) b.total += size_t(ELEMENTS) * sizeof(TYPE);
  MK_DECODE_BUFFERS(MK_ADD_BYTES)
#undef MK_ADD_BYTES
#define MK_ADD_BYTES(NAME, TYPE, ELEMENTS, CELL, WHAT) b.chunk += size_t(ELEMENTS) * sizeof(TYPE);
  MK_DECODE_CHUNK_BUFFERS(MK_ADD_BYTES)
#undef MK_ADD_BYTES
  b.kv_cache = 2 * s.kv_rows * s.head_dim * sizeof(uint16_t);
  return b;
}

}  // namespace mk
