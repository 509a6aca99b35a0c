#include "runtime/byte_automaton.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace mk::constraint {

int Nfa::add_state() {
  if (edges_.size() >= kMaxNfaStates)
    constraint_fail("the constraint needs more than {} automaton states (docs/structured_output.md): make it smaller", kMaxNfaStates);
  edges_.emplace_back();
  return int(edges_.size() - 1);
}

void Nfa::add_epsilon(int from, int to) { edges_[size_t(from)].push_back({to, -1}); }

int Nfa::intern(const ByteSet& set) {
  // Most sets repeat (a JSON string's characters, digits): a small linear search over recent ones.
  for (size_t i = sets_.size(); i > 0 && i + 64 > sets_.size(); --i)
    if (sets_[i - 1] == set) return int(i - 1);
  sets_.push_back(set);
  return int(sets_.size() - 1);
}

void Nfa::add_bytes(int from, const ByteSet& bytes, int to) { edges_[size_t(from)].push_back({to, intern(bytes)}); }

Fragment Nfa::empty() {
  const int s = add_state();
  return {s, s};
}

Fragment Nfa::bytes(const ByteSet& set) {
  Fragment f{add_state(), add_state()};
  add_bytes(f.in, set, f.out);
  return f;
}

Fragment Nfa::literal(std::string_view text) {
  Fragment f = empty();
  for (const char c : text) {
    const int next = add_state();
    ByteSet b;
    b.set(uint8_t(c));
    add_bytes(f.out, b, next);
    f.out = next;
  }
  return f;
}

Fragment Nfa::sequence(const std::vector<Fragment>& parts) {
  if (parts.empty()) return empty();
  for (size_t i = 1; i < parts.size(); ++i) add_epsilon(parts[i - 1].out, parts[i].in);
  return {parts.front().in, parts.back().out};
}

Fragment Nfa::alternatives(const std::vector<Fragment>& options) {
  if (options.size() == 1) return options[0];
  Fragment f{add_state(), add_state()};
  for (const Fragment& o : options) add_epsilon(f.in, o.in), add_epsilon(o.out, f.out);
  return f;
}

Fragment Nfa::optional(Fragment f) {
  Fragment g{add_state(), add_state()};
  add_epsilon(g.in, f.in);
  add_epsilon(f.out, g.out);
  add_epsilon(g.in, g.out);
  return g;
}

Fragment Nfa::star(Fragment f) {
  Fragment g{add_state(), add_state()};
  add_epsilon(g.in, f.in);
  add_epsilon(f.out, f.in);
  add_epsilon(f.out, g.out);
  add_epsilon(g.in, g.out);
  return g;
}

int ByteDfa::walk(int state, std::string_view text) const {
  for (const char c : text) {
    if (state < 0) return -1;
    state = step(state, uint8_t(c));
  }
  return state;
}

bool ByteDfa::matches(std::string_view text) const {
  const int s = walk(start, text);
  return s >= 0 && accepting[size_t(s)];
}

