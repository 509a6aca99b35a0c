// mk-server's pieces on their own (host/server): request validation, stop strings over streamed text,
// the response shapes, the metrics text, and the generation queue on the CPU emulator with the tiny chat
// model. The HTTP side is tested against the real binary: tests/server/ (node's openai client, curl, load).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "host/engine/engine.h"
#include "host/server/api_error.h"
#include "host/server/metrics.h"
#include "host/server/openai_json.h"
#include "host/server/reasoning_split.h"
#include "host/server/request.h"
#include "host/server/request_framing.h"
#include "host/server/request_gate.h"
#include "host/server/scheduler.h"
#include "host/server/stop_filter.h"
#include "host/server/tool_call_parser.h"
#include "runtime/decode_backend.h"
#include "tests/helpers/tiny_chat_model.h"

namespace mk::server {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------------
// Requests

ApiError rejection(Endpoint e, const std::string& body) {
  try {
    parse_request(e, body);
  } catch (const ApiError& error) {
    return error;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "");
}

TEST(ServerRequest, ReadsEveryFieldOfAChatRequest) {
  const auto r = parse_request(Endpoint::Chat, R"({
    "model": "anything", "messages": [{"role": "developer", "content": "Be brief."},
                                      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                                      {"role": "assistant", "content": "Hello", "tool_calls": []},
                                      {"role": "user", "content": "More", "name": "bob"}],
    "max_tokens": 5, "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 3, "min_p": 0.1,
    "seed": -1, "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true},
    "n": 1, "logprobs": false, "frequency_penalty": 0, "user": "u", "some_future_field": {"x": [1]},
    "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");  // "developer" is OpenAI's newer name for it
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.max_tokens, 7);               // max_completion_tokens wins
  EXPECT_FLOAT_EQ(*r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 3);
  EXPECT_FLOAT_EQ(*r.min_p, 0.1f);
  EXPECT_FALSE(r.seed);  // -1: a random seed, as llama.cpp's server reads it
  EXPECT_TRUE(r.random_seed);
  EXPECT_THAT(r.stop, ::testing::ElementsAre("\n\n", "END"));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.enable_thinking, false);
}

TEST(ServerRequest, ReadsLogprobsBiasAndPenalties) {
  const auto chat = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
      "top_logprobs": 20, "logit_bias": {"5": -100, "17": 2.5}, "frequency_penalty": 0.5, "presence_penalty": -2})");
  EXPECT_TRUE(chat.logprobs);
  EXPECT_EQ(chat.top_logprobs, 20);
  EXPECT_THAT(chat.adjust.bias, ::testing::UnorderedElementsAre(std::pair<int32_t, float>{5, -100.f}, std::pair<int32_t, float>{17, 2.5f}));
  EXPECT_FLOAT_EQ(chat.adjust.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(chat.adjust.presence_penalty, -2.f);
  const auto plain = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false, "top_logprobs": 0})");
  EXPECT_FALSE(plain.logprobs);
  EXPECT_FALSE(plain.adjust.active());
  // Completions: "logprobs": N asks for N alternatives; 0 for the sampled token's alone.
  const auto completion = parse_request(Endpoint::Completion, R"({"prompt": "x", "logprobs": 0})");
  EXPECT_TRUE(completion.logprobs);
  EXPECT_EQ(completion.top_logprobs, 0);
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "x", "logprobs": 5})").top_logprobs, 5);
  EXPECT_FALSE(parse_request(Endpoint::Completion, R"({"prompt": "x", "logprobs": null})").logprobs);
}

TEST(ServerRequest, ReadsResponseFormatKeepingTheSchemasOrder) {
  using Kind = constraint::ConstraintSpec::Kind;
  const auto schema = parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "response_format":
      {"type": "json_schema", "json_schema": {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"zeta": {"type": "string"},
      "alpha": {"type": "integer"}}}}}})");
  EXPECT_EQ(schema.constraint.kind, Kind::JsonSchema);
  // The properties as the client wrote them, zeta first (the schema's order is the output's).
  EXPECT_EQ(schema.constraint.text, R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}})");
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "x", "response_format": {"type": "json_object"}})").constraint.kind, Kind::JsonObject);
  EXPECT_FALSE(parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"}})")
                   .constraint.active());
}

TEST(ServerJson, LogprobsInOpenAIsChatAndLegacyForms) {
  const std::vector<LogprobEntry> entries = {{"Hi", -0.25f, {{"Hi", -0.25f}, {"Ho", -1.5f}}}, {"\xe2\x82", -2.0f, {}}};
  const json chat = logprobs_json(Endpoint::Chat, entries);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "Hi");
  EXPECT_FLOAT_EQ(chat["content"][0]["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(chat["content"][0]["bytes"], json::array({72, 105}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "Ho");
  EXPECT_FLOAT_EQ(chat["content"][0]["top_logprobs"][1]["logprob"].get<float>(), -1.5f);
  EXPECT_EQ(chat["content"][1]["token"], "\xef\xbf\xbd");  // an incomplete character: U+FFFD, its bytes exact
  EXPECT_EQ(chat["content"][1]["bytes"], json::array({0xe2, 0x82}));
  EXPECT_TRUE(chat["refusal"].is_null());
  const json legacy = logprobs_json(Endpoint::Completion, entries, 10);
  EXPECT_EQ(legacy["tokens"], json::array({"Hi", "\xef\xbf\xbd"}));
  EXPECT_FLOAT_EQ(legacy["token_logprobs"][1].get<float>(), -2.0f);
  EXPECT_FLOAT_EQ(legacy["top_logprobs"][0]["Ho"].get<float>(), -1.5f);
  EXPECT_EQ(legacy["text_offset"], json::array({10, 12}));
}

TEST(ServerRequest, SeedsFromZeroToTheLargest) {
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "x", "seed": 0})").seed, 0u);
  const auto largest = parse_request(Endpoint::Completion, R"({"prompt": "x", "seed": 18446744073709551615})");
  EXPECT_EQ(largest.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_FALSE(largest.random_seed);
}

TEST(ServerRequest, AbsentAndNullFieldsAreUnset) {
  const auto r = parse_request(Endpoint::Completion, R"({"prompt": "x", "max_tokens": null, "temperature": null, "stop": null})");
  EXPECT_EQ(r.prompt, "x");
  EXPECT_FALSE(r.max_tokens || r.temperature || r.top_p || r.top_k || r.min_p || r.seed || r.random_seed);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
}

