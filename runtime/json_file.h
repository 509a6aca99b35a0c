// Reading the JSON files of a model directory (untrusted input): the size and the nesting depth are
// bounded (runtime/limits.h), and every exception nlohmann throws while parsing (parse_error, and
// out_of_range for a number like 1e400) becomes an mk::Error naming the file. Type errors after
// parsing are the callers' to prevent: they check each value's type before reading it, so that the
// message can name the key.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>

#include "runtime/error.h"
#include "runtime/limits.h"

namespace mk {

// The whole file; fails (naming it) when it cannot be read or is larger than limits::kMaxJsonFileBytes.
inline std::string read_model_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > uint64_t(limits::kMaxJsonFileBytes))
    fail("{}: {} bytes is larger than the {} bytes a model JSON file may have (docs/limits.md)", path.string(), size,
         limits::kMaxJsonFileBytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("{}: read error", path.string());
  return text.str();
}

// Parses `text`; `source` names the file in messages ("{source}: not valid JSON: ...").
inline nlohmann::json parse_model_json(std::string_view text, std::string_view source) {
  using json = nlohmann::json;
  if (text.size() > size_t(limits::kMaxJsonFileBytes))
    fail("{}: {} bytes is larger than the {} bytes a model JSON file may have (docs/limits.md)", source, text.size(),
         limits::kMaxJsonFileBytes);
  // Rejected while parsing, before the deep value exists: the serializer (used for messages) and
  // copies of a value recurse once per level.
  const json::parser_callback_t depth_check = [source](int depth, json::parse_event_t, json&) {
    if (depth > limits::kMaxJsonDepth)
      fail("{}: not valid JSON for a model file: nested deeper than {} levels (docs/limits.md)", source,
           limits::kMaxJsonDepth);
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), depth_check);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
}

}  // namespace mk
