// OpenAI request bodies -> what the server generates. Validation only: no engine, no tokenizer, so it is
// tested on its own (tests/test_server_units.cpp). Every rejection is an ApiError (400) naming the field.
//
// Unknown fields are ignored, as OpenAI does. Fields that OpenAI knows but this server cannot honour
// (n > 1, echo, the deprecated functions, ...) are rejected rather than silently ignored: a client relying on
// them would otherwise get a different kind of answer than it asked for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat_template.h"
#include "runtime/constraint_spec.h"
#include "runtime/sampling.h"

namespace mk::server {

enum class Endpoint { Chat, Completion };  // /v1/chat/completions, /v1/completions

struct Limits {
  size_t max_stop_strings = 16;
  size_t max_stop_bytes = 256;  // per stop string
  size_t max_tools = 128;       // as OpenAI's API
};

// "tool_choice": none (the tools are not shown to the model), auto (the model may call them), required
// (it calls one or more), or a named function (it calls that one).
enum class ToolChoice { None, Auto, Required, Function };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::vector<ChatMessage> messages;        // Chat: rendered with the model's chat template
  std::optional<bool> enable_thinking;      // Chat: chat_template_kwargs.enable_thinking (Qwen3)
  std::string prompt;                       // Completion, given as text
  std::optional<std::vector<int32_t>> prompt_tokens;  // Completion, given as token ids
  bool stream = false;
  bool include_usage = false;               // stream_options.include_usage: a last chunk with the usage
  std::optional<int> max_tokens;            // max_completion_tokens, else max_tokens; unset: server default
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;             // unset: the server's --seed, else a random one
  bool random_seed = false;                 // "seed": -1 asks for a random seed whatever --seed says
  std::vector<std::string> stop;
  // Chat: "logprobs": true and "top_logprobs" (0..20); Completion: "logprobs": N (0..20) asks for the
  // sampled tokens' log-probabilities and N alternatives each.
  bool logprobs = false;
  int top_logprobs = 0;
  // "logit_bias" ({"token id": bias}), "frequency_penalty", "presence_penalty" (runtime/sampling.h); the
  // token ids are checked against the model's vocabulary by the server, which knows it.
  LogitAdjustments adjust;
  // "response_format": {"type": "json_object"} or {"type": "json_schema", "json_schema": {"schema": ...}};
  // the server compiles it against the model's vocabulary (docs/structured_output.md).
  constraint::ConstraintSpec constraint;
  // Chat: "tools", each {"type": "function", "function": {"name", "description", "parameters", "strict"}}
  // as the client wrote it (keys in order); "tool_choice" (default auto with tools, else none; the name
  // in tool_choice_function); "parallel_tool_calls" (default true).
  std::vector<nlohmann::ordered_json> tools;
  ToolChoice tool_choice = ToolChoice::None;
  std::string tool_choice_function;
  bool parallel_tool_calls = true;
  // The tools' function names, in order.
  std::vector<std::string> tool_names() const;
};

// Parses and checks a request body. Throws ApiError: 400 for malformed JSON, wrong types, values out of
// range and unsupported options.
CompletionRequest parse_request(Endpoint endpoint, std::string_view body, const Limits& limits = {});

}  // namespace mk::server
