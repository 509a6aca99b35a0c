// One error type for everything the runtime rejects: bad files, bad shapes, bad requests.
// Messages name the file / tensor / limit and say what was expected and what was found.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace mk {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace mk
