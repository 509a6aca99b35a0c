#include "runtime/token_automaton.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <numeric>
#include <unordered_map>

#include "runtime/json_schema.h"
#include "runtime/regex_syntax.h"
#include "runtime/tool_call_grammar.h"

namespace mk::constraint {

namespace {

// The trie of the given tokens (`order`: their ids, sorted by their bytes): each token shares its longest
// common prefix with the one before; the nodes past it close, the rest open.
TokenVocabulary::Trie build_trie(const TokenVocabulary& v, const std::vector<int32_t>& order) {
  TokenVocabulary::Trie tr;
  tr.next_same_token.assign(size_t(v.size()), -1);
  const auto open = [&](uint8_t byte, int depth) {
    tr.byte.push_back(byte);
    tr.depth.push_back(uint16_t(depth));
    tr.subtree_end.push_back(0);
    tr.first_token.push_back(-1);
    tr.max_depth = std::max(tr.max_depth, depth);
  };
  open(0, 0);
  std::vector<uint32_t> path{0};  // open nodes, root first
  std::string_view previous;
  std::vector<int32_t> last_token;  // per node, the chain's last token
  for (const int32_t t : order) {
    const std::string_view b = v.bytes(t);
    if (b.size() > 0xFFFF) continue;  // a token this long is never allowed
    size_t common = 0;
    while (common < b.size() && common < previous.size() && b[common] == previous[common]) ++common;
    while (path.size() > common + 1) {
      tr.subtree_end[path.back()] = uint32_t(tr.byte.size());
      path.pop_back();
    }
    for (size_t i = common; i < b.size(); ++i) {
      path.push_back(uint32_t(tr.byte.size()));
      open(uint8_t(b[i]), int(i) + 1);
    }
    const uint32_t node = path.back();
    last_token.resize(tr.byte.size(), -1);
    if (tr.first_token[node] < 0) tr.first_token[node] = t;
    else tr.next_same_token[size_t(last_token[node])] = t;
    last_token[node] = t;
    previous = b;
  }
  while (!path.empty()) {
    tr.subtree_end[path.back()] = uint32_t(tr.byte.size());
    path.pop_back();
  }
  return tr;
}

// JSON's structure: the bytes of the punctuation tokens that completion bounds take across choices.
bool structural_byte(char c) { return c == '"' || c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':' || c == ' '; }

}  // namespace

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos) : eos_(std::move(eos)) {
  offsets_.reserve(token_bytes.size() + 1);
  offsets_.push_back(0);
  for (const std::string& t : token_bytes) {
    bytes_ += t;
    offsets_.push_back(uint32_t(bytes_.size()));
  }
  std::vector<int32_t> order, structural;
  for (int32_t t = 0; t < size(); ++t)
    if (!bytes(t).empty()) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b) || (bytes(a) == bytes(b) && a < b); });
  for (const int32_t t : order)
    if (bytes(t).size() >= 2 && std::all_of(bytes(t).begin(), bytes(t).end(), structural_byte)) structural.push_back(t);
  trie_ = build_trie(*this, order);
  structural_trie_ = build_trie(*this, structural);
}

ByteDfa compile_constraint(const ConstraintSpec& spec) {
  Nfa nfa;
  switch (spec.kind) {
    case ConstraintSpec::Kind::JsonObject: return determinize(nfa, json_object_fragment(nfa), "json_object");
    case ConstraintSpec::Kind::JsonSchema: {
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(spec.text);
      } catch (const nlohmann::json::exception& e) {
        constraint_fail("json_schema: not valid JSON: {}", e.what());
      }
      return determinize(nfa, json_schema_fragment(nfa, schema), "json_schema");
    }
    case ConstraintSpec::Kind::Regex: return determinize(nfa, compile_regex(nfa, spec.text, RegexTarget::Utf8, "regex"), "regex");
    case ConstraintSpec::Kind::ToolCalls: return determinize(nfa, tool_calls_fragment(nfa, spec.text), "tool calls");
    case ConstraintSpec::Kind::None: break;
  }
  constraint_fail("internal: no constraint to compile");
}

size_t TokenAutomaton::device_bytes() const {
  return masks.size() * sizeof(uint32_t) + dfa.next.size() * sizeof(int32_t) + 256 +
         size_t(dfa.states()) * (kStateSetFields * sizeof(int32_t) + sizeof(uint8_t)) + vocabulary->all_bytes().size() +
         vocabulary->offsets().size() * sizeof(uint32_t);
}

