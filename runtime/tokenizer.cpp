// Byte-level BPE tokenizer: see tokenizer.h for the pipeline and what is supported.
#include "runtime/tokenizer.h"

#include "runtime/error.h"
#include "runtime/json_file.h"
#include "runtime/limits.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <queue>
#include <unordered_map>

namespace mk {

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------------
// UTF-8

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// WHATWG UTF-8 decoder state machine over bytes[i..]: returns the length of the valid sequence starting
// at i (1..4), or 0 if the bytes starting at i are invalid; in that case *bad_len is the length of the
// maximal invalid subpart (the bytes replaced by one U+FFFD). *truncated tells whether the sequence is a
// valid prefix cut off by the end of the input.
size_t utf8_sequence(std::string_view s, size_t i, size_t* bad_len, bool* truncated) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  *truncated = false;
  *bad_len = 1;
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lower = 0x80, upper = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lower = 0xA0;
    if (b0 == 0xED) upper = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lower = 0x90;
    if (b0 == 0xF4) upper = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) {
      *truncated = true;
      *bad_len = k;
      return 0;
    }
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (b < lower || b > upper) {
      *bad_len = k;
      return 0;
    }
    lower = 0x80;
    upper = 0xBF;
  }
  return need + 1;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t bad;
    bool truncated;
    const size_t n = utf8_sequence(s, i, &bad, &truncated);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Next code point of valid UTF-8 at s[i]; advances i.
char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t c = b0 & (0x7F >> n);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += n;
  return c;
}

// Previous code point of valid UTF-8 ending at s[i - 1]; moves i back to its start.
char32_t prev_code_point(std::string_view s, size_t& i) {
  size_t start = i - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  size_t j = start;
  const char32_t c = next_code_point(s, j);
  i = start;
  return c;
}

bool is_white_space(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE); }

// Rust's char::is_alphanumeric() (Alphabetic or Numeric) or '_': a "word" character for single_word.
bool is_word_char(char32_t c) {
  if (c == '_') return true;
  if (u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC)) return true;
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

// ---------------------------------------------------------------------------------------------------
// GPT-2 byte <-> unicode mapping used by the ByteLevel pre-tokenizer and decoder.

struct ByteLevelTables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int, 0x144> char_to_byte{};  // -1 where the char is not in the alphabet
  ByteLevelTables() {
    char_to_byte.fill(-1);
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      byte_to_char[b] = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      char_to_byte[byte_to_char[b]] = b;
    }
  }
};

const ByteLevelTables& byte_level() {
  static const ByteLevelTables tables;
  return tables;
}

