// The constrained-decoding flags of mk-run and mk-chat (docs/structured_output.md): --json-schema FILE,
// --json-object and --regex RE, at most one of them.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "host/tools/cli_checks.h"
#include "runtime/json_file.h"
#include "runtime/token_automaton.h"
#include "runtime/token_vocabulary.h"
#include "runtime/tokenizer.h"

namespace mk::cli {

struct ConstraintFlags {
  std::string json_schema_file, regex;
  bool json_object = false;
};

inline void add_constraint_options(CLI::App& app, ConstraintFlags& f) {
  auto* schema = app.add_option("--json-schema", f.json_schema_file,
                                "FILE: the output is JSON that validates against this JSON schema (docs/structured_output.md)");
  auto* object = app.add_flag("--json-object", f.json_object, "the output is a JSON object");
  auto* regex = app.add_option("--regex", f.regex, "RE: the output matches this regular expression, whole");
  schema->excludes(object)->excludes(regex);
  object->excludes(regex);
}

// The spec the flags ask for (none: Kind::None). A schema file that cannot be read is a usage error
// naming it; its content is checked when it is compiled.
inline constraint::ConstraintSpec constraint_spec(const ConstraintFlags& f) {
  using Kind = constraint::ConstraintSpec::Kind;
  if (f.json_object) return {Kind::JsonObject, ""};
  if (!f.regex.empty()) return {Kind::Regex, f.regex};
  if (f.json_schema_file.empty()) return {};
  if (!std::filesystem::is_regular_file(f.json_schema_file)) usage_error("--json-schema {}: no such file", f.json_schema_file);
  return {Kind::JsonSchema, read_model_text_file(f.json_schema_file)};
}

// "--json-schema FILE", "--json-object" or "--regex": what errors start with.
inline std::string constraint_flag_name(const ConstraintFlags& f) {
  if (f.json_object) return "--json-object";
  if (!f.regex.empty()) return "--regex";
  return "--json-schema " + f.json_schema_file;
}

// `spec` (from the flags) compiled against the tokenizer's vocabulary for a model of `vocab` tokens that
// ends at `eos`. What cannot be compiled is a usage error naming the flag and what it refuses.
inline std::shared_ptr<const constraint::TokenAutomaton> compile_constraint_flags(const ConstraintFlags& f,
                                                                                  const constraint::ConstraintSpec& spec,
                                                                                  const Tokenizer& tokenizer, int vocab,
                                                                                  std::vector<int32_t> eos) {
  const auto vocabulary = constraint::token_vocabulary(tokenizer, vocab, std::move(eos));
  try {
    return constraint::compile_token_constraint(spec, vocabulary, constraint_flag_name(f));
  } catch (const constraint::ConstraintError& e) {
    usage_error("{}", e.what());
  }
}

}  // namespace mk::cli
