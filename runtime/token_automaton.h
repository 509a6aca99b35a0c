// A constraint (JSON object, JSON schema, regex) compiled against a tokenizer's vocabulary into what the
// kernel's LM head and sample op use (docs/structured_output.md):
//   - the byte DFA of the constraint (runtime/byte_automaton.h); its state is the decode's constraint
//     state, and the sample op moves it along the sampled token's bytes;
//   - for each DFA state a whole token can reach, the set of tokens allowed there (the token's bytes stay
//     inside the language's prefixes; EOS where the DFA accepts), stored once per distinct set.
// A state that accepts and allows no token but EOS ends the generation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/byte_automaton.h"
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

 private:
  std::string bytes_;
  std::vector<uint32_t> offsets_;
  std::vector<int32_t> eos_;
  Trie trie_;
};

// The byte DFA of the spec. Throws ConstraintError naming what is unsupported or too large.
ByteDfa compile_constraint(const ConstraintSpec& spec);

struct TokenAutomaton {
  ByteDfa dfa;
  std::shared_ptr<const TokenVocabulary> vocabulary;
  int mask_words = 0;                 // ceil(vocab / 32)
  std::vector<uint32_t> masks;        // [distinct sets][mask_words], bit t of a set: token t allowed
  std::vector<int32_t> state_mask;    // per DFA state, its set; -1 where no whole token reaches it
  std::vector<uint8_t> state_end;     // per DFA state: it accepts and allows only EOS

  bool allowed(int state, int32_t token) const {
    const int m = state_mask[size_t(state)];
    return m >= 0 && (masks[size_t(m) * size_t(mask_words) + size_t(token) / 32] >> (token % 32) & 1u) != 0;
  }
  // The DFA state after the token's bytes (the token must be allowed and not EOS).
  int advance(int state, int32_t token) const { return dfa.walk(state, vocabulary->bytes(token)); }
  // DFA states a whole token reaches (the start included): those with a set.
  int token_states() const { return int(std::count_if(state_mask.begin(), state_mask.end(), [](int32_t m) { return m >= 0; })); }
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
