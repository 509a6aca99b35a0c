// Hugging Face BPE tokenizer (tokenizer.json + tokenizer_config.json) in its two alphabets:
//   byte-level     (decoder "ByteLevel"): Llama 3, Qwen2/Qwen2.5/Qwen3;
//   SentencePiece  (decoder Sequence [Replace U+2581 -> " ", ByteFallback, Fuse]): Gemma 3. Tokens are
//                  text with U+2581 for a space; a character without a token becomes its "<0xXX>" byte
//                  tokens ("byte_fallback"), else "unk_token" ("fuse_unk" joins a run of them).
//
// Encoding follows the Hugging Face `tokenizers` pipeline:
//   1. the input bytes are made valid UTF-8 the way a UTF-8 decoder with replacement does it (WHATWG /
//      Python errors="replace": each maximal invalid subpart becomes U+FFFD), since the reference
//      implementations only ever see decoded strings;
//   2. added tokens whose "normalized" flag is false are split out of the raw text (leftmost-longest),
//      honouring "lstrip" / "rstrip" (White_Space around the token is absorbed) and "single_word";
//      with parse_special = false the added tokens flagged "special" are not matched (they are encoded
//      as ordinary text), the other added tokens still are (HF `split_special_tokens`);
//   3. the rest is normalised (NFC / NFD / NFKC / NFKD through ICU, "Replace" of a literal string, in
//      sequence, or nothing), then added tokens with "normalized": true are split out of the normalised
//      text;
//   4. pre-tokenizer: "Split" (the tokenizer.json regex, compiled with PCRE2 in UTF + UCP mode, JIT when
//      available; Oniguruma's \s / \S are mapped to \p{White_Space} / \P{White_Space}; or a literal string;
//      behavior Isolated, Removed or MergedWithPrevious) and "ByteLevel" (optional prefix space, optional
//      GPT-2 regex), possibly inside a "Sequence";
//   5. BPE with merge ranks over the alphabet's symbols ("ignore_merges" honoured; merges given either
//      as "a b" strings or as ["a", "b"] pairs).
// Decoding concatenates the tokens' bytes (byte-level: the mapped bytes; SentencePiece: the text with
// U+2581 as a space, a "<0xXX>" token its byte; added tokens: their content, through the same Replace)
// and repairs invalid UTF-8 with U+FFFD the same way; ids without a token (e.g. padding rows of the
// embedding) decode to nothing. For a run of byte tokens that is not valid UTF-8 this gives one U+FFFD
// per maximal invalid subpart, as Tokenizers.js does; Rust `tokenizers` gives one per byte.
//
// Anything else in tokenizer.json (Unigram / WordPiece models, other normalizers, pre-tokenizers or
// decoders) is rejected at load time with an mk::Error naming the file and the field.
// All methods are const and thread-safe after load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/prompt_text.h"

namespace mk {

class Tokenizer {
 public:
  // Reads model_dir/tokenizer.json and model_dir/tokenizer_config.json (both required) and, if present,
  // model_dir/generation_config.json (extra end-of-sequence ids).
  static Tokenizer load(const std::filesystem::path& model_dir);
  // From file contents; tokenizer_config_json / generation_config_json may be empty. `source` names the
  // tokenizer.json in error messages; the other two are named as the files next to it. Ids are bounded
  // (limits::kMaxVocabSize, runtime/limits.h) before any table is sized by them.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                             std::string_view generation_config_json, std::string_view source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (any bytes; invalid UTF-8 is replaced, see above). parse_special: match the
  // special added tokens ("<|eot_id|>", "<|im_start|>") in the text. add_special_tokens: apply the
  // post-processor template (Llama 3 prepends <|begin_of_text|>; Qwen adds nothing); chat prompts
  // rendered by ChatTemplate already contain their BOS text and must be encoded without it.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true,
                              bool add_special_tokens = false) const;
  // A chat prompt: special tokens are read in the template's text and never inside prompt.plain (a
  // message's own text), where "<|im_end|>" is encoded as the characters it is made of.
  std::vector<int32_t> encode(const PromptText& prompt, bool add_special_tokens = false) const;

  // Text of `ids` (always valid UTF-8). skip_special drops added tokens flagged "special".
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes of one token (may be an incomplete UTF-8 sequence; empty for ids without a token).
  std::string_view token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;   // an added token flagged "special"
  bool is_added(int32_t id) const;     // any added token

  // Id of the token whose bytes are `piece` (" the", "<|eot_id|>"), or -1.
  int32_t token_id(std::string_view piece) const;

  int32_t bos_id() const;               // tokenizer_config "bos_token", or -1 (Qwen has none)
  std::vector<int32_t> eos_ids() const; // "eos_token", then generation_config.json "eos_token_id"(s)
  size_t vocab_size() const;            // 1 + the largest token id (model vocab and added tokens)

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static Tokenizer from_json_unchecked(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                                       std::string_view generation_config_json, std::string_view source);
  std::unique_ptr<Impl> impl_;
  friend class StreamingDecoder;
};

// Incremental decoding for streaming output: push() returns only complete UTF-8 and holds back an
// incomplete multi-byte sequence until the token that completes it arrives; invalid bytes become U+FFFD
// exactly as in Tokenizer::decode, so the concatenation of all push() results and flush() equals
// decode() of the whole id sequence.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  std::string flush();                     // emits U+FFFD for a held-back incomplete tail; resets
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

// Valid UTF-8 from arbitrary bytes: each maximal invalid subpart becomes U+FFFD (WHATWG "utf-8" decode,
// the same as Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy).
std::string sanitize_utf8(std::string_view bytes);

// Length of the longest prefix of `bytes` that does not end inside an incomplete (but so far valid)
// UTF-8 sequence: bytes[prefix..] is either empty or could still become a valid character.
size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace mk
