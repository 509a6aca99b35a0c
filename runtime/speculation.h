// Speculative decoding in steps of several tokens (ScheduleParams::step_tokens): after a step, the sample
// op drafts up to k tokens; the next step runs the newest token and the drafts as one span, and its sample
// op keeps the drafts while each equals the token sampled at the column before it, plus the first token
// that differs (or the one after the last draft). Every token is sampled from the target's own
// distribution at its position, with the position's random stream, so the output is token for token what
// steps of one token produce, greedy or sampled; a draft is accepted with probability p(draft), which is
// speculative sampling's min(1, p / q) for a draft that is a point mass (q = 1), as prompt lookup's are.
// A span that starts before rejected drafts' positions discards their K/V: the next step writes its own
// there before anything reads them (runtime/schedule.h's StepSpan).
#pragma once

#include <cstdint>

#include "runtime/portability.h"

namespace mk {

enum class Drafter : uint8_t {
  None,    // steps of one token once the prompt is in
  Lookup,  // prompt lookup: the continuation of the latest earlier occurrence of the newest n tokens
};
inline const char* drafter_name(Drafter d) { return d == Drafter::Lookup ? "lookup" : "none"; }

inline constexpr int kMaxLookupTokens = 16;  // the longest n-gram prompt lookup matches
// Drafts a step when the caller does not choose (the engine's steps then hold the newest token and these).
inline constexpr int kDefaultDraftTokens = 4;

struct SpeculationParams {
  Drafter drafter = Drafter::None;
  int lookup_min = 1, lookup_max = 3;  // n-gram lengths tried, longest first
  int draft_max = 0;                   // drafts a step, at most; 0: as many as a step has room for (step_tokens - 1)
};

// Checks the parameters against the steps' size (ScheduleParams::step_tokens); returns the drafts a step
// takes at most (0 without a drafter). Throws mk::Error naming the parameter.
int check_speculation(const SpeculationParams& p, int step_tokens);
// The step size a drafter's parameters ask for: the newest token and draft_max drafts (kDefaultDraftTokens
// when 0); 1 without a drafter. Throws mk::Error when that exceeds kMaxStepTokens.
int speculation_step_tokens(const SpeculationParams& p);

// Prompt lookup over the tokens history[0, length): for n from lookup_max down to lookup_min, the latest
// earlier occurrence of the last n tokens, history[p, p + n) with p + n < length; its continuation, k
// tokens, goes to `drafts`. The continuation is copied as the history would go on if it repeated from
// there: a token past the history's end is the draft that many places before it (a copy that overlaps
// itself), so a match just before the end still drafts k tokens of the repeating text. Returns how many
// (0: no occurrence). Shared by the executors.
MK_HD_INLINE int lookup_drafts(const int32_t* history, int length, int lookup_min, int lookup_max, int k, int32_t* drafts) {
  for (int n = lookup_max; n >= lookup_min; --n) {
    if (n < 1 || n >= length) continue;
    for (int p = length - n - 1; p >= 0; --p) {
      int same = 0;
      while (same < n && history[p + same] == history[length - n + same]) ++same;
      if (same < n) continue;
      for (int i = 0; i < k; ++i) {
        const int from = p + n + i;
        drafts[i] = from < length ? history[from] : drafts[from - length];
      }
      return k;
    }
  }
  return 0;
}

}  // namespace mk
