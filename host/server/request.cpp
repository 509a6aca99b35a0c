#include "host/server/request.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "host/server/api_error.h"

namespace mk::server {
namespace {

// Kept in the client's order: the chat template writes tools as they come, and a schema's properties
// order the JSON it constrains.
using json = nlohmann::ordered_json;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number with a fraction";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "something else";
  }
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const json& got) {
  throw invalid_request(fmt::format("'{}' must be {} (got {})", field, expected, type_name(got)), field);
}

// The field's value, or nullptr when it is absent or null (OpenAI treats null as "not given").
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<double> get_number(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  return v->get<double>();
}

// JSON parsers read a whole number beyond 64 bits as a double ("seed": 1234567890123456789012): it is an
// integer that is too large, not "a number with a fraction".
bool is_huge_whole_number(const json& v) {
  if (!v.is_number_float()) return false;
  const double x = v.get<double>();
  return std::isfinite(x) && std::trunc(x) == x && std::fabs(x) >= 9.2e18;
}

[[noreturn]] void too_large(const char* name, const json& v, std::string_view limit) {
  throw invalid_request(fmt::format("'{}' is too large: at most {} (got {})", name, limit, v.dump()), name);
}

std::optional<int64_t> get_integer(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      too_large(name, *v, std::to_string(std::numeric_limits<int64_t>::max()));
    return int64_t(v->get<uint64_t>());
  }
  if (is_huge_whole_number(*v)) too_large(name, *v, std::to_string(std::numeric_limits<int64_t>::max()));
  if (!v->is_number_integer()) wrong_type(name, "an integer", *v);
  return v->get<int64_t>();
}

// "seed": 0 to 2^64-1, or -1 for a random seed (llama.cpp's server convention).
void parse_seed(const json& body, CompletionRequest& out) {
  const json* s = field(body, "seed");
  if (!s) return;
  constexpr const char* kExpected = "-1 (a random seed) or an integer from 0 to 18446744073709551615";
  if (s->is_number_unsigned()) {
    out.seed = s->get<uint64_t>();
  } else if (s->is_number_integer()) {
    if (s->get<int64_t>() != -1)
      throw invalid_request(fmt::format("'seed' must be {} (got {})", kExpected, s->get<int64_t>()), "seed");
    out.random_seed = true;
  } else if (is_huge_whole_number(*s)) {
    too_large("seed", *s, "18446744073709551615");
  } else {
    wrong_type("seed", kExpected, *s);
  }
}

float in_range(const char* name, double value, double lo, double hi, bool lo_open, const char* range) {
  if (!std::isfinite(value) || value > hi || value < lo || (lo_open && value == lo))
    throw invalid_request(fmt::format("'{}' must be in {} (got {})", name, range, value), name);
  return float(value);
}

// "content": a string, or OpenAI's array of parts of which only {"type": "text", "text": ...} is supported.
std::string message_content(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(where, "a string or an array of text parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!part.is_object()) wrong_type(at, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string())
      throw invalid_request(fmt::format("'{}.type' must be a string such as \"text\"", at), at + ".type");
    if (type->get<std::string>() != "text")
      throw invalid_request(fmt::format("'{}' is a \"{}\" part; only \"text\" parts are supported (the model reads text only)",
                                        at, type->get<std::string>()),
                            at + ".type");
    const json* t = field(part, "text");
    if (!t || !t->is_string()) throw invalid_request(fmt::format("'{}.text' must be a string", at), at + ".text");
    text += t->get<std::string>();
  }
  return text;
}