TEST(ServerRequest, PromptsAsTextTokenIdsOrABatchOfOne) {
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": ["one"]})").prompt, "one");
  EXPECT_EQ(*parse_request(Endpoint::Completion, R"({"prompt": [1, 2, 3]})").prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*parse_request(Endpoint::Completion, R"({"prompt": [[4, 5]]})").prompt_tokens, (std::vector<int32_t>{4, 5}));
  EXPECT_THAT(rejection(Endpoint::Completion, R"({"prompt": ["a", "b"]})").what(), HasSubstr("only one is supported"));
  EXPECT_THAT(rejection(Endpoint::Completion, R"({"prompt": [1, -2]})").what(), HasSubstr("'prompt[1]' must be a token id"));
  EXPECT_THAT(rejection(Endpoint::Completion, R"({"prompt": 5})").what(), HasSubstr("'prompt' must be a string or an array"));
  EXPECT_THAT(rejection(Endpoint::Completion, R"({})").what(), HasSubstr("'prompt' is required"));
}

TEST(ServerRequest, MalformedBodiesNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not valid JSON"},
      {"", "not valid JSON"},
      {R"({"a": 1e999})", "not valid JSON"},  // nlohmann's out_of_range, not a parse_error
      {"\"text\"", "must be a JSON object (got a string)"},
      {"[1]", "must be a JSON object (got an array)"},
      {R"({"messages": "hi"})", "'messages' must be an array (got a string)"},
      {R"({"messages": []})", "'messages' is empty"},
      {R"({"messages": [7]})", "'messages[0]' must be an object (got an integer)"},
      {R"({"messages": [{"content": "x"}]})", "'messages[0].role' must be a string"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "'messages[0].role' is \"wizard\""},
      {R"({"messages": [{"role": "user"}]})", "'messages[0].content' is required"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "'messages[0].content' must be a string or an array of text parts"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "'messages[0].content[0]' is a \"image_url\" part; only \"text\" parts are supported"},
      {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{}]}]})", "'messages[0].tool_calls[0].function' must be an object"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]})",
       "'messages[0].tool_calls': only an assistant message has tool calls"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 1}}]}]})", "'messages[0].tool_calls[0].function.name' must be a string"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})",
       "'messages[0].tool_calls[0].function.arguments' must be a string of JSON"},
      {R"({"messages": [{"role": "tool", "content": "x", "tool_call_id": 4}]})", "'messages[0].tool_call_id' must be a string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "model": 3})", "'model' must be a string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "'temperature' must be a number (got a string)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})", "'temperature' must be in [0, 100]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "'top_p' must be in (0, 1]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "min_p": 2})", "'min_p' must be in [0, 1]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_k": 2.5})", "'top_k' must be an integer (got a number with a fraction)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_k": -1})", "'top_k' must be a non-negative integer"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "'max_tokens' must be a positive integer (got 0)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5000000000})",
       "'max_completion_tokens' is too large: at most 2147483647 (got 5000000000)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1099511627776})",
       "'max_tokens' is too large: at most 2147483647 (got 1099511627776)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1234567890123456789012})",
       "'max_tokens' is too large: at most 9223372036854775807"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"})", "'max_tokens' must be an integer (got a string)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "seed": 1.5})",
       "'seed' must be -1 (a random seed) or an integer from 0 to 18446744073709551615 (got a number with a fraction)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "seed": -2})",
       "'seed' must be -1 (a random seed) or an integer from 0 to 18446744073709551615 (got -2)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "seed": 1234567890123456789012})",
       "'seed' is too large: at most 18446744073709551615 (got 1.2345678901234568e+21)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "'stream' must be a boolean (got a string)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": 1})", "'stream_options' must be an object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": 1})", "'stop' must be a string or an array of strings"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", 2]})", "'stop[1]' must be a string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})", "empty string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 2})", "'n' must be 1"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": "1"})", "'n' must be an integer"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "'logprobs' must be a boolean (got an integer)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", "'top_logprobs' needs 'logprobs': true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
       "'top_logprobs' must be an integer from 0 to 20 (got 21)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "'tools' must be an array"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "'tools[0].function' must be an object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval", "function": {"name": "f"}}]})",
       "'tools[0].type' must be \"function\""},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "'tools[0].function.name' must be a string of a-z, A-Z, 0-9, '_' and '-'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]})",
       "'tools[0].function.parameters' must be a JSON schema (an object)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}},
                                                                   {"type": "function", "function": {"name": "f"}}]})",
       "'tools[1].function.name': \"f\" is given twice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", "'tool_choice' needs 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "any"})",
       "'tool_choice' must be \"none\", \"auto\", \"required\" or"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
           "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "'tool_choice' names the function \"g\", which is not in 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
           "response_format": {"type": "json_object"}})",
       "'response_format' cannot be combined with a 'tool_choice' that forces a call"},
      {R"({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]})", "'functions' is not supported: it is the deprecated form"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})",
       "'response_format' type 'xml' is not supported: text, json_object or json_schema"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json"})", "'response_format' must be an object with a string 'type'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": 1}}})",
       "'json_schema.name' must be a string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}})",
       "needs 'json_schema.schema'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 2.5})", "'presence_penalty' must be in [-2, 2] (got 2.5)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": "1"})", "'frequency_penalty' must be a number"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": [1]})", "'logit_bias' must be an object mapping token ids"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"x5": 1}})", "'logit_bias' key \"x5\" is not a token id"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"-1": 1}})", "'logit_bias' key \"-1\" is not a token id"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 101}})", "'logit_bias.5' must be in [-100, 100] (got 101)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": "1"}})", "'logit_bias.5' must be a number"},
  };
  for (const auto& [body, expected] : cases) {
    const ApiError e = rejection(Endpoint::Chat, body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.type(), "invalid_request_error") << body;
    EXPECT_THAT(e.what(), HasSubstr(expected)) << body;
  }
  EXPECT_THAT(rejection(Endpoint::Completion, R"({"prompt": "x", "logprobs": true})").what(),
              HasSubstr("'logprobs' must be a number of alternatives, an integer from 0 to 20 (got a boolean)"));
  EXPECT_THAT(rejection(Endpoint::Completion, R"({"prompt": "x", "logprobs": 30})").what(),
              HasSubstr("'logprobs' must be an integer from 0 to 20 (got 30)"));
  EXPECT_THAT(rejection(Endpoint::Completion, R"({"prompt": "x", "echo": true})").what(), HasSubstr("'echo' is not supported"));
  EXPECT_THAT(rejection(Endpoint::Completion, R"({"prompt": "x", "best_of": 3})").what(), HasSubstr("'best_of' must be 1"));
  EXPECT_THAT(rejection(Endpoint::Completion, R"({"prompt": "x", "suffix": "y"})").what(), HasSubstr("'suffix' is not supported"));
  Limits limits;
  limits.max_stop_strings = 2;
  try {
    parse_request(Endpoint::Completion, R"({"prompt": "x", "stop": ["a", "b", "c"]})", limits);
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'stop' has 3 strings; at most 2"));
    EXPECT_EQ(e.param(), "stop");
  }
}

