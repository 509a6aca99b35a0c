#include "runtime/context_size.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"
#include "runtime/limits.h"

namespace mk {

ContextChoice choose_context(int64_t requested, int model_max_position) {
  if (requested < 0 || requested > limits::kMaxPositions)
    fail("the context must be between 1 and {} tokens, or 0 for the default (got {})", limits::kMaxPositions, requested);
  ContextChoice c;
  if (requested == 0) {
    c.tokens = model_max_position > 0 ? std::min(kDefaultContextCap, model_max_position) : kDefaultContextCap;
    return c;
  }
  c.tokens = int(requested);
  if (model_max_position > 0 && requested > model_max_position)
    c.warning = fmt::format("context {} > the model's trained length {} (max_position_embeddings): output past it may degrade",
                            requested, model_max_position);
  return c;
}

}  // namespace mk
