// The parameter block of the persistent kernel: device pointers to the schedule, the weights and the
// decode state, plus the per-launch request. Shared by the kernel and its launcher (both in device/).
#pragma once

#include <cstdint>

#include "runtime/constraint_budget.h"
#include "runtime/decode_buffers.h"
#include "runtime/sampling.h"
#include "runtime/schedule.h"
#include "runtime/weight_layout.h"

namespace mk::dev {

inline constexpr int kThreads = 512;       // one workgroup (CTA) per SM/CU
inline constexpr int kMaxEosIds = 8;
inline constexpr int kMaxStreamSlots = 16;  // shared-memory slots of the weight stream (device/weight_stream.h)
// Profile counters per workgroup and Op (nanoseconds, summed over steps): the whole instruction after its
// inputs were ready, the wait for them, the prologue part of the first (activations into shared memory),
// and the signal at the end (counter release).
enum ProfileField { kProfExec, kProfWait, kProfPrologue, kProfSignal, kProfileFields };

// Warps of a workgroup on a 32-lane platform: the most there are (AMD's 64-lane waves make half as many).
// Host-side plans that depend on the warp count size for this many.
inline constexpr int kMaxWarps = kThreads / 32;

// What one token-step instruction streams through the weight stream (KernelParams::stream_records, one
// per entry of `instrs`; built on the host by plan_stream_records from its op's gemv() and its layer's
// offsets): where its rows start in the weight image, per part, and the chunks they make. The stream's
// producer on thread 0, between one instruction's signal and the next one's first chunk, reads one
// record here instead of the op's shape, the layer's offsets and a division.
struct StreamRecord {
  uint64_t src[2];  // byte offset in the weight image of the instruction's first row, per part
  uint32_t rows;    // 0: the instruction streams nothing
  uint32_t chunks, rows_per_chunk, row_bytes;
  uint8_t parts;
  uint8_t every_step;  // 0: its op is inactive at some steps (OpDefaults::kEveryStep): ask op_active
  Op op;
  uint8_t reserved;
};
static_assert(sizeof(StreamRecord) == 40, "StreamRecord is shared with the GPU: keep its layout fixed");

// Per layer, attention's data (runtime/step_recipe.h's LayerAttention): its sliding window (0: global),
// the scale of its scores, and which RoPE table it rotates by (KernelParams::rope).
struct LayerAttentionParams {
  int32_t window;
  float scale;
  uint32_t rope_table;
  uint32_t reserved;
};

struct ModelDims {
  int hidden, intermediate, layers, heads, kv_heads, head_dim, group_size, vocab;
  int qkv_rows, qkv_group_rows, attention_splits, lm_head_slots;
  float rms_eps;
  bool qkv_bias, qk_norm;
  MatrixFormat format;       // of the layers' weight matrices (runtime/matrix_format.h)
  MatrixFormat head_format;  // of the embedding and the LM head
  // Schedule::combine_once: each kv group's last attention split combines the group's partials into
  // KernelParams::att, which o_proj reads.
  bool combine_once;
  int split_positions_log2;  // attention_split_positions_log2(head_dim)
  // The MLP's activation (every layer's: the GPU backend checks) as act(g) = g * sigmoid(g * (act_linear
  // + act_cubic * g^2)): SiLU (1, 0), GELU-tanh (mlp_activation_coefficients).
  float act_linear, act_cubic;
  float embed_scale;         // the embedding rows are multiplied by it (runtime/step_recipe.h)
  // Attention's data when every layer has the same (window, scale, RoPE table 0); else
  // per_layer_attention, and KernelParams::layer_attention holds each layer's. The uniform form keeps a
  // dependent load off attention's and o_proj's critical path (Qwen2.5-0.5B measured 1% slower with it).
  bool per_layer_attention;
  int attention_window;
  float attention_scale;
};

// ModelDims::act_linear and act_cubic of an activation.
inline void mlp_activation_coefficients(Activation a, float* linear, float* cubic) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  *linear = a == Activation::GeluTanh ? 2.0f * k : 1.0f;
  *cubic = a == Activation::GeluTanh ? 2.0f * k * 0.044715f : 0.0f;
}

// A layer's attention data (above).
MK_HD_INLINE LayerAttentionParams layer_attention_params(const ModelDims& d, const LayerAttentionParams* per_layer, int layer) {
  if (d.per_layer_attention) return per_layer[layer];
  return LayerAttentionParams{d.attention_window, d.attention_scale, 0u, 0u};
}

