// A tiny chat model directory for the engine, C API, install and pty tests: a random Qwen2-style model
// (runtime/synthetic_model.h) plus a small byte-level BPE tokenizer.json and a tokenizer_config.json with
// the Qwen2 ChatML template, so the whole chat path (template -> tokens -> backend -> streamed text) runs
// on the CPU emulator in a fraction of a second.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace mk::test {

struct TinyChatModel {
  int vocab = 0;          // model vocabulary: printable ASCII + '\n' + merges + the three special tokens
  int32_t im_start = -1;  // <|im_start|>
  int32_t im_end = -1;    // <|im_end|>: the end-of-turn token and the model's EOS id
  int32_t endoftext = -1; // <|endoftext|>
  int32_t think = -1, end_think = -1;  // <think>, </think> (scripted_thinking only)
};

struct TinyChatModelOptions {
  uint64_t seed = 7;
  // Zero the LM-head row of <|im_end|>: its logit is then always 0 while the ~110 others are random, so
  // greedy decoding practically never ends a reply by itself (long replies for the Ctrl-C tests).
  bool suppress_eos = true;
  // The shape (the tokenizer is the same for any). Larger shapes make the emulator slower per token:
  // the server's cancel test wants tokens far apart; a GPU benchmark wants a real model's per-token work.
  int layers = 2, hidden = 64, intermediate = 96, heads = 4, kv_heads = 2, head_dim = 16;
  // A Qwen3-style model whose every reply is kScriptedThinkingReply: the <think> and </think> tokens, a
  // chat template with Qwen3's thinking switch, and weights that fix each token's successor (the layers'
  // outputs are zero, so the residual is the token's embedding; the reply's tokens embed as distinct basis
  // vectors, and the LM head row of each one's successor is the vector of its predecessor). The reply
  // starts after the generation prompt's last token, "\n", whatever the prompt and the sampling.
  bool scripted_thinking = false;
};

// The reply of a scripted_thinking model, token by token: "<think>", "P", "l", "a", "n", "</think>",
// "O", "K", then <|im_end|>.
inline constexpr const char* kScriptedThinkingReply = "<think>Plan</think>OK";

// Writes config.json, generation_config.json, model.safetensors, tokenizer.json and tokenizer_config.json.
//
// Token ids: printable ASCII and '\n' first, then merges, then <|endoftext|>, <|im_start|>, <|im_end|>;
// the model's vocabulary ends there. The remaining 160 byte tokens (control and non-ASCII bytes, required
// by a byte-level vocabulary) get ids beyond the model's vocabulary, so a random model only ever prints
// printable text: the pty tests never see stray control bytes. (Encoding text with such bytes gives ids
// the model rejects; the tests only type ASCII.)
TinyChatModel write_tiny_chat_model(const std::filesystem::path& dir, const TinyChatModelOptions& options = {});

// A fresh temporary directory, removed with the object.
struct ScopedTempDir {
  explicit ScopedTempDir(const std::string& tag);
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  std::filesystem::path path;
};

// The tiny chat model in a temporary directory, removed with the object (tests keep one in a
// function-local static, so it goes when the test process exits).
struct ScopedTinyChatModel {
  explicit ScopedTinyChatModel(const std::string& tag, const TinyChatModelOptions& options = {})
      : temp(tag), dir(temp.path), ids(write_tiny_chat_model(dir, options)) {}
  ScopedTempDir temp;
  std::filesystem::path dir;
  TinyChatModel ids;
};

}  // namespace mk::test
