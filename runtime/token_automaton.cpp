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

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos) : eos_(std::move(eos)) {
  offsets_.reserve(token_bytes.size() + 1);
  offsets_.push_back(0);
  for (const std::string& t : token_bytes) {
    bytes_ += t;
    offsets_.push_back(uint32_t(bytes_.size()));
  }
  // The trie from the tokens in byte order: each token shares its longest common prefix with the one
  // before; the nodes past it close, the rest open.
  std::vector<int32_t> order;
  for (int32_t t = 0; t < size(); ++t)
    if (!bytes(t).empty()) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b) || (bytes(a) == bytes(b) && a < b); });
  Trie& tr = trie_;
  tr.next_same_token.assign(size_t(size()), -1);
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
    const std::string_view b = bytes(t);
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
         size_t(dfa.states()) * (sizeof(int32_t) + sizeof(uint8_t)) + vocabulary->all_bytes().size() +
         vocabulary->offsets().size() * sizeof(uint32_t);
}

namespace {

// One state's walk over the trie: its allowed tokens, how many, and the states they lead to.
struct Walk {
  std::vector<uint32_t> words;
  size_t tokens = 0;
  std::vector<int> reached;
};

void walk_state(const ByteDfa& dfa, const TokenVocabulary::Trie& tr, const std::vector<uint8_t>& node_class, int s, Walk& w,
                std::vector<int>& at_depth, std::vector<uint32_t>& mark, uint32_t epoch) {
  const size_t k = size_t(dfa.classes);
  const int32_t* next = dfa.next.data();
  const size_t nodes = tr.byte.size();
  std::fill(w.words.begin(), w.words.end(), 0u);
  w.tokens = 0;
  w.reached.clear();
  at_depth[0] = s;
  for (size_t i = 1; i < nodes;) {
    const int t = next[size_t(at_depth[tr.depth[i] - 1u]) * k + node_class[i]];
    if (t < 0) {
      i = tr.subtree_end[i];
      continue;
    }
    at_depth[tr.depth[i]] = t;
    for (int32_t tok = tr.first_token[i]; tok >= 0; tok = tr.next_same_token[size_t(tok)]) {
      w.words[size_t(tok) / 32] |= 1u << (tok % 32);
      ++w.tokens;
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
  a->state_mask.assign(size_t(dfa.states()), -1);
  a->state_end.assign(size_t(dfa.states()), 0);
  // Each trie node's byte class in this DFA: the walk's step is one load from `next`.
  std::vector<uint8_t> node_class(tr.byte.size());
  for (size_t i = 0; i < tr.byte.size(); ++i) node_class[i] = dfa.byte_class[tr.byte[i]];

  // Breadth-first over the states whole tokens reach, a level at a time; the walks of a level on all
  // cores (they are most of a compile: one walk visits up to the whole trie).
  const unsigned threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::unordered_map<std::vector<uint32_t>, int, IntVectorHash> set_ids;
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
        walk_state(dfa, tr, node_class, level[q], w, at_depth, mark, ++epoch);
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
      if (accepting)
        for (const int32_t e : vocabulary->eos())
          if (e >= 0 && e < vocab) w.words[size_t(e) / 32] |= 1u << (e % 32);
      a->state_end[size_t(s)] = accepting && w.tokens == 0;
      const auto [it, added] = set_ids.emplace(w.words, int(set_ids.size()));
      if (added) {
        a->masks.insert(a->masks.end(), w.words.begin(), w.words.end());
        if (a->masks.size() * sizeof(uint32_t) > kMaxConstraintTableBytes)
          constraint_fail("{}: its token tables need more than {} MiB (docs/structured_output.md): make it smaller", what,
                          kMaxConstraintTableBytes >> 20);
      }
      a->state_mask[size_t(s)] = it->second;
      for (const int t : w.reached)
        if (!seen[size_t(t)]) seen[size_t(t)] = 1, next_level.push_back(t);
    }
    level.swap(next_level);
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