// An assistant message's "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}], the
// arguments a JSON text (kept as a string when it is not JSON, as a template would then render it).
std::vector<ChatToolCall> parse_tool_calls(const json& calls, const std::string& role, const std::string& at) {
  if (!calls.is_array()) wrong_type(at, "an array of tool calls", calls);
  if (!calls.empty() && role != "assistant")
    throw invalid_request(fmt::format("'{}': only an assistant message has tool calls (role \"{}\")", at, role), at);
  std::vector<ChatToolCall> out;
  for (size_t j = 0; j < calls.size(); ++j) {
    const json& c = calls[j];
    const std::string cat = fmt::format("{}[{}]", at, j);
    if (!c.is_object()) wrong_type(cat, "an object", c);
    if (const json* type = field(c, "type"); type && *type != "function")
      throw invalid_request(fmt::format("'{}.type' must be \"function\"", cat), cat + ".type");
    if (const json* id = field(c, "id"); id && !id->is_string()) wrong_type(cat + ".id", "a string", *id);
    const json* f = field(c, "function");
    if (!f || !f->is_object()) throw invalid_request(fmt::format("'{}.function' must be an object {{\"name\", \"arguments\"}}", cat), cat + ".function");
    const json* name = field(*f, "name");
    if (!name || !name->is_string()) throw invalid_request(fmt::format("'{}.function.name' must be a string", cat), cat + ".function.name");
    ChatToolCall call{name->get<std::string>(), json::object()};
    if (const json* a = field(*f, "arguments")) {
      if (a->is_string()) {
        try {
          call.arguments = json::parse(a->get<std::string>());
        } catch (const json::exception&) {
          call.arguments = a->get<std::string>();
        }
      } else if (a->is_object()) {
        call.arguments = *a;
      } else {
        wrong_type(cat + ".function.arguments", "a string of JSON", *a);
      }
    }
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const json& body) {
  const json* v = field(body, "messages");
  if (!v) throw invalid_request("'messages' is required: an array of {\"role\", \"content\"} objects", "messages");
  if (!v->is_array()) wrong_type("messages", "an array", *v);
  if (v->empty()) throw invalid_request("'messages' is empty: at least one message is needed", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(at, "an object", m);
    const json* role = field(m, "role");
    if (!role || !role->is_string()) throw invalid_request(fmt::format("'{}.role' must be a string", at), at + ".role");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      throw invalid_request(fmt::format("'{}.role' is \"{}\"; expected \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"",
                                        at, r),
                            at + ".role");
    std::vector<ChatToolCall> calls;
    if (const json* c = field(m, "tool_calls")) calls = parse_tool_calls(*c, r, at + ".tool_calls");
    if (const json* id = field(m, "tool_call_id"); id && !id->is_string()) wrong_type(at + ".tool_call_id", "a string", *id);
    const json* content = field(m, "content");
    // An assistant message that calls tools may have no content (OpenAI sends null).
    if (!content && calls.empty()) throw invalid_request(fmt::format("'{}.content' is required", at), at + ".content");
    out.emplace_back(std::move(r), content ? message_content(*content, at + ".content") : std::string(), std::move(calls));
  }
  return out;
}

// "prompt": a string, token ids, or a batch of one of either (batches of more are n > 1 in disguise).
void parse_prompt(const json& body, CompletionRequest& out) {
  const json* v = field(body, "prompt");
  if (!v) throw invalid_request("'prompt' is required: a string or an array of token ids", "prompt");
  const json* p = v;
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) p = &(*v)[0];
  if (p->is_string()) {
    out.prompt = p->get<std::string>();
    return;
  }
  if (p->is_array()) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < p->size(); ++i) {
      const json& t = (*p)[i];
      if (t.is_string() || t.is_array())
        throw invalid_request("'prompt' holds several prompts; only one is supported per request", "prompt");
      if (!(t.is_number_integer() || t.is_number_unsigned()) || t.get<int64_t>() < 0 ||
          t.get<int64_t>() > std::numeric_limits<int32_t>::max())
        throw invalid_request(fmt::format("'prompt[{}]' must be a token id (a non-negative integer)", i), "prompt");
      ids.push_back(int32_t(t.get<int64_t>()));
    }
    out.prompt_tokens = std::move(ids);
    return;
  }
  wrong_type("prompt", "a string or an array of token ids", *p);
}

void parse_stop(const json& body, const Limits& limits, CompletionRequest& out) {
  const json* v = field(body, "stop");
  if (!v) return;
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) wrong_type(fmt::format("stop[{}]", i), "a string", (*v)[i]);
      stops.push_back((*v)[i].get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", *v);
  }
  if (stops.size() > limits.max_stop_strings)
    throw invalid_request(fmt::format("'stop' has {} strings; at most {} are allowed", stops.size(), limits.max_stop_strings), "stop");
  for (const auto& s : stops) {
    if (s.empty()) throw invalid_request("'stop' holds an empty string, which would stop before the first token", "stop");
    if (s.size() > limits.max_stop_bytes)
      throw invalid_request(fmt::format("a 'stop' string is {} bytes long; at most {} are allowed", s.size(), limits.max_stop_bytes),
                            "stop");
  }
  out.stop = std::move(stops);
}