// Raw bytes of a byte-level vocabulary string ("Ġthe" -> " the"); nullopt if a character is outside
// the 256-character alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  size_t i = 0;
  if (!is_valid_utf8(key)) return std::nullopt;
  while (i < key.size()) {
    const char32_t c = next_code_point(key, i);
    if (c >= byte_level().char_to_byte.size() || byte_level().char_to_byte[c] < 0) return std::nullopt;
    out += static_cast<char>(byte_level().char_to_byte[c]);
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (const char ch : bytes) append_utf8(out, byte_level().byte_to_char[static_cast<uint8_t>(ch)]);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Heterogeneous string-keyed map.

// The byte a SentencePiece byte-fallback token "<0xXX>" decodes to, if `key` is one (the ByteFallback
// decoder reads either case; encoding uses the upper-case form).
std::optional<uint8_t> fallback_byte(std::string_view key) {
  if (key.size() != 6 || key.substr(0, 3) != "<0x" || key[5] != '>') return std::nullopt;
  const auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  const int hi = digit(key[3]), lo = digit(key[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// ---------------------------------------------------------------------------------------------------
// JSON helpers: every error names the file and the field.

std::string describe(const json& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

const json& member(const json& obj, const char* key, std::string_view source, std::string_view where) {
  if (!obj.is_object()) fail("{}: {} is not a JSON object", source, where);
  const auto it = obj.find(key);
  if (it == obj.end()) fail("{}: missing \"{}.{}\"", source, where, key);
  return *it;
}

bool get_bool(const json& obj, const char* key, bool fallback, std::string_view source, std::string_view where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("{}: \"{}.{}\" must be true or false, found {}", source, where, key, describe(*it));
  return it->get<bool>();
}

// "bos_token": "<s>" | {"content": "<s>", ...} | null
std::optional<std::string> special_token_string(const json& config, const char* key, std::string_view source) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  fail("{}: \"{}\" must be a string, {{\"content\": ...}} or null, found {}", source, key, describe(*it));
}

// A token id read from `value`: an integer in [0, limits::kMaxVocabSize), else nullopt. The bound is
// what keeps the id tables (one entry per id up to the largest) small.
std::optional<int32_t> token_id_of(const json& value) {
  if (value.is_number_unsigned() && value.get<uint64_t>() < uint64_t(limits::kMaxVocabSize))
    return static_cast<int32_t>(value.get<uint64_t>());
  if (value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < limits::kMaxVocabSize)
    return static_cast<int32_t>(value.get<int64_t>());
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------
// PCRE2 regex (UTF + UCP, JIT when available).

// tokenizer.json patterns are written for Oniguruma, where \s means the Unicode White_Space property.
// PCRE2's \s in UCP mode also matches U+180E, so map \s / \S to the property explicitly.
std::string oniguruma_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[i + 1];
      if (n == 's') {
        out += "\\p{White_Space}";
      } else if (n == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += pattern[i];
        out += n;
      }
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

std::string escape_regex_literal(std::string_view s) {
  std::string out = "\\Q";
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.substr(i, 2) == "\\E") {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += s[i];
    }
  }
  return out + "\\E";
}

class Regex {
 public:
  Regex(const std::string& pattern, std::string_view source, std::string_view where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                          &offset, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      fail("{}: {}: regex /{}/ does not compile (PCRE2, at offset {}): {}", source, where, pattern, offset,
           reinterpret_cast<const char*>(message));
    }
    uint32_t jit = 0;
    pcre2_config(PCRE2_CONFIG_JIT, &jit);
    if (jit != 0) jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code_); }

  // Calls on_match(start, end) for each non-overlapping match in s (valid UTF-8).
  template <typename F>
  void for_each_match(std::string_view s, F&& on_match) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    if (md == nullptr) fail("tokenizer: out of memory (PCRE2 match data)");
    struct Free {
      pcre2_match_data* md;
      ~Free() { pcre2_match_data_free(md); }
    } guard{md};
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t offset = 0;
    while (offset <= s.size()) {
      uint32_t options = PCRE2_NO_UTF_CHECK;
      int rc = pcre2_match(code_, subject, s.size(), offset, options, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // Very long runs can exhaust the 32 KiB JIT stack: fall back to the interpreter for this match.
        rc = pcre2_match(code_, subject, s.size(), offset, options | PCRE2_NO_JIT, md, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        fail("tokenizer: regex match failed: {}", reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t start = ov[0], end = ov[1];
      if (end == start) {
        // Empty match: move on by one character.
        if (start >= s.size()) break;
        size_t next = start;
        next_code_point(s, next);
        offset = next;
        continue;
      }
      on_match(start, end);
      offset = end;
    }
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---------------------------------------------------------------------------------------------------
// Pipeline pieces.

enum class NormForm { None, NFC, NFD, NFKC, NFKD };

// One normalizer of a Sequence: a Unicode normal form, or "Replace" of a literal string.
struct NormStep {
  NormForm form = NormForm::None;  // None: a Replace step
  std::string from, to;
};

// How vocabulary strings relate to bytes.
//   ByteLevel:     GPT-2's byte-to-character map (Llama 3, Qwen); every byte has a token.
//   SentencePiece: tokens are text with U+2581 for a space (the decoder's "Replace"), and "<0xXX>" tokens
//                  stand for single bytes ("byte_fallback"); Gemma.
enum class Alphabet { ByteLevel, SentencePiece };
constexpr std::string_view kSentencePieceSpace = "\u2581";  // what the SentencePiece alphabet writes for " "

struct PreStep {
  enum Kind { Split, ByteLevel } kind;
  std::shared_ptr<Regex> regex;   // Split pattern, or ByteLevel's GPT-2 regex when use_regex
  enum Behavior { Isolated, Removed, MergedWithPrevious } behavior = Isolated;  // Split
  bool add_prefix_space = false;  // ByteLevel
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, normalized, single_word;
};

// Trie over bytes for leftmost-longest matching of added tokens.
class TokenTrie {
 public:
  void insert(std::string_view s, int32_t token_index) {
    if (s.empty()) return;  // e.g. content that normalises to nothing: it can never match
    int32_t node = 0;
    for (const char ch : s) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(ch);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        terminal_.push_back(-1);
        it = edges_.emplace(key, static_cast<int32_t>(terminal_.size() - 1)).first;
      }
      node = it->second;
    }
    first_byte_[static_cast<uint8_t>(s[0])] = true;
    terminal_[node] = token_index;
  }
  bool empty() const { return terminal_.size() <= 1; }
  // Longest accepted token starting at s[i]: (token_index, length) or (-1, 0).
  template <typename Accept>
  std::pair<int32_t, size_t> longest(std::string_view s, size_t i, Accept&& accept) const {
    std::pair<int32_t, size_t> best{-1, 0};
    if (!first_byte_[static_cast<uint8_t>(s[i])]) return best;
    int32_t node = 0;
    for (size_t j = i; j < s.size(); ++j) {
      const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(s[j]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0 && accept(terminal_[node])) best = {terminal_[node], j + 1 - i};
    }
    return best;
  }

 private:
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_{-1};
  std::array<bool, 256> first_byte_{};
};

struct MergeInfo {
  uint32_t rank;
  int32_t merged;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::string source;

  // Model.
  Alphabet alphabet = Alphabet::ByteLevel;
  StringMap bytes_to_id;                      // model vocabulary keyed by raw bytes
  std::array<int32_t, 256> byte_id{};         // ByteLevel: single-byte tokens
  StringMap piece_to_id;                      // SentencePiece: the vocabulary as written ("\u2581the")
  std::array<int32_t, 256> fallback_id{};     // SentencePiece: "<0xXX>" tokens, -1 where missing
  bool byte_fallback = false;
  int32_t unk_id = -1;                        // SentencePiece: what a character without a token becomes
  bool fuse_unk = false;                      // consecutive unknown characters become one unk
  std::unordered_map<uint64_t, MergeInfo> merges;  // (left << 32 | right) -> rank, merged token
  bool ignore_merges = false;

  // Id tables over [0, vocab_size).
  std::vector<std::string> token_bytes;
  std::vector<uint8_t> added_flag, special_flag;

  // Added tokens.
  std::vector<AddedToken> added;
  StringMap added_by_content;
  TokenTrie raw_trie, normalized_trie;  // "normalized": false / true tokens

  std::vector<NormStep> norm_steps;
  std::vector<PreStep> pre_steps;

  // Post-processor (add_special_tokens = true).
  std::vector<int32_t> prefix_ids, suffix_ids;
  std::string post_processor_error;

  int32_t bos = -1;
  std::vector<int32_t> eos;

  // ---- encode ----
  std::string normalize(std::string_view s) const {
    std::string out(s);
    for (const NormStep& step : norm_steps) out = step.form == NormForm::None ? replace_all(out, step.from, step.to)
                                                                             : unicode_normalize(out, step.form);
    return out;
  }

  static std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size());
    for (size_t pos = 0;;) {
      const size_t hit = s.find(from, pos);
      if (hit == std::string_view::npos) {
        out.append(s.substr(pos));
        return out;
      }
      out.append(s.substr(pos, hit - pos)).append(to);
      pos = hit + from.size();
    }
  }

  static std::string unicode_normalize(const std::string& s, NormForm form) {
    if (s.empty()) return s;
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = nullptr;
    switch (form) {
      case NormForm::NFC: n = icu::Normalizer2::getNFCInstance(status); break;
      case NormForm::NFD: n = icu::Normalizer2::getNFDInstance(status); break;
      case NormForm::NFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
      case NormForm::NFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
      case NormForm::None: return s;
    }
    if (U_FAILURE(status) || n == nullptr) fail("tokenizer: ICU normalizer unavailable: {}", u_errorName(status));
    const icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
    if (n->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return s;
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out);
    n->normalizeUTF8(0, piece, sink, nullptr, status);
    if (U_FAILURE(status)) fail("tokenizer: ICU normalization failed: {}", u_errorName(status));
    return out;
  }

  // Splits `s` at the added tokens of `trie`; calls on_text(string_view) for the text between them and
  // on_token(id) for each token. special_ok(start, end): whether a special token may be read from
  // s[start, end) (added tokens that are not special are read anywhere, as Hugging Face does).
  template <typename SpecialOk, typename OnText, typename OnToken>
  void split_added(std::string_view s, const TokenTrie& trie, SpecialOk&& special_ok, OnText&& on_text,
                   OnToken&& on_token) const {
    if (trie.empty()) {
      if (!s.empty()) on_text(s);
      return;
    }
    struct Match {
      size_t start, end;
      int32_t token;
    };
    std::vector<Match> matches;
    for (size_t i = 0; i < s.size();) {
      const bool specials_here = special_ok(i, i + 1);
      const auto accept = [&](int32_t t) { return specials_here || !added[t].special; };
      const auto [t, len] = trie.longest(s, i, accept);
      if (t < 0 || (added[t].special && !special_ok(i, i + len))) {  // none, or a special running into text
        ++i;
        continue;
      }
      const AddedToken& tok = added[t];
      if (tok.single_word) {
        size_t p = i, q = i + len;
        const bool start_ok = i == 0 || !is_word_char(prev_code_point(s, p));
        const bool end_ok = i + len == s.size() || !is_word_char(next_code_point(s, q));
        if (!start_ok || !end_ok) {
          ++i;
          continue;
        }
      }
      matches.push_back({i, i + len, t});
      i += len;
    }
    // lstrip / rstrip: the token absorbs the White_Space next to it.
    for (size_t k = 0; k < matches.size(); ++k) {
      Match& m = matches[k];
      const size_t lo = k == 0 ? 0 : matches[k - 1].end;
      const size_t hi = k + 1 == matches.size() ? s.size() : matches[k + 1].start;
      if (added[m.token].lstrip) {
        while (m.start > lo) {
          size_t p = m.start;
          if (!is_white_space(prev_code_point(s, p)) || p < lo) break;
          m.start = p;
        }
      }
      if (added[m.token].rstrip) {
        while (m.end < hi) {
          size_t q = m.end;
          if (!is_white_space(next_code_point(s, q)) || q > hi) break;
          m.end = q;
        }
      }
    }
    size_t pos = 0;
    for (const Match& m : matches) {
      if (m.start > pos) on_text(s.substr(pos, m.start - pos));
      on_token(added[m.token].id);
      pos = m.end;
    }
    if (pos < s.size()) on_text(s.substr(pos));
  }

  void pre_tokenize(std::string_view s, std::vector<std::string>& pieces) const {
    pieces.clear();
    pieces.emplace_back(s);
    std::vector<std::string> next;
    for (const PreStep& step : pre_steps) {
      next.clear();
      for (std::string& piece : pieces) {
        if (step.kind == PreStep::ByteLevel) {
          if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
          if (!step.regex) {
            next.push_back(std::move(piece));
            continue;
          }
        }
        // Split "Isolated": matches and the text between them are pieces; "Removed": only the text between;
        // "MergedWithPrevious": each match ends the piece before it.
        const PreStep::Behavior behavior = step.kind == PreStep::ByteLevel ? PreStep::Isolated : step.behavior;
        size_t prev = 0;
        step.regex->for_each_match(piece, [&](size_t start, size_t end) {
          if (behavior == PreStep::MergedWithPrevious) {
            next.emplace_back(piece, prev, end - prev);
          } else {
            if (start > prev) next.emplace_back(piece, prev, start - prev);
            if (behavior == PreStep::Isolated) next.emplace_back(piece, start, end - start);
          }
          prev = end;
        });
        if (prev < piece.size()) next.emplace_back(piece, prev, piece.size() - prev);
      }
      std::swap(pieces, next);
    }
  }

  // The symbols BPE starts from. ByteLevel: one per byte. SentencePiece: one per character that is a
  // token, else the character's "<0xXX>" byte tokens (byte_fallback), else unk (runs fused if fuse_unk);
  // a character with none of these is dropped, as in Hugging Face tokenizers.
  void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
    ids.clear();
    if (alphabet == Alphabet::ByteLevel) {
      for (const char c : piece) ids.push_back(byte_id[static_cast<uint8_t>(c)]);
      return;
    }
    bool last_unk = false;
    for (size_t i = 0; i < piece.size();) {
      const size_t start = i;
      next_code_point(piece, i);
      const std::string_view ch = piece.substr(start, i - start);
      if (const auto it = piece_to_id.find(ch); it != piece_to_id.end()) {
        ids.push_back(it->second);
        last_unk = false;
        continue;
      }
      if (byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char c) { return fallback_id[static_cast<uint8_t>(c)] >= 0; })) {
        for (const char c : ch) ids.push_back(fallback_id[static_cast<uint8_t>(c)]);
        last_unk = false;
        continue;
      }
      if (unk_id < 0) continue;
      if (!(fuse_unk && last_unk)) ids.push_back(unk_id);
      last_unk = true;
    }
  }

  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (alphabet == Alphabet::ByteLevel && piece.size() == 1) {
      out.push_back(byte_id[static_cast<uint8_t>(piece[0])]);
      return;
    }
    if (ignore_merges) {
      const StringMap& whole = alphabet == Alphabet::ByteLevel ? bytes_to_id : piece_to_id;
      const auto it = whole.find(piece);
      if (it != whole.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::vector<int32_t> ids;
    initial_symbols(piece, ids);
    if (ids.size() <= 1) {
      out.insert(out.end(), ids.begin(), ids.end());
      return;
    }
    struct Sym {
      int32_t id, prev, next;
    };
    struct Cand {
      uint32_t rank;
      int32_t pos, left, right;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    if (ids.size() > size_t(INT32_MAX)) fail("{}: a piece of {} bytes is too long to encode", source, piece.size());
    const auto n = static_cast<int32_t>(ids.size());
    std::vector<Sym> syms(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) syms[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
    std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
    const auto consider = [&](int32_t pos) {
      const Sym& a = syms[pos];
      if (a.next < 0) return;
      const int32_t right = syms[a.next].id;
      const auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a.id)) << 32) | static_cast<uint32_t>(right));
      if (it != merges.end()) heap.push({it->second.rank, pos, a.id, right});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      Sym& a = syms[c.pos];
      if (a.id != c.left || a.next < 0 || syms[a.next].id != c.right) continue;  // stale
      const int32_t b = a.next;
      a.id = merges.at((static_cast<uint64_t>(static_cast<uint32_t>(c.left)) << 32) | static_cast<uint32_t>(c.right)).merged;
      a.next = syms[b].next;
      if (a.next >= 0) syms[a.next].prev = c.pos;
      syms[b].id = -1;
      if (a.prev >= 0) consider(a.prev);
      consider(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  }

  // plain: byte ranges of `input` where no special token is read (a chat message's own text); empty for
  // none. With ranges, `input` must be valid UTF-8 (the ranges would not survive a repair).
  std::vector<int32_t> encode(std::string_view input, bool parse_special, bool add_special_tokens,
                              const std::vector<std::pair<size_t, size_t>>& plain = {}) const {
    if (add_special_tokens && !post_processor_error.empty()) fail("{}: {}", source, post_processor_error);
    std::string repaired;
    std::string_view text = input;
    if (!is_valid_utf8(input)) {
      if (!plain.empty()) fail("{}: a prompt with message ranges must be valid UTF-8", source);
      repaired = sanitize_utf8(input);
      text = repaired;
    }
    const auto outside_plain = [&](size_t start, size_t end) {
      if (!parse_special) return false;
      for (const auto& [b, e] : plain)
        if (start < e && b < end) return false;
      return true;
    };
    std::vector<int32_t> out;
    if (add_special_tokens) out = prefix_ids;
    std::vector<std::string> pieces;
    const auto on_token = [&](int32_t id) { out.push_back(id); };
    split_added(text, raw_trie, outside_plain, [&](std::string_view section) {
      const std::string normalized = normalize(section);
      // Normalizing moves positions: a section that holds message text reads no special token at all.
      const size_t at = size_t(section.data() - text.data());
      const bool specials = outside_plain(at, at + section.size());
      split_added(normalized, normalized_trie, [specials](size_t, size_t) { return specials; }, [&](std::string_view sub) {
        pre_tokenize(sub, pieces);
        for (const std::string& p : pieces) bpe(p, out);
      }, on_token);
    }, on_token);
    if (add_special_tokens) out.insert(out.end(), suffix_ids.begin(), suffix_ids.end());
    return out;
  }

  bool has_token(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < token_bytes.size(); }
};

