#include "runtime/tool_call_grammar.h"

#include "runtime/json_schema.h"

namespace mk::constraint {

using json = nlohmann::ordered_json;

ConstraintSpec tool_call_constraint(ToolCallFormat format, const std::vector<ToolFunction>& functions, bool several,
                                    bool thinking) {
  json spec = {{"format", tool_call_format_name(format)}, {"several", several}, {"thinking", thinking}, {"functions", json::array()}};
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

// Any bytes that do not contain `word`: the word's matching automaton (state j: the longest beginning of
// the word the text ends with) with the state of the whole word left out. Every state accepts.
Fragment without(Nfa& nfa, std::string_view word) {
  const size_t m = word.size();
  std::vector<int> state(m);
  for (int& s : state) s = nfa.add_state();
  const int out = nfa.add_state();
  for (size_t j = 0; j < m; ++j) {
    std::vector<ByteSet> to(m);
    for (int c = 0; c < 256; ++c) {
      const std::string text = std::string(word.substr(0, j)) + char(c);
      size_t k = std::min(text.size(), m);
      while (k > 0 && !text.ends_with(word.substr(0, k))) --k;
      if (k < m) to[k].set(size_t(c));
    }
    for (size_t k = 0; k < m; ++k)
      if (to[k].any()) nfa.add_bytes(state[j], to[k], state[k]);
    nfa.add_epsilon(state[j], out);
  }
  return {state[0], out};
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
  Fragment calls;
  if (!(spec["several"].get<bool>() && syntax.several)) {
    calls = call();
  } else {
    const Fragment first = call();
    const Fragment more = nfa.repeat([&] { return nfa.sequence({nfa.literal(syntax.separator), call()}); }, 0, kMaxToolCalls - 1);
    calls = nfa.sequence({first, more});
  }
  if (!spec.value("thinking", false)) return calls;
  const Fragment thought = nfa.sequence({nfa.literal("<think>"), without(nfa, "</think>"), nfa.literal("</think>"), nfa.star(nfa.literal("\n"))});
  return nfa.sequence({nfa.optional(thought), calls});
}

}  // namespace mk::constraint