// Options OpenAI defines that would change what the client gets back: refused with a clear reason.
void reject_unsupported(const json& body) {
  const auto unsupported = [](const std::string& name, const std::string& why) {
    throw invalid_request(fmt::format("'{}' {}", name, why), name);
  };
  if (const auto n = get_integer(body, "n"); n && *n != 1)
    unsupported("n", fmt::format("must be 1: this server generates one choice per request (got {})", *n));
  if (const auto b = get_integer(body, "best_of"); b && *b != 1)
    unsupported("best_of", fmt::format("must be 1: this server generates one choice per request (got {})", *b));
  if (const auto e = get_bool(body, "echo"); e && *e) unsupported("echo", "is not supported");
  if (const json* s = field(body, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
    unsupported("suffix", "is not supported");
  for (const char* name : {"functions", "function_call"})
    if (field(body, name)) unsupported(name, "is not supported: it is the deprecated form of 'tools' and 'tool_choice'");
}

// "response_format": text (no constraint), json_object, or json_schema with its schema. The schema's
// keywords are checked when the server compiles it (runtime/json_schema.h), naming what is unsupported;
// its text keeps the keys' order, so that the properties come out in the order the schema gives them.
void parse_response_format(const json& body, CompletionRequest& out) {
  const json* rf = field(body, "response_format");
  if (!rf) return;
  const auto bad = [](const std::string& why) { throw invalid_request("'response_format' " + why, "response_format"); };
  const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
  if (!type || !type->is_string()) bad("must be an object with a string 'type' (text, json_object or json_schema)");
  const std::string t = type->get<std::string>();
  if (t == "text") return;
  if (t == "json_object") {
    out.constraint = {constraint::ConstraintSpec::Kind::JsonObject, ""};
    return;
  }
  if (t != "json_schema") bad(fmt::format("type '{}' is not supported: text, json_object or json_schema", t));
  const json* js = field(*rf, "json_schema");
  if (!js || !js->is_object()) bad("of type json_schema needs a 'json_schema' object");
  if (const json* name = field(*js, "name"); name && !name->is_string()) bad("'json_schema.name' must be a string");
  if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean()) bad("'json_schema.strict' must be a boolean");
  const json* schema = field(*js, "schema");
  if (!schema || !(schema->is_object() || schema->is_boolean())) bad("needs 'json_schema.schema', the JSON schema (an object)");
  out.constraint = {constraint::ConstraintSpec::Kind::JsonSchema, schema->dump()};
}

// A function's name as OpenAI allows it: a-z, A-Z, 0-9, '_' and '-', at most 64 characters.
bool valid_function_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(uint8_t(c)) || c == '_' || c == '-'; });
}

