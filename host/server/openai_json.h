// The OpenAI response shapes mk-server sends: chat.completion / text_completion objects, their streamed
// chunks (server-sent events), usage, and the model list. Field names and nesting follow OpenAI's API
// reference, so its client libraries parse them unchanged.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host/server/request.h"
#include "host/server/scheduler.h"
#include "host/server/tool_call_parser.h"

namespace mk::server {

struct ResponseIds {
  Endpoint endpoint = Endpoint::Chat;
  std::string id;       // "chatcmpl-..." / "cmpl-...": the same in every chunk of one response
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}
nlohmann::json usage_json(const JobOutcome& o);
// Not in OpenAI's API (clients ignore it; llama.cpp's server sends a similar object): the server's own
// timings of the request, for benchmarks of what HTTP adds.
nlohmann::json timings_json(const JobOutcome& o);

// A streamed chunk carrying `text`; `first` adds the chat delta's role. `with_usage_null`: the request
// asked for stream_options.include_usage, and OpenAI then sends "usage": null in every chunk but the last.
// `reasoning`: the text is the model's reasoning (chat only): the delta's "reasoning_content", as vLLM and
// DeepSeek's API send it, instead of its "content".
// `logprobs`: the chunk's choice's "logprobs" (logprobs_json), null when not asked for.
nlohmann::json text_chunk(const ResponseIds& ids, std::string_view text, bool first, bool with_usage_null, bool reasoning = false,
                          nlohmann::json logprobs = nullptr);
// A call's id: unique to the response ("call_" + its id's number + "_" + the call's index).
std::string tool_call_id(const ResponseIds& ids, size_t index);
// A streamed chunk of a tool call, as OpenAI streams them: a Call event gives the call's index, id, type and
// name (arguments ""), an Arguments event more of the arguments under the index. `first` adds the role.
nlohmann::json tool_call_chunk(const ResponseIds& ids, const ToolCallEvent& event, bool first, bool with_usage_null,
                               nlohmann::json logprobs = nullptr);
// The chunk that ends the choice: empty delta / text, finish_reason set (plus timings).
nlohmann::json finish_chunk(const ResponseIds& ids, const JobOutcome& o, bool with_usage_null);
// The last chunk when include_usage was asked for: no choices, the usage.
nlohmann::json usage_chunk(const ResponseIds& ids, const JobOutcome& o);
// The whole response of a request that did not stream. `reasoning` (chat only): the message's
// "reasoning_content". `calls` (chat only): the message's "tool_calls" (its content null when empty).
nlohmann::json full_response(const ResponseIds& ids, const std::string& text, const JobOutcome& o,
                             const std::optional<std::string>& reasoning = std::nullopt, nlohmann::json logprobs = nullptr,
                             const std::vector<ParsedToolCall>& calls = {});

// A choice's "logprobs" for `entries`. Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs":
// [{"token", "logprob", "bytes"}]}], "refusal": null}. Completion (OpenAI's legacy form): {"tokens",
// "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}, the offsets counted in bytes from
// `text_offset` (the bytes of the tokens before these). A token's text is its bytes with any incomplete
// UTF-8 sequence replaced by U+FFFD; "bytes" has them exactly.
nlohmann::json logprobs_json(Endpoint endpoint, const std::vector<LogprobEntry>& entries, size_t text_offset = 0);

nlohmann::json models_json(const std::string& model, int64_t created);

// GET /health: 200 {"status": "ok", "queue_length", "generating"} while the server can generate; 503
// {"status": "device_lost", "error", ...} once the device is lost, so that a load balancer stops sending.
struct HealthReply {
  int status = 200;
  nlohmann::json body;
};
HealthReply health_reply(const QueueState& queue);
nlohmann::json model_json(const std::string& model, int64_t created);

// Serialised for the wire. Invalid UTF-8 (a model directory's name, say) becomes U+FFFD instead of failing.
std::string dump(const nlohmann::json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace mk::server
