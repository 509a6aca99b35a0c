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
//            default ("26 Jul 2024"). Tools go in the first user message (the template's default
//            tools_in_user_message), a call as {"name": ..., "parameters": ...}, tool results as
//            "ipython" turns.
//   ChatML   "<|im_start|>" (Qwen2 / Qwen2.5). A default system prompt written in the template (Qwen2.5:
//            "You are Qwen, created by Alibaba Cloud. ...") is used when messages[0] is not "system".
//            Where the template renders <tool_call> blocks, tools go in the system turn's "# Tools" block
//            and tool results in <tool_response> blocks of a user turn.
//   Qwen3    "<|im_start|>" with <think> handling: assistant messages are rendered as the Qwen3 template
//            does (reasoning before "</think>" is dropped from turns before the last user query, and an
//            assistant turn after it gets a "<think>\n...\n</think>\n\n" block); with
//            ChatOptions::enable_thinking == false the generation prompt ends in an empty think block.
//            Tools as in ChatML.
//   Gemma    "<start_of_turn>" (Gemma 3): <bos>, then "<start_of_turn>user\n" / "<start_of_turn>model\n"
//            turns with trimmed content and "<end_of_turn>\n"; a first system message is put, untrimmed
//            and followed by "\n\n", in front of the first user turn's text. The roles after it must
//            alternate user / assistant (the template raises an exception otherwise: mk::Error here).
//
// Output is byte-identical to rendering the model's template with Python jinja2 (transformers'
// apply_chat_template, whose tojson is json.dumps with ensure_ascii=False) for conversations of string
// messages, tools and tool calls. Not covered (rejected with mk::Error rather than rendered differently):
// tools or tool calls with a template that has no tool-call format (tool_call_format() None: Llama 3,
// Gemma, ChatML templates without <tool_call>), more than one call in a Llama 3.1 assistant turn (the
// template raises), roles other than system/user/assistant/tool in the ChatML formats (the templates
// silently drop them), roles other than system/user/assistant for Gemma, and an empty message list.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/prompt_text.h"
#include "runtime/tool_call_format.h"

namespace mk {

// A call an assistant turn made: the function's name and its arguments, a JSON object as the client sent
// it (a string that is not JSON stays a string, which the templates render as Python would).
struct ChatToolCall {
  std::string name;
  nlohmann::ordered_json arguments;
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c, std::vector<ChatToolCall> calls = {})
      : role(std::move(r)), content(std::move(c)), tool_calls(std::move(calls)) {}
  std::string role;     // "system", "user", "assistant", "tool" ("ipython" for Llama 3.1)
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant
};

struct ChatOptions {
  std::optional<std::string> date_string;  // Llama 3.1: "26 Jul 2024"
  std::optional<bool> enable_thinking;     // Qwen3: unset = template default (thinking on)
  // OpenAI's tools, each as the client wrote it ({"type": "function", "function": {...}}), keys in order.
  std::vector<nlohmann::ordered_json> tools;
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
  // How this model writes tool calls; None: the template renders no tools.
  ToolCallFormat tool_call_format() const { return tool_format_; }

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
  ToolCallFormat tool_format_ = ToolCallFormat::None;
  std::string source_;
  std::string bos_token_;
  std::string default_system_;     // ChatML: used when messages[0] is not "system"
  std::string default_date_;       // Llama31: template literal default
  bool date_from_clock_ = false;   // Llama31: template calls strftime_now

  void check(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;
  std::vector<PromptText> render_messages(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;
  std::string generation_prompt(const ChatOptions& options) const;
  std::string date(const ChatOptions& options) const;
};

// Python's json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0: None), which transformers'
// tojson filter is: ", " and ": " between items, or "," and newlines with indent (exposed for tests).
std::string python_json(const nlohmann::ordered_json& value, int indent = -1);

// Python str.strip() / lstrip() / rstrip() semantics used by the templates (exposed for tests):
// chars empty = Python whitespace (str.isspace), else the given set of ASCII characters.
std::string_view python_strip(std::string_view s, std::string_view chars = {}, bool left = true, bool right = true);

}  // namespace mk