namespace {

// At most how many tokens complete the constraint from each DFA state: a breadth-first search backwards
// from the ends (0) and the accepting states (1: EOS) over three kinds of moves, each a real token:
//   - a single-byte token's byte (byte-level vocabularies have one for every byte);
//   - a longer token whose bytes after the first are a forced run, where each state has one byte to go
//     on with (a property's name and the quotes and colon around it: ` "description":` is one token or
//     two, not 16 bytes);
//   - a token of JSON punctuation and spaces (`", "`, `"}]`), wherever its bytes fit.
// A bound, not the fewest tokens: other long tokens may complete it sooner (a word of a string's
// minLength, "true" across the choice of a value), but it is found before the walks, which build the
// closing sets from it in the same pass. Every state with a bound has a token that lowers it by one (or
// EOS where it is one), which is what the closing sets need. kNoBound where these moves cannot complete
// the constraint.
std::vector<int32_t> completion_bounds(const ByteDfa& dfa, const TokenVocabulary& vocabulary) {
  const size_t k = size_t(dfa.classes), n = size_t(dfa.states());
  const auto& tr = vocabulary.trie();
  std::vector<uint8_t> usable(k, 0);  // the class holds a byte that is a token of its own: a root child with a token
  std::vector<std::vector<size_t>> class_roots(k);  // the root's children of each class's bytes
  std::vector<int> class_bytes(k, 0), class_byte(k, 0);
  for (int b = 0; b < 256; ++b) ++class_bytes[dfa.byte_class[b]], class_byte[dfa.byte_class[b]] = b;
  for (size_t c = 1; c < tr.byte.size(); c = tr.subtree_end[c]) {
    const size_t cls = dfa.byte_class[tr.byte[c]];
    class_roots[cls].push_back(c);
    if (tr.first_token[c] >= 0) usable[cls] = 1;
  }
  bool eos = false;
  for (const int32_t e : vocabulary.eos()) eos |= e >= 0 && e < vocabulary.size();
  // The one byte a state goes on with, or -1.
  std::vector<int> forced(n, -1);
  std::vector<uint8_t> goes_on(n, 0);
  std::vector<std::vector<int>> before(n);  // the states a move leads from into each state
  for (size_t s = 0; s < n; ++s) {
    int classes = 0, only = -1;
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = dfa.next[s * k + c];
      if (t < 0) continue;
      ++classes, only = int(c);
      if (usable[c]) before[size_t(t)].push_back(int(s));
    }
    goes_on[s] = classes > 0;
    if (classes == 1 && class_bytes[size_t(only)] == 1) forced[s] = class_byte[size_t(only)];
  }
  // Tokens whose first byte may be any and the rest a forced run: only where the first byte leads to a
  // state with one byte to go on with (into a property's name, a literal's letters), and not where it
  // stays in its state (inside a string). A node's children are found by skipping subtrees.
  for (size_t s = 0; s < n; ++s)
    for (size_t c = 0; c < k; ++c) {
      const int32_t after_first = dfa.next[s * k + c];
      if (after_first < 0 || after_first == int32_t(s) || forced[size_t(after_first)] < 0) continue;
      for (const size_t first : class_roots[c]) {
        int cur = after_first;
        size_t node = first;
        while (forced[size_t(cur)] >= 0) {
          const uint8_t byte = uint8_t(forced[size_t(cur)]);
          size_t child = 0;
          for (size_t d = node + 1; d < tr.subtree_end[node]; d = tr.subtree_end[d])
            if (tr.byte[d] == byte) {
              child = d;
              break;
            }
          if (child == 0) break;
          cur = dfa.next[size_t(cur) * k + dfa.byte_class[byte]];
          node = child;
          if (tr.first_token[node] >= 0) before[size_t(cur)].push_back(int(s));
        }
      }
    }
  // The punctuation tokens from every state: a walk over their (small) trie. A byte that stays in its
  // state (inside a string) makes no token that counts: the walk skips what lies below it.
  const auto& st = vocabulary.structural_trie();
  std::vector<int> at_depth(size_t(st.max_depth) + 1);
  std::vector<uint32_t> mark(n, 0);
  for (size_t s = 0; s < n; ++s) {
    at_depth[0] = int(s);
    for (size_t i = 1; i < st.byte.size();) {
      const int from = at_depth[st.depth[i] - 1u];
      const int t = dfa.next[size_t(from) * k + dfa.byte_class[st.byte[i]]];
      if (t < 0 || t == from) {
        i = st.subtree_end[i];
        continue;
      }
      at_depth[st.depth[i]] = t;
      if (st.first_token[i] >= 0 && mark[size_t(t)] != s + 1) mark[size_t(t)] = uint32_t(s + 1), before[size_t(t)].push_back(int(s));
      ++i;
    }
  }
  std::vector<int32_t> bound(n, TokenAutomaton::kNoBound);
  std::vector<std::vector<int>> level(2);
  for (size_t s = 0; s < n; ++s)
    if (dfa.accepting[s] && !goes_on[s]) bound[s] = 0, level[0].push_back(int(s));
    else if (dfa.accepting[s] && eos) bound[s] = 1, level[1].push_back(int(s));
  for (size_t d = 0; d < level.size(); ++d)
    for (size_t i = 0; i < level[d].size(); ++i)
      for (const int p : before[size_t(level[d][i])])
        if (bound[size_t(p)] > int32_t(d) + 1) {
          bound[size_t(p)] = int32_t(d) + 1;
          if (level.size() <= d + 1) level.resize(d + 2);
          level[d + 1].push_back(p);
        }
  return bound;
}