namespace {

// A DFA before pruning: -1 transitions allowed, states that may not reach acceptance.
struct RawDfa {
  int start = 0, classes = 0;
  uint8_t byte_class[256] = {};
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  int states() const { return int(accepting.size()); }
};

void check_dfa_size(size_t states) {
  if (states > kMaxDfaStates)
    constraint_fail("the constraint needs more than {} automaton states after determinization (docs/structured_output.md): "
                    "make it smaller (fewer bounded repetitions, shorter maxLength/maxItems)",
                    kMaxDfaStates);
}

// Removes the states that cannot reach acceptance, merges equivalent ones (Moore's refinement), and
// numbers the rest breadth-first from the start.
ByteDfa finish(const RawDfa& raw, std::string_view what) {
  const int n = raw.states(), k = raw.classes;
  // Reverse reachability from the accepting states.
  std::vector<std::vector<int>> preds(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s)
    for (int c = 0; c < k; ++c) {
      const int t = raw.next[size_t(s) * size_t(k) + size_t(c)];
      if (t >= 0) preds[size_t(t)].push_back(s);
    }
  std::vector<uint8_t> live(size_t(n), 0);
  std::vector<int> stack;
  for (int s = 0; s < n; ++s)
    if (raw.accepting[size_t(s)]) live[size_t(s)] = 1, stack.push_back(s);
  while (!stack.empty()) {
    const int t = stack.back();
    stack.pop_back();
    for (const int p : preds[size_t(t)])
      if (!live[size_t(p)]) live[size_t(p)] = 1, stack.push_back(p);
  }
  if (!live[size_t(raw.start)]) constraint_fail("{} matches no string", what);
  const auto target = [&](int s, int c) {
    const int t = raw.next[size_t(s) * size_t(k) + size_t(c)];
    return t >= 0 && live[size_t(t)] ? t : -1;
  };
  // Moore: blocks by acceptance, refined by the blocks of each class's target until stable.
  std::vector<int> block(size_t(n), -1);
  for (int s = 0; s < n; ++s)
    if (live[size_t(s)]) block[size_t(s)] = raw.accepting[size_t(s)] ? 1 : 0;
  int blocks = 0;
  for (;;) {
    std::unordered_map<std::vector<int>, int, IntVectorHash> ids;
    ids.reserve(size_t(n));
    std::vector<int> refined(size_t(n), -1);
    std::vector<int> sig(size_t(k) + 1);
    for (int s = 0; s < n; ++s) {
      if (!live[size_t(s)]) continue;
      sig[0] = block[size_t(s)];
      for (int c = 0; c < k; ++c) {
        const int t = target(s, c);
        sig[size_t(c) + 1] = t < 0 ? -1 : block[size_t(t)];
      }
      refined[size_t(s)] = ids.emplace(sig, int(ids.size())).first->second;
    }
    const int count = int(ids.size());
    block.swap(refined);
    if (count == blocks) break;
    blocks = count;
  }
  // Breadth-first numbering of the blocks from the start's.
  ByteDfa d;
  d.classes = k;
  std::copy(std::begin(raw.byte_class), std::end(raw.byte_class), d.byte_class);
  std::vector<int> rep(size_t(blocks), -1), number(size_t(blocks), -1);
  for (int s = 0; s < n; ++s)
    if (live[size_t(s)] && rep[size_t(block[size_t(s)])] < 0) rep[size_t(block[size_t(s)])] = s;
  std::vector<int> order{block[size_t(raw.start)]};
  number[size_t(order[0])] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int s = rep[size_t(order[i])];
    for (int c = 0; c < k; ++c) {
      const int t = target(s, c);
      if (t >= 0 && number[size_t(block[size_t(t)])] < 0) {
        number[size_t(block[size_t(t)])] = int(order.size());
        order.push_back(block[size_t(t)]);
      }
    }
  }
  d.start = 0;
  d.accepting.resize(order.size());
  d.next.assign(order.size() * size_t(k), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    const int s = rep[size_t(order[i])];
    d.accepting[i] = raw.accepting[size_t(s)];
    for (int c = 0; c < k; ++c) {
      const int t = target(s, c);
      d.next[i * size_t(k) + size_t(c)] = t < 0 ? -1 : number[size_t(block[size_t(t)])];
    }
  }
  return d;
}

}  // namespace

