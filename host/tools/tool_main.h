// The main() of the command-line tools (mk-run, mk-chat, mk-server, mk-bench): runs the tool and turns what
// it throws into one line on stderr, "NAME: error: ...", and an exit status (host/tools/cli_checks.h): 1 for
// an error, 2 for a bad command-line value, 3 for a hung kernel. A hung kernel that would not stop leaves
// the process at once: destructors and the GPU runtime's teardown would wait for it forever.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <new>

#include "host/tools/cli_checks.h"
#include "runtime/decode_backend.h"
#include "runtime/error.h"

namespace mk::cli {

template <class Run>
int run_tool(const char* name, Run run, int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const HangError& e) {
    fmt::print(stderr, "{}: error: {}\n", name, e.what());
    if (e.stopped()) return kExitHung;
    std::fflush(stderr);
    std::_Exit(kExitHung);
  } catch (const UsageError& e) {
    fmt::print(stderr, "{}: error: {}\n", name, e.what());
    return kExitUsage;
  } catch (const Error& e) {
    fmt::print(stderr, "{}: error: {}\n", name, e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {  // the checks before large allocations should make this unreachable
    fmt::print(stderr, "{}: error: out of memory\n", name);
    return kExitError;
  }
}

}  // namespace mk::cli
