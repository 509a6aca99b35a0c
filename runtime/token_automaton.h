// A constraint (JSON object, JSON schema, regex) compiled against a tokenizer's vocabulary into what the
// kernel's LM head and sample op use (docs/structured_output.md):
//   - the byte DFA of the constraint (runtime/byte_automaton.h); its state is the decode's constraint
//     state, and the sample op moves it along the sampled token's bytes;
//   - for each DFA state a whole token can reach, the set of tokens allowed there (the token's bytes stay
//     inside the language's prefixes; EOS where the DFA accepts), and its closing set for the end of the
//     token budget (runtime/constraint_budget.h), each set stored once however many states share it.
// A state that accepts and allows no token but EOS ends the generation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/byte_automaton.h"
#include "runtime/constraint_budget.h"
#include "runtime/constraint_spec.h"

namespace mk::constraint {

// The device tables of one constraint fail past this size (docs/structured_output.md).
inline constexpr size_t kMaxConstraintTableBytes = size_t(256) << 20;

// A tokenizer's vocabulary as bytes, with a trie over it for the walks. Tokens with no bytes (special and
// added tokens) are never allowed, except `eos` where the constraint accepts.
class TokenVocabulary {
 public:
  // token_bytes[i]: token i's bytes ("" for a token generation may not use).
  TokenVocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos);
  int size() const { return int(offsets_.size()) - 1; }
  std::string_view bytes(int32_t token) const { return std::string_view(bytes_).substr(offsets_[size_t(token)], offsets_[size_t(token) + 1] - offsets_[size_t(token)]); }
  const std::vector<int32_t>& eos() const { return eos_; }
  const std::string& all_bytes() const { return bytes_; }
  const std::vector<uint32_t>& offsets() const { return offsets_; }

  // The trie in preorder: node i's byte, depth (root 0), the index after its subtree, and the first
  // token whose bytes end there (then next_same_token's chain), -1 if none.
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;
    std::vector<uint32_t> subtree_end;
    std::vector<int32_t> first_token;
    std::vector<int32_t> next_same_token;
    int max_depth = 0;
  };
  const Trie& trie() const { return trie_; }
  // The trie of the tokens of two or more bytes that are all JSON punctuation or spaces (`", "`, `"}]`):
  // the completion bounds' moves across choices (runtime/token_automaton.cpp).
  const Trie& structural_trie() const { return structural_trie_; }

 private:
  std::string bytes_;
  std::vector<uint32_t> offsets_;
  std::vector<int32_t> eos_;
  Trie trie_, structural_trie_;
};

// The byte DFA of the spec. Throws ConstraintError naming what is unsupported or too large.
ByteDfa compile_constraint(const ConstraintSpec& spec);

struct TokenAutomaton {
  ByteDfa dfa;
  std::shared_ptr<const TokenVocabulary> vocabulary;
  int mask_words = 0;                 // ceil(vocab / 32)
  std::vector<uint32_t> masks;        // [distinct sets][mask_words], bit t of a set: token t allowed
  // Per DFA state, kStateSetFields entries (runtime/constraint_budget.h): its set (-1 where no whole token
  // reaches the state), its closing set, and the budget below which the closing set applies.
  std::vector<int32_t> state_sets;
  std::vector<uint8_t> state_end;         // per DFA state: it accepts and allows only EOS
  // Per DFA state, at most how many tokens complete the constraint from there (EOS included; 0 at an
  // end): its closing sets take no more (runtime/token_automaton.cpp, completion_bounds). kNoBound where
  // the bound's moves cannot complete it; if a state the tokens reach has none, no closing set applies.
  std::vector<int32_t> completion_bound;
  static constexpr int32_t kNoBound = INT32_MAX;
  // Every state has a completion bound: a reply whose budget at the start covers the start's bound ends
  // complete.
  bool closes_within_budget = false;

  int32_t set_of(int state) const { return state_sets[size_t(state) * kStateSetFields + kStateSet]; }
  bool set_allows(int32_t set, int32_t token) const {
    return set >= 0 && (masks[size_t(set) * size_t(mask_words) + size_t(token) / 32] >> (token % 32) & 1u) != 0;
  }
  // Whether the state allows the token at all / with `budget` tokens left (the next one included).
  bool allowed(int state, int32_t token) const { return set_allows(set_of(state), token); }
  bool allowed(int state, int32_t budget, int32_t token) const {
    return set_allows(constraint_set(state_sets.data(), state, budget), token);
  }
  // The DFA state after the token's bytes (the token must be allowed and not EOS).
  int advance(int state, int32_t token) const { return dfa.walk(state, vocabulary->bytes(token)); }
  // DFA states a whole token reaches (the start included): those with a set.
  int token_states() const {
    int n = 0;
    for (int s = 0; s < dfa.states(); ++s) n += set_of(s) >= 0;
    return n;
  }
  // Bytes of the tables the device holds: the sets, the DFA, the per-state arrays and the vocabulary.
  size_t device_bytes() const;
};

// The token automaton of `dfa` over `vocabulary`. Throws ConstraintError when a state the tokens reach
// cannot be continued by any token, or past kMaxConstraintTableBytes. `what` names the constraint.
std::shared_ptr<const TokenAutomaton> build_token_automaton(ByteDfa dfa, std::shared_ptr<const TokenVocabulary> vocabulary,
                                                            std::string_view what);

// compile_constraint and build_token_automaton; `what` ("response_format", "--regex") names it.
std::shared_ptr<const TokenAutomaton> compile_token_constraint(const ConstraintSpec& spec,
                                                               std::shared_ptr<const TokenVocabulary> vocabulary,
                                                               std::string_view what);

}  // namespace mk::constraint