// ---------------------------------------------------------------------------------------------------
// Loading.

namespace {

// The pattern of a Replace / Split step: {"String": ...} is supported everywhere, {"Regex": ...} only where
// `regex_ok`; returns the string and whether it is a regex.
std::pair<std::string, bool> string_or_regex(const json& pattern, bool regex_ok, std::string_view source,
                                             std::string_view where) {
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string())
    return {pattern["String"].get<std::string>(), false};
  if (regex_ok && pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string())
    return {pattern["Regex"].get<std::string>(), true};
  fail("{}: {}.pattern must be {} found {}", source, where,
       regex_ok ? "{\"Regex\": ...} or {\"String\": ...}," : "{\"String\": ...} (a regex is not supported here),",
       describe(pattern));
}

void parse_normalizer(const json& j, std::string_view source, std::vector<NormStep>& steps) {
  if (j.is_null()) return;
  const std::string type = member(j, "type", source, "normalizer").is_string() ? j["type"].get<std::string>() : "";
  if (type == "NFC") return steps.push_back({NormForm::NFC, {}, {}});
  if (type == "NFD") return steps.push_back({NormForm::NFD, {}, {}});
  if (type == "NFKC") return steps.push_back({NormForm::NFKC, {}, {}});
  if (type == "NFKD") return steps.push_back({NormForm::NFKD, {}, {}});
  if (type == "Replace") {
    NormStep step;
    step.from = string_or_regex(member(j, "pattern", source, "normalizer.Replace"), false, source, "normalizer.Replace").first;
    const json& content = member(j, "content", source, "normalizer.Replace");
    if (!content.is_string()) fail("{}: normalizer.Replace.content must be a string, found {}", source, describe(content));
    step.to = content.get<std::string>();
    if (step.from.empty()) fail("{}: normalizer.Replace.pattern is empty", source);
    return steps.push_back(std::move(step));
  }
  if (type == "Sequence") {
    for (const json& n : member(j, "normalizers", source, "normalizer")) parse_normalizer(n, source, steps);
    return;
  }
  fail("{}: unsupported normalizer type {} (supported: NFC, NFD, NFKC, NFKD, Replace of a string, Sequence of those, "
       "null)",
       source, describe(j["type"]));
}

