// libFuzzer target for tokenizer.json loading, encoding and decoding (built by scripts/run_fuzz.sh
// tokenizer). Input: NUL-separated parts
//     tokenizer.json \0 text \0 tokenizer_config.json \0 generation_config.json
// (missing parts are empty). An empty tokenizer.json selects a built-in tokenizer of Llama 3's shape
// (runtime/tokenizer.h's pipeline with Llama 3's pre-tokenizer, regex and added-token flags) and
// fuzzes only the text.
//
// Invariants (a violation aborts, so libFuzzer keeps the input as a crash):
//   - loading succeeds or throws mk::Error naming the file, with no nlohmann exception left unconverted
//     except as the parse error of a file;
//   - ids from encode() are in [0, vocab_size()) and name a token (non-empty bytes); vocab_size(), BOS
//     and EOS ids are within limits::kMaxVocabSize and the vocabulary;
//   - decode() of any ids (in range or not) is valid UTF-8 and equals the reference below, with and
//     without skip_special; StreamingDecoder, one id at a time, gives valid UTF-8 pieces whose
//     concatenation (with flush()) equals decode();
//   - the round trip is exact, decode(encode(text)) == text after U+FFFD repair, with and without
//     special-token parsing, for every tokenizer that meets the conditions of runtime/tokenizer.h
//     (round_trip_expected below mirrors them; Llama 3's tokenizer meets them).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"
#include "tests/fuzz/fuzz_input.h"
#include "runtime/limits.h"
#include "runtime/tokenizer.h"

namespace {

using json = nlohmann::json;
constexpr const char* kSource = "fuzz/tokenizer.json";

[[noreturn]] void violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "invariant violated: %s: %s\n", what, detail.c_str());
  std::abort();
}
void check(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) violated(what, detail);
}

std::string hex(std::string_view s) {
  std::string out;
  char buf[4];
  for (const char c : s) std::snprintf(buf, sizeof buf, "%02x", static_cast<uint8_t>(c)), out += buf;
  return out;
}

// Strict UTF-8 validation (Unicode Table 3-7), independent of the code under test.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    size_t n;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 < 0x80) n = 1;
    else if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

