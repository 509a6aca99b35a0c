// The one list of instruction kinds (ops). Adding an op means a line here and the files it names:
//   X(Enum, name): Op::Enum in the schedule (runtime/schedule.h), "name" in diagnostics and profiles,
//   device/ops/<name>.h   its spec (weights streamed, shared memory) and its kernel body (Enum##Op),
//   host/emulator/ops/<name>.cpp   its CPU twin (emulate_<name>),
//   runtime/recipe_<family>.cpp  its stage in an architecture's step recipe (runtime/step_recipe.h), which
//                         the schedule lays out and the reference forward runs.
// The kernel's dispatch, the weight stream, the host's shared-memory plan and the emulator's dispatch are
// all generated from these lists.
//
// Token-step ops run one token through the model per step; the order is the canonical order of a step's
// stages. all_reduce sums the row stages' partials of a tensor-parallel step (runtime/tensor_parallel.h).
#pragma once

#define MK_FOR_EACH_STEP_OP(X) \
  X(Embed, embed)              \
  X(QKV, qkv)                  \
  X(Attention, attention)      \
  X(OProj, o_proj)             \
  X(GateUp, gate_up)           \
  X(Down, down)                \
  X(PostNorm, post_norm)       \
  X(AllReduce, all_reduce)     \
  X(LMHead, lm_head)           \
  X(Sample, sample)

// Chunk-step ops run a chunk of prompt tokens through the layers at once (prefill): matrix multiplies on
// tensor cores, causal attention over the cache. A chunk step's stages, in order, per layer: norm, qkv,
// rope (the chunk's K/V into the cache), attention, o_proj, norm, gate_up, down; post-norm layers (Gemma 3)
// add a post_norm after o_proj and after down.
#define MK_FOR_EACH_CHUNK_OP(X)         \
  X(ChunkNorm, chunk_norm)              \
  X(ChunkQKV, chunk_qkv)                \
  X(ChunkRope, chunk_rope)              \
  X(ChunkAttention, chunk_attention)    \
  X(ChunkOProj, chunk_o_proj)           \
  X(ChunkGateUp, chunk_gate_up)         \
  X(ChunkDown, chunk_down)              \
  X(ChunkPostNorm, chunk_post_norm)

#define MK_FOR_EACH_OP(X) MK_FOR_EACH_STEP_OP(X) MK_FOR_EACH_CHUNK_OP(X)
