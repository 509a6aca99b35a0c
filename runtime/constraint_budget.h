// A constrained reply completes within its token budget (docs/structured_output.md): each state of the
// token automaton has two token sets, all it allows and its closing set (the tokens that bring the
// completion no further away than a token's worth), and a threshold. With fewer tokens left than the
// threshold, the closing set applies, so the reply ends inside max_tokens and the context whenever the
// budget at its start covers the start state's completion bound. Shared by the host, the emulator and
// the kernel: one rule.
#pragma once

#include <cstdint>

#include "runtime/portability.h"

namespace mk::constraint {

// A state's entry in TokenAutomaton::state_sets.
enum StateSetField { kStateSet = 0, kStateClosingSet = 1, kStateClosingBelow = 2, kStateSetFields = 3 };

// The tokens a reply can still produce, the next one included, at `position` (the position of the step
// that samples it) after `produced` tokens: what max_tokens and the context leave.
MK_HD_INLINE int32_t constraint_budget(int32_t max_new, int32_t produced, int32_t context, int32_t position) {
  const int32_t by_count = max_new - produced, by_context = context - position;
  return by_count < by_context ? by_count : by_context;
}

// The token set `state` applies with `budget` tokens left (-1: no token reaches the state).
MK_HD_INLINE int32_t constraint_set(const int32_t* state_sets, int32_t state, int32_t budget) {
  const int32_t* e = state_sets + kStateSetFields * state;
  return budget < e[kStateClosingBelow] ? e[kStateClosingSet] : e[kStateSet];
}

}  // namespace mk::constraint
