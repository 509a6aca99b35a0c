// The context (KV cache tokens) a front end runs with: one rule for mk-chat, mk-run, mk-server and the C
// API. 0 asks for the default, the model's trained length (max_position_embeddings) capped at 4,096
// tokens so that a long-context model does not take gigabytes of cache unasked. A larger context than the
// model was trained for is allowed, as llama.cpp allows it, with a warning: RoPE positions past the
// trained length give the model input it has not seen, and its output degrades.
#pragma once

#include <cstdint>
#include <string>

namespace mk {

inline constexpr int kDefaultContextCap = 4096;

struct ContextChoice {
  int tokens = 0;
  std::string warning;  // empty, or why `tokens` may give poor output
};

// requested: 0 for the default, else 1..limits::kMaxPositions (anything else throws mk::Error naming the
// range). model_max_position: the config's max_position_embeddings (0 when unknown: the default is then
// the cap, and no warning is given).
ContextChoice choose_context(int64_t requested, int model_max_position);

}  // namespace mk
