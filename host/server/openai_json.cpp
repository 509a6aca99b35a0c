#include "host/server/openai_json.h"

#include <fmt/format.h>

#include "runtime/tokenizer.h"

namespace mk::server {
namespace {

using json = nlohmann::json;

json envelope(const ResponseIds& ids, bool chunk) {
  const bool chat = ids.endpoint == Endpoint::Chat;
  return {{"id", ids.id},
          {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", ids.created},
          {"model", ids.model},
          {"system_fingerprint", nullptr}};
}

json choice(const ResponseIds& ids, json content, json finish_reason, json logprobs = nullptr) {
  json c = {{"index", 0}};
  if (ids.endpoint == Endpoint::Chat) c["delta"] = std::move(content);
  else c["text"] = std::move(content);
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = std::move(finish_reason);
  return c;
}

}  // namespace

json usage_json(const JobOutcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

json timings_json(const JobOutcome& o) {
  return {{"prompt_n", o.prompt_tokens - o.cached_tokens},
          {"cached_n", o.cached_tokens},
          {"predicted_n", o.completion_tokens},
          {"queue_ms", o.queue_seconds * 1e3},
          {"first_token_ms", o.first_token_seconds * 1e3},
          {"engine_first_token_ms", o.engine_first_token_seconds * 1e3},
          {"predicted_per_second", o.decode_tokens_per_second},
          {"draft_n", o.drafted_tokens},
          {"draft_n_accepted", o.accepted_tokens}};
}

json logprobs_json(Endpoint endpoint, const std::vector<LogprobEntry>& entries, size_t text_offset) {
  const auto bytes_array = [](const std::string& b) {
    json a = json::array();
    for (const unsigned char c : b) a.push_back(int(c));
    return a;
  };
  if (endpoint == Endpoint::Chat) {
    json content = json::array();
    for (const LogprobEntry& e : entries) {
      json top = json::array();
      for (const auto& [bytes, lp] : e.top) top.push_back({{"token", sanitize_utf8(bytes)}, {"logprob", lp}, {"bytes", bytes_array(bytes)}});
      content.push_back({{"token", sanitize_utf8(e.bytes)}, {"logprob", e.logprob}, {"bytes", bytes_array(e.bytes)}, {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(sanitize_utf8(e.bytes));
    token_logprobs.push_back(e.logprob);
    json top = json::object();
    for (const auto& [bytes, lp] : e.top) top[sanitize_utf8(bytes)] = lp;  // as OpenAI: alternatives by their text
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += e.bytes.size();
  }
  return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)}, {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

json text_chunk(const ResponseIds& ids, std::string_view text, bool first, bool with_usage_null, bool reasoning, json logprobs) {
  json j = envelope(ids, true);
  json content;
  if (ids.endpoint == Endpoint::Chat) {
    content = json::object();
    if (first) content["role"] = "assistant";
    content[reasoning ? "reasoning_content" : "content"] = text;
  } else {
    content = text;
  }
  j["choices"] = json::array({choice(ids, std::move(content), nullptr, std::move(logprobs))});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

std::string tool_call_id(const ResponseIds& ids, size_t index) {
  const size_t dash = ids.id.find('-');
  return fmt::format("call_{}_{}", dash == std::string::npos ? ids.id : ids.id.substr(dash + 1), index);
}

json tool_call_chunk(const ResponseIds& ids, const ToolCallEvent& event, bool first, bool with_usage_null, json logprobs) {
  json call = {{"index", event.index}};
  if (event.kind == ToolCallEvent::Kind::Call) {
    call["id"] = tool_call_id(ids, event.index);
    call["type"] = "function";
    call["function"] = {{"name", event.text}, {"arguments", ""}};
  } else {
    call["function"] = {{"arguments", event.text}};
  }
  json delta = json::object();
  if (first) {
    delta["role"] = "assistant";
    delta["content"] = nullptr;
  }
  delta["tool_calls"] = json::array({std::move(call)});
  json j = envelope(ids, true);
  j["choices"] = json::array({choice(ids, std::move(delta), nullptr, std::move(logprobs))});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

json finish_chunk(const ResponseIds& ids, const JobOutcome& o, bool with_usage_null) {
  json j = envelope(ids, true);
  j["choices"] = json::array({choice(ids, ids.endpoint == Endpoint::Chat ? json::object() : json(""), o.finish_reason)});
  if (with_usage_null) j["usage"] = nullptr;
  j["timings"] = timings_json(o);
  return j;
}

json usage_chunk(const ResponseIds& ids, const JobOutcome& o) {
  json j = envelope(ids, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(o);
  return j;
}

json full_response(const ResponseIds& ids, const std::string& text, const JobOutcome& o, const std::optional<std::string>& reasoning,
                   json logprobs, const std::vector<ParsedToolCall>& calls) {
  json j = envelope(ids, false);
  json c = {{"index", 0}};
  if (ids.endpoint == Endpoint::Chat) {
    c["message"] = {{"role", "assistant"}, {"content", calls.empty() || !text.empty() ? json(text) : json(nullptr)}, {"refusal", nullptr}};
    if (reasoning) c["message"]["reasoning_content"] = *reasoning;
    if (!calls.empty()) {
      json list = json::array();
      for (size_t i = 0; i < calls.size(); ++i)
        list.push_back({{"id", tool_call_id(ids, i)},
                        {"type", "function"},
                        {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
      c["message"]["tool_calls"] = std::move(list);
    }
  } else {
    c["text"] = text;
  }
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = o.finish_reason;
  j["choices"] = json::array({c});
  j["usage"] = usage_json(o);
  j["timings"] = timings_json(o);
  return j;
}

json model_json(const std::string& model, int64_t created) {
  return {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "monokernel"}};
}

json models_json(const std::string& model, int64_t created) {
  return {{"object", "list"}, {"data", json::array({model_json(model, created)})}};
}

HealthReply health_reply(const QueueState& q) {
  if (q.device_lost)
    return {503, {{"status", "device_lost"},
                  {"error", "the device was lost (a generation hung and its launch did not stop): restart the server; " + q.device_error},
                  {"queue_length", q.waiting},
                  {"generating", q.generating}}};
  return {200, {{"status", "ok"}, {"queue_length", q.waiting}, {"generating", q.generating}}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace mk::server