// "tools", "tool_choice", "parallel_tool_calls". The tools are kept as written, keys in order (the chat
// template writes them as they come, and their parameters' properties order the arguments).
void parse_tools(const json& body, const Limits& limits, CompletionRequest& out) {
  const json* tools = field(body, "tools");
  const json* choice = field(body, "tool_choice");
  if (const auto p = get_bool(body, "parallel_tool_calls")) out.parallel_tool_calls = *p;
  if (tools) {
    if (!tools->is_array()) wrong_type("tools", "an array of {\"type\": \"function\", \"function\": {...}}", *tools);
    if (tools->size() > limits.max_tools)
      throw invalid_request(fmt::format("'tools' has {} entries; at most {}", tools->size(), limits.max_tools), "tools");
  }
  if (!tools || tools->empty()) {
    if (choice && !(choice->is_string() && choice->get<std::string>() == "none"))
      throw invalid_request("'tool_choice' needs 'tools'", "tool_choice");
    return;
  }
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object()) wrong_type(at, "an object", t);
    const json* type = field(t, "type");
    if (!type || *type != "function") throw invalid_request(fmt::format("'{}.type' must be \"function\"", at), at + ".type");
    const json* f = field(t, "function");
    if (!f || !f->is_object()) throw invalid_request(fmt::format("'{}.function' must be an object {{\"name\", \"parameters\"}}", at), at + ".function");
    const json* name = field(*f, "name");
    if (!name || !name->is_string() || !valid_function_name(name->get<std::string>()))
      throw invalid_request(fmt::format("'{}.function.name' must be a string of a-z, A-Z, 0-9, '_' and '-', at most 64 characters", at),
                            at + ".function.name");
    if (const json* d = field(*f, "description"); d && !d->is_string()) wrong_type(at + ".function.description", "a string", *d);
    if (const json* p = field(*f, "parameters"); p && !p->is_object())
      wrong_type(at + ".function.parameters", "a JSON schema (an object)", *p);
    if (const json* st = field(*f, "strict"); st && !st->is_boolean()) wrong_type(at + ".function.strict", "a boolean", *st);
    const std::string n = name->get<std::string>();
    for (const auto& earlier : out.tools)
      if (earlier["function"]["name"] == n)
        throw invalid_request(fmt::format("'{}.function.name': \"{}\" is given twice", at, n), at + ".function.name");
    out.tools.push_back(t);
  }
  out.tool_choice = ToolChoice::Auto;
  if (!choice) return;
  constexpr const char* kExpected = "\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") out.tool_choice = ToolChoice::None;
    else if (c == "auto") out.tool_choice = ToolChoice::Auto;
    else if (c == "required") out.tool_choice = ToolChoice::Required;
    else throw invalid_request(fmt::format("'tool_choice' must be {} (got \"{}\")", kExpected, c), "tool_choice");
    return;
  }
  const json* f = choice->is_object() ? field(*choice, "function") : nullptr;
  const json* name = f && f->is_object() ? field(*f, "name") : nullptr;
  if (!name || !name->is_string()) throw invalid_request(fmt::format("'tool_choice' must be {}", kExpected), "tool_choice");
  out.tool_choice_function = name->get<std::string>();
  const auto names = out.tool_names();
  if (std::find(names.begin(), names.end(), out.tool_choice_function) == names.end())
    throw invalid_request(fmt::format("'tool_choice' names the function \"{}\", which is not in 'tools'", out.tool_choice_function),
                          "tool_choice");
  out.tool_choice = ToolChoice::Function;
}

// Chat: "logprobs" a boolean, "top_logprobs" 0..20 with it; Completion: "logprobs" an integer 0..20.
void parse_logprobs(Endpoint endpoint, const json& body, CompletionRequest& out) {
  const std::string range = fmt::format("an integer from 0 to {}", kMaxTopLogprobs);
  const auto top = [&](const char* name, int64_t n) {
    if (n < 0 || n > kMaxTopLogprobs) throw invalid_request(fmt::format("'{}' must be {} (got {})", name, range, n), name);
    return int(n);
  };
  if (endpoint == Endpoint::Chat) {
    out.logprobs = get_bool(body, "logprobs").value_or(false);
    if (const auto t = get_integer(body, "top_logprobs")) {
      out.top_logprobs = top("top_logprobs", *t);
      if (!out.logprobs && out.top_logprobs > 0) throw invalid_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
  } else if (const json* lp = field(body, "logprobs")) {
    if (lp->is_boolean()) wrong_type("logprobs", ("a number of alternatives, " + range).c_str(), *lp);
    out.logprobs = true;
    out.top_logprobs = top("logprobs", *get_integer(body, "logprobs"));
  }
}

// "logit_bias": {"token id": bias in [-100, 100]}; "frequency_penalty", "presence_penalty" in [-2, 2].
void parse_adjustments(const json& body, CompletionRequest& out) {
  if (const json* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) wrong_type("logit_bias", "an object mapping token ids to biases", *lb);
    if (lb->size() > kMaxLogitBiasEntries)
      throw invalid_request(fmt::format("'logit_bias' has {} entries; at most {}", lb->size(), kMaxLogitBiasEntries), "logit_bias");
    for (const auto& [key, value] : lb->items()) {
      int32_t token = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), token);
      if (ec != std::errc() || end != key.data() + key.size() || key.empty() || token < 0)
        throw invalid_request(fmt::format("'logit_bias' key \"{}\" is not a token id (a non-negative integer)", key), "logit_bias");
      const std::string name = fmt::format("logit_bias.{}", key);
      if (!value.is_number()) wrong_type(name, "a number", value);
      out.adjust.bias.emplace_back(token, in_range(name.c_str(), value.get<double>(), -kMaxLogitBias, kMaxLogitBias, false, "[-100, 100]"));
    }
  }
  if (const auto p = get_number(body, "frequency_penalty"))
    out.adjust.frequency_penalty = in_range("frequency_penalty", *p, -kMaxPenalty, kMaxPenalty, false, "[-2, 2]");
  if (const auto p = get_number(body, "presence_penalty"))
    out.adjust.presence_penalty = in_range("presence_penalty", *p, -kMaxPenalty, kMaxPenalty, false, "[-2, 2]");
}

}  // namespace

