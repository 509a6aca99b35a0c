#include "runtime/regex_syntax.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <string>

namespace mk::constraint {

void CodePointSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  bool placed = false;
  for (const auto& r : ranges_) {
    if (r.second + 1 < lo) {
      out.push_back(r);
    } else if (hi + 1 < r.first) {
      if (!placed) out.emplace_back(lo, hi), placed = true;
      out.push_back(r);
    } else {
      lo = std::min(lo, r.first), hi = std::max(hi, r.second);
    }
  }
  if (!placed) out.emplace_back(lo, hi);
  std::sort(out.begin(), out.end());
  ranges_.swap(out);
}

void CodePointSet::add(const CodePointSet& other) {
  for (const auto& [lo, hi] : other.ranges_) add(lo, hi);
}

CodePointSet CodePointSet::complement() const {
  CodePointSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) out.add(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.add(next, kMaxCodePoint);
  return out;
}

CodePointSet CodePointSet::minus(const CodePointSet& other) const {
  CodePointSet out;
  const CodePointSet keep = other.complement();
  for (const auto& [lo, hi] : ranges_)
    for (const auto& [klo, khi] : keep.ranges_) out.add(std::max(lo, klo), std::min(hi, khi));
  return out;
}

bool CodePointSet::contains(uint32_t cp) const {
  for (const auto& [lo, hi] : ranges_)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

namespace {

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void utf8_encode(uint32_t cp, uint8_t* out) {
  switch (utf8_length(cp)) {
    case 1: out[0] = uint8_t(cp); break;
    case 2: out[0] = uint8_t(0xC0 | (cp >> 6)), out[1] = uint8_t(0x80 | (cp & 0x3F)); break;
    case 3: out[0] = uint8_t(0xE0 | (cp >> 12)), out[1] = uint8_t(0x80 | ((cp >> 6) & 0x3F)), out[2] = uint8_t(0x80 | (cp & 0x3F)); break;
    default:
      out[0] = uint8_t(0xF0 | (cp >> 18)), out[1] = uint8_t(0x80 | ((cp >> 12) & 0x3F)), out[2] = uint8_t(0x80 | ((cp >> 6) & 0x3F)),
      out[3] = uint8_t(0x80 | (cp & 0x3F));
  }
}

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// The byte-range sequences whose union is the UTF-8 encoding of [lo, hi] (the split of Rust's
// regex-syntax Utf8Sequences): split where the encoded length changes, then where a continuation
// byte's full range starts or ends, until each piece is one range per byte position.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates are not code points
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
    return;
  }
  for (const uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu})
    if (lo <= edge && hi > edge) {
      utf8_sequences(lo, edge, out);
      utf8_sequences(edge + 1, hi, out);
      return;
    }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  utf8_encode(lo, a);
  utf8_encode(hi, b);
  ByteRanges seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out.push_back(seq);
}

}  // namespace

Fragment utf8_fragment(Nfa& nfa, const CodePointSet& set) {
  std::vector<ByteRanges> seqs;
  for (const auto& [lo, hi] : set.ranges()) utf8_sequences(lo, hi, seqs);
  const Fragment f{nfa.add_state(), nfa.add_state()};
  // Sequences of one length that share their leading ranges share states (a small trie by ranges).
  std::map<std::pair<int, std::pair<uint8_t, uint8_t>>, int> trie;
  for (const ByteRanges& seq : seqs) {
    int at = f.in;
    for (size_t i = 0; i < seq.size(); ++i) {
      ByteSet b;
      for (int x = seq[i].first; x <= seq[i].second; ++x) b.set(size_t(x));
      if (i + 1 == seq.size()) {
        nfa.add_bytes(at, b, f.out);
        break;
      }
      const auto key = std::make_pair(at, seq[i]);
      auto it = trie.find(key);
      if (it == trie.end()) {
        const int next = nfa.add_state();
        nfa.add_bytes(at, b, next);
        it = trie.emplace(key, next).first;
      }
      at = it->second;
    }
  }
  return f;
}

Fragment json_string_char_fragment(Nfa& nfa, const CodePointSet& set) {
  CodePointSet escaped(0, 0x1F);
  escaped.add('"', '"');
  escaped.add('\\', '\\');
  std::vector<Fragment> options;
  const CodePointSet plain = set.minus(escaped);
  if (!plain.empty()) options.push_back(utf8_fragment(nfa, plain));
  for (const auto& [lo, hi] : set.ranges())
    for (uint32_t cp = lo; cp <= std::min(hi, 0x5Cu); ++cp) {
      if (!escaped.contains(cp)) continue;
      switch (cp) {
        case '"': options.push_back(nfa.literal("\\\"")); break;
        case '\\': options.push_back(nfa.literal("\\\\")); break;
        case '\n': options.push_back(nfa.literal("\\n")); break;
        case '\t': options.push_back(nfa.literal("\\t")); break;
        case '\r': options.push_back(nfa.literal("\\r")); break;
        case '\b': options.push_back(nfa.literal("\\b")); break;
        case '\f': options.push_back(nfa.literal("\\f")); break;
        default: options.push_back(nfa.literal(fmt::format("\\u{:04x}", cp)));
      }
    }
  if (options.empty()) return {-1, -1};
  return nfa.alternatives(options);
}

