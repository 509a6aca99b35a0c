// Constrained decoding's compilers (runtime/byte_automaton, regex_syntax, json_schema, token_automaton):
// the languages they accept, against strings written by hand; their errors, naming what they refuse; the
// closing sets that end a reply within its token budget (runtime/constraint_budget.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "runtime/byte_automaton.h"
#include "runtime/json_schema.h"
#include "runtime/regex_syntax.h"
#include "runtime/token_automaton.h"
#include "runtime/tool_call_grammar.h"

namespace mk::constraint {
namespace {

using ::testing::HasSubstr;

ByteDfa regex_dfa(std::string_view re) {
  Nfa nfa;
  return determinize(nfa, compile_regex(nfa, re, RegexTarget::Utf8, "regex"), "regex");
}

ByteDfa schema_dfa(std::string_view schema) {
  ConstraintSpec spec{ConstraintSpec::Kind::JsonSchema, std::string(schema)};
  return compile_constraint(spec);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConstraintError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Regex, MatchesWholeStringsOfItsLanguage) {
  const ByteDfa d = regex_dfa("^[a-c]+(x|yz){1,2}\\d?$");
  for (const char* yes : {"ax", "abcyz", "cxyz", "ax7", "bbyzyz0"}) EXPECT_TRUE(d.matches(yes)) << yes;
  for (const char* no : {"", "x", "axxx", "ax77", "dax", "ayz y"}) EXPECT_FALSE(d.matches(no)) << no;
}

TEST(Regex, ClassesEscapesAndUnicode) {
  const ByteDfa d = regex_dfa("[^a-z\\d]\\w\\s.\\u00e9[α-ω]");
  EXPECT_TRUE(d.matches("A_ x\xc3\xa9\xce\xb2"));   // A _ space x é β
  EXPECT_TRUE(d.matches("\xe2\x82\xac" "9\t\xf0\x9f\x98\x80\xc3\xa9\xcf\x89"));  // € 9 tab 😀 é ω
  EXPECT_FALSE(d.matches("a_ x\xc3\xa9\xce\xb2"));  // a is in a-z
  EXPECT_FALSE(d.matches("A_ \n\xc3\xa9\xce\xb2"));  // . is not a line terminator
  EXPECT_FALSE(d.matches("A_ x\xc3\xa9\xce"));       // a truncated code point
  const ByteDfa any = regex_dfa(".");
  EXPECT_FALSE(any.matches("\xed\xa0\x80"));  // an encoded surrogate is not UTF-8
  EXPECT_FALSE(any.matches("\xc0\xaf"));      // nor is an overlong form
  EXPECT_TRUE(any.matches("\xf4\x8f\xbf\xbf"));
  EXPECT_FALSE(any.matches("\xf4\x90\x80\x80"));  // above U+10FFFF
}

TEST(Regex, BoundedRepetitionCountsExactly) {
  const ByteDfa d = regex_dfa("a{2,4}b{3}c{2,}");
  EXPECT_TRUE(d.matches("aabbbcc"));
  EXPECT_TRUE(d.matches("aaaabbbccccc"));
  EXPECT_FALSE(d.matches("abbbcc"));
  EXPECT_FALSE(d.matches("aaaaabbbcc"));
  EXPECT_FALSE(d.matches("aabbbc"));
}

TEST(Regex, RefusesWhatItCannotCompileByName) {
  EXPECT_THAT(error_of([] { regex_dfa("(a)\\1"); }), HasSubstr("back-references are not supported"));
  EXPECT_THAT(error_of([] { regex_dfa("a(?=b)"); }), HasSubstr("lookaround"));
  EXPECT_THAT(error_of([] { regex_dfa("\\bword"); }), HasSubstr("\\b (a word boundary)"));
  EXPECT_THAT(error_of([] { regex_dfa("\\p{L}"); }), HasSubstr("\\p{...}"));
  EXPECT_THAT(error_of([] { regex_dfa("a{2000}"); }), HasSubstr("above 1000"));
  EXPECT_THAT(error_of([] { regex_dfa("a$b"); }), HasSubstr("'$' before the end"));
  EXPECT_THAT(error_of([] { regex_dfa("[a-"); }), HasSubstr("unterminated character class"));
  EXPECT_THAT(error_of([] { regex_dfa("[]"); }), HasSubstr("matches no string"));
}

TEST(Dfa, IsMinimal) {
  // (a|b)*abb: the textbook's minimal DFA has 4 states.
  EXPECT_EQ(regex_dfa("(a|b)*abb").states(), 4);
  EXPECT_EQ(regex_dfa("x(ab|ab)y").states(), 5);
}

TEST(Dfa, IntersectionIsBoth) {
  const ByteDfa x = intersect(regex_dfa("[a-z]*q[a-z]*"), regex_dfa("[a-m]{3,5}|[p-z]{2}"), "test");
  EXPECT_FALSE(x.matches("abc"));
  EXPECT_TRUE(x.matches("qz"));
  EXPECT_FALSE(x.matches("aqz"));
  EXPECT_THAT(error_of([] { intersect(regex_dfa("a+"), regex_dfa("b+"), "this pair"); }), HasSubstr("this pair matches no string"));
}

TEST(JsonSchema, ObjectsTakeTheirPropertiesInOrderWithTheRequiredOnes) {
  const ByteDfa d = schema_dfa(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
      "c": {"type": "boolean"}}, "required": ["b"], "additionalProperties": false})");
  for (const char* yes : {R"({"b":""})", R"({"a":1,"b":"x"})", R"({"a": -20, "b": "x\n\u00e9", "c": true})", R"({"b":"y","c":false})"})
    EXPECT_TRUE(d.matches(yes)) << yes;
  for (const char* no : {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x",})", R"({"b":"x","d":1})", R"({"a":01,"b":""})",
                         R"({ "b":""})", R"({"b":"\ud83d"})"})
    EXPECT_FALSE(d.matches(no)) << no;
}