ByteDfa determinize(const Nfa& nfa, Fragment f, std::string_view what) {
  RawDfa raw;
  // Byte classes: bytes that every set of the NFA treats alike.
  const auto& sets = nfa.sets();
  {
    std::vector<int> cls(256, 0);
    int count = 1;
    for (const ByteSet& set : sets) {
      std::map<std::pair<int, bool>, int> ids;
      for (int b = 0; b < 256; ++b) cls[size_t(b)] = ids.emplace(std::make_pair(cls[size_t(b)], bool(set[size_t(b)])), int(ids.size())).first->second;
      count = int(ids.size());
    }
    raw.classes = count;
    for (int b = 0; b < 256; ++b) raw.byte_class[b] = uint8_t(cls[size_t(b)]);
  }
  const int k = raw.classes;
  std::vector<int> representative(size_t(k), -1);
  for (int b = 255; b >= 0; --b) representative[raw.byte_class[b]] = b;
  // Each set's classes.
  std::vector<std::vector<int>> set_classes(sets.size());
  for (size_t i = 0; i < sets.size(); ++i)
    for (int c = 0; c < k; ++c)
      if (sets[i][size_t(representative[size_t(c)])]) set_classes[i].push_back(c);

  std::vector<int> mark(nfa.size(), -1);
  int epoch = 0;
  const auto closure = [&](std::vector<int>& states) {
    ++epoch;
    std::vector<int> stack;
    std::vector<int> out;
    for (const int s : states)
      if (mark[size_t(s)] != epoch) mark[size_t(s)] = epoch, stack.push_back(s);
    while (!stack.empty()) {
      const int s = stack.back();
      stack.pop_back();
      out.push_back(s);
      for (const Nfa::Edge& e : nfa.edges(s))
        if (e.set < 0 && mark[size_t(e.to)] != epoch) mark[size_t(e.to)] = epoch, stack.push_back(e.to);
    }
    std::sort(out.begin(), out.end());
    states.swap(out);
  };
  std::unordered_map<std::vector<int>, int, IntVectorHash> ids;
  std::vector<std::vector<int>> subsets;
  const auto intern = [&](std::vector<int>&& subset) {
    const auto [it, added] = ids.emplace(subset, int(subsets.size()));
    if (added) {
      check_dfa_size(subsets.size() + 1);
      subsets.push_back(std::move(subset));
      raw.accepting.push_back(0);
      raw.next.resize(raw.next.size() + size_t(k), -1);
    }
    return it->second;
  };
  std::vector<int> first{f.in};
  closure(first);
  raw.start = intern(std::move(first));
  std::vector<std::vector<int>> targets(static_cast<size_t>(k));
  for (size_t i = 0; i < subsets.size(); ++i) {
    for (auto& t : targets) t.clear();
    bool accept = false;
    for (const int s : subsets[i]) {
      accept |= s == f.out;
      for (const Nfa::Edge& e : nfa.edges(s))
        if (e.set >= 0)
          for (const int c : set_classes[size_t(e.set)]) targets[size_t(c)].push_back(e.to);
    }
    raw.accepting[i] = accept;
    for (int c = 0; c < k; ++c) {
      if (targets[size_t(c)].empty()) continue;
      std::vector<int> t = targets[size_t(c)];
      closure(t);
      const int id = intern(std::move(t));
      raw.next[i * size_t(k) + size_t(c)] = id;
    }
  }
  return finish(raw, what);
}

ByteDfa intersect(const ByteDfa& a, const ByteDfa& b, std::string_view what) {
  RawDfa raw;
  std::map<std::pair<int, int>, int> class_ids;
  for (int byte = 0; byte < 256; ++byte)
    raw.byte_class[byte] = uint8_t(class_ids.emplace(std::make_pair(int(a.byte_class[byte]), int(b.byte_class[byte])), int(class_ids.size())).first->second);
  raw.classes = int(class_ids.size());
  std::vector<std::pair<int, int>> class_pair(class_ids.size());
  for (const auto& [pair, id] : class_ids) class_pair[size_t(id)] = pair;
  const int k = raw.classes;
  std::map<std::pair<int, int>, int> ids;
  std::vector<std::pair<int, int>> pairs;
  const auto intern = [&](int x, int y) {
    const auto [it, added] = ids.emplace(std::make_pair(x, y), int(pairs.size()));
    if (added) {
      check_dfa_size(pairs.size() + 1);
      pairs.emplace_back(x, y);
      raw.accepting.push_back(a.accepting[size_t(x)] && b.accepting[size_t(y)]);
      raw.next.resize(raw.next.size() + size_t(k), -1);
    }
    return it->second;
  };
  raw.start = intern(a.start, b.start);
  for (size_t i = 0; i < pairs.size(); ++i)
    for (int c = 0; c < k; ++c) {
      const auto [x, y] = pairs[i];
      const int tx = a.next[size_t(x) * size_t(a.classes) + size_t(class_pair[size_t(c)].first)];
      const int ty = b.next[size_t(y) * size_t(b.classes) + size_t(class_pair[size_t(c)].second)];
      if (tx >= 0 && ty >= 0) {
        const int id = intern(tx, ty);
        raw.next[i * size_t(k) + size_t(c)] = id;
      }
    }
  return finish(raw, what);
}

Fragment embed(Nfa& nfa, const ByteDfa& dfa) {
  std::vector<int> state(size_t(dfa.states()));
  for (auto& s : state) s = nfa.add_state();
  const int out = nfa.add_state();
  for (int s = 0; s < dfa.states(); ++s) {
    std::map<int, ByteSet> by_target;
    for (int byte = 0; byte < 256; ++byte) {
      const int t = dfa.step(s, uint8_t(byte));
      if (t >= 0) by_target[t].set(size_t(byte));
    }
    for (const auto& [t, set] : by_target) nfa.add_bytes(state[size_t(s)], set, state[size_t(t)]);
    if (dfa.accepting[size_t(s)]) nfa.add_epsilon(state[size_t(s)], out);
  }
  return {state[size_t(dfa.start)], out};
}

}  // namespace mk::constraint