// The decoder names the alphabet: "ByteLevel", or the SentencePiece chain Sequence [Replace U+2581 -> " ",
// ByteFallback, Fuse] (the order Hugging Face's converters write).
Alphabet parse_decoder(const json& decoder, std::string_view source) {
  const auto type_of = [](const json& d) { return d.is_object() ? d.value("type", json()) : json(); };
  if (type_of(decoder) == "ByteLevel") return Alphabet::ByteLevel;
  if (type_of(decoder) == "Sequence" && decoder.contains("decoders") && decoder["decoders"].is_array()) {
    const json& d = decoder["decoders"];
    if (d.size() == 3 && type_of(d[0]) == "Replace" && type_of(d[1]) == "ByteFallback" && type_of(d[2]) == "Fuse" &&
        d[0].value("pattern", json()) == json{{"String", kSentencePieceSpace}} && d[0].value("content", json()) == " ")
      return Alphabet::SentencePiece;
  }
  fail("{}: unsupported decoder {} (supported: \"ByteLevel\", or the Sequence [Replace \"\u2581\" -> \" \", "
       "ByteFallback, Fuse])",
       source, describe(decoder));
}

void parse_pre_tokenizer(const json& j, std::string_view source, std::vector<PreStep>& steps) {
  if (j.is_null()) return;
  const json& type_j = member(j, "type", source, "pre_tokenizer");
  const std::string type = type_j.is_string() ? type_j.get<std::string>() : "";
  if (type == "Sequence") {
    for (const json& p : member(j, "pretokenizers", source, "pre_tokenizer")) parse_pre_tokenizer(p, source, steps);
    return;
  }
  if (type == "ByteLevel") {
    PreStep step{PreStep::ByteLevel, nullptr};
    step.add_prefix_space = get_bool(j, "add_prefix_space", false, source, "pre_tokenizer.ByteLevel");
    if (get_bool(j, "use_regex", true, source, "pre_tokenizer.ByteLevel"))
      step.regex = std::make_shared<Regex>(oniguruma_to_pcre2(kGpt2Pattern), source, "ByteLevel regex");
    steps.push_back(std::move(step));
    return;
  }
  if (type == "Split") {
    const auto [text, is_regex] =
        string_or_regex(member(j, "pattern", source, "pre_tokenizer.Split"), true, source, "pre_tokenizer.Split");
    const std::string regex = is_regex ? oniguruma_to_pcre2(text) : escape_regex_literal(text);
    if (get_bool(j, "invert", false, source, "pre_tokenizer.Split"))
      fail("{}: unsupported pre_tokenizer.Split with \"invert\": true", source);
    const json& behavior = member(j, "behavior", source, "pre_tokenizer.Split");
    PreStep step{PreStep::Split, std::make_shared<Regex>(regex, source, "pre_tokenizer.Split.pattern")};
    if (behavior == "Isolated") {
      step.behavior = PreStep::Isolated;
    } else if (behavior == "Removed") {
      step.behavior = PreStep::Removed;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = PreStep::MergedWithPrevious;
    } else {
      fail("{}: unsupported pre_tokenizer.Split.behavior {} (supported: Isolated, Removed, MergedWithPrevious)", source,
           describe(behavior));
    }
    steps.push_back(std::move(step));
    return;
  }
  fail("{}: unsupported pre_tokenizer type {} (supported: ByteLevel, Split, Sequence)", source, describe(type_j));
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                               std::string_view generation_config_json, std::string_view source_name) {
  try {
    return from_json_unchecked(tokenizer_json, tokenizer_config_json, generation_config_json, source_name);
  } catch (const nlohmann::json::exception& e) {
    // A field of an unexpected JSON type somewhere not checked explicitly.
    fail("{}: unexpected content: {}", source_name, e.what());
  }
}