TEST(ServerRequest, ReadsToolsToolChoiceAndToolMessages) {
  const CompletionRequest r = parse_request(Endpoint::Chat, R"({
    "messages": [{"role": "user", "content": "Weather?"},
                 {"role": "assistant", "content": null,
                  "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"z\": 1, \"a\": [2]}"}},
                                 {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "not json"}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}},
              {"type": "function", "function": {"name": "now", "description": "the time"}}],
    "tool_choice": {"type": "function", "function": {"name": "now"}}, "parallel_tool_calls": false})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments.dump(), R"({"z":1,"a":[2]})");  // the client's order
  EXPECT_EQ(r.messages[1].tool_calls[1].arguments, "not json");                  // kept as a string
  EXPECT_EQ(r.messages[2].role, "tool");
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"].dump(), R"({"z":{},"a":{}})");
  EXPECT_EQ(r.tool_names(), (std::vector<std::string>{"get_weather", "now"}));
  EXPECT_EQ(r.tool_choice, ToolChoice::Function);
  EXPECT_EQ(r.tool_choice_function, "now");
  EXPECT_FALSE(r.parallel_tool_calls);
  const auto choice = [](const char* c) {
    return parse_request(Endpoint::Chat, fmt::format(R"({{"messages": [{{"role": "user", "content": "x"}}],
        "tools": [{{"type": "function", "function": {{"name": "f"}}}}]{}}})", c)).tool_choice;
  };
  EXPECT_EQ(choice(""), ToolChoice::Auto);
  EXPECT_EQ(choice(R"(, "tool_choice": "none")"), ToolChoice::None);
  EXPECT_EQ(choice(R"(, "tool_choice": "required")"), ToolChoice::Required);
  EXPECT_EQ(parse_request(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "tools": []})").tool_choice, ToolChoice::None);
}

// ---------------------------------------------------------------------------------------------------
// Tool calls read out of replies

ParsedReply whole(ToolCallFormat f, std::string_view text) { return parse_tool_calls(f, {"get_weather", "now"}, text); }

TEST(ServerToolCalls, HermesBlocksAreCallsTheTextAroundThemContent) {
  ParsedReply r = whole(ToolCallFormat::Hermes,
                        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, {\"}\": \"]\"}]}}\n"
                        "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "Paris", "n": [1, {"}": "]"}]})");
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // An unknown function, or a block that is not a call, stays content, whole.
  r = whole(ToolCallFormat::Hermes, "a <tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call> b");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "a <tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call> b");
  r = whole(ToolCallFormat::Hermes, "<tool_call>oops");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "<tool_call>oops");
  // A reply cut inside a call keeps the call, its arguments as far as they came.
  r = whole(ToolCallFormat::Hermes, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"a\": 1");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"a": 1)");
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(whole(ToolCallFormat::Hermes, "no calls\n").content, "no calls\n");
}

