#include "runtime/json_schema.h"

#include <algorithm>
#include <array>
#include <set>
#include <string>

#include "runtime/regex_syntax.h"

namespace mk::constraint {

using json = nlohmann::ordered_json;

namespace {

// Keywords that describe and never constrain.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "$defs",
                                            "definitions", "deprecated", "readOnly", "writeOnly"};
const std::set<std::string> kSupported = {"type",     "properties", "required", "additionalProperties", "enum",      "const",
                                          "items",    "minItems",   "maxItems", "anyOf",                "$ref",      "minLength",
                                          "maxLength", "pattern"};

ByteSet byte_set(std::string_view chars) {
  ByteSet b;
  for (const char c : chars) b.set(uint8_t(c));
  return b;
}

ByteSet byte_range(char lo, char hi) {
  ByteSet b;
  for (int c = uint8_t(lo); c <= uint8_t(hi); ++c) b.set(size_t(c));
  return b;
}

class Compiler {
 public:
  Compiler(Nfa& nfa, const json& root) : nfa_(nfa), root_(root) {}

  // ',' or ':' and one optional space.
  Fragment separator(char c) { return nfa_.sequence({nfa_.literal(std::string(1, c)), nfa_.optional(nfa_.literal(" "))}); }

  // One character inside a JSON string: unescaped, or an escape (\u never a surrogate: a pair would be
  // one character to a validator and two here).
  Fragment string_char() {
    CodePointSet plain(0x20, kMaxCodePoint);
    plain = plain.minus(CodePointSet('"', '"'));
    plain = plain.minus(CodePointSet('\\', '\\'));
    const ByteSet hex = byte_range('0', '9') | byte_range('a', 'f') | byte_range('A', 'F');
    const Fragment u_plain = nfa_.sequence({nfa_.bytes(byte_range('0', '9') | byte_range('a', 'c') | byte_range('A', 'C') | byte_set("eEfF")),
                                            nfa_.bytes(hex), nfa_.bytes(hex), nfa_.bytes(hex)});
    const Fragment u_d = nfa_.sequence({nfa_.bytes(byte_set("dD")), nfa_.bytes(byte_range('0', '7')), nfa_.bytes(hex), nfa_.bytes(hex)});
    const Fragment escape = nfa_.sequence(
        {nfa_.literal("\\"), nfa_.alternatives({nfa_.bytes(byte_set("\"\\/bfnrt")), nfa_.sequence({nfa_.literal("u"), nfa_.alternatives({u_plain, u_d})})})});
    return nfa_.alternatives({utf8_fragment(nfa_, plain), escape});
  }

  Fragment quoted(Fragment content) { return nfa_.sequence({nfa_.literal("\""), content, nfa_.literal("\"")}); }

  Fragment free_string() { return quoted(nfa_.star(string_char())); }

  Fragment digits(int min, int max) {
    return nfa_.repeat([&] { return nfa_.bytes(byte_range('0', '9')); }, min, max);
  }

  Fragment integer() {
    const Fragment magnitude = nfa_.alternatives(
        {nfa_.literal("0"), nfa_.sequence({nfa_.bytes(byte_range('1', '9')), digits(0, kMaxNumberDigits - 1)})});
    return nfa_.sequence({nfa_.optional(nfa_.literal("-")), magnitude});
  }

  Fragment number() {
    const Fragment fraction = nfa_.optional(nfa_.sequence({nfa_.literal("."), digits(1, kMaxNumberDigits)}));
    // Two exponent digits: 1e99 at most, so that every number is finite.
    const Fragment exponent =
        nfa_.optional(nfa_.sequence({nfa_.bytes(byte_set("eE")), nfa_.optional(nfa_.bytes(byte_set("+-"))), digits(1, 2)}));
    return nfa_.sequence({integer(), fraction, exponent});
  }