Tokenizer Tokenizer::from_json_unchecked(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                                         std::string_view generation_config_json, std::string_view source_name) {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  t.source = std::string(source_name);
  const std::string_view source = t.source;
  const json root = parse_model_json(tokenizer_json, source);
  if (!root.is_object()) fail("{}: top level is not a JSON object", source);

  // ---- model ----
  const json& model = member(root, "model", source, "(root)");
  if (!model.is_object()) fail("{}: \"model\" is not a JSON object", source);
  if (model.contains("type")) {
    if (model["type"] != "BPE")
      fail("{}: unsupported model type {} (only \"BPE\" is supported)", source, describe(model["type"]));
  } else if (!model.contains("merges")) {
    fail("{}: \"model\" has no \"type\" and no \"merges\": not a BPE model", source);
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    const json& dropout = model["dropout"];
    if (!dropout.is_number()) fail("{}: \"model.dropout\" must be a number or null, found {}", source, describe(dropout));
    if (dropout.get<double>() != 0.0) fail("{}: unsupported \"model.dropout\" {}", source, describe(dropout));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      fail("{}: unsupported \"model.{}\" {}", source, key, describe(model[key]));
  }
  t.ignore_merges = get_bool(model, "ignore_merges", false, source, "model");

  const json& vocab = member(model, "vocab", source, "model");
  if (!vocab.is_object()) fail("{}: \"model.vocab\" must be an object of token -> id", source);
  StringMap key_to_id;  // byte-level strings
  key_to_id.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [key, value] : vocab.items()) {
    const std::optional<int32_t> id = token_id_of(value);
    if (!id)
      fail("{}: \"model.vocab\" entry {} has id {}; ids must be integers in [0, {}) (docs/limits.md)", source,
           describe(json(key)), describe(value), limits::kMaxVocabSize);
    key_to_id.emplace(key, *id);
    max_id = std::max(max_id, *id);
  }

  // ---- added tokens ----
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const json& list = root["added_tokens"];
    if (!list.is_array()) fail("{}: \"added_tokens\" must be an array", source);
    for (size_t i = 0; i < list.size(); ++i) {
      const json& a = list[i];
      const std::string where = fmt::format("added_tokens[{}]", i);
      const json& id = member(a, "id", source, where);
      const json& content = member(a, "content", source, where);
      const std::optional<int32_t> token_id = token_id_of(id);
      if (!token_id)
        fail("{}: \"{}.id\" is {}; ids must be integers in [0, {}) (docs/limits.md)", source, where, describe(id),
             limits::kMaxVocabSize);
      if (!content.is_string() || content.get<std::string>().empty())
        fail("{}: \"{}.content\" must be a non-empty string", source, where);
      AddedToken tok;
      tok.id = *token_id;
      tok.content = content.get<std::string>();
      if (!is_valid_utf8(tok.content)) fail("{}: \"{}.content\" is not valid UTF-8", source, where);
      tok.special = get_bool(a, "special", false, source, where);
      tok.lstrip = get_bool(a, "lstrip", false, source, where);
      tok.rstrip = get_bool(a, "rstrip", false, source, where);
      tok.single_word = get_bool(a, "single_word", false, source, where);
      tok.normalized = get_bool(a, "normalized", !tok.special, source, where);
      max_id = std::max(max_id, tok.id);
      t.added.push_back(std::move(tok));
    }
  }
  if (max_id < 0) fail("{}: empty vocabulary", source);
  const auto vocab_size = static_cast<size_t>(max_id) + 1;
  t.token_bytes.assign(vocab_size, std::string());
  t.added_flag.assign(vocab_size, 0);
  t.special_flag.assign(vocab_size, 0);

  // ---- alphabet (the decoder says which) ----
  t.alphabet = parse_decoder(root.value("decoder", json()), source);
  t.byte_fallback = get_bool(model, "byte_fallback", false, source, "model");
  t.fuse_unk = get_bool(model, "fuse_unk", false, source, "model");
  if (t.byte_fallback && t.alphabet == Alphabet::ByteLevel)
    fail("{}: \"model.byte_fallback\": true with the ByteLevel decoder (byte fallback needs the decoder Sequence "
         "[Replace, ByteFallback, Fuse])",
         source);
  t.bytes_to_id.reserve(key_to_id.size());
  if (t.alphabet == Alphabet::ByteLevel) {
    for (const auto& [key, id] : key_to_id) {
      if (auto bytes = byte_level_to_bytes(key)) {
        t.token_bytes[id] = *bytes;
        t.bytes_to_id.emplace(std::move(*bytes), id);
      } else {
        t.token_bytes[id] = key;  // not byte-level: decodes to its own text, never produced by encode
      }
    }
    for (int b = 0; b < 256; ++b) {
      const auto it = t.bytes_to_id.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
      if (it == t.bytes_to_id.end())
        fail("{}: \"model.vocab\" has no token for byte 0x{:02X} ({}): not a byte-level BPE vocabulary", source, b,
             bytes_to_byte_level(std::string(1, static_cast<char>(b))));
      t.byte_id[b] = it->second;
    }
  } else {
    t.fallback_id.fill(-1);
    for (const auto& [key, id] : key_to_id) {
      if (const std::optional<uint8_t> b = fallback_byte(key)) {
        t.token_bytes[id] = std::string(1, static_cast<char>(*b));
        if (key == fmt::format("<0x{:02X}>", *b)) t.fallback_id[*b] = id;
      } else {
        if (!is_valid_utf8(key)) fail("{}: \"model.vocab\" key {} is not valid UTF-8", source, describe(json(key)));
        t.token_bytes[id] = Impl::replace_all(key, kSentencePieceSpace, " ");
        t.bytes_to_id[t.token_bytes[id]] = id;
      }
    }
    // A byte's text may also be a whole token (" " is both "\u2581" and "<0x20>"): token_id() gives the whole one.
    for (int b = 0; b < 256; ++b)
      if (t.fallback_id[b] >= 0) t.bytes_to_id.emplace(std::string(1, static_cast<char>(b)), t.fallback_id[b]);
    const json unk = model.value("unk_token", json());
    if (!unk.is_null()) {
      if (!unk.is_string()) fail("{}: \"model.unk_token\" must be a string or null, found {}", source, describe(unk));
      const auto it = key_to_id.find(unk.get<std::string>());
      if (it == key_to_id.end()) fail("{}: \"model.unk_token\" {} is not in \"model.vocab\"", source, describe(unk));
      t.unk_id = it->second;
    }
  }

  // ---- merges ----
  const json& merges = member(model, "merges", source, "model");
  if (!merges.is_array()) fail("{}: \"model.merges\" must be an array", source);
  t.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        fail("{}: \"model.merges[{}]\" {} is not two space-separated tokens", source, i, describe(m));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail("{}: \"model.merges[{}]\" must be \"a b\" or [\"a\", \"b\"], found {}", source, i, describe(m));
    }
    const auto ia = key_to_id.find(a), ib = key_to_id.find(b), iab = key_to_id.find(a + b);
    if (ia == key_to_id.end() || ib == key_to_id.end() || iab == key_to_id.end()) {
      const std::string& missing = ia == key_to_id.end() ? a : ib == key_to_id.end() ? b : a + b;
      fail("{}: \"model.merges[{}]\" {} uses token {} which is not in \"model.vocab\"", source, i, describe(m),
           describe(json(missing)));
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
    t.merges[key] = MergeInfo{static_cast<uint32_t>(i), iab->second};  // a repeated pair: the last one wins
  }
  // SentencePiece encodes from the vocabulary as written; the merges above were its last other use.
  if (t.alphabet == Alphabet::SentencePiece) t.piece_to_id = std::move(key_to_id);

  // Added tokens go after the model vocabulary so that they win on id conflicts (as in HF).
  for (size_t i = 0; i < t.added.size(); ++i) {
    const AddedToken& tok = t.added[i];
    // The decoder reads added tokens too: SentencePiece's Replace turns their U+2581 into spaces.
    t.token_bytes[tok.id] = t.alphabet == Alphabet::SentencePiece ? Impl::replace_all(tok.content, kSentencePieceSpace, " ") : tok.content;
    t.added_flag[tok.id] = 1;
    t.special_flag[tok.id] = tok.special ? 1 : 0;
    t.added_by_content[tok.content] = tok.id;
  }

  // ---- normalizer, pre-tokenizer ----
  parse_normalizer(root.value("normalizer", json()), source, t.norm_steps);
  parse_pre_tokenizer(root.value("pre_tokenizer", json()), source, t.pre_steps);
  const bool has_byte_level_step =
      std::any_of(t.pre_steps.begin(), t.pre_steps.end(), [](const PreStep& s) { return s.kind == PreStep::ByteLevel; });
  if (t.alphabet == Alphabet::ByteLevel && !has_byte_level_step)
    fail("{}: \"pre_tokenizer\" has no ByteLevel step, which the ByteLevel decoder needs", source);
  if (t.alphabet == Alphabet::SentencePiece && has_byte_level_step)
    fail("{}: \"pre_tokenizer\" has a ByteLevel step, which the SentencePiece decoder cannot undo", source);
  for (size_t i = 0; i < t.added.size(); ++i) {
    AddedToken& tok = t.added[i];
    if (tok.normalized && !t.norm_steps.empty()) {
      const std::string normalized = t.normalize(tok.content);
      t.normalized_trie.insert(normalized, static_cast<int32_t>(i));
      if (!t.added_by_content.count(normalized)) t.added_by_content[normalized] = tok.id;
    } else {
      t.raw_trie.insert(tok.content, static_cast<int32_t>(i));
    }
  }

  // ---- post-processor (only used by encode(add_special_tokens = true)) ----
  // What it cannot use is recorded, not rejected: only encode(add_special_tokens = true) needs it.
  {
    const auto string_at = [](const json& obj, const char* key) {
      return obj.is_object() && obj.contains(key) && obj[key].is_string() ? obj[key].get<std::string>() : std::string();
    };
    std::vector<const json*> todo;
    const json post = root.value("post_processor", json());
    if (!post.is_null()) todo.push_back(&post);
    for (size_t k = 0; k < todo.size() && t.post_processor_error.empty(); ++k) {
      const json& p = *todo[k];
      const std::string type = string_at(p, "type");
      if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
        for (const json& q : p["processors"]) todo.push_back(&q);
      } else if (type == "ByteLevel") {
        // offsets only
      } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array()) {
        bool seen_sequence = false;
        for (const json& piece : p["single"]) {
          if (!piece.is_object()) continue;
          if (piece.contains("Sequence")) {
            seen_sequence = true;
            continue;
          }
          if (!piece.contains("SpecialToken")) continue;
          const std::string name = string_at(piece["SpecialToken"], "id");
          const json* entry = p.contains("special_tokens") && p["special_tokens"].is_object() &&
                                      p["special_tokens"].contains(name)
                                  ? &p["special_tokens"][name]
                                  : nullptr;
          const json* ids = entry != nullptr && entry->is_object() && entry->contains("ids") ? &(*entry)["ids"] : nullptr;
          if (ids == nullptr || !ids->is_array()) {
            t.post_processor_error = fmt::format("post_processor special token {} has no ids", describe(json(name)));
            break;
          }
          for (const json& id : *ids) {
            const std::optional<int32_t> token = token_id_of(id);
            if (!token || static_cast<size_t>(*token) >= vocab_size) {
              t.post_processor_error = fmt::format("post_processor special token {} has id {}, which is not a token",
                                                   describe(json(name)), describe(id));
              break;
            }
            (seen_sequence ? t.suffix_ids : t.prefix_ids).push_back(*token);
          }
          if (!t.post_processor_error.empty()) break;
        }
      } else {
        t.post_processor_error = fmt::format("unsupported post_processor {}", describe(p));
      }
    }
  }

  // ---- tokenizer_config.json / generation_config.json ----
  // Named in messages as the files next to `source` (Tokenizer::load passes the tokenizer.json path).
  const std::filesystem::path source_dir = std::filesystem::path(source).parent_path();
  Tokenizer tok(std::move(impl));
  if (!tokenizer_config_json.empty()) {
    const std::string config_source = (source_dir / "tokenizer_config.json").string();
    const json config = parse_model_json(tokenizer_config_json, config_source);
    if (!config.is_object()) fail("{}: top level is not a JSON object", config_source);
    if (const auto bos = special_token_string(config, "bos_token", config_source)) {
      tok.impl_->bos = tok.token_id(*bos);
      if (tok.impl_->bos < 0) fail("{}: \"bos_token\" {} is not a token", config_source, describe(json(*bos)));
    }
    if (const auto eos = special_token_string(config, "eos_token", config_source)) {
      const int32_t id = tok.token_id(*eos);
      if (id < 0) fail("{}: \"eos_token\" {} is not a token", config_source, describe(json(*eos)));
      tok.impl_->eos.push_back(id);
    }
  }
  if (!generation_config_json.empty()) {
    const std::string gen_source = (source_dir / "generation_config.json").string();
    const json gen = parse_model_json(generation_config_json, gen_source);
    const json ids = gen.is_object() ? gen.value("eos_token_id", json()) : json();
    if (!ids.is_null() && !ids.is_number_integer() && !ids.is_array())
      fail("{}: \"eos_token_id\" must be an integer or a list of integers, found {}", gen_source, describe(ids));
    const json list = ids.is_array() ? ids : ids.is_null() ? json::array() : json::array({ids});
    for (const json& id : list) {
      const std::optional<int32_t> token = token_id_of(id);
      if (!token || static_cast<size_t>(*token) >= vocab_size)
        fail("{}: \"eos_token_id\" {} is not a token id (the vocabulary has ids [0, {}))", gen_source, describe(id),
             vocab_size);
      if (std::find(tok.impl_->eos.begin(), tok.impl_->eos.end(), *token) == tok.impl_->eos.end())
        tok.impl_->eos.push_back(*token);
    }
  }
  return tok;
}

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
  const auto tokenizer_path = model_dir / "tokenizer.json";
  const auto config_path = model_dir / "tokenizer_config.json";
  const auto generation_path = model_dir / "generation_config.json";
  if (!std::filesystem::exists(tokenizer_path)) fail("{}: file not found (a Hugging Face tokenizer.json is required)", tokenizer_path.string());
  if (!std::filesystem::exists(config_path)) fail("{}: file not found (required next to tokenizer.json)", config_path.string());
  const std::string tokenizer_json = read_model_text_file(tokenizer_path);
  const std::string config_json = read_model_text_file(config_path);
  const std::string generation_json =
      std::filesystem::exists(generation_path) ? read_model_text_file(generation_path) : std::string();
  return from_json(tokenizer_json, config_json, generation_json, tokenizer_path.string());
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special, bool add_special_tokens) const {
  return impl_->encode(text, parse_special, add_special_tokens);
}

