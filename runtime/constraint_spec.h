// What a request asks its output to be (docs/structured_output.md): a JSON object, JSON that validates
// against a schema, text that matches a regular expression, or calls to given tools
// (runtime/tool_call_grammar.h). Plain data: runtime/token_automaton.h compiles it.
#pragma once

#include <string>

namespace mk::constraint {

struct ConstraintSpec {
  enum class Kind { None, JsonObject, JsonSchema, Regex, ToolCalls } kind = Kind::None;
  std::string text;  // the schema's JSON, the regex, or the tool calls' spec (tool_call_constraint)
  bool active() const { return kind != Kind::None; }
};

}  // namespace mk::constraint
