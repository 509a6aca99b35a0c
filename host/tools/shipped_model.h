// Where mk-chat finds the model shipped with monokernel (models/pystdlib-6m, trained by
// scripts/train_tiny_model.py) when it is given no -m: a newcomer without a model of their own can chat at once.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "runtime/error.h"

namespace mk::tools {

inline constexpr const char* kShippedModelName = "pystdlib-6m";
inline constexpr const char* kShippedModelEnv = "MK_DEFAULT_MODEL";

struct DefaultModel {
  std::filesystem::path dir;
  bool from_environment = false;  // $MK_DEFAULT_MODEL chose it (it may be any model)
};

// The running executable's directory ("" if unknown).
inline std::filesystem::path executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path();
}

// The first of, in order:
//   1. $MK_DEFAULT_MODEL, when set: it must hold a model (a wrong value is an error, not a reason to
//      quietly open another model);
//   2. `exe_dir`/`installed_relative`: where `cmake --install` puts the model next to bin/mk-chat
//      (../share/monokernel/models/pystdlib-6m);
//   3. `source_dir`/models/pystdlib-6m: the source tree the executable was built from;
//   4. models/pystdlib-6m in a directory above `exe_dir` (up to 4 levels): a build directory inside a
//      source tree that was copied elsewhere since (a GPU build carried to a GPU machine), where 3 is gone.
// A directory counts when it has a config.json. Throws mk::Error naming every place looked at.
inline DefaultModel find_default_model(const std::filesystem::path& source_dir,
                                       const std::filesystem::path& installed_relative,
                                       const std::filesystem::path& exe_dir = executable_dir()) {
  namespace fs = std::filesystem;
  const auto holds_model = [](const fs::path& dir) {
    std::error_code ec;
    return fs::is_regular_file(dir / "config.json", ec);
  };
  if (const char* env = std::getenv(kShippedModelEnv); env && *env) {
    if (holds_model(env)) return {fs::path(env), true};
    fail("{}={} has no config.json: point it at a model directory, or unset it to use the model shipped in "
         "models/{}", kShippedModelEnv, env, kShippedModelName);
  }
  std::vector<fs::path> tried;
  if (!exe_dir.empty()) tried.push_back((exe_dir / installed_relative).lexically_normal());
  tried.push_back(source_dir / "models" / kShippedModelName);
  fs::path up = exe_dir.lexically_normal();
  for (int level = 0; level < 4 && up.has_relative_path(); ++level) {
    up = up.parent_path();
    tried.push_back(up / "models" / kShippedModelName);
  }
  for (const fs::path& dir : tried)
    if (holds_model(dir)) return {dir, false};
  std::string list;
  for (const fs::path& dir : tried) list += "\n  " + dir.string();
  fail("no -m given, and the model shipped with monokernel ({}) is not where it should be:{}\nGive a model "
       "directory with -m, or set {} to one.", kShippedModelName, list, kShippedModelEnv);
}

}  // namespace mk::tools