// One state's walk over the trie: its allowed tokens, how many, and the states they lead to; its closing
// set (the tokens after which the bound is at least one less) and the largest rise of the bound a token
// of its set causes (1 + the bound after it - its own).
struct Walk {
  std::vector<uint32_t> words, closing;
  size_t tokens = 0;
  int32_t max_rise = 0;
  std::vector<int> reached;
};

void walk_state(const ByteDfa& dfa, const TokenVocabulary::Trie& tr, const std::vector<uint8_t>& node_class,
                const int32_t* bound, int s, Walk& w, std::vector<int>& at_depth, std::vector<uint32_t>& mark, uint32_t epoch) {
  const size_t k = size_t(dfa.classes);
  const int32_t* next = dfa.next.data();
  const size_t nodes = tr.byte.size();
  std::fill(w.words.begin(), w.words.end(), 0u);
  std::fill(w.closing.begin(), w.closing.end(), 0u);
  w.tokens = 0;
  w.max_rise = 0;
  w.reached.clear();
  const int32_t own = bound[s];
  at_depth[0] = s;
  for (size_t i = 1; i < nodes;) {
    const int t = next[size_t(at_depth[tr.depth[i] - 1u]) * k + node_class[i]];
    if (t < 0) {
      i = tr.subtree_end[i];
      continue;
    }
    at_depth[tr.depth[i]] = t;
    if (tr.first_token[i] >= 0) {
      const int32_t rise = 1 + bound[t] - own;
      w.max_rise = std::max(w.max_rise, rise);
      for (int32_t tok = tr.first_token[i]; tok >= 0; tok = tr.next_same_token[size_t(tok)]) {
        w.words[size_t(tok) / 32] |= 1u << (tok % 32);
        ++w.tokens;
        if (rise <= 0) w.closing[size_t(tok) / 32] |= 1u << (tok % 32);
      }
      if (mark[size_t(t)] != epoch) mark[size_t(t)] = epoch, w.reached.push_back(t);
    }
    ++i;
  }
}

}  // namespace

