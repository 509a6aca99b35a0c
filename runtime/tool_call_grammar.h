// The constraint of tool_choice "required" or a named function (docs/server.md, "Tool calls"): the reply
// is one call (or, where the format allows several, one or more calls) to the given functions, written
// as the model's format writes it (runtime/tool_call_format.h), the arguments a JSON text that validates
// against the function's parameter schema (runtime/json_schema.h). So every call parses, and its
// arguments validate.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "runtime/byte_automaton.h"
#include "runtime/constraint_spec.h"
#include "runtime/tool_call_format.h"

namespace mk::constraint {

// A reply of several calls holds at most this many: then it ends, so that a model that would go on
// calling forever still completes its reply.
inline constexpr int kMaxToolCalls = 8;

struct ToolFunction {
  std::string name;                                   // written as a JSON string literal
  std::optional<nlohmann::ordered_json> parameters;   // a JSON schema of type object; none: no arguments ({})
  std::string where;                                  // names it in errors: "tools[2].function.parameters"
};

// The spec (Kind::ToolCalls) whose text the compiler reads back. `several`: one to kMaxToolCalls calls
// where the format allows several, else exactly one. `thinking`: the calls may follow a reasoning block,
// "<think>" + any text without "</think>" + "</think>" and newlines (Qwen3 with thinking on).
ConstraintSpec tool_call_constraint(ToolCallFormat format, const std::vector<ToolFunction>& functions, bool several,
                                    bool thinking = false);

// The spec's text as a fragment. Throws ConstraintError naming the function's parameters and the keyword.
Fragment tool_calls_fragment(Nfa& nfa, std::string_view spec_text);

}  // namespace mk::constraint