CodePointSet ecmascript_space() {
  CodePointSet s(0x09, 0x0D);
  for (const uint32_t cp : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) s.add(cp, cp);
  s.add(0x2000, 0x200A);
  return s;
}

namespace {

struct Node {
  enum Kind { Set, Sequence, Alternatives, Repeat } kind = Sequence;
  CodePointSet set;
  std::vector<std::unique_ptr<Node>> children;
  int min = 0, max = 0;  // Repeat; max < 0: unbounded
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view what) : s_(text), what_(what) {}

  std::unique_ptr<Node> parse() {
    if (at('^')) ++i_;
    auto n = alternatives();
    if (i_ < s_.size()) error("unexpected ')'");
    return n;
  }

 private:
  [[noreturn]] void error(std::string_view message) const {
    constraint_fail("{}: {} at offset {} of /{}/ (docs/structured_output.md lists the supported syntax)", what_, message, i_, s_);
  }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }

  // The code point at the position (UTF-8), advancing.
  uint32_t next_code_point() {
    const uint8_t b = uint8_t(s_[i_]);
    const int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (n == 0 || i_ + size_t(n) > s_.size()) error("invalid UTF-8");
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s_[i_ + size_t(k)]) & 0x3Fu);
    i_ += size_t(n);
    return cp;
  }

  std::unique_ptr<Node> alternatives() {
    auto alt = std::make_unique<Node>();
    alt->kind = Node::Alternatives;
    alt->children.push_back(sequence());
    while (at('|')) {
      ++i_;
      alt->children.push_back(sequence());
    }
    return alt;
  }

  std::unique_ptr<Node> sequence() {
    auto seq = std::make_unique<Node>();
    seq->kind = Node::Sequence;
    while (i_ < s_.size() && !at('|') && !at(')')) {
      if (at('$')) {
        ++i_;
        if (i_ != s_.size()) error("'$' before the end (only a final '$' is supported)");
        break;
      }
      auto atom_node = atom();
      seq->children.push_back(quantified(std::move(atom_node)));
    }
    return seq;
  }

  int number() {
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') error("a number expected in {n,m}");
    long v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_++] - '0');
      if (v > kMaxRepeat) error(fmt::format("a repetition count above {}", kMaxRepeat));
    }
    return int(v);
  }

  std::unique_ptr<Node> quantified(std::unique_ptr<Node> a) {
    for (;;) {
      int min, max;
      if (at('*')) min = 0, max = -1, ++i_;
      else if (at('+')) min = 1, max = -1, ++i_;
      else if (at('?')) min = 0, max = 1, ++i_;
      else if (at('{') && i_ + 1 < s_.size() && s_[i_ + 1] >= '0' && s_[i_ + 1] <= '9') {
        ++i_;
        min = number();
        max = min;
        if (at(',')) {
          ++i_;
          max = at('}') ? -1 : number();
        }
        if (!at('}')) error("'}' expected");
        ++i_;
        if (max >= 0 && max < min) error("{n,m} with m < n");
      } else {
        return a;
      }
      if (at('?')) ++i_;  // lazy: the same strings
      if (at('*') || at('+') || (at('{') && i_ + 1 < s_.size() && s_[i_ + 1] >= '0' && s_[i_ + 1] <= '9')) error("a quantifier after a quantifier");
      auto r = std::make_unique<Node>();
      r->kind = Node::Repeat;
      r->min = min, r->max = max;
      r->children.push_back(std::move(a));
      a = std::move(r);
    }
  }

  static std::unique_ptr<Node> set_node(CodePointSet set) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Set;
    n->set = std::move(set);
    return n;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (i_ >= s_.size() || !std::isxdigit(uint8_t(s_[i_]))) error("a hexadecimal digit expected");
      const char c = s_[i_++];
      v = v * 16 + uint32_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After a backslash: a class escape (\d ...) into `set`, or a single code point returned.
  bool escape(CodePointSet& set, uint32_t& cp, bool in_class) {
    if (i_ >= s_.size()) error("a trailing backslash");
    const char c = s_[i_++];
    switch (c) {
      case 'd': set = CodePointSet('0', '9'); return true;
      case 'D': set = CodePointSet('0', '9').complement(); return true;
      case 'w': set = word(); return true;
      case 'W': set = word().complement(); return true;
      case 's': set = ecmascript_space(); return true;
      case 'S': set = ecmascript_space().complement(); return true;
      case 'n': cp = '\n'; return false;
      case 't': cp = '\t'; return false;
      case 'r': cp = '\r'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = hex(2); return false;
      case 'u':
        if (at('{')) {
          ++i_;
          cp = 0;
          int digits = 0;
          while (!at('}')) {
            cp = cp * 16 + hex(1);
            if (++digits > 6 || cp > kMaxCodePoint) error("a code point above U+10FFFF");
          }
          ++i_;
        } else {
          cp = hex(4);
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) error("a surrogate code point");
        return false;
      case 'b':
        if (in_class) {
          cp = '\b';
          return false;
        }
        error("\\b (a word boundary) is not supported");
      case 'B': error("\\B (a non-boundary) is not supported");
      case 'p':
      case 'P': error("Unicode property classes (\\p{...}) are not supported");
      case 'c': error("control escapes (\\cX) are not supported");
      case 'k': error("named back-references are not supported");
      default:
        if (c >= '1' && c <= '9') error("back-references are not supported");
        if (std::isalnum(uint8_t(c))) error(fmt::format("the escape \\{} is not supported", c));
        --i_;
        cp = next_code_point();  // escaped punctuation stands for itself
        return false;
    }
  }

  static CodePointSet word() {
    CodePointSet w('a', 'z');
    w.add('A', 'Z');
    w.add('0', '9');
    w.add('_', '_');
    return w;
  }

  std::unique_ptr<Node> atom() {
    const char c = s_[i_];
    if (c == '(') {
      ++i_;
      if (at('?')) {
        ++i_;
        if (at(':')) {
          ++i_;
        } else if (at('<') && i_ + 1 < s_.size() && s_[i_ + 1] != '=' && s_[i_ + 1] != '!') {
          while (i_ < s_.size() && !at('>')) ++i_;  // a named group: the name is not needed
          if (!at('>')) error("an unterminated group name");
          ++i_;
        } else {
          error("lookaround and group flags are not supported");
        }
      }
      auto inner = alternatives();
      if (!at(')')) error("')' expected");
      ++i_;
      return inner;
    }
    if (c == '[') return set_node(char_class());
    if (c == '.') {
      ++i_;
      CodePointSet lines('\n', '\n');
      lines.add('\r', '\r');
      lines.add(0x2028, 0x2029);
      return set_node(lines.complement());
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') error("a quantifier with nothing to repeat");
    if (c == '^') error("'^' after the start (only a leading '^' is supported)");
    if (c == '\\') {
      ++i_;
      CodePointSet set;
      uint32_t cp = 0;
      if (escape(set, cp, false)) return set_node(set);
      return set_node(CodePointSet(cp, cp));
    }
    const uint32_t cp = next_code_point();
    return set_node(CodePointSet(cp, cp));
  }

  CodePointSet char_class() {
    ++i_;  // '['
    bool negate = false;
    if (at('^')) negate = true, ++i_;
    CodePointSet set;
    for (;;) {
      if (i_ >= s_.size()) error("an unterminated character class");
      if (at(']')) break;
      CodePointSet item;
      uint32_t lo = 0;
      bool is_set = false;
      if (at('\\')) {
        ++i_;
        is_set = escape(item, lo, true);
      } else {
        lo = next_code_point();
      }
      if (!is_set && at('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        CodePointSet dummy;
        if (at('\\')) {
          ++i_;
          if (escape(dummy, hi, true)) error("a class escape as a range's end");
        } else {
          hi = next_code_point();
        }
        if (hi < lo) error("a range out of order");
        set.add(lo, hi);
      } else if (is_set) {
        set.add(item);
      } else {
        set.add(lo, lo);
      }
    }
    ++i_;  // ']'
    return negate ? set.complement() : set;
  }

  std::string_view s_;
  std::string_view what_;
  size_t i_ = 0;
};

Fragment build(Nfa& nfa, const Node& n, RegexTarget target, std::string_view what) {
  switch (n.kind) {
    case Node::Set: {
      if (target == RegexTarget::Utf8) {
        if (n.set.empty()) return {-1, -1};
        return utf8_fragment(nfa, n.set);
      }
      return json_string_char_fragment(nfa, n.set);
    }
    case Node::Sequence: {
      std::vector<Fragment> parts;
      for (const auto& c : n.children) {
        const Fragment f = build(nfa, *c, target, what);
        if (f.in < 0) return f;  // a part that matches nothing: so does the sequence
        parts.push_back(f);
      }
      return nfa.sequence(parts);
    }
    case Node::Alternatives: {
      std::vector<Fragment> options;
      for (const auto& c : n.children) {
        const Fragment f = build(nfa, *c, target, what);
        if (f.in >= 0) options.push_back(f);
      }
      if (options.empty()) return {-1, -1};
      return nfa.alternatives(options);
    }
    case Node::Repeat: {
      bool nothing = false;
      const Fragment r = nfa.repeat(
          [&] {
            const Fragment f = build(nfa, *n.children[0], target, what);
            if (f.in < 0) nothing = true;
            return f.in < 0 ? nfa.empty() : f;
          },
          n.min, n.max);
      if (nothing) return n.min == 0 ? nfa.empty() : Fragment{-1, -1};
      return r;
    }
  }
  return {-1, -1};
}

}  // namespace

Fragment compile_regex(Nfa& nfa, std::string_view regex, RegexTarget target, std::string_view what) {
  const auto tree = Parser(regex, what).parse();
  const Fragment f = build(nfa, *tree, target, what);
  if (f.in < 0) constraint_fail("{}: /{}/ matches no string", what, regex);
  return f;
}

}  // namespace mk::constraint