// GPT-2's byte -> character map, as byte-level vocabularies write tokens.
std::string byte_level(std::string_view bytes) {
  std::string out;
  for (const char ch : bytes) {
    const int b = static_cast<uint8_t>(ch);
    int n = 0, c = 0;
    for (int x = 0; x < 256; ++x) {
      const bool direct = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
      if (x == b) {
        c = direct ? x : 256 + n;
        break;
      }
      if (!direct) ++n;
    }
    if (c < 0x80) out += static_cast<char>(c);
    else out += static_cast<char>(0xC0 | (c >> 6)), out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

// A tokenizer.json of Llama 3's shape: the byte alphabet, a few merges, Llama 3's Split regex and
// ByteLevel settings, special added tokens without strip flags, a BOS post-processor.
std::string llama_shaped_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
  json merges = json::array();
  int next = 256;
  for (const char* pair : {" t", "he", " a", "in", "er", " the", "on", "re", "\n\n", "  ", "ll", "ing"}) {
    const std::string p = pair;
    for (size_t cut = 1; cut < p.size(); ++cut) {
      const std::string a = byte_level(p.substr(0, cut)), b = byte_level(p.substr(cut));
      if (!vocab.contains(a) || !vocab.contains(b) || vocab.contains(a + b)) continue;
      vocab[a + b] = next++;
      merges.push_back(a + " " + b);
      break;
    }
  }
  const int bos = next;
  json added = json::array();
  for (const char* content : {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"})
    added.push_back({{"id", next++}, {"content", content}, {"special", true}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"single_word", false}});
  const char* regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json t;
  t["added_tokens"] = added;
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  t["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {bos}}}}}}};
  t["decoder"] = {{"type", "ByteLevel"}};
  t["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}};
  return t.dump();
}

// The bytes a byte-level vocabulary key stands for, or the key itself when it is not byte-level (such
// tokens decode to their own text).
std::string byte_level_key_bytes(const std::string& key) {
  static const std::map<std::string, char> byte_of = [] {
    std::map<std::string, char> m;
    for (int b = 0; b < 256; ++b) m.emplace(byte_level(std::string(1, static_cast<char>(b))), static_cast<char>(b));
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < key.size();) {
    const size_t n = (uint8_t(key[i]) & 0x80) == 0 ? 1 : 2;  // the alphabet is within U+0000..U+0143
    const auto it = i + n <= key.size() ? byte_of.find(key.substr(i, n)) : byte_of.end();
    if (it == byte_of.end()) return key;
    out += it->second;
    i += n;
  }
  return out;
}

// The conditions under which runtime/tokenizer.h promises an exact round trip, read from the JSON:
// nothing rewrites the text (no normalizer, no prefix space, no "Removed" split, no added token that
// absorbs whitespace), and each id names one text (no two vocabulary entries share an id; an added
// token's id is not a vocabulary entry of other text, nor another added token of other text).
bool round_trip_expected(const json& root) {
  if (root.contains("normalizer") && !root["normalizer"].is_null()) return false;
  std::vector<const json*> todo{&root.at("pre_tokenizer")};
  for (size_t k = 0; k < todo.size(); ++k) {
    const json& p = *todo[k];
    if (!p.is_object()) continue;
    if (p.value("type", json()) == "Sequence" && p.contains("pretokenizers"))
      for (const json& q : p.at("pretokenizers")) todo.push_back(&q);
    if (p.value("type", json()) == "Split" && p.value("behavior", json()) != "Isolated") return false;
    if (p.value("type", json()) == "ByteLevel" && p.value("add_prefix_space", json(false)) != false) return false;
  }
  std::map<int64_t, std::string> text_of;  // id -> raw text (byte-level keys as they are: compared as keys)
  std::set<int64_t> vocab_ids;
  for (const auto& [key, id] : root.at("model").at("vocab").items()) {
    if (!text_of.emplace(id.get<int64_t>(), byte_level_key_bytes(key)).second) return false;
    vocab_ids.insert(id.get<int64_t>());
  }
  std::map<int64_t, std::string> added_text;
  if (root.contains("added_tokens") && root["added_tokens"].is_array())
    for (const json& a : root["added_tokens"]) {
      if (a.value("lstrip", json(false)) == true || a.value("rstrip", json(false)) == true) return false;
      const int64_t id = a.at("id").get<int64_t>();
      const std::string content = a.at("content").get<std::string>();
      if (const auto it = added_text.find(id); it != added_text.end() && it->second != content) return false;
      added_text[id] = content;
      if (vocab_ids.count(id) != 0 && text_of[id] != content) return false;
    }
  return true;
}

// decode() as runtime/tokenizer.h defines it, from the public per-token accessors: ids without a token
// are dropped, runs of ordinary tokens are joined and repaired (sanitize_utf8), added tokens are their
// text (or nothing when skipped), and an added token ends the run before it.
std::string reference_decode(const mk::Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  std::string out, run;
  for (const int32_t id : ids) {
    if (id < 0 || size_t(id) >= t.vocab_size()) continue;
    if (!t.is_added(id)) {
      run += t.token_bytes(id);
      continue;
    }
    if (skip_special && t.is_special(id)) continue;
    out += mk::sanitize_utf8(run);
    run.clear();
    out += t.token_bytes(id);
  }
  return out + mk::sanitize_utf8(run);
}

void check_decoding(const mk::Tokenizer& t, const std::vector<int32_t>& ids) {
  for (const bool skip : {false, true}) {
    const std::string d = t.decode(ids, skip);
    check(valid_utf8(d), "decode() is valid UTF-8", hex(d));
    check(d == reference_decode(t, ids, skip), "decode() follows its definition", hex(d));
    mk::StreamingDecoder stream(t, skip);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = stream.push(id);
      check(valid_utf8(piece), "streamed pieces are valid UTF-8", hex(piece));
      streamed += piece;
    }
    streamed += stream.flush();
    check(streamed == d, "streaming decode equals decode", hex(streamed) + " vs " + hex(d));
  }
}

// Ids from raw bytes, 3 bytes each: in range mostly, out of range (negative, too large) sometimes.
std::vector<int32_t> ids_from_bytes(std::string_view bytes, size_t vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 3 <= bytes.size() && ids.size() < 256; i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint32_t(uint8_t(bytes[i + 2])) << 16;
    ids.push_back((v & 0x800000u) != 0 ? int32_t(v & 0x7FFFFFu) - 0x400000 : int32_t(v % (vocab + 2)));
  }
  return ids;
}

void check_tokenizer(const mk::Tokenizer& t, std::string_view text, bool round_trip) {
  const size_t vocab = t.vocab_size();
  check(vocab >= 1 && vocab <= size_t(mk::limits::kMaxVocabSize), "vocab_size within limits");
  check(t.bos_id() >= -1 && t.bos_id() < int64_t(vocab), "BOS id in the vocabulary");
  for (const int32_t id : t.eos_ids()) check(id >= 0 && size_t(id) < vocab, "EOS ids in the vocabulary");
  const std::string repaired = mk::sanitize_utf8(text);
  check(valid_utf8(repaired), "sanitize_utf8 gives valid UTF-8", hex(repaired));
  for (const bool parse_special : {true, false}) {
    std::vector<int32_t> ids;
    try {
      ids = t.encode(text, parse_special);
    } catch (const mk::Error& e) {
      // A tokenizer.json regex that exceeds PCRE2's match limits: reported, not hung.
      check(std::string_view(e.what()).find("regex") != std::string_view::npos, "encode fails only on the regex", e.what());
      return;
    }
    for (const int32_t id : ids)
      check(id >= 0 && size_t(id) < vocab && !t.token_bytes(id).empty(), "encoded ids name tokens", std::to_string(id));
    check_decoding(t, ids);
    if (round_trip) check(t.decode(ids) == repaired, "exact round trip", hex(text) + " -> " + hex(t.decode(ids)));
  }
  try {
    const auto with_bos = t.encode(text, true, true);
    for (const int32_t id : with_bos) check(id >= 0 && size_t(id) < vocab, "post-processor ids in the vocabulary");
  } catch (const mk::Error&) {
    // An unsupported or broken post_processor: reported when it is used.
  }
  check_decoding(t, ids_from_bytes(text, vocab));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = mk::fuzz::split_at_nul<4>(data, size);
  if (parts[0].empty()) {
    static const mk::Tokenizer llama = mk::Tokenizer::from_json(llama_shaped_tokenizer(), "", "", kSource);
    check_tokenizer(llama, parts[1], /*round_trip=*/true);
    return 0;
  }
  std::optional<mk::Tokenizer> t;
  try {
    t.emplace(mk::Tokenizer::from_json(parts[0], parts[2], parts[3], kSource));
  } catch (const mk::Error& e) {
    const std::string_view msg = e.what();
    check(msg.find("fuzz/") != std::string_view::npos, "the error names the file", std::string(msg));
    check(!mk::fuzz::leaks_json_library_message(msg, std::string_view(reinterpret_cast<const char*>(data), size)), "only parse errors carry nlohmann's message",
          std::string(msg));
    return 0;
  }
  check_tokenizer(*t, parts[1], round_trip_expected(json::parse(parts[0])));
  return 0;
}