// Shared memory of one attention instruction on the tile path (device/ops/attention.h).
struct AttentionSmem {
  float *group, *cos, *sin, *o, *m, *l, *corr, *scores;
  uint16_t *k, *v;
  int tile, stride;  // positions per tile; K/V row stride in elements (padded)
};
// Float offset of the staged K tile in the attention instruction's shared memory: after q/k/v, RoPE,
// o, m, l, corr and the scores, rounded up to 16 bytes (K and V rows are read 16 bytes at a time).
// attention_smem places it there and attention_smem_bytes sizes the area with it.
MK_HD_INLINE int attention_k_offset(const ModelDims& d) {
  const int hd = d.head_dim, G = d.group_size;
  const int floats = (G + 2) * hd + hd + G * hd + 3 * G + G * attention_tile_positions(hd);
  return (floats + 3) / 4 * 4;
}

// The warp path (the long-context kernels; device/ops/attention.h) lays out the same area its own way.
// Its tile: a power of two, at most 128 positions (a split of a short sequence, kPositionsPerSplit, is one
// tile) and at most kThreads * 16 / head_dim (~36 KiB of K plus V), so that each warp's share (tile /
// warps positions of K and V) is at most four 16-byte pieces per lane; at least kMaxWarps (a row a warp).
MK_HD_INLINE int attention_warp_tile_positions(int head_dim) {
  int t = 128;
  while (t > kMaxWarps && t * head_dim > 16 * kThreads) t /= 2;
  return t;
}
struct AttentionWarpSmem {
  float *group, *cos, *sin;  // as on the tile path
  // Per warp: its output accumulators beyond a lane's 8 (attention_warp_acc_floats), the softmax weights
  // of its current chunk (G x rows), per head its rescale factor, running max and sum (3G); once the tile
  // is done (overlapping it), each warp's output, then (m, l) per head.
  float *acc, *probs, *state, *parts;
  // The tensor-core form (attention_warp_mma), over probs and state, which it does not use: q as bf16 in
  // two parts whose sum is q (8 rows of `stride` each, rows >= G zero), the A operand of the scores.
  uint16_t *q_hi, *q_lo;
  uint16_t *k, *v;           // the K/V tile, `tile` rows of `stride` elements each
  int tile, stride, rows;    // positions per tile; K/V row stride in elements (padded); rows a warp owns
  int rows_log2, row8_log2;  // log2 of rows and of head_dim / 8 (powers of two on this path)
};
// Floats of a warp's output accumulators kept in shared memory on the warp path: a lane keeps 8 in
// registers, the rest of the group's G x head_dim go here (none for 4 heads of 64 on 32 lanes).
MK_HD_INLINE int attention_warp_acc_floats(const ModelDims& d, int warp_size) {
  const int more = d.group_size * d.head_dim - 8 * warp_size;
  return more > 0 ? more : 0;
}
// Models whose warp path runs on tensor cores where the platform has them (device/tensor_core.h): at most
// 8 query heads per kv head (the rows of an MMA's A operand that are kept) and head_dim 32 or 64 (whole
// 32-column ldmatrix loads; every output accumulator in registers). A chunk is then 8 positions, the N of
// the MMA (attention_warp_tile_positions gives 8 rows a warp for these head sizes).
MK_HD_INLINE bool attention_warp_mma(const ModelDims& d) {
  return d.group_size <= 8 && (d.head_dim == 32 || d.head_dim == 64);
}
// Float offset of the warp path's K tile: after q/k/v, RoPE, the per-warp accumulators (sized for 32-lane
// warps, the most warps), then the softmax weights and running state of the FMA form or, over them, the
// tensor-core form's bf16 q rows (2 x 8 rows of the padded stride), rounded up to 16 bytes.
MK_HD_INLINE int attention_warp_k_offset(const ModelDims& d) {
  const int hd = d.head_dim, G = d.group_size;
  const int fma_state = G * attention_warp_tile_positions(hd) + 3 * kMaxWarps * G;
  const int q16 = attention_warp_mma(d) ? 8 * attention_row_stride(hd) : 0;
  const int floats = (G + 2) * hd + hd + kMaxWarps * attention_warp_acc_floats(d, 32) + (fma_state > q16 ? fma_state : q16);
  return (floats + 3) / 4 * 4;
}
// Floats each warp leaves for the combine at the end of the warp path: the G x head_dim unnormalised
// output, then m and l per head, padded to whole 16-byte pieces (the outputs are stored as float4s).
MK_HD_INLINE int attention_part_floats(const ModelDims& d) { return d.group_size * d.head_dim + (2 * d.group_size + 3) / 4 * 4; }
// Bytes of the attention area on each path, and the area itself: the larger of the two.
inline size_t attention_kv_tile_bytes(int positions, int head_dim) {  // K and V rows, bf16, padded
  return size_t(2 * positions * attention_row_stride(head_dim)) * 2;
}
inline size_t attention_tile_smem_bytes(const ModelDims& d) {
  return size_t(attention_k_offset(d)) * 4 + attention_kv_tile_bytes(attention_tile_positions(d.head_dim), d.head_dim);
}
inline size_t attention_warp_smem_bytes(const ModelDims& d) {
  const size_t tile = attention_kv_tile_bytes(attention_warp_tile_positions(d.head_dim), d.head_dim);
  const size_t parts = size_t(kMaxWarps) * size_t(attention_part_floats(d)) * 4;
  return size_t(attention_warp_k_offset(d)) * 4 + (tile > parts ? tile : parts);
}
inline size_t attention_smem_bytes(const ModelDims& d) {
  const size_t tiles = attention_tile_smem_bytes(d), warps = attention_warp_smem_bytes(d);
  return tiles > warps ? tiles : warps;
}
// Models the warp path runs: it divides by rows and head_dim / 8 with shifts (head_dim / 8 must be a
// power of two; rows always is), and keeps a kv group's output 8 elements a lane in at most 4 rounds of
// a warp (query heads per kv head x head_dim <= 1,024). Other models keep the tile path at every length.
MK_HD_INLINE bool attention_warp_path_supported(const ModelDims& d) {
  const int row8 = d.head_dim / 8;
  return row8 > 0 && (row8 & (row8 - 1)) == 0 && d.group_size * d.head_dim <= 1024;
}
// Whether this build's warp path has its tensor-core form (device/tensor_core.h: NVIDIA); the macro for
// device code's #if, the constant for the launcher.
#if defined(MK_PLATFORM_NVIDIA)
#define MK_WARP_MMA 1
#else
#define MK_WARP_MMA 0
#endif
inline constexpr bool kWarpMmaBuild = MK_WARP_MMA != 0;
// Whether a launch whose sequence reaches `positions` runs attention's warp path (the long-context
// kernels), in a build with (`tensor_cores`) or without the warp path's tensor-core form. Measured on an
// H100 (docs/log.md): on tensor cores (2026-11-24), the warp path is faster once splits hold more
// than about 1.5 tiles of 128 positions (Llama-3.2-1B, whose launches at depth d reach d + 128: -2.5% at
// depth 4096, 264 a split; +1% at 2048, 136 a split), and at every length for groups whose tile takes the
// tile path's block more than one round of (head, position) threads (Qwen2.5-0.5B's 7 heads: -0.5% at 128
// to -22% at 16384). On the FMA units (2026-11-24), only when splits hold more than 512 positions
// (Llama-3.2-1B from 8192; Llama-3.1-8B even at 8192).
MK_HD_INLINE bool attention_long_context(const ModelDims& d, int positions, bool tensor_cores) {
  if (!attention_warp_path_supported(d)) return false;
  const int splits = active_attention_splits(positions, d.attention_splits, d.split_positions_log2);
  const int per_split = (positions + splits - 1) / splits;
  if (tensor_cores && attention_warp_mma(d))
    return 2 * per_split > 3 * kPositionsPerSplit || d.group_size * attention_tile_positions(d.head_dim) > kThreads;
  return per_split > 4 * kPositionsPerSplit;
}

