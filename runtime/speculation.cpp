#include "runtime/speculation.h"

#include "runtime/error.h"
#include "runtime/schedule.h"

namespace mk {

int check_speculation(const SpeculationParams& p, int step_tokens) {
  if (p.drafter == Drafter::None) return 0;
  if (step_tokens < 2)
    fail("speculation: the {} drafter needs token steps of at least 2 tokens (step tokens: {})", drafter_name(p.drafter), step_tokens);
  if (p.lookup_min < 1 || p.lookup_max < p.lookup_min || p.lookup_max > kMaxLookupTokens)
    fail("speculation: lookup n-grams of {} to {} tokens (must be 1 <= min <= max <= {})", p.lookup_min, p.lookup_max, kMaxLookupTokens);
  if (p.draft_max < 0 || p.draft_max > step_tokens - 1)
    fail("speculation: {} drafts a step (must be between 1 and step tokens - 1 = {}, or 0 for that)", p.draft_max, step_tokens - 1);
  return p.draft_max > 0 ? p.draft_max : step_tokens - 1;
}

int speculation_step_tokens(const SpeculationParams& p) {
  if (p.drafter == Drafter::None) return 1;
  if (p.draft_max > kMaxStepTokens - 1) fail("speculation: {} drafts a step (at most {})", p.draft_max, kMaxStepTokens - 1);
  return 1 + (p.draft_max > 0 ? p.draft_max : kDefaultDraftTokens);
}

}  // namespace mk
