// The message of the mk::Error a test expects: tests then check that it names the file, tensor or limit.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/error.h"

namespace mk::test {

// Runs `f`, which must throw mk::Error; returns its message ("" and a test failure if it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected mk::Error";
  return "";
}

}  // namespace mk::test