std::shared_ptr<const TokenAutomaton> build_token_automaton(ByteDfa dfa, std::shared_ptr<const TokenVocabulary> vocabulary,
                                                            std::string_view what) {
  auto a = std::make_shared<TokenAutomaton>();
  const int vocab = vocabulary->size();
  const auto& tr = vocabulary->trie();
  a->mask_words = (vocab + 31) / 32;
  a->state_sets.assign(size_t(dfa.states()) * kStateSetFields, -1);
  a->state_end.assign(size_t(dfa.states()), 0);
  a->completion_bound = completion_bounds(dfa, *vocabulary);
  // The walks' copy: a missing bound as a large number that cannot overflow a rise (where one is
  // missing, the closing sets are dropped after the walks).
  std::vector<int32_t> walk_bound(a->completion_bound);
  for (int32_t& b : walk_bound) b = std::min(b, int32_t(1) << 28);
  const int32_t* bound = walk_bound.data();
  // Each trie node's byte class in this DFA: the walk's step is one load from `next`.
  std::vector<uint8_t> node_class(tr.byte.size());
  for (size_t i = 0; i < tr.byte.size(); ++i) node_class[i] = dfa.byte_class[tr.byte[i]];

  // Breadth-first over the states whole tokens reach, a level at a time; the walks of a level on all
  // cores (they are most of a compile: one walk visits up to the whole trie).
  const unsigned threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::unordered_map<std::vector<uint32_t>, int, IntVectorHash> set_ids;
  const auto set_id = [&](const std::vector<uint32_t>& words) {
    if (const auto it = set_ids.find(words); it != set_ids.end()) return it->second;  // no copy of a known set
    const int id = int(set_ids.size());
    set_ids.emplace(words, id);
    a->masks.insert(a->masks.end(), words.begin(), words.end());
    if (a->masks.size() * sizeof(uint32_t) > kMaxConstraintTableBytes)
      constraint_fail("{}: its token tables need more than {} MiB (docs/structured_output.md): make it smaller", what,
                      kMaxConstraintTableBytes >> 20);
    return id;
  };
  std::vector<uint8_t> seen(size_t(dfa.states()), 0);
  std::vector<int> level{dfa.start};
  seen[size_t(dfa.start)] = 1;
  std::vector<Walk> walks;
  while (!level.empty()) {
    walks.resize(std::max(walks.size(), level.size()));
    std::atomic<size_t> cursor{0};
    const auto work = [&] {
      std::vector<int> at_depth(size_t(tr.max_depth) + 1);
      std::vector<uint32_t> mark(size_t(dfa.states()), 0);
      uint32_t epoch = 0;
      for (size_t q; (q = cursor.fetch_add(1)) < level.size();) {
        Walk& w = walks[q];
        w.words.resize(size_t(a->mask_words));
        w.closing.resize(size_t(a->mask_words));
        walk_state(dfa, tr, node_class, bound, level[q], w, at_depth, mark, ++epoch);
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads && t < level.size(); ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    std::vector<int> next_level;
    for (size_t q = 0; q < level.size(); ++q) {
      const int s = level[q];
      Walk& w = walks[q];
      const bool accepting = dfa.accepting[size_t(s)] != 0;
      if (w.tokens == 0 && !accepting)
        constraint_fail("{}: the tokenizer's vocabulary cannot continue the constraint after some prefix (no token's bytes "
                        "fit there)",
                        what);
      // EOS where the DFA accepts; it completes, so it closes where the bound is one or more.
      if (accepting)
        for (const int32_t e : vocabulary->eos())
          if (e >= 0 && e < vocab) {
            w.words[size_t(e) / 32] |= 1u << (e % 32);
            if (bound[s] >= 1) w.closing[size_t(e) / 32] |= 1u << (e % 32);
          }
      a->state_end[size_t(s)] = accepting && w.tokens == 0;
      int32_t* sets = &a->state_sets[size_t(s) * kStateSetFields];
      sets[kStateSet] = set_id(w.words);
      sets[kStateClosingSet] = w.max_rise <= 0 ? sets[kStateSet] : set_id(w.closing);
      sets[kStateClosingBelow] = bound[s] + w.max_rise;
      for (const int t : w.reached)
        if (!seen[size_t(t)]) seen[size_t(t)] = 1, next_level.push_back(t);
    }
    level.swap(next_level);
  }
  // The rule holds only if every state the tokens reach has a bound; else no closing set applies.
  a->closes_within_budget = true;
  for (int s = 0; s < dfa.states(); ++s)
    a->closes_within_budget &= a->set_of(s) < 0 || a->completion_bound[size_t(s)] != TokenAutomaton::kNoBound;
  if (!a->closes_within_budget)
    for (int s = 0; s < dfa.states(); ++s) {
      int32_t* sets = &a->state_sets[size_t(s) * kStateSetFields];
      sets[kStateClosingSet] = sets[kStateSet];
      sets[kStateClosingBelow] = INT32_MIN;
    }
  a->dfa = std::move(dfa);
  a->vocabulary = std::move(vocabulary);
  if (a->device_bytes() > kMaxConstraintTableBytes)
    constraint_fail("{}: its token tables need {} MiB, more than the {} MiB limit (docs/structured_output.md)", what,
                    (a->device_bytes() + (1u << 20) - 1) >> 20, kMaxConstraintTableBytes >> 20);
  return a;
}

std::shared_ptr<const TokenAutomaton> compile_token_constraint(const ConstraintSpec& spec,
                                                               std::shared_ptr<const TokenVocabulary> vocabulary,
                                                               std::string_view what) {
  try {
    return build_token_automaton(compile_constraint(spec), std::move(vocabulary), what);
  } catch (const ConstraintError& e) {
    if (std::string_view(e.what()).rfind(what, 0) == 0) throw;
    throw ConstraintError(fmt::format("{}: {}", what, e.what()));
  }
}

}  // namespace mk::constraint
