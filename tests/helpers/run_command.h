// Runs a program to completion with its stdout and stderr captured separately, for tests that check what
// the command-line tools print.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/helpers/tiny_chat_model.h"

namespace mk::test {

struct Captured {
  int status = -1;  // the exit status; 128 + n for a program killed by signal n (as the shell reports it)
  std::string out, err;
};

// `args[0]` is the program. `input` is its stdin (empty: /dev/null); `cwd` its working directory (empty:
// this process's).
inline Captured run_command(const std::vector<std::string>& args, const std::string& input = "",
                            const std::filesystem::path& cwd = {}) {
  const ScopedTempDir dir("captured");
  const auto quote = [](const std::string& s) {
    std::string q = "'";
    for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string cmd = cwd.empty() ? "" : "cd " + quote(cwd.string()) + " && ";
  for (const auto& a : args) cmd += quote(a) + " ";
  std::string in = "/dev/null";
  if (!input.empty()) {
    in = (dir.path / "in").string();
    std::ofstream(in, std::ios::binary) << input;
  }
  cmd += "> " + quote((dir.path / "out").string()) + " 2> " + quote((dir.path / "err").string()) + " < " + quote(in);
  Captured c;
  const int raw = std::system(cmd.c_str());
  c.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::stringstream out, err;
  out << std::ifstream(dir.path / "out").rdbuf();
  err << std::ifstream(dir.path / "err").rdbuf();
  c.out = out.str();
  c.err = err.str();
  return c;
}

}  // namespace mk::test