std::vector<int32_t> Tokenizer::encode(const PromptText& prompt, bool add_special_tokens) const {
  if (is_valid_utf8(prompt.text)) return impl_->encode(prompt.text, /*parse_special=*/true, add_special_tokens, prompt.plain);
  // Invalid bytes are replaced piece by piece, so that the ranges still mark the messages' text.
  const std::string_view text = prompt.text;
  PromptText repaired;
  size_t at = 0;
  for (const auto& [begin, end] : prompt.plain) {
    repaired += sanitize_utf8(text.substr(at, begin - at));
    repaired.add_message_text(sanitize_utf8(text.substr(begin, end - begin)));
    at = end;
  }
  repaired += sanitize_utf8(text.substr(at));
  return impl_->encode(repaired.text, /*parse_special=*/true, add_special_tokens, repaired.plain);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  StreamingDecoder d(*this, skip_special);
  std::string out;
  for (const int32_t id : ids) out += d.push(id);
  out += d.flush();
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  return impl_->has_token(id) ? std::string_view(impl_->token_bytes[id]) : std::string_view();
}
bool Tokenizer::is_special(int32_t id) const { return impl_->has_token(id) && impl_->special_flag[id] != 0; }
bool Tokenizer::is_added(int32_t id) const { return impl_->has_token(id) && impl_->added_flag[id] != 0; }

