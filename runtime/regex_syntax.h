// Regular expressions (ECMAScript syntax, as JSON Schema's `pattern` uses it) into byte automata over
// UTF-8: a string matches when the whole string matches (^ and $ may only stand at the ends). Supported:
// literals, `.`, classes with ranges and negation, \d \D \w \W \s \S, escapes (\n \t \r \f \v \0 \xHH
// \uHHHH \u{H...}, escaped punctuation), groups ( ) (?: ) (?<name> ), alternation, and the quantifiers
// * + ? {n} {n,} {n,m} (lazy forms too: the same language). Anything else (back-references, lookaround,
// \b, \p{...}) is a ConstraintError naming the construct and its offset.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/byte_automaton.h"

namespace mk::constraint {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Bounded quantifiers above this count fail (docs/structured_output.md).
inline constexpr int kMaxRepeat = 1000;

// A set of Unicode code points as sorted, disjoint, non-adjacent ranges.
class CodePointSet {
 public:
  CodePointSet() = default;
  CodePointSet(uint32_t lo, uint32_t hi) { add(lo, hi); }
  void add(uint32_t lo, uint32_t hi);
  void add(const CodePointSet& other);
  CodePointSet complement() const;  // within [0, kMaxCodePoint], surrogates excluded
  CodePointSet minus(const CodePointSet& other) const;
  bool contains(uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// One code point of the set, UTF-8 encoded (surrogates never).
Fragment utf8_fragment(Nfa& nfa, const CodePointSet& set);

// One code point of the set as it is written inside a JSON string: unescaped where JSON allows, else
// escaped (\" \\ \n \t \r \b \f, other control characters \u00XX).
Fragment json_string_char_fragment(Nfa& nfa, const CodePointSet& set);

// What a regex's code points become: raw UTF-8 (--regex), or the inside of a JSON string (`pattern`).
enum class RegexTarget { Utf8, JsonStringContent };

// The regex as a fragment of `nfa`. `what` names it in errors ("pattern at /properties/id").
Fragment compile_regex(Nfa& nfa, std::string_view regex, RegexTarget target, std::string_view what);

// ECMAScript's \s: white space and line terminators.
CodePointSet ecmascript_space();

}  // namespace mk::constraint
