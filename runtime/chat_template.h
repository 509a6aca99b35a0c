// Built-in chat prompt renderers (plain C++, no Jinja engine) for the chat formats of the supported
// models, chosen by looking at the model's own chat_template (tokenizer_config.json "chat_template", or
// chat_template.jinja next to it):
//
//   Llama3   "<|start_header_id|>" without a date header: the original Llama 3 template
//            (<|begin_of_text|> before the first message; content is trimmed).
//   Llama31  "<|start_header_id|>" and "Cutting Knowledge Date": Llama 3.1 / 3.2 / 3.3 templates. The
//            system block is always emitted ("Cutting Knowledge Date: December 2023\nToday Date: ...").
//            The date is ChatOptions::date_string; when unset it is today's date ("%d %b %Y", local time)
//            if the template calls strftime_now (as transformers provides), else the template's literal
//            default ("26 Jul 2024").
//   ChatML   "<|im_start|>" (Qwen2 / Qwen2.5). A default system prompt written in the template (Qwen2.5:
//            "You are Qwen, created by Alibaba Cloud. ...") is used when messages[0] is not "system".
//   Qwen3    "<|im_start|>" with <think> handling: assistant messages are rendered as the Qwen3 template
//            does (reasoning before "</think>" is dropped from turns before the last user query, and an
//            assistant turn after it gets a "<think>\n...\n</think>\n\n" block); with
//            ChatOptions::enable_thinking == false the generation prompt ends in an empty think block.
//   Gemma    "<start_of_turn>" (Gemma 3): <bos>, then "<start_of_turn>user\n" / "<start_of_turn>model\n"
//            turns with trimmed content and "<end_of_turn>\n"; a first system message is put, untrimmed
//            and followed by "\n\n", in front of the first user turn's text. The roles after it must
//            alternate user / assistant (the template raises an exception otherwise: mk::Error here).
//
// Output is byte-identical to rendering the model's template with Python jinja2 (transformers'
// apply_chat_template) for conversations of plain string messages. Not covered (rejected with mk::Error
// rather than rendered differently): tools / tool_calls / reasoning_content fields (ChatMessage has only
// role and content), "tool"/"ipython" messages in the Llama 3.1 format (rendered as JSON by the template),
// roles other than system/user/assistant/tool in the ChatML formats (the templates silently drop them),
// roles other than system/user/assistant for Gemma, and an empty message list.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/prompt_text.h"

namespace mk {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool"
  std::string content;
};

struct ChatOptions {
  std::optional<std::string> date_string;  // Llama 3.1: "26 Jul 2024"
  std::optional<bool> enable_thinking;     // Qwen3: unset = template default (thinking on)
};

enum class ChatFormat { Llama3, Llama31, ChatML, Qwen3, Gemma };

class ChatTemplate {
 public:
  // Reads model_dir/tokenizer_config.json ("chat_template" as a string, or the "default" entry of a list
  // of {name, template}); if it has none, model_dir/chat_template.jinja. Anything malformed, including
  // JSON that does not parse and values of the wrong type, is an mk::Error naming the file and the key.
  static ChatTemplate load(const std::filesystem::path& model_dir);
  // The same from file contents: `jinja` is chat_template.jinja's text when the directory has one.
  static ChatTemplate from_config_json(std::string_view config_json, std::string_view config_source,
                                       const std::optional<std::string>& jinja = std::nullopt,
                                       std::string_view jinja_source = "chat_template.jinja");
  // From a template's source text; bos_token is what the template's {{ bos_token }} renders to.
  static ChatTemplate from_source(std::string_view template_source, std::string bos_token, std::string_view source_name);

  ChatFormat format() const { return format_; }
  std::string_view format_name() const;

  // Full prompt text for `messages`; add_generation_prompt appends the assistant header.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const ChatOptions& options = {}) const;
  // The same with where each message's text lies: what the engine and the server encode
  // (Tokenizer::encode(const PromptText&)), so that control tokens typed into a message stay text.
  PromptText render_prompt(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           const ChatOptions& options = {}) const;

  // Incremental text for multi-turn chat with KV-cache reuse. The context already holds
  // messages[0, history_count) the way the model saw them: the prompt rendered (add_generation_prompt =
  // true) for messages[0, history_count - 1) followed by the tokens the model generated for
  // messages[history_count - 1], which must be an assistant message, *without* its end-of-turn token.
  // Returns end_of_turn() followed by messages[history_count, size) and, if add_generation_prompt, the
  // assistant header. If the decode loop already fed the end-of-turn token (<|eot_id|>, <|im_end|>) into
  // the KV cache, drop that token's text from the front of the result. history_count == 0 gives
  // render(messages, ...).
  //
  // For Llama3 / Llama31 / ChatML / Gemma this is exactly the tail of render(messages) once the assistant
  // reply is stored as generated (trimmed, for the Llama and Gemma formats). For Qwen3 it differs from a full re-render
  // on purpose: a full render drops the previous turn's <think> block, the KV cache keeps what the model
  // actually generated. A caller that wants the re-rendered form must re-render and re-prefill from the
  // first differing token.
  std::string render_continuation(const std::vector<ChatMessage>& messages, size_t history_count,
                                  bool add_generation_prompt, const ChatOptions& options = {}) const;
  PromptText render_continuation_prompt(const std::vector<ChatMessage>& messages, size_t history_count,
                                        bool add_generation_prompt, const ChatOptions& options = {}) const;

  // Text that closes an assistant turn: "<|eot_id|>" (Llama), "<|im_end|>\n" (ChatML) or "<end_of_turn>\n"
  // (Gemma).
  std::string_view end_of_turn() const;

  std::string_view bos_token() const { return bos_token_; }
  std::string_view default_system_prompt() const { return default_system_; }

 private:
  ChatFormat format_ = ChatFormat::ChatML;
  std::string source_;
  std::string bos_token_;
  std::string default_system_;     // ChatML: used when messages[0] is not "system"
  std::string default_date_;       // Llama31: template literal default
  bool date_from_clock_ = false;   // Llama31: template calls strftime_now

  void check(const std::vector<ChatMessage>& messages) const;
  std::vector<PromptText> render_messages(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;
  std::string generation_prompt(const ChatOptions& options) const;
  std::string date(const ChatOptions& options) const;
};

// Python str.strip() / lstrip() / rstrip() semantics used by the templates (exposed for tests):
// chars empty = Python whitespace (str.isspace), else the given set of ASCII characters.
std::string_view python_strip(std::string_view s, std::string_view chars = {}, bool left = true, bool right = true);

}  // namespace mk