// Whether attention's kernel of this kind combines each kv group's partials in its last split (o_proj
// then loads KernelParams::att) or leaves them to o_proj: ModelDims::combine_once, on the tile path only
// (device/ops/attention.h says why the long-context kernels do not). Attention and o_proj both ask here.
MK_HD_INLINE bool attention_combines_once(const ModelDims& d, bool long_context) { return d.combine_once && !long_context; }

// Floats of the attention (m, l) partials of all (head, split) (runtime/decode_buffers.h).
MK_HD_INLINE size_t attention_ml_floats(const ModelDims& d) { return mk::attention_ml_floats(size_t(d.heads), size_t(d.attention_splits)); }

// Float offset in shared memory of the residual rows o_proj / down add to: after the larger of down's
// activations (h) and o_proj's (the combined attention output, then every (m, l)). The kernel places
// them there and the host sizes shared memory with it.
MK_HD_INLINE size_t gemv_residual_offset(const ModelDims& d) {
  const size_t down = size_t(d.intermediate), o_proj = size_t(d.heads) * size_t(d.head_dim) + attention_ml_floats(d);
  return down > o_proj ? down : o_proj;
}

// Each counter value (a flat counter, or one stripe of a per-domain counter: runtime/schedule.h's
// counter_line) on its own 128-byte line (the L2 line of Hopper and CDNA3): packed, the counters of
// consecutive stages shared lines, so one stage's release-adds and the next stage's polls hit the same
// line. Line l is word l * kCounterStride of KernelParams::counters.
inline constexpr int kCounterStride = 32;
MK_HD_INLINE size_t counter_word(uint32_t line) { return size_t(line) * kCounterStride; }