TEST(JsonSchema, ArraysCountTheirItems) {
  const ByteDfa d = schema_dfa(R"({"type": "array", "items": {"enum": ["x", 2, null]}, "minItems": 1, "maxItems": 3})");
  for (const char* yes : {R"(["x"])", R"([2, null])", R"(["x",2,"x"])"}) EXPECT_TRUE(d.matches(yes)) << yes;
  for (const char* no : {R"([])", R"(["x",2,"x",2])", R"(["y"])", R"([2,])"}) EXPECT_FALSE(d.matches(no)) << no;
  const ByteDfa any = schema_dfa(R"({"type": "array"})");
  EXPECT_TRUE(any.matches(R"([])"));
  EXPECT_TRUE(any.matches(R"([1, {"k": [true]}, "s", -0.5e+10])"));
}

TEST(JsonSchema, StringsCountCodePointsAndFollowTheirPattern) {
  const ByteDfa len = schema_dfa(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(len.matches(R"("ab")"));
  EXPECT_TRUE(len.matches("\"\xc3\xa9\\n\xf0\x9f\x98\x80\""));  // é, an escape, 😀: three code points
  EXPECT_FALSE(len.matches(R"("a")"));
  EXPECT_FALSE(len.matches(R"("abcd")"));
  const ByteDfa pat = schema_dfa(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d+$"})");
  EXPECT_TRUE(pat.matches(R"("AB-123")"));
  EXPECT_FALSE(pat.matches(R"("AB-")"));
  const ByteDfa quote = schema_dfa(R"({"type": "string", "pattern": "a\"b\\\\"})");  // a"b\ in the string
  EXPECT_TRUE(quote.matches(R"("a\"b\\")"));
  const ByteDfa both = schema_dfa(R"({"type": "string", "pattern": "^[a-z]+$", "maxLength": 2})");
  EXPECT_TRUE(both.matches(R"("ab")"));
  EXPECT_FALSE(both.matches(R"("abc")"));
  EXPECT_FALSE(both.matches(R"("")"));
}

TEST(JsonSchema, RefsAnyOfConstAndTypeLists) {
  const ByteDfa d = schema_dfa(R"({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
      "anyOf": [{"$ref": "#/$defs/p"}, {"const": "none"}, {"type": ["integer", "null"]}]})");
  for (const char* yes : {R"({"x":1.5e3})", R"("none")", "null", "-7"}) EXPECT_TRUE(d.matches(yes)) << yes;
  for (const char* no : {R"({"x":1.5e})", R"("other")", "1.5", "{}"}) EXPECT_FALSE(d.matches(no)) << no;
}

