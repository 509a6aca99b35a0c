// How a model family writes a tool call (OpenAI's "tools"), as its chat template renders one in an
// assistant turn and as the model was trained to answer:
//   Llama3Json  the whole reply is one JSON object {"name": NAME, "parameters": ARGUMENTS} (the Llama 3.1 /
//               3.2 / 3.3 templates: one call per turn);
//   Hermes      each call is "<tool_call>\n{"name": NAME, "arguments": ARGUMENTS}\n</tool_call>", after any
//               text, calls separated by "\n" (Qwen2.5, Qwen3, and any ChatML template that renders
//               <tool_call> blocks).
// The constraint that makes a reply a call (runtime/tool_call_grammar.h) and the parser that reads calls
// out of a reply (host/server/tool_call_parser.h) both take their text from here.
#pragma once

#include <string_view>

namespace mk {

enum class ToolCallFormat { None, Llama3Json, Hermes };

struct ToolCallSyntax {
  std::string_view open_tag;        // opens a call ("" : the reply itself is the call)
  std::string_view close_tag;       // closes it
  std::string_view before_object;   // written between open_tag and the call's JSON object
  std::string_view after_object;    // written between the object and close_tag
  std::string_view separator;       // between two calls
  std::string_view arguments_key;   // the object's key for the arguments, after "name"
  bool several = false;             // a reply may hold more than one call
};

inline ToolCallSyntax tool_call_syntax(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Llama3Json: return {"", "", "", "", "", "parameters", false};
    case ToolCallFormat::Hermes: return {"<tool_call>", "</tool_call>", "\n", "\n", "\n", "arguments", true};
    case ToolCallFormat::None: break;
  }
  return {};
}

inline std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Llama3Json: return "llama3_json";
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::None: break;
  }
  return "none";
}

}  // namespace mk
