// JSON Schema (the subset OpenAI's strict structured outputs use) and free-form JSON into byte automata
// whose strings are the JSON texts the schema accepts, written compactly: no white space except one
// optional space after ':' and ','; properties in the schema's order; no properties beyond `properties`.
// Every text the automaton accepts validates against the schema (docs/structured_output.md). The schema is
// an ordered_json: the properties keep the order they were written in.
//
// Supported: type (one or a list), properties, required, additionalProperties, enum, const, items,
// minItems, maxItems, anyOf, $ref to #/$defs/... or #/definitions/... (not recursive), minLength,
// maxLength, pattern (regex_syntax.h). Annotations (title, description, default, examples, $schema, $id,
// $comment) change nothing. Any other keyword is a ConstraintError naming it and where it is.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/byte_automaton.h"

namespace mk::constraint {

// Free-form JSON (response_format json_object, and a schema's untyped values) nests objects and arrays
// this deep at most; schemas themselves nest at most kMaxSchemaDepth levels.
inline constexpr int kFreeFormJsonDepth = 4;
inline constexpr int kMaxSchemaDepth = 32;
// Numbers are written with at most this many digits in their integer part, fraction and exponent.
inline constexpr int kMaxNumberDigits = 16;

// Any JSON object (response_format {"type": "json_object"}).
Fragment json_object_fragment(Nfa& nfa);

// The JSON texts `schema` accepts. Throws ConstraintError naming the keyword and its JSON pointer.
Fragment json_schema_fragment(Nfa& nfa, const nlohmann::ordered_json& schema);

}  // namespace mk::constraint
