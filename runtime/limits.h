// Upper bounds on every size read from a model's files (config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json) and on a session's context, checked before anything is
// allocated from them. Each is far above every published model of the supported architectures
// (docs/limits.md lists the largest known values next to them) and small enough that every product the
// runtime forms from them fits: q_dim and kv_dim fit in int, tensor element counts, the KV cache and
// the schedule's sizes in 64 bits.
#pragma once

#include <cstdint>

namespace mk::limits {

inline constexpr int64_t kMaxHiddenSize = int64_t(1) << 16;        // Llama-3.1-405B: 16384
inline constexpr int64_t kMaxIntermediateSize = int64_t(1) << 18;  // Llama-3.1-405B: 53248
inline constexpr int64_t kMaxLayers = 1024;                        // Llama-3.1-405B: 126
inline constexpr int64_t kMaxHeads = 1024;                         // query heads; Llama-3.1-405B: 128
inline constexpr int64_t kMaxHeadDim = 1024;                       // Gemma: 256
inline constexpr int64_t kMaxAttentionWidth = int64_t(1) << 17;    // num_heads * head_dim (q_dim)
// Config vocab_size, and one more than any token id (tokenizer vocabulary, added tokens, EOS/BOS ids).
inline constexpr int64_t kMaxVocabSize = int64_t(1) << 22;         // Gemma 3: 262144
// max_position_embeddings, and the context (KV cache tokens) a session may ask for.
inline constexpr int64_t kMaxPositions = int64_t(1) << 24;         // Llama 4 Scout: 10485760
// A model JSON file's bytes and nesting depth. tokenizer.json files are the largest (Gemma 3: 33 MB)
// and nest 6 levels deep; nlohmann's serializer and copies recurse per level.
inline constexpr int64_t kMaxJsonFileBytes = int64_t(1) << 28;
inline constexpr int kMaxJsonDepth = 64;

}  // namespace mk::limits
