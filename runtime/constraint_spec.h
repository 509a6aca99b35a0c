// What a request asks its output to be (docs/structured_output.md): a JSON object, JSON that validates
// against a schema, or text that matches a regular expression. Plain data: runtime/token_automaton.h
// compiles it.
#pragma once

#include <string>

namespace mk::constraint {

struct ConstraintSpec {
  enum class Kind { None, JsonObject, JsonSchema, Regex } kind = Kind::None;
  std::string text;  // the schema's JSON, or the regex
  bool active() const { return kind != Kind::None; }
};

}  // namespace mk::constraint