TEST(ServerToolCalls, Llama3ReplyIsACallOnlyWhenItIsOneCallObject) {
  ParsedReply r = whole(ToolCallFormat::Llama3Json, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(r.content, "");
  r = whole(ToolCallFormat::Llama3Json, "<|python_tag|>{\"name\": \"now\", \"arguments\": {}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "now");
  for (const char* content : {"{\"answer\": 42}", "It is {\"name\": \"now\"}", "{\"name\": \"rm\", \"parameters\": {}}", "", "  "}) {
    r = whole(ToolCallFormat::Llama3Json, content);
    EXPECT_TRUE(r.calls.empty()) << content;
    EXPECT_EQ(r.content, content);
  }
}

// Streamed in pieces of any size, the events add up to the whole reply's parse, and a call's name comes
// before any of its arguments.
TEST(ServerToolCalls, RandomSplitsGiveTheWholeRepliesCalls) {
  std::mt19937 rng(5);
  const std::vector<std::pair<ToolCallFormat, std::string>> replies = {
      {ToolCallFormat::Hermes, "I will.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\\\"}b\"}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>\n"},
      {ToolCallFormat::Hermes, "<tool_call> {\"name\": \"now\", \"arguments\": [1, 2]} </tool_call> after"},
      {ToolCallFormat::Hermes, "<tool_cal <tool_call>\n{\"name\": \"x\", \"arguments\": 1}</tool_call>"},
      {ToolCallFormat::Llama3Json, "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"{[\"}}"},
      {ToolCallFormat::Llama3Json, "{\"name\": \"get_weather\", \"x\": 1}"},
  };
  for (const auto& [format, text] : replies) {
    const ParsedReply expected = whole(format, text);
    for (int round = 0; round < 300; ++round) {
      ToolCallParser p(format, {"get_weather", "now"});
      ParsedReply got;
      std::vector<bool> named;
      const auto take = [&](const std::vector<ToolCallEvent>& events) {
        for (const ToolCallEvent& e : events) {
          if (e.kind == ToolCallEvent::Kind::Content) got.content += e.text;
          if (e.kind == ToolCallEvent::Kind::Call) {
            ASSERT_EQ(e.index, got.calls.size());
            got.calls.push_back({e.text, ""});
          }
          if (e.kind == ToolCallEvent::Kind::Arguments) {
            ASSERT_LT(e.index, got.calls.size());
            got.calls[e.index].arguments += e.text;
          }
        }
      };
      for (size_t at = 0; at < text.size();) {
        const size_t len = std::uniform_int_distribution<size_t>(1, 6)(rng);
        take(p.push(std::string_view(text).substr(at, std::min(len, text.size() - at))));
        at += len;
      }
      take(p.finish());
      EXPECT_EQ(got.content, expected.content) << text;
      ASSERT_EQ(got.calls.size(), expected.calls.size()) << text;
      for (size_t i = 0; i < got.calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].name, expected.calls[i].name);
        EXPECT_EQ(got.calls[i].arguments, expected.calls[i].arguments);
      }
    }
  }
  // The whole parses, checked by hand.
  ParsedReply r = whole(ToolCallFormat::Hermes, replies[0].second);
  EXPECT_EQ(r.content, "I will.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "a\"}b"})");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  r = whole(ToolCallFormat::Hermes, replies[1].second);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "[1, 2]");
  EXPECT_EQ(r.content, "after");
  r = whole(ToolCallFormat::Hermes, replies[2].second);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, replies[2].second);
  r = whole(ToolCallFormat::Llama3Json, replies[3].second);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city": "{["})");
  EXPECT_TRUE(whole(ToolCallFormat::Llama3Json, replies[4].second).calls.empty());
}

TEST(ServerRequest, DeeplyNestedJsonIsAnErrorNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(rejection(Endpoint::Chat, deep).what(), HasSubstr("must be a JSON object"));
  const std::string deep_field = R"({"messages": )" + deep + "}";
  EXPECT_THAT(rejection(Endpoint::Chat, deep_field).what(), HasSubstr("'messages[0]' must be an object"));
}

TEST(ServerRequest, ErrorsComeInOpenAIsForm) {
  const json j = invalid_request("bad", "top_k").to_json();
  EXPECT_EQ(j, json::parse(R"({"error": {"message": "bad", "type": "invalid_request_error", "param": "top_k", "code": null}})"));
}

// ---------------------------------------------------------------------------------------------------
// Stop strings

// Feeds `pieces` through a filter; returns what was released in total.
std::string filtered(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool* stopped = nullptr) {
  StopFilter f(stops);
  std::string out;
  for (const auto& p : pieces) out += f.push(p);
  out += f.finish();
  if (stopped) *stopped = f.stopped();
  return out;
}

TEST(ServerStopFilter, HoldsBackWhatCouldBeTheStartOfAStopString) {
  StopFilter f({"<END>", "\n\n"});
  EXPECT_EQ(f.push("Hello <E"), "Hello ");
  EXPECT_EQ(f.push("N"), "");
  EXPECT_EQ(f.push("X more\n"), "<ENX more");  // not a stop string after all
  EXPECT_EQ(f.push("\nrest"), "");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.push("anything"), "");
  EXPECT_EQ(f.finish(), "");
}

TEST(ServerStopFilter, TheEarliestStopStringWinsAndTheTailIsReleasedAtTheEnd) {
  bool stopped = false;
  EXPECT_EQ(filtered({"cd", "bcde"}, {"ab", "cdef"}, &stopped), "a");  // "bcde" starts before "cd"
  EXPECT_TRUE(stopped);
  EXPECT_EQ(filtered({"bcde", "cd"}, {"abc", "d"}, &stopped), "ab");  // "bcde" never completes
  EXPECT_EQ(filtered({"xyz"}, {"abx", "y"}, &stopped), "abxy");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(filtered({"\xC3\xA9t\xC3\xA9"}, {"caf\xC3\xA9", " \xC3\xA9t", "\xC3\xA9 fin"}, &stopped), "caf\xC3\xA9 ");
  EXPECT_EQ(filtered({}, {"a", "b"}, &stopped), "ab");
}

// For random texts split at random places: the released text is always a prefix of the text cut before
// the first stop string, and at the end it is all of it; nothing of a stop string is ever released.
TEST(ServerStopFilter, RandomSplitsNeverReleasePartOfAStopString) {
  std::mt19937 rng(5);
  const std::vector<std::string> stops = {"abc", "ba", "cc"};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 30)(rng);
    for (int i = 0; i < n; ++i) text += "abcd"[std::uniform_int_distribution<int>(0, 3)(rng)];
    size_t cut = std::string::npos;
    for (const auto& s : stops) cut = std::min(cut, text.find(s));
    const std::string expected = text.substr(0, cut);
    StopFilter f(stops);
    std::string released;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::uniform_int_distribution<size_t>(1, 4)(rng);
      released += f.push(text.substr(at, len));
      at += len;
      ASSERT_TRUE(expected.starts_with(released)) << text << " released " << released;
    }
    released += f.finish();
    EXPECT_EQ(released, expected) << text;
    EXPECT_EQ(f.stopped(), cut != std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------------
// Reasoning apart from the answer (Qwen3's <think> blocks)

// The Qwen3 template's own split of an earlier reply (python's strip and split, at the first tags), and
// all reasoning when "</think>" never comes: what the splitter must give, written without it.
SplitText template_split(const std::string& text) {
  const auto lstrip = [](std::string t) { return t.erase(0, std::min(t.size(), t.find_first_not_of('\n'))); };
  const auto rstrip = [](std::string t) {
    const size_t end = t.find_last_not_of('\n');
    return t.substr(0, end == std::string::npos ? 0 : end + 1);
  };
  if (!lstrip(text).starts_with("<think>")) return {"", text};
  const std::string after_open = text.substr(text.find("<think>") + 7);
  const size_t close = after_open.find("</think>");
  if (close == std::string::npos) return {lstrip(rstrip(after_open)), ""};
  return {lstrip(rstrip(after_open.substr(0, close))), lstrip(after_open.substr(close + 8))};
}

TEST(ServerReasoning, ThinkBlocksBecomeReasoningTheRestContent) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"<think>\nPlan it.\n</think>\n\nThe answer.", "Plan it.", "The answer."},
      {"<think>PlanOK</think>Answer", "PlanOK", "Answer"},
      {"\n\n<think>\nx\n\n</think>y\n", "x", "y\n"},
      {"<think>\n\n</think>\n\nJust this.", "", "Just this."},
      {"<think>\nstill thinking when max_tokens came\n\n", "still thinking when max_tokens came", ""},
      {"<think>\nhalf a tag </thi", "half a tag </thi", ""},
      {"No thinking here, not even <think>.", "", "No thinking here, not even <think>."},
      {"<thinking> is another tag", "", "<thinking> is another tag"},
      {"\n<thi", "", "\n<thi"},
      {"", "", ""},
  };
  for (const auto& [text, reasoning, content] : cases) {
    const SplitText got = split_reasoning(text);
    EXPECT_EQ(got.reasoning, reasoning) << text;
    EXPECT_EQ(got.content, content) << text;
    const SplitText ref = template_split(text);
    EXPECT_EQ(ref.reasoning, reasoning) << "the test's reference disagrees: " << text;
    EXPECT_EQ(ref.content, content) << "the test's reference disagrees: " << text;
  }
}