int32_t Tokenizer::token_id(std::string_view piece) const {
  if (const auto it = impl_->added_by_content.find(piece); it != impl_->added_by_content.end()) return it->second;
  if (const auto it = impl_->bytes_to_id.find(piece); it != impl_->bytes_to_id.end()) return it->second;
  return -1;
}

int32_t Tokenizer::bos_id() const { return impl_->bos; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos; }
size_t Tokenizer::vocab_size() const { return impl_->token_bytes.size(); }

// ---------------------------------------------------------------------------------------------------

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamingDecoder::push(int32_t id) {
  const Tokenizer::Impl& t = *tokenizer_->impl_;
  if (!t.has_token(id)) return {};
  if (t.added_flag[id] != 0) {
    // Added tokens are emitted verbatim; bytes held back before them can no longer complete.
    if (skip_special_ && t.special_flag[id] != 0) return {};
    std::string out = flush();
    out += t.token_bytes[id];
    return out;
  }
  pending_ += t.token_bytes[id];
  const size_t n = complete_utf8_prefix(pending_);
  std::string out = sanitize_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamingDecoder::flush() {
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      out += s[i++];
      continue;
    }
    size_t bad;
    bool truncated;
    const size_t n = utf8_sequence(s, i, &bad, &truncated);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += kReplacement;
      i += bad;
    }
  }
  return out;
}

size_t complete_utf8_prefix(std::string_view s) {
  // Only the last (up to 3) bytes can be an incomplete sequence.
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = from; i < s.size(); ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte
    size_t bad;
    bool truncated;
    if (utf8_sequence(s, i, &bad, &truncated) == 0 && truncated) return i;
  }
  return s.size();
}

}  // namespace mk