  // open item (sep item)* close, with min..max items (max < 0: unbounded), the item made by `make`.
  template <class Make>
  Fragment list(char open, char close, Make&& make, int min, int max) {
    const Fragment head = nfa_.literal(std::string(1, open));
    const Fragment tail = nfa_.literal(std::string(1, close));
    if (max == 0) return nfa_.sequence({head, tail});
    if (min <= 1 && max < 0) {
      // One copy of the item: entered after the opening or after a separator, both followed by the
      // same choice (close, or a separator and another item).
      const Fragment item = make();
      const Fragment sep = separator(',');
      const int after = nfa_.add_state();
      nfa_.add_epsilon(head.out, item.in);
      if (min == 0) nfa_.add_epsilon(head.out, tail.in);
      nfa_.add_epsilon(item.out, after);
      nfa_.add_epsilon(after, tail.in);
      nfa_.add_epsilon(after, sep.in);
      nfa_.add_epsilon(sep.out, item.in);
      return {head.in, tail.out};
    }
    const auto more = [&] { return nfa_.sequence({separator(','), make()}); };
    const int first_min = std::max(min, 1);
    Fragment items = nfa_.sequence({make(), nfa_.repeat(more, first_min - 1, max < 0 ? -1 : max - 1)});
    if (min == 0) items = nfa_.optional(items);
    return nfa_.sequence({head, items, tail});
  }

  Fragment free_value(int depth) {
    std::vector<Fragment> options = {free_string(), number(), nfa_.literal("true"), nfa_.literal("false"), nfa_.literal("null")};
    if (depth > 0) {
      options.push_back(free_object(depth));
      options.push_back(list('[', ']', [&] { return free_value(depth - 1); }, 0, -1));
    }
    return nfa_.alternatives(options);
  }

  Fragment free_object(int depth) {
    return list('{', '}', [&] { return nfa_.sequence({free_string(), separator(':'), free_value(depth - 1)}); }, 0, -1);
  }

  [[noreturn]] void error(const std::string& path, std::string_view message) const {
    constraint_fail("json_schema at {}: {}", path.empty() ? "/" : path, message);
  }

  static std::string child(const std::string& path, std::string_view key) {
    std::string k(key);
    for (size_t p = 0; (p = k.find('~', p)) != std::string::npos; p += 2) k.replace(p, 1, "~0");
    for (size_t p = 0; (p = k.find('/', p)) != std::string::npos; p += 2) k.replace(p, 1, "~1");
    return path + "/" + k;
  }

  int count(const json& s, const char* key, const std::string& path, int fallback) const {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) error(child(path, key), "must be a non-negative integer");
    if (v.get<int64_t>() > kMaxRepeat) error(child(path, key), fmt::format("{} is above the supported {}", v.get<int64_t>(), kMaxRepeat));
    return int(v.get<int64_t>());
  }

  Fragment string_value(const json& s, const std::string& path) {
    const int min = count(s, "minLength", path, 0), max = count(s, "maxLength", path, -1);
    if (max >= 0 && max < min) error(path, "maxLength is below minLength");
    if (!s.contains("pattern")) return quoted(nfa_.repeat([&] { return string_char(); }, min, max));
    if (!s["pattern"].is_string()) error(child(path, "pattern"), "must be a string");
    const std::string what = fmt::format("json_schema at {}", child(path, "pattern"));
    const std::string pattern = s["pattern"].get<std::string>();
    if (min == 0 && max < 0) return quoted(compile_regex(nfa_, pattern, RegexTarget::JsonStringContent, what));
    // The pattern's strings of the right length: the two automata intersected.
    Nfa p, l;
    const ByteDfa pattern_dfa = determinize(p, compile_regex(p, pattern, RegexTarget::JsonStringContent, what), what);
    Compiler lengths(l, root_);
    const ByteDfa length_dfa = determinize(l, l.repeat([&] { return lengths.string_char(); }, min, max), what);
    return quoted(embed(nfa_, intersect(pattern_dfa, length_dfa, what + " with minLength/maxLength")));
  }