// Written by the kernel into host-mapped memory while it runs.
struct HostChannel {
  volatile uint32_t token_count;  // tokens published so far in this launch
  volatile uint32_t stop_reason;  // StopReason, when the launch ends
  volatile uint32_t steps_run;
  // 1 + the step whose logits held a NaN or an infinity (0: none): the launch stopped there without a
  // token, and the host reports it (the logits buffer still holds that step's logits).
  volatile uint32_t nonfinite_step;
  // followed by: int32 tokens[max_tokens]; uint64 token_time_ns[max_tokens]; uint32 progress[2 x workgroups];
  // uint32 waiting[workgroups]
};

inline constexpr uint32_t kProgressChunk = 0x80000000u, kProgressPrefillGate = 0xfffffffeu;

// A constraint's device tables (runtime/token_automaton.h): the LM head sets each logit whose token the
// state's set for the budget left does not allow to -inf (runtime/constraint_budget.h); the sample op
// moves the state along the sampled token's bytes through the DFA, stops where the state is an end, and
// writes the next token's budget. Null masks: no constraint.
struct ConstraintTables {
  const uint32_t* masks;          // [sets][mask_words]
  const int32_t* state_sets;      // per DFA state, kStateSetFields: its set, its closing set, the closing budget
  const uint8_t* state_end;       // per DFA state: complete, nothing but EOS left
  const int32_t* next;            // [state * classes + class], -1 where the DFA rejects
  const uint8_t* byte_class;      // [256]
  const uint8_t* token_bytes;     // token t's bytes: [token_offsets[t], token_offsets[t + 1])
  const uint32_t* token_offsets;  // [vocab + 1]
  int classes, mask_words;
};

