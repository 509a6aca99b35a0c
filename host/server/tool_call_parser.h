// Tool calls read out of a reply as it streams (docs/server.md, "Tool calls"), in the model's format
// (runtime/tool_call_format.h). The events are what OpenAI's stream carries: content text, a call's start
// (its index and the function's name), then its arguments' JSON text in pieces as it comes.
//
// A call starts where the format's opening is followed by {"name": NAME, "arguments": (or "parameters":),
// NAME one of the given functions; from then on it is a call, and its arguments are the JSON value's text
// as the model wrote it (cut short if the reply is). Anything else is content: Hermes text around the
// <tool_call> blocks (white space next to a block dropped), a block whose head does not read as a call
// (kept whole, tags included), and a Llama 3 reply that is not one call object.
// The whole reply at once (parse_tool_calls) gives what the events of any split of it add up to.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/tool_call_format.h"

namespace mk::server {

struct ToolCallEvent {
  enum class Kind { Content, Call, Arguments };
  Kind kind = Kind::Content;
  size_t index = 0;  // Call, Arguments: the call's index in the reply
  std::string text;  // Content: text; Call: the function's name; Arguments: more of the arguments' text
};

class ToolCallParser {
 public:
  ToolCallParser(ToolCallFormat format, std::vector<std::string> names);
  // Adds generated text; returns what can be told now.
  std::vector<ToolCallEvent> push(std::string_view text);
  // The reply ended: what was held back.
  std::vector<ToolCallEvent> finish();

 private:
  enum class State { Text, Head, Arguments, Tail, Rest };
  void run(std::vector<ToolCallEvent>& out, bool end);
  void content(std::vector<ToolCallEvent>& out, std::string text);
  bool text_state(std::vector<ToolCallEvent>& out, bool end);
  bool head_state(std::vector<ToolCallEvent>& out, bool end);
  bool arguments_state(std::vector<ToolCallEvent>& out, bool end);
  bool tail_state(std::vector<ToolCallEvent>& out, bool end);

  ToolCallFormat format_;
  ToolCallSyntax syntax_;
  std::vector<std::string> names_;
  State state_ = State::Text;
  std::string held_;           // text not yet told
  std::string pending_space_;  // Hermes: white space after content, dropped if a block follows
  bool after_call_ = false;    // no content since the last call: leading white space is dropped
  size_t calls_ = 0;
  // The arguments' JSON value: nesting depth, inside a string, after a backslash, begun, a bare scalar.
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, value_begun_ = false, scalar_ = false;
};

struct ParsedToolCall {
  std::string name, arguments;
};
struct ParsedReply {
  std::string content;
  std::vector<ParsedToolCall> calls;
};
ParsedReply parse_tool_calls(ToolCallFormat format, const std::vector<std::string>& names, std::string_view reply);

}  // namespace mk::server
