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

// The model's files parse but their content cannot run (NaN or infinite weights); the C API answers
// MK_ERROR_BAD_MODEL for it.
class BadModelError : public Error {
 public:
  using Error::Error;
};

// What was asked for does not fit the memory that is free (host or device). Checked before allocating, so
// the message can name the need and the limit; the C API answers MK_ERROR_OUT_OF_MEMORY for it.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace mk