std::vector<std::string> CompletionRequest::tool_names() const {
  std::vector<std::string> names;
  for (const auto& t : tools) names.push_back(t["function"]["name"].get<std::string>());
  return names;
}

CompletionRequest parse_request(Endpoint endpoint, std::string_view body_text, const Limits& limits) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {
    throw invalid_request(fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw invalid_request(fmt::format("the request body must be a JSON object (got {})", type_name(body)));

  CompletionRequest out;
  out.endpoint = endpoint;
  if (const json* model = field(body, "model"); model && !model->is_string()) wrong_type("model", "a string", *model);
  reject_unsupported(body);

  if (endpoint == Endpoint::Chat) {
    out.messages = parse_messages(body);
    if (const json* kw = field(body, "chat_template_kwargs")) {
      if (!kw->is_object()) wrong_type("chat_template_kwargs", "an object", *kw);
      if (const json* think = field(*kw, "enable_thinking")) {
        if (!think->is_boolean()) wrong_type("chat_template_kwargs.enable_thinking", "a boolean", *think);
        out.enable_thinking = think->get<bool>();
      }
    }
    parse_tools(body, limits, out);
  } else {
    for (const char* name : {"tools", "tool_choice"})
      if (field(body, name)) throw invalid_request(fmt::format("'{}' is for /v1/chat/completions", name), name);
    parse_prompt(body, out);
  }

  out.stream = get_bool(body, "stream").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    out.include_usage = get_bool(*so, "include_usage").value_or(false);
  }

  // max_completion_tokens replaced max_tokens in OpenAI's chat API; either is accepted.
  const char* max_name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (const auto m = get_integer(body, max_name)) {
    if (*m < 1) throw invalid_request(fmt::format("'{}' must be a positive integer (got {})", max_name, *m), max_name);
    if (*m > std::numeric_limits<int>::max())
      throw invalid_request(fmt::format("'{}' is too large: at most {} (got {})", max_name, std::numeric_limits<int>::max(), *m),
                            max_name);
    out.max_tokens = int(*m);
  }
  if (const auto t = get_number(body, "temperature"))
    out.temperature = in_range("temperature", *t, 0.0, 100.0, false, "[0, 100] (0: greedy)");
  if (const auto p = get_number(body, "top_p")) out.top_p = in_range("top_p", *p, 0.0, 1.0, true, "(0, 1]");
  if (const auto p = get_number(body, "min_p")) out.min_p = in_range("min_p", *p, 0.0, 1.0, false, "[0, 1]");
  if (const auto k = get_integer(body, "top_k")) {
    if (*k < 0 || *k > std::numeric_limits<int>::max())
      throw invalid_request(fmt::format("'top_k' must be a non-negative integer, 0 for no limit (got {})", *k), "top_k");
    out.top_k = int(*k);
  }
  parse_seed(body, out);
  parse_stop(body, limits, out);
  parse_logprobs(endpoint, body, out);
  parse_response_format(body, out);
  if (out.constraint.active() && (out.tool_choice == ToolChoice::Required || out.tool_choice == ToolChoice::Function))
    throw invalid_request("'response_format' cannot be combined with a 'tool_choice' that forces a call (the reply is then the call)",
                          "response_format");
  parse_adjustments(body, out);
  return out;
}

}  // namespace mk::server