  Fragment object_value(const json& s, const std::string& path, int depth) {
    if (!s.contains("properties")) {
      if (s.contains("required") && !s["required"].empty()) error(child(path, "required"), "names properties that `properties` does not define");
      return free_object(kFreeFormJsonDepth);
    }
    const json& props = s["properties"];
    if (!props.is_object()) error(child(path, "properties"), "must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) error(child(path, "required"), "must be an array of property names");
      for (const json& r : s["required"]) {
        if (!r.is_string()) error(child(path, "required"), "must be an array of property names");
        if (!props.contains(r.get<std::string>()))
          error(child(path, "required"), fmt::format("names \"{}\", which `properties` does not define", r.get<std::string>()));
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean() && !s["additionalProperties"].is_object())
      error(child(path, "additionalProperties"), "must be a boolean or a schema");
    // States (i, emitted): before property i, with or without a property written already.
    const Fragment open = nfa_.literal("{"), close = nfa_.literal("}");
    const size_t n = props.size();
    std::vector<std::array<int, 2>> at(n + 1);
    for (auto& a : at) a = {nfa_.add_state(), nfa_.add_state()};
    nfa_.add_epsilon(open.out, at[0][0]);
    size_t i = 0;
    for (auto it = props.begin(); it != props.end(); ++it, ++i) {
      const std::string key_path = child(child(path, "properties"), it.key());
      const Fragment member = nfa_.sequence({nfa_.literal(json(it.key()).dump()), separator(':'), value(it.value(), key_path, depth + 1)});
      const Fragment comma = separator(',');
      nfa_.add_epsilon(at[i][0], member.in);
      nfa_.add_epsilon(at[i][1], comma.in);
      nfa_.add_epsilon(comma.out, member.in);
      nfa_.add_epsilon(member.out, at[i + 1][1]);
      if (!required.count(it.key())) nfa_.add_epsilon(at[i][0], at[i + 1][0]), nfa_.add_epsilon(at[i][1], at[i + 1][1]);
    }
    nfa_.add_epsilon(at[n][0], close.in);
    nfa_.add_epsilon(at[n][1], close.in);
    return {open.in, close.out};
  }

  Fragment array_value(const json& s, const std::string& path, int depth) {
    const int min = count(s, "minItems", path, 0), max = count(s, "maxItems", path, -1);
    if (max >= 0 && max < min) error(path, "maxItems is below minItems");
    if (!s.contains("items")) return list('[', ']', [&] { return free_value(kFreeFormJsonDepth - 1); }, min, max);
    const json& items = s["items"];
    if (items.is_boolean() && !items.get<bool>()) {
      if (min > 0) error(child(path, "items"), "is false while minItems asks for items");
      return nfa_.literal("[]");
    }
    return list('[', ']', [&] { return value(items, child(path, "items"), depth + 1); }, min, max);
  }

  // The literal JSON of each value that has one of `types` (all when empty).
  Fragment literals(const std::vector<json>& values, const std::vector<std::string>& types, const std::string& path) {
    std::vector<Fragment> options;
    for (const json& v : values) {
      bool ok = types.empty();
      for (const std::string& t : types)
        ok |= (t == "string" && v.is_string()) || (t == "number" && v.is_number()) || (t == "integer" && v.is_number_integer()) ||
              (t == "integer" && v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>()))) ||
              (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) || (t == "object" && v.is_object()) ||
              (t == "array" && v.is_array());
      if (ok) options.push_back(nfa_.literal(v.dump()));
    }
    if (options.empty()) error(path, "no value of enum/const has the schema's type");
    return nfa_.alternatives(options);
  }

  Fragment value(const json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) error(path, fmt::format("the schema nests deeper than the supported {} levels", kMaxSchemaDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) error(path, "the schema `false` accepts no value");
      return free_value(kFreeFormJsonDepth);
    }
    if (!s.is_object()) error(path, "a schema must be an object or a boolean");
    std::vector<std::string> constraining;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kAnnotations.count(it.key())) continue;
      if (!kSupported.count(it.key()))
        error(child(path, it.key()), fmt::format("the keyword \"{}\" is not supported (docs/structured_output.md lists those that are)", it.key()));
      constraining.push_back(it.key());
    }
    const auto alone = [&](const char* key, std::initializer_list<const char*> allowed) {
      for (const std::string& k : constraining)
        if (k != key && std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) == allowed.end())
          error(path, fmt::format("\"{}\" together with \"{}\" is not supported", key, k));
    };
    if (s.contains("$ref")) {
      alone("$ref", {});
      return reference(s["$ref"], child(path, "$ref"), depth);
    }
    if (s.contains("anyOf")) {
      alone("anyOf", {});
      const json& options = s["anyOf"];
      if (!options.is_array() || options.empty()) error(child(path, "anyOf"), "must be a non-empty array of schemas");
      std::vector<Fragment> fragments;
      for (size_t i = 0; i < options.size(); ++i) fragments.push_back(value(options[i], child(child(path, "anyOf"), std::to_string(i)), depth + 1));
      return nfa_.alternatives(fragments);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const json& x : t) {
          if (!x.is_string()) error(child(path, "type"), "must be a type name or a list of them");
          types.push_back(x.get<std::string>());
        }
      else error(child(path, "type"), "must be a type name or a list of them");
      for (const std::string& x : types)
        if (x != "string" && x != "number" && x != "integer" && x != "boolean" && x != "null" && x != "object" && x != "array")
          error(child(path, "type"), fmt::format("\"{}\" is not a JSON Schema type", x));
    }
    if (s.contains("enum")) {
      alone("enum", {"type"});
      if (!s["enum"].is_array() || s["enum"].empty()) error(child(path, "enum"), "must be a non-empty array");
      return literals(std::vector<json>(s["enum"].begin(), s["enum"].end()), types, child(path, "enum"));
    }
    if (s.contains("const")) {
      alone("const", {"type"});
      return literals({s["const"]}, types, child(path, "const"));
    }
    if (types.empty()) {  // no type: what the keywords present describe, else any value
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) types.push_back("object");
      else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) types.push_back("array");
      else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) types.push_back("string");
      else return free_value(kFreeFormJsonDepth);
    }
    std::vector<Fragment> options;
    for (const std::string& t : types) {
      if (t == "string") options.push_back(string_value(s, path));
      else if (t == "number") options.push_back(number());
      else if (t == "integer") options.push_back(integer());
      else if (t == "boolean") options.push_back(nfa_.alternatives({nfa_.literal("true"), nfa_.literal("false")}));
      else if (t == "null") options.push_back(nfa_.literal("null"));
      else if (t == "object") options.push_back(object_value(s, path, depth));
      else options.push_back(array_value(s, path, depth));
    }
    return nfa_.alternatives(options);
  }

  Fragment reference(const json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) error(path, "must be a string");
    const std::string r = ref.get<std::string>();
    if (r.rfind("#/", 0) != 0 && r != "#") error(path, fmt::format("\"{}\": only references inside the schema (#/...) are supported", r));
    if (std::find(expanding_.begin(), expanding_.end(), r) != expanding_.end())
      error(path, fmt::format("\"{}\" is recursive; recursive schemas are not supported", r));
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(r.substr(1)));
    } catch (const json::exception&) {
      error(path, fmt::format("\"{}\" names nothing in the schema", r));
    }
    expanding_.push_back(r);
    const Fragment f = value(*target, r.substr(1), depth + 1);
    expanding_.pop_back();
    return f;
  }

 private:
  Nfa& nfa_;
  const json& root_;
  std::vector<std::string> expanding_;
};

}  // namespace

Fragment json_object_fragment(Nfa& nfa) {
  static const json kNone;
  return Compiler(nfa, kNone).free_object(kFreeFormJsonDepth);
}

Fragment json_schema_fragment(Nfa& nfa, const json& schema) { return Compiler(nfa, schema).value(schema, "", 0); }

}  // namespace mk::constraint