struct KernelParams {
  // Schedule.
  const Instr* instrs;
  const uint32_t* wg_begin;
  unsigned* counters;  // counter line l at word counter_word(l)
  uint32_t sample_counter;
  // Per-domain counters (Schedule::first_striped_counter, sync_domains): a workgroup signals the stripe
  // of its domain, unit_domain[hw_unit_id()] (device/hw_unit.h), or fallback_sync_domain() where the
  // table has no entry (-1) or is absent (unit_domain_len 0).
  uint32_t first_striped_counter, sync_domains;
  const int16_t* unit_domain;
  uint32_t unit_domain_len;
  // With ModelDims::combine_once: the first of the attention arrival counters (CombineOnce::counter).
  uint32_t arrivals_first;
  // Weights (one image) and their offsets.
  const uint8_t* weights;
  const LayerOffsets* layers;
  uint64_t embed, final_norm, lm_head;
  // Decode state (runtime/decode_buffers.h): x, qkv, the attention partials (unnormalised o, then (m, l),
  // per (query head, split)), with combine_once the attention output per query head, h, the logits, the
  // LM head's partial argmax, the K and V caches (bf16 [layer][kv head][context][head_dim]) and the token
  // of each step of this launch (its prompt part written by the host).
#define MK_KERNEL_PARAM(NAME, TYPE, ELEMENTS, CELL, WHAT) TYPE* NAME;
  MK_DECODE_STEP_BUFFERS(MK_KERNEL_PARAM)
  const float* rope;  // tables of [context][hd/2] cos then sin, one after the other (LayerAttentionParams::rope_table)
  MK_DECODE_TOKEN_BUFFERS(MK_KERNEL_PARAM)
  uint32_t* stop_flag;
  // Host-mapped.
  HostChannel* channel;
  int32_t* out_tokens;
  unsigned long long* out_token_time_ns;
  // Per workgroup: the step and the instructions of it done (0xffffffff when the workgroup is done); in
  // the chunk steps, kProgressChunk | chunk and the index of the instruction it is at (in its chunk-step
  // list), or kProgressPrefillGate at the prefill gate. Then one waiting mark per workgroup, which moves
  // while a wait of it lasts past kAbortCheckAfterNs (device/launch_abort.h).
  uint32_t* progress;
  const volatile uint32_t* cancel;  // host sets non-zero to stop at the next token
  // Host sets non-zero to stop a hung launch: waits that have lasted past kAbortCheckAfterNs give up and
  // their workgroups leave the kernel (device/launch_abort.h).
  const volatile uint32_t* abort;
  // Profiling (the kernel's kProfile instantiations only): per workgroup, per Op, kProfileFields counters;
  // and the SM/CU each workgroup ran on (device/hw_unit.h), to relate its times to the chip's topology.
  unsigned long long* profile;
  uint32_t* workgroup_unit;
  // With profiling: step `trace_step` (-1: none) writes 4 timestamps per instruction (its index in
  // `instrs`): start, inputs ready, prologue end, signalled.
  unsigned long long* trace;
  int trace_step;
  // Weight stream (device/weight_stream.h): `stream_slots` slots of `stream_slot_bytes` at byte
  // `stream_ring_offset` of dynamic shared memory; 0 slots: GEMVs load weights into registers. A chunk
  // may be issued up to `stream_lookahead` instructions ahead of the one running; at most `stream_early`
  // chunks are issued before an instruction's inputs are ready.
  uint32_t stream_slots, stream_slot_bytes, stream_ring_offset, stream_lookahead, stream_early;
  // Request.
  ModelDims dims;
  int context, start, ingest, max_new, max_steps;
  SamplingParams sampling;
  int32_t eos[kMaxEosIds];
  int num_eos;
  // Chunk steps (prefill; runtime/schedule.h's ChunkSchedule): their instruction lists and counters
  // (chunk counter c is counter line chunk_first_line + c), and their buffers, chunk_size tokens each
  // (runtime/decode_buffers.h; chunk_act has chunk_act_cols columns), and per launch the prompt tokens
  // they run (chunk_count of them, from position chunk_start, in `chunks` steps); token step 0 then runs
  // at position `start`.
  const Instr* chunk_instrs;
  const uint32_t* chunk_wg_begin;
  uint32_t chunk_first_line, chunk_final_counter, chunk_final_per_step;
  int chunk_size, chunk_act_cols;
  MK_DECODE_CHUNK_FIRST_BUFFERS(MK_KERNEL_PARAM)
  int chunk_start, chunk_count, chunks;
  // One per entry of `instrs`. At the end: fields placed among the others have made kernels spill.
  const StreamRecord* stream_records;
  // Post-norm layers (LayerOffsets::post_attn_norm): o_proj's and down's rows before post_norm adds them.
  MK_DECODE_LATE_BUFFERS(MK_KERNEL_PARAM)
  const LayerAttentionParams* layer_attention;  // one per layer
  // The request's logit adjustments (runtime/sampling.h): with adjust_logits, the LM head adds
  // logit_adjust to each logit and the sample op adds each sampled token's penalty to its entry.
  int adjust_logits;
  float frequency_penalty, presence_penalty;
  // With out_logprobs (host-mapped, one record per token of the launch): the sample op writes each
  // token's record (top_logprobs alternatives) before it publishes the token.
  int top_logprobs;
  TokenLogprobs* out_logprobs;
  // With masks set, constrained decoding (runtime/token_automaton.h; constraint_state is a decode buffer).
  ConstraintTables constraint;
  // Chunk steps of post-norm layers: chunk_o_proj's and chunk_down's rows before chunk_post_norm adds them.
  MK_DECODE_CHUNK_LAST_BUFFERS(MK_KERNEL_PARAM)
  // Tensor parallel (runtime/tensor_parallel.h): the devices a step is split over (1: none) and every
  // device's partials of o_proj's and down's rows, which the all_reduce op sums.
  int devices;
  MK_DECODE_DEVICE_BUFFERS(MK_KERNEL_PARAM)
#undef MK_KERNEL_PARAM
};

// The RoPE cos row of position `pos` in a layer's table (its sin row follows context * hd/2 floats on).
MK_HD_INLINE const float* rope_cos_row(const KernelParams& p, const LayerAttentionParams& la, int pos) {
  const size_t half = size_t(p.dims.head_dim / 2);
  return p.rope + size_t(la.rope_table) * 2 * size_t(p.context) * half + size_t(pos) * half;
}

}  // namespace mk::dev
