// Finite automata over bytes, the base of constrained decoding (docs/structured_output.md): an NFA built
// from fragments (the regex and JSON-schema compilers write into one), its DFA by subset construction,
// with the states that cannot reach acceptance removed and equivalent states merged.
// Written here: no packaged C++ library exposes a DFA's transition table (PCRE2 and RE2 only match).
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/decode_backend.h"

namespace mk::constraint {

using ByteSet = std::bitset<256>;

// A constraint that cannot be compiled as asked: unsupported syntax or keyword, a limit passed. The message
// names the keyword, the construct or the limit. A RequestError: mk-server answers 400 with it.
class ConstraintError : public RequestError {
 public:
  using RequestError::RequestError;
};

template <typename... Args>
[[noreturn]] void constraint_fail(fmt::format_string<Args...> format, Args&&... args) {
  throw ConstraintError(fmt::format(format, std::forward<Args>(args)...));
}

// FNV-1a over a vector of integers: the key of the compilers' maps of state sets and token sets.
struct IntVectorHash {
  template <class T>
  size_t operator()(const std::vector<T>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (const T x : v) h = (h ^ uint64_t(uint32_t(x))) * 1099511628211ull;
    return size_t(h);
  }
};

// Automata larger than these fail with a ConstraintError naming the limit (docs/structured_output.md).
inline constexpr size_t kMaxNfaStates = size_t(1) << 20;
inline constexpr size_t kMaxDfaStates = size_t(1) << 15;

// An NFA fragment: one entry state, one exit state.
struct Fragment {
  int in = -1, out = -1;
};

// Thompson-style NFA. Fragments are built by the helpers below; a repeated part is built again for each
// copy (the builders take a callable that makes a fresh fragment).
class Nfa {
 public:
  int add_state();
  void add_epsilon(int from, int to);
  void add_bytes(int from, const ByteSet& bytes, int to);

  Fragment empty();                          // matches ""
  Fragment bytes(const ByteSet& set);        // one byte of the set
  Fragment literal(std::string_view text);   // exactly these bytes
  Fragment sequence(const std::vector<Fragment>& parts);
  Fragment alternatives(const std::vector<Fragment>& options);  // at least one
  Fragment optional(Fragment f);
  Fragment star(Fragment f);
  // `make` called for each copy: min copies, then max - min optional ones (max < 0: then any number more).
  template <class Make>
  Fragment repeat(Make&& make, int min, int max) {
    std::vector<Fragment> parts;
    for (int i = 0; i < min; ++i) parts.push_back(make());
    if (max < 0) {
      parts.push_back(star(make()));
    } else {
      // Nested optionals, so that copy i + 1 can only follow copy i: a?(b?(c?)) is linear in max - min.
      Fragment tail = empty();
      for (int i = max - min; i > 0; --i) tail = optional(sequence({make(), tail}));
      parts.push_back(tail);
    }
    return sequence(parts);
  }

  struct Edge {
    int to;
    int set;  // index into sets(); -1: epsilon
  };
  size_t size() const { return edges_.size(); }
  const std::vector<Edge>& edges(int state) const { return edges_[size_t(state)]; }
  const std::vector<ByteSet>& sets() const { return sets_; }

 private:
  int intern(const ByteSet& set);
  std::vector<std::vector<Edge>> edges_;
  std::vector<ByteSet> sets_;
};

// A DFA over bytes, through byte classes (bytes no transition tells apart). Every state can reach an
// accepting one; a missing transition is -1.
struct ByteDfa {
  int start = 0;
  int classes = 0;
  uint8_t byte_class[256] = {};
  std::vector<int32_t> next;  // [state * classes + class]
  std::vector<uint8_t> accepting;

  int states() const { return int(accepting.size()); }
  int step(int state, uint8_t byte) const { return next[size_t(state) * size_t(classes) + byte_class[byte]]; }
  // The state after `text` from `state`, or -1.
  int walk(int state, std::string_view text) const;
  bool matches(std::string_view text) const;
};

// The minimal DFA of the NFA's language from `start` to `accept`. Throws ConstraintError past
// kMaxDfaStates, or when the language is empty (`what` names the constraint).
ByteDfa determinize(const Nfa& nfa, Fragment f, std::string_view what);

// The strings both accept (their product), minimal.
ByteDfa intersect(const ByteDfa& a, const ByteDfa& b, std::string_view what);

// The DFA's language as a fragment of `nfa`.
Fragment embed(Nfa& nfa, const ByteDfa& dfa);

}  // namespace mk::constraint
