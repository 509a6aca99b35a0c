#include "runtime/tool_call_grammar.h"

#include "runtime/json_schema.h"

namespace mk::constraint {

using json = nlohmann::ordered_json;

ConstraintSpec tool_call_constraint(ToolCallFormat format, const std::vector<ToolFunction>& functions, bool several) {
  json spec = {{"format", tool_call_format_name(format)}, {"several", several}, {"functions", json::array()}};
  for (const ToolFunction& f : functions) {
    json entry = {{"name", f.name}, {"where", f.where}};
    if (f.parameters) entry["parameters"] = *f.parameters;
    spec["functions"].push_back(std::move(entry));
  }
  return {ConstraintSpec::Kind::ToolCalls, spec.dump()};
}

namespace {

ToolCallFormat format_named(const std::string& name) {
  for (const ToolCallFormat f : {ToolCallFormat::Llama3Json, ToolCallFormat::Hermes})
    if (tool_call_format_name(f) == name) return f;
  constraint_fail("tool calls: unknown format \"{}\"", name);
}

// One function's call object: {"name": NAME, "<arguments_key>": ARGUMENTS}, spaced as the templates
// render it, so that the model's likeliest text is allowed.
Fragment call_object(Nfa& nfa, const ToolCallSyntax& syntax, const json& function) {
  const std::string& where = function["where"].get_ref<const std::string&>();
  const std::string head = fmt::format("{{\"name\": {}, \"{}\": ", json(function["name"]).dump(), syntax.arguments_key);
  Fragment arguments;
  if (!function.contains("parameters")) {
    arguments = nfa.literal("{}");
  } else {
    const json& schema = function["parameters"];
    if (!schema.is_object()) constraint_fail("{}: must be a JSON schema object", where);
    if (const auto t = schema.find("type"); t != schema.end() && *t != "object")
      constraint_fail("{}: the arguments are a JSON object: 'type' must be \"object\" (got {})", where, t->dump());
    try {
      arguments = json_schema_fragment(nfa, schema);
    } catch (const ConstraintError& e) {
      constraint_fail("{}: {}", where, e.what());
    }
  }
  return nfa.sequence({nfa.literal(head), arguments, nfa.literal("}")});
}

}  // namespace

Fragment tool_calls_fragment(Nfa& nfa, std::string_view spec_text) {
  const json spec = json::parse(spec_text);
  const ToolCallSyntax syntax = tool_call_syntax(format_named(spec["format"].get<std::string>()));
  const json& functions = spec["functions"];
  if (functions.empty()) constraint_fail("tool calls: no function to call");
  const auto call = [&] {
    std::vector<Fragment> objects;
    for (const json& f : functions) objects.push_back(call_object(nfa, syntax, f));
    return nfa.sequence({nfa.literal(syntax.open_tag), nfa.literal(syntax.before_object), nfa.alternatives(objects),
                         nfa.literal(syntax.after_object), nfa.literal(syntax.close_tag)});
  };
  if (!(spec["several"].get<bool>() && syntax.several)) return call();
  const Fragment first = call();
  const Fragment more = nfa.repeat([&] { return nfa.sequence({nfa.literal(syntax.separator), call()}); }, 0, kMaxToolCalls - 1);
  return nfa.sequence({first, more});
}

}  // namespace mk::constraint