TEST(ServerReasoning, RandomSplitsGiveTheWholeTextsParts) {
  std::mt19937 rng(11);
  const std::vector<std::string> words = {"<think>", "</think>", "\n", "\n\n", "<", "</", "<th", "a", "bc", " ", "think>"};
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < n; ++i) text += words[std::uniform_int_distribution<size_t>(0, words.size() - 1)(rng)];
    const SplitText expected = template_split(text);
    ReasoningSplitter s;
    SplitText got;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::uniform_int_distribution<size_t>(1, 5)(rng);
      const SplitText part = s.push(std::string_view(text).substr(at, std::min(len, text.size() - at)));
      got.reasoning += part.reasoning, got.content += part.content;
      at += len;
      // Nothing released is taken back: what is out is a beginning of the final parts.
      ASSERT_TRUE(expected.reasoning.starts_with(got.reasoning)) << text;
      ASSERT_TRUE(expected.content.starts_with(got.content)) << text;
    }
    const SplitText rest = s.finish();
    EXPECT_EQ(got.reasoning + rest.reasoning, expected.reasoning) << text;
    EXPECT_EQ(got.content + rest.content, expected.content) << text;
  }
}

// ---------------------------------------------------------------------------------------------------
// Response shapes and metrics

TEST(ServerJson, ChunksAndResponsesHaveOpenAIsShape) {
  ResponseIds ids{Endpoint::Chat, "chatcmpl-1", 1700000000, "m"};
  JobOutcome o;
  o.finish_reason = "stop";
  o.prompt_tokens = 10;
  o.cached_tokens = 4;
  o.completion_tokens = 3;
  const json first = text_chunk(ids, "Hi", true, false);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": "Hi"})"));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  EXPECT_EQ(text_chunk(ids, "x", false, true)["choices"][0]["delta"], json::parse(R"({"content": "x"})"));
  EXPECT_TRUE(text_chunk(ids, "x", false, true)["usage"].is_null());
  const json fin = finish_chunk(ids, o, false);
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  const json usage = usage_chunk(ids, o);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"], json::parse(R"({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                                             "prompt_tokens_details": {"cached_tokens": 4}})"));
  EXPECT_EQ(timings_json(o)["draft_n"], 0);
  o.drafted_tokens = 9, o.accepted_tokens = 4;
  EXPECT_EQ(timings_json(o)["draft_n"], 9);
  EXPECT_EQ(timings_json(o)["draft_n_accepted"], 4);
  const json full = full_response(ids, "Hello", o);
  EXPECT_EQ(full["timings"]["draft_n_accepted"], 4);
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(full["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(full["usage"]["total_tokens"], 13);
  EXPECT_FALSE(full["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(full_response(ids, "Hello", o, "Plan")["choices"][0]["message"]["reasoning_content"], "Plan");
  EXPECT_EQ(text_chunk(ids, "Pl", true, false, true)["choices"][0]["delta"],
            json::parse(R"({"role": "assistant", "reasoning_content": "Pl"})"));

  ids.endpoint = Endpoint::Completion;
  EXPECT_EQ(text_chunk(ids, "t", true, false)["choices"][0]["text"], "t");
  EXPECT_EQ(full_response(ids, "t", o)["object"], "text_completion");
  EXPECT_EQ(full_response(ids, "t", o)["choices"][0]["text"], "t");
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(dump(json("\xFF")), "\"\xEF\xBF\xBD\"");  // invalid UTF-8 is replaced, not an exception
}

TEST(ServerMetrics, PrometheusTextWithCountsHistogramsAndEscapedLabels) {
  Metrics m;
  m.count_http("/v1/completions", 200);
  m.count_http("/v1/completions", 200);
  m.count_http("other", 404);
  GenerationRecord g;
  g.endpoint = "chat";
  g.finish_reason = "stop";
  g.prompt_tokens = 10;
  g.cached_tokens = 6;
  g.completion_tokens = 5;
  g.has_first_token = true;
  g.first_token_seconds = 0.003;
  g.queue_seconds = 0.0005;
  g.decode_tokens = 4;
  g.decode_seconds = 0.5;
  m.record(g);
  const std::string text = m.render({2, 16, true, false, ""}, "my \"model\"\\", "emu");
  EXPECT_THAT(text, HasSubstr("mk_http_requests_total{path=\"/v1/completions\",status=\"200\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("mk_http_requests_total{path=\"other\",status=\"404\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mk_generations_total{endpoint=\"chat\",finish_reason=\"stop\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mk_prompt_cached_tokens_total 6\n"));
  EXPECT_THAT(text, HasSubstr("mk_decode_tokens_per_second 8\n"));
  EXPECT_THAT(text, HasSubstr("mk_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("mk_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mk_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("mk_time_to_first_token_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr("mk_queue_length 2\n"));
  EXPECT_THAT(text, HasSubstr("mk_generating 1\n"));
  EXPECT_THAT(text, HasSubstr("mk_info{model=\"my \\\"model\\\"\\\\\",backend=\"emu\"} 1\n"));
  // Every line is a comment or "name{labels} value".
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    EXPECT_THAT(line, ::testing::MatchesRegex(R"(# (HELP|TYPE) .*|[a-z_]+(\{.*\})? [-+0-9.e]+|[a-z_]+\{.*\} \+?Inf)")) << line;
}

// ---------------------------------------------------------------------------------------------------
// The generation queue, on the emulator

class ServerScheduler : public ::testing::Test {
 protected:
  static Engine& engine() {
    static const test::ScopedTinyChatModel model("server-units");
    static const std::unique_ptr<Engine> e = [] {
      EngineOptions o;
      o.backend = BackendChoice::Emulator;
      o.context = 4096;
      return Engine::open(model.dir, o);
    }();
    return *e;
  }

  void SetUp() override {
    session_ = engine().create_session();
    scheduler_ = std::make_unique<Scheduler>(*session_, engine().tokenizer(), 2, metrics_);
  }
  void TearDown() override { scheduler_.reset(); }

  static std::shared_ptr<Job> job(const std::string& prompt, int max_tokens, std::vector<std::string> stop = {}) {
    auto j = std::make_shared<Job>();
    j->endpoint = Endpoint::Completion;
    j->prompt = engine().tokenizer().encode(prompt, true);
    j->params.max_tokens = max_tokens;
    j->stop = std::move(stop);
    return j;
  }

  // Everything the job releases, until it is done.
  static std::string drain(Job& j) {
    std::string text;
    for (;;) {
      auto u = j.wait(std::chrono::milliseconds(100));
      text += u.text;
      if (u.done) return text;
    }
  }

  Metrics metrics_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(ServerScheduler, RunsJobsInOrderAndReleasesTheirText) {
  auto a = job("first", 6), b = job("second", 4);
  ASSERT_EQ(scheduler_->submit(a), Scheduler::Admission::Queued);
  ASSERT_EQ(scheduler_->submit(b), Scheduler::Admission::Queued);
  const std::string ta = drain(*a), tb = drain(*b);
  const JobOutcome oa = a->outcome(), ob = b->outcome();
  EXPECT_EQ(oa.finish_reason, "length");
  EXPECT_EQ(oa.completion_tokens, 6);
  EXPECT_EQ(ob.completion_tokens, 4);
  EXPECT_EQ(oa.prompt_tokens, int(a->prompt.size()));
  EXPECT_GE(ob.queue_seconds, oa.queue_seconds);
  // The same text as the engine gives for the prompt on a fresh session.
  auto fresh = engine().create_session();
  EXPECT_EQ(ta, engine().tokenizer().decode(fresh->complete(a->prompt, a->params, {}).tokens));
  EXPECT_EQ(tb, engine().tokenizer().decode(fresh->complete(b->prompt, b->params, {}).tokens));
}

TEST_F(ServerScheduler, AStopStringEndsTheReplyBeforeIt) {
  // Find a stop string in what the model says, then ask again with it.
  auto probe = job("Tell me", 40);
  scheduler_->submit(probe);
  const std::string full = drain(*probe);
  ASSERT_GE(full.size(), 20u);
  const std::string stop = full.substr(10, 3);
  const size_t at = full.find(stop);
  auto j = job("Tell me", 40, {stop});
  scheduler_->submit(j);
  EXPECT_EQ(drain(*j), full.substr(0, at));
  const JobOutcome o = j->outcome();
  EXPECT_EQ(o.finish_reason, "stop");
  EXPECT_LT(o.completion_tokens, 40);
  EXPECT_EQ(o.cached_tokens, int(j->prompt.size()) - 1);  // the same prompt again: all but its last token
}

TEST_F(ServerScheduler, AFullQueueRefusesAndCancelledJobsLeaveIt) {
  auto running = job("long", 100000);
  ASSERT_EQ(scheduler_->submit(running), Scheduler::Admission::Queued);
  while (!running->started()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto w1 = job("one", 3), w2 = job("two", 3), w3 = job("three", 3);
  EXPECT_EQ(scheduler_->submit(w1), Scheduler::Admission::Queued);
  EXPECT_EQ(scheduler_->submit(w2), Scheduler::Admission::Queued);
  EXPECT_EQ(scheduler_->submit(w3), Scheduler::Admission::QueueFull);  // capacity 2
  EXPECT_EQ(scheduler_->state().waiting, 2u);
  EXPECT_TRUE(scheduler_->state().generating);

  scheduler_->cancel(w1);  // waiting: leaves the queue at once
  EXPECT_TRUE(w1->wait(std::chrono::milliseconds(0)).done);
  EXPECT_EQ(w1->outcome().finish_reason, "cancelled");
  EXPECT_EQ(scheduler_->state().waiting, 1u);
  EXPECT_EQ(scheduler_->submit(w3), Scheduler::Admission::Queued);

  scheduler_->cancel(running);  // running: stops at the next token
  drain(*running);
  EXPECT_EQ(running->outcome().finish_reason, "cancelled");
  EXPECT_LT(running->outcome().completion_tokens, 4000);
  drain(*w2);
  drain(*w3);
  EXPECT_EQ(w2->outcome().finish_reason, "length");
  EXPECT_EQ(w3->outcome().finish_reason, "length");
  scheduler_->cancel(w2);  // finished: nothing happens
  EXPECT_EQ(w2->outcome().finish_reason, "length");
  EXPECT_THAT(metrics_.render(scheduler_->state(), "m", "b"),
              HasSubstr("mk_generations_total{endpoint=\"completion\",finish_reason=\"cancelled\"} 2\n"));
}

TEST_F(ServerScheduler, StoppingEndsEveryJobAndRefusesNewOnes) {
  auto running = job("long", 100000), waiting = job("next", 3);
  scheduler_->submit(running);
  scheduler_->submit(waiting);
  while (!running->started()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  scheduler_->stop();
  EXPECT_TRUE(running->wait(std::chrono::milliseconds(0)).done);
  EXPECT_TRUE(waiting->wait(std::chrono::milliseconds(0)).done);
  EXPECT_EQ(running->outcome().finish_reason, "cancelled");
  EXPECT_EQ(waiting->outcome().finish_reason, "cancelled");
  EXPECT_EQ(scheduler_->submit(job("late", 1)), Scheduler::Admission::Stopping);
  scheduler_->stop();  // twice is fine
}

// A backend whose every launch hangs and does not stop (on a GPU: the device is lost).
class LostDevice final : public DecodeBackend {
 public:
  explicit LostDevice(int context) : context_(context) {}
  GenerateResult generate(const GenerateRequest&, const TokenCallback&) override {
    throw HangError("decode launch hung (layer 3 down) and did not stop when aborted", /*stopped=*/false);
  }
  void cancel() override {}
  void reset() override {}
  int position() const override { return 0; }
  int context() const override { return context_; }
  std::string name() const override { return "lost device"; }

 private:
  int context_;
};

TEST(ServerHealth, OkWhileTheDeviceWorks503OnceItIsLost) {
  const HealthReply ok = health_reply(QueueState{1, 4, true, false, ""});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, json({{"status", "ok"}, {"queue_length", 1}, {"generating", true}}));

  const test::ScopedTinyChatModel model("server-lost-device");
  Engine engine(Tokenizer::load(model.dir), ChatTemplate::load(model.dir), "", {model.ids.im_end},
                [] { return std::unique_ptr<DecodeBackend>(new LostDevice(512)); });
  auto session = engine.create_session();
  Metrics metrics;
  Scheduler scheduler(*session, engine.tokenizer(), 2, metrics);
  EXPECT_FALSE(scheduler.state().device_lost);
  auto j = std::make_shared<Job>();
  j->endpoint = Endpoint::Completion;
  j->prompt = engine.tokenizer().encode("hello", true);
  j->params.max_tokens = 4;
  ASSERT_EQ(scheduler.submit(j), Scheduler::Admission::Queued);
  while (!j->wait(std::chrono::milliseconds(100)).done) {
  }
  EXPECT_EQ(j->outcome().finish_reason, "error");
  EXPECT_THAT(j->outcome().error, HasSubstr("did not stop"));
  const QueueState q = scheduler.state();
  EXPECT_TRUE(q.device_lost);
  const HealthReply lost = health_reply(q);
  EXPECT_EQ(lost.status, 503);
  EXPECT_EQ(lost.body["status"], "device_lost");
  EXPECT_THAT(lost.body["error"].get<std::string>(), HasSubstr("layer 3 down"));
}

// ---------------------------------------------------------------------------------------------------
// Request framing (the fuzz target tests/fuzz/fuzz_request_framing.cpp checks it on random bytes)

TEST(ServerFraming, ARequestIsWholeWithItsDeclaredBody) {
  using S = RequestFraming::State;
  RequestFraming f(1000, 100);
  EXPECT_EQ(f.add("POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 1\r\n"), S::NeedMore);  // the first counts
  EXPECT_EQ(f.add("\r\nab"), S::NeedMore);
  EXPECT_FALSE(f.take_continue());
  EXPECT_EQ(f.add("cd"), S::Whole);
  EXPECT_EQ(f.add("more"), S::Whole);  // decided: what follows changes nothing
  EXPECT_EQ(f.bytes(), "POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 1\r\n\r\nabcdmore");

  EXPECT_EQ(RequestFraming(1000, 100).add("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), S::Whole);
  EXPECT_EQ(RequestFraming(1000, 100).add("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n"), S::Whole);
  EXPECT_EQ(RequestFraming(1000, 100).add("POST / HTTP/1.1\r\nContent-Length: 4x\r\n\r\n"), S::Whole);  // the server judges it
  EXPECT_EQ(RequestFraming(1000, 100).add("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n"), S::BodyTooLarge);
  EXPECT_EQ(RequestFraming(30, 100).add("GET / HTTP/1.1\r\nX-Long: 0123456789\r\n\r\n"), S::HeadersTooLarge);
  EXPECT_EQ(RequestFraming(30, 100).add(std::string(31, 'x')), S::HeadersTooLarge);
  EXPECT_EQ(RequestFraming(30, 100).add(std::string(30, 'x')), S::NeedMore);
}

TEST(ServerFraming, ExpectContinueIsAnsweredOnceAndTakenOut) {
  using S = RequestFraming::State;
  RequestFraming f(1000, 100);
  EXPECT_EQ(f.add("POST / HTTP/1.1\r\nexpect:  100-CONTINUE \r\nContent-Length: 2\r\n\r\n"), S::NeedMore);
  EXPECT_TRUE(f.take_continue());
  EXPECT_FALSE(f.take_continue());
  EXPECT_EQ(f.add("{}"), S::Whole);
  EXPECT_EQ(f.bytes(), "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
  // The body came with the headers: nothing to answer, the header stays.
  RequestFraming g(1000, 100);
  EXPECT_EQ(g.add("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}"), S::Whole);
  EXPECT_FALSE(g.take_continue());
  // After a bare LF line the Expect line and the headers' end overlap: answered, but the line stays (the
  // fuzz target found the case).
  RequestFraming h(1000, 100);
  const std::string head = "POST / HTTP/1.1\r\nContent-Length: 2\nExpect: 100-continue\r\n\r\n";
  EXPECT_EQ(h.add(head), S::NeedMore);
  EXPECT_TRUE(h.take_continue());
  EXPECT_EQ(h.add("{}"), S::Whole);
  EXPECT_EQ(h.bytes(), head + "{}");
}

// ---------------------------------------------------------------------------------------------------
// The request gate, over socketpairs: the test holds the client's end.

class ServerGate : public ::testing::Test {
 protected:
  struct Handed {
    int socket;
    std::string bytes;
  };

  void start(GateLimits limits) {
    gate_ = std::make_unique<RequestGate>(
        limits,
        [this](int sock, std::string bytes) {
          std::lock_guard lock(mutex_);
          handed_.push_back({sock, std::move(bytes)});
          changed_.notify_all();
        },
        [](int status) { return "refused " + std::to_string(status); });
  }

  ~ServerGate() override {
    if (gate_) gate_->stop();
    for (const Handed& h : handed_) ::close(h.socket);
    for (int c : clients_) ::close(c);
  }

  int connect() {
    int pair[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    clients_.push_back(pair[0]);
    gate_->admit(pair[1]);
    return pair[0];
  }

  static void send_text(int client, std::string_view text) {
    ASSERT_EQ(::send(client, text.data(), text.size(), MSG_NOSIGNAL), ssize_t(text.size()));
  }

  // What the gate sent back until it closed the connection (or 5 s passed); then the client hangs up too.
  static std::string read_until_closed(int client) {
    timeval tv{5, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(client, buf, sizeof buf, 0)) > 0;) out.append(buf, size_t(n));
    ::shutdown(client, SHUT_RDWR);
    return out;
  }

  std::vector<Handed> handed(size_t at_least, std::chrono::milliseconds wait = std::chrono::seconds(5)) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, wait, [&] { return handed_.size() >= at_least; });
    return handed_;
  }

  std::unique_ptr<RequestGate> gate_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Handed> handed_;
  std::vector<int> clients_;
};

TEST_F(ServerGate, HandsARequestOverOnlyOnceItsBodyHasArrived) {
  start({});
  const int c = connect();
  send_text(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-length:  10 \r\n\r\n01234");
  EXPECT_TRUE(handed(1, std::chrono::milliseconds(200)).empty());
  EXPECT_EQ(gate_->pending(), 1u);
  send_text(c, "56789");
  const auto h = handed(1);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].bytes, "POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-length:  10 \r\n\r\n0123456789");
  EXPECT_EQ(gate_->pending(), 0u);
  // The socket is the server's now, blocking: what the client sends next reaches it.
  send_text(c, "more");
  char buf[8];
  EXPECT_EQ(::recv(h[0].socket, buf, sizeof buf, 0), 4);
}

TEST_F(ServerGate, RequestsWithoutABodyGoAtTheirHeadersEnd) {
  start({});
  const int get = connect(), chunked = connect();
  send_text(get, "GET /health HTTP/1.1\r\n");
  send_text(get, "\r\n");
  send_text(chunked, "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n");
  const auto h = handed(2);
  ASSERT_EQ(h.size(), 2u);
}

TEST_F(ServerGate, AnswersOneHundredContinueAndTakesTheExpectationOut) {
  start({});
  const int c = connect();
  send_text(c, "POST /v1/completions HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n");
  char buf[64] = {};
  ASSERT_GT(::recv(c, buf, sizeof buf - 1, 0), 0);
  EXPECT_STREQ(buf, "HTTP/1.1 100 Continue\r\n\r\n");
  send_text(c, "{}");
  const auto h = handed(1);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].bytes, "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
}

TEST_F(ServerGate, ABodyOverTheLimitGoesAtItsHeadersForTheServerToRefuse) {
  GateLimits limits;
  limits.max_body_bytes = 100;
  start(limits);
  const int c = connect();
  send_text(c, "POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 101\r\n\r\n");
  const auto h = handed(1);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_THAT(h[0].bytes, HasSubstr("Expect: 100-continue"));  // the server answers it (413)
}

TEST_F(ServerGate, RefusesLateRequestsAndEndlessHeaders) {
  GateLimits limits;
  limits.whole_request = std::chrono::milliseconds(300);
  limits.first_byte = std::chrono::milliseconds(200);
  limits.max_header_bytes = 1000;
  start(limits);
  const int slow = connect(), silent = connect(), endless = connect();
  send_text(slow, "POST /v1/completions HTTP/1.1\r\nContent-Le");
  send_text(endless, "GET / HTTP/1.1\r\n" + std::string(1100, 'x'));
  EXPECT_EQ(read_until_closed(endless), "refused 431");
  for (int i = 0; i < 50 && gate_->pending() != 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(gate_->pending(), 2u);  // the refused one has left once its client hung up
  const int leaving = connect();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_until_closed(silent), "");  // closed without an answer
  EXPECT_EQ(read_until_closed(slow), "refused 408");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ::shutdown(leaving, SHUT_WR);  // a client that leaves before its request: closed, never handed over
  EXPECT_EQ(read_until_closed(leaving), "");
  EXPECT_TRUE(handed(1, std::chrono::milliseconds(100)).empty());
  EXPECT_EQ(gate_->pending(), 0u);
}

TEST_F(ServerGate, WhenFullTheConnectionThatWaitedLongestLeaves) {
  GateLimits limits;
  limits.max_pending = 3;
  start(limits);
  std::vector<int> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(connect());
    send_text(slow.back(), "GET /he");
    for (int t = 0; t < 100 && gate_->pending() != size_t(i + 1); ++t) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int prompt = connect();
  send_text(prompt, "GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_until_closed(slow[0]), "refused 503");
  const auto h = handed(1);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].bytes, "GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(gate_->pending(), 2u);  // the two younger slow ones
}

TEST_F(ServerGate, ARefusedClientThatGoesOnSendingIsClosedAfterALinger) {
  GateLimits limits;
  limits.max_header_bytes = 100;
  start(limits);
  const int c = connect();
  send_text(c, "GET / HTTP/1.1\r\n" + std::string(200, 'x'));
  char buf[64] = {};
  ASSERT_GT(::recv(c, buf, sizeof buf - 1, 0), 0);
  EXPECT_STREQ(buf, "refused 431");
  send_text(c, "still sending");  // read and dropped, so that the answer is not lost to a reset
  EXPECT_EQ(gate_->pending(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  while (gate_->pending() != 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(gate_->pending(), 0u);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(800));
}

TEST_F(ServerGate, RefusesReadsPastTheBufferedBytesLimit) {
  GateLimits limits;
  limits.max_buffered_bytes = 100;
  start(limits);
  const int first = connect(), second = connect();
  const std::string head = "POST / HTTP/1.1\r\nContent-Length: 50\r\n\r\n";  // 39 bytes, then waits for its body
  send_text(first, head);
  for (int i = 0; i < 100 && gate_->pending() != 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  send_text(second, std::string(70, 'x'));  // 39 + 70 > 100
  EXPECT_EQ(read_until_closed(second), "refused 503");
  send_text(first, std::string(50, 'b'));  // the first one's bytes still fit: served
  const auto h = handed(1);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].bytes, head + std::string(50, 'b'));
}

TEST_F(ServerGate, StoppingClosesTheConnectionsStillArriving) {
  start({});
  const int c = connect();
  send_text(c, "GET /he");
  for (int i = 0; i < 100 && gate_->pending() != 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  gate_->stop();
  EXPECT_EQ(read_until_closed(c), "");
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  gate_->admit(pair[1]);  // closed at once
  EXPECT_EQ(read_until_closed(pair[0]), "");
  ::close(pair[0]);
  EXPECT_TRUE(handed(1, std::chrono::milliseconds(50)).empty());
}

}  // namespace
}  // namespace mk::server