TEST(JsonSchema, RefusesByNameWhatItDoesNotSupport) {
  EXPECT_THAT(error_of([] { schema_dfa(R"({"type": "integer", "minimum": 3})"); }),
              HasSubstr("json_schema at /minimum: the keyword \"minimum\" is not supported"));
  EXPECT_THAT(error_of([] { schema_dfa(R"({"properties": {"a": {"type": "string", "format": "email"}}})"); }),
              HasSubstr("/properties/a/format: the keyword \"format\""));
  EXPECT_THAT(error_of([] { schema_dfa(R"({"$defs": {"n": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}, "$ref": "#/$defs/n"})"); }),
              HasSubstr("recursive"));
  EXPECT_THAT(error_of([] { schema_dfa(R"({"$ref": "#/$defs/missing"})"); }), HasSubstr("names nothing"));
  EXPECT_THAT(error_of([] { schema_dfa(R"({"type": "object", "properties": {}, "required": ["a"]})"); }),
              HasSubstr("/required: names \"a\""));
  EXPECT_THAT(error_of([] { schema_dfa(R"({"type": "string", "maxLength": 5000})"); }), HasSubstr("above the supported 1000"));
  EXPECT_THAT(error_of([] { schema_dfa(R"({"type": "strin"})"); }), HasSubstr("\"strin\" is not a JSON Schema type"));
  EXPECT_THAT(error_of([] { schema_dfa(R"({"type": "string",)"); }), HasSubstr("json_schema: not valid JSON"));
  std::string deep = R"({"type": "string"})";
  for (int i = 0; i < 40; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  EXPECT_THAT(error_of([&] { schema_dfa(deep); }), HasSubstr("deeper than the supported 32 levels"));
}

TEST(JsonObject, IsAnyObjectUpToItsDepth) {
  const ByteDfa d = compile_constraint({ConstraintSpec::Kind::JsonObject, ""});
  EXPECT_TRUE(d.matches("{}"));
  EXPECT_TRUE(d.matches(R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(d.matches("[]"));
  EXPECT_FALSE(d.matches(R"({"a": 1)"));
  EXPECT_TRUE(d.matches(R"({"a":{"b":{"c":[1]}}})"));
  EXPECT_FALSE(d.matches(R"({"a":{"b":{"c":{"d":[1]}}}})"));  // five levels: one more than kFreeFormJsonDepth
}

// A vocabulary of single characters and a few longer pieces.
std::shared_ptr<const TokenVocabulary> small_vocabulary() {
  std::vector<std::string> tokens = {"<eos>"};  // id 0: special (no bytes here), the EOS
  tokens[0].clear();
  for (int c = 32; c < 127; ++c) tokens.push_back(std::string(1, char(c)));
  for (const char* piece : {"{\"", "\":", "\"}", "true", "ab", "abc", "123", "\",\""}) tokens.push_back(piece);
  return std::make_shared<TokenVocabulary>(tokens, std::vector<int32_t>{0});
}

int32_t id_of(const TokenVocabulary& v, std::string_view bytes) {
  for (int32_t t = 0; t < v.size(); ++t)
    if (v.bytes(t) == bytes) return t;
  return -1;
}

// tool_choice required / a named function: calls in the model's format, arguments under their schema.
std::vector<ToolFunction> weather_and_now() {
  return {{"get_weather",
           nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                          "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false})"),
           "tools[0].function.parameters"},
          {"now", std::nullopt, "tools[1].function.parameters"}};
}

TEST(ToolCalls, HermesCallsOneOrMoreWithValidArguments) {
  const ByteDfa several = compile_constraint(tool_call_constraint(ToolCallFormat::Hermes, weather_and_now(), true));
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>";
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  for (const std::string& yes : {weather, now, weather + "\n" + now, now + "\n" + now + "\n" + weather}) EXPECT_TRUE(several.matches(yes)) << yes;
  for (const std::string& no : std::vector<std::string>{"", "text " + weather, weather + "\n", weather + now,
                               "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>",
                               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Reykjavik\", \"unit\": \"c\"}}\n</tool_call>",
                               "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\": 1}}\n</tool_call>"})
    EXPECT_FALSE(several.matches(no)) << no;
  std::string most = now;
  for (int i = 1; i < kMaxToolCalls; ++i) most += "\n" + now;
  EXPECT_TRUE(several.matches(most));
  EXPECT_FALSE(several.matches(most + "\n" + now));
  const ByteDfa one = compile_constraint(tool_call_constraint(ToolCallFormat::Hermes, weather_and_now(), false));
  EXPECT_TRUE(one.matches(now));
  EXPECT_FALSE(one.matches(now + "\n" + now));
}

// Qwen3 with thinking on: a reasoning block may come first; it ends at its first "</think>".
TEST(ToolCalls, AReasoningBlockMayComeFirst) {
  const ByteDfa d = compile_constraint(tool_call_constraint(ToolCallFormat::Hermes, weather_and_now(), true, true));
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  for (const std::string& yes : std::vector<std::string>{now, "<think>\nThe user wants </thin> the <time>.\n</think>\n\n" + now,
                                                         "<think></think>" + now, "<think></think</think>\n" + now})
    EXPECT_TRUE(d.matches(yes)) << yes;
  for (const std::string& no : std::vector<std::string>{"<think>a</think>b</think>\n" + now, "<think>\nno end\n" + now,
                                                        "text <think></think>" + now})
    EXPECT_FALSE(d.matches(no)) << no;
  EXPECT_FALSE(compile_constraint(tool_call_constraint(ToolCallFormat::Hermes, weather_and_now(), true)).matches("<think></think>" + now));
}

TEST(ToolCalls, Llama3IsOneCallObject) {
  const ByteDfa d = compile_constraint(tool_call_constraint(ToolCallFormat::Llama3Json, weather_and_now(), true));
  EXPECT_TRUE(d.matches(R"({"name": "get_weather", "parameters": {"city": "Rome", "unit": "f"}})"));
  EXPECT_TRUE(d.matches(R"({"name": "now", "parameters": {}})"));
  EXPECT_FALSE(d.matches(R"({"name": "now", "parameters": {}}{"name": "now", "parameters": {}})"));
  EXPECT_FALSE(d.matches(R"({"name": "now", "arguments": {}})"));
}

TEST(ToolCalls, ParameterSchemasAreCheckedByName) {
  std::vector<ToolFunction> f = weather_and_now();
  f[0].parameters = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}})");
  EXPECT_THAT(error_of([&] { compile_constraint(tool_call_constraint(ToolCallFormat::Hermes, f, true)); }),
              HasSubstr("tools[0].function.parameters: "));
  EXPECT_THAT(error_of([&] { compile_constraint(tool_call_constraint(ToolCallFormat::Hermes, f, true)); }), HasSubstr("minimum"));
  f[0].parameters = nlohmann::ordered_json::parse(R"({"type": "string"})");
  EXPECT_THAT(error_of([&] { compile_constraint(tool_call_constraint(ToolCallFormat::Hermes, f, true)); }),
              HasSubstr("tools[0].function.parameters: the arguments are a JSON object"));
}

TEST(TokenAutomaton, AllowsExactlyTheTokensThatStayInTheLanguage) {
  const auto vocab = small_vocabulary();
  const auto a = compile_token_constraint({ConstraintSpec::Kind::Regex, "ab(c|123)"}, vocab, "--regex");
  const TokenVocabulary& v = *vocab;
  const int s0 = a->dfa.start;
  std::vector<int32_t> allowed;
  for (int32_t t = 0; t < v.size(); ++t)
    if (a->allowed(s0, t)) allowed.push_back(t);
  EXPECT_THAT(allowed, ::testing::UnorderedElementsAre(id_of(v, "a"), id_of(v, "ab"), id_of(v, "abc")));
  const int s1 = a->advance(s0, id_of(v, "ab"));
  EXPECT_TRUE(a->allowed(s1, id_of(v, "c")));
  EXPECT_TRUE(a->allowed(s1, id_of(v, "123")));
  EXPECT_TRUE(a->allowed(s1, id_of(v, "1")));
  EXPECT_FALSE(a->allowed(s1, 0));  // EOS only where the regex accepts
  const int end = a->advance(s1, id_of(v, "123"));
  EXPECT_TRUE(a->allowed(end, 0));
  EXPECT_TRUE(a->state_end[size_t(end)]);
  EXPECT_FALSE(a->state_end[size_t(s1)]);
  EXPECT_EQ(a->token_states(), 6);  // before "", a, ab, ab1, ab12 and after the end
}

TEST(TokenAutomaton, RefusesAConstraintTheVocabularyCannotWrite) {
  const auto vocab = small_vocabulary();
  EXPECT_THAT(error_of([&] { compile_token_constraint({ConstraintSpec::Kind::Regex, "a\\u00e9"}, vocab, "--regex"); }),
              HasSubstr("--regex: the tokenizer's vocabulary cannot continue"));
}

// "ab(c|123)" over single characters and a few longer pieces, worked by hand: the bounds count single
// characters and the longer tokens of forced runs ("ab": a then b is the only way on; "abc" and "123"
// pass a choice, so they do not count; the end, which nothing follows, needs no EOS). After "ab", "1"
// raises the bound from 1 to 2 (a rise of 1 + 2 - 1), so below a budget of 1 + 2 only "c" and "123"
// remain; at the start "a" rises by 1, so below 2 + 1 only "ab" and "abc" remain.
TEST(TokenAutomaton, ClosingSetsKeepTheReplyWithinTheBudget) {
  const auto vocab = small_vocabulary();
  const TokenVocabulary& v = *vocab;
  const auto a = compile_token_constraint({ConstraintSpec::Kind::Regex, "ab(c|123)"}, vocab, "--regex");
  ASSERT_TRUE(a->closes_within_budget);
  const int s0 = a->dfa.start, sa = a->advance(s0, id_of(v, "a")), sab = a->advance(s0, id_of(v, "ab"));
  const int s1 = a->advance(sab, id_of(v, "1")), end = a->advance(sab, id_of(v, "c"));
  EXPECT_EQ(a->completion_bound[size_t(s0)], 2);
  EXPECT_EQ(a->completion_bound[size_t(sa)], 2);
  EXPECT_EQ(a->completion_bound[size_t(sab)], 1);
  EXPECT_EQ(a->completion_bound[size_t(s1)], 2);
  EXPECT_EQ(a->completion_bound[size_t(end)], 0);
  for (const int budget : {1, 2}) {
    EXPECT_TRUE(a->allowed(sab, budget, id_of(v, "c"))) << budget;
    EXPECT_TRUE(a->allowed(sab, budget, id_of(v, "123"))) << budget;
    EXPECT_FALSE(a->allowed(sab, budget, id_of(v, "1"))) << budget;
    std::vector<int32_t> at_start;
    for (int32_t t = 0; t < v.size(); ++t)
      if (a->allowed(s0, budget, t)) at_start.push_back(t);
    EXPECT_THAT(at_start, ::testing::ElementsAre(id_of(v, "ab"), id_of(v, "abc"))) << budget;
  }
  for (const int budget : {3, 4, 100}) {
    EXPECT_TRUE(a->allowed(sab, budget, id_of(v, "1"))) << budget;
    for (int32_t t = 0; t < v.size(); ++t) EXPECT_EQ(a->allowed(s0, budget, t), a->allowed(s0, t)) << budget << ", " << t;
  }
}

// "x(ab)*y" over x, xa, ba, ab and y: after "xa" only "ba" fits, forever, so no tokens complete the
// constraint from there; the closing sets then never apply.
TEST(TokenAutomaton, NoClosingSetsWhereTokensCannotComplete) {
  const auto vocab = std::make_shared<TokenVocabulary>(std::vector<std::string>{"", "x", "xa", "ba", "ab", "y"}, std::vector<int32_t>{0});
  const auto a = compile_token_constraint({ConstraintSpec::Kind::Regex, "x(ab)*y"}, vocab, "--regex");
  EXPECT_FALSE(a->closes_within_budget);
  const int stuck = a->advance(a->dfa.start, 2);
  EXPECT_EQ(a->completion_bound[size_t(stuck)], TokenAutomaton::kNoBound);
  EXPECT_EQ(a->completion_bound[size_t(a->dfa.start)], 2);  // x, y
  for (const int budget : {1, 2, 50}) EXPECT_TRUE(a->allowed(a->dfa.start, budget, 2)) << budget;
}

// Replies drawn at random, each token uniformly among those the state's set for the budget left allows
// (the worst case for ending: a model that never means to close), with budgets from the start's bound up:
// every one ends (EOS, or a state with nothing left) within its budget, and its text is in the language,
// checked by std::regex or by nlohmann's JSON parser.
TEST(TokenAutomaton, RandomRepliesEndWithinTheirBudget) {
  const auto vocab = small_vocabulary();
  const TokenVocabulary& v = *vocab;
  struct Case {
    ConstraintSpec spec;
    bool json;
  };
  const Case cases[] = {
      {{ConstraintSpec::Kind::Regex, "(ab|c)*d(a|b){2,5}"}, false},
      {{ConstraintSpec::Kind::Regex, "[a-z]{3,}@[a-z]+\\.(com|org)( [0-9]+)*"}, false},
      {{ConstraintSpec::Kind::JsonObject, ""}, true},
      {{ConstraintSpec::Kind::JsonSchema,
        R"({"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"},
           "minItems": 2}, "n": {"type": "integer"}, "more": {"type": "array", "items": {"type": "object", "properties":
           {"x": {"type": "number"}}, "required": ["x"], "additionalProperties": false}}}, "required": ["name", "tags"],
           "additionalProperties": false})"},
       true},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const auto a = compile_token_constraint(c.spec, vocab, "test");
    ASSERT_TRUE(a->closes_within_budget) << c.spec.text;
    const int32_t start_bound = a->completion_bound[size_t(a->dfa.start)];
    for (int reply = 0; reply < 200; ++reply) {
      const int32_t budget = start_bound + int32_t(rng() % 30);
      int state = a->dfa.start;
      std::string text;
      bool ended = false;
      int32_t used = 0;
      std::vector<int32_t> choices;
      while (!ended && used < budget) {
        choices.clear();
        for (int32_t t = 0; t < v.size(); ++t)
          if (a->allowed(state, budget - used, t)) choices.push_back(t);
        ASSERT_FALSE(choices.empty()) << c.spec.text << ": " << text;
        const int32_t t = choices[rng() % choices.size()];
        ++used;
        if (t == 0) {
          ended = true;
        } else {
          text += v.bytes(t);
          state = a->advance(state, t);
          ended = a->state_end[size_t(state)] != 0;
        }
      }
      ASSERT_TRUE(ended) << c.spec.text << ": budget " << budget << ", cut: " << text;
      if (c.json) EXPECT_TRUE(nlohmann::json::accept(text)) << text;
      else EXPECT_TRUE(std::regex_match(text, std::regex(c.spec.text))) << c.spec.text << ": " << text;
    }
  }
}

}  // namespace
}  // namespace mk::constraint
