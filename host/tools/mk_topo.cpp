// mk-topo: prints the GPU's unit -> domain -> die map (SM -> GPC on NVIDIA, CU -> XCD -> IOD on AMD),
// as a table or as JSON. Without a GPU (or a GPU-less build) it falls back to a synthetic map, saying so.
//
//   mk-topo [--device K] [--json] [--verbose] [--no-fallback] [--fallback SPEC]
//   mk-topo --synthetic SPEC [--json]      SPEC: h100 | mi300x | N,D,P (units, domains, domains per die)
//   mk-topo --from FILE [--json]           read and validate a map written by `mk-topo --json`
//
// Exit status: 0 on success (a fallback to a synthetic map included, with a warning on stderr),
// 1 when the map cannot be produced, 2 on a usage error.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "device/measure/topology_probe.h"
#include "runtime/error.h"
#include "topology/topology.h"

namespace {

constexpr std::string_view kUsage = R"(usage: mk-topo [options]
Prints which SM/CU belongs to which GPC/XCD (and IOD) of a GPU.

  --device K         probe GPU K (default 0)
  --json             print JSON instead of a table
  --synthetic SPEC   print a synthetic map instead of probing: h100, mi300x or N,D,P
                     (N units in D domains, P domains per die)
  --from FILE        read a map written by `mk-topo --json`, validate it and print it
  --fallback SPEC    synthetic map to print when probing fails (default mi300x in an
                     AMD build, h100 otherwise)
  --no-fallback      fail (exit 1) when probing fails instead of falling back
  --verbose          print the probe's progress on stderr
  --help             this text
)";

struct Args {
  int device = 0;
  bool json = false;
  bool verbose = false;
  bool fallback = true;
  std::string fallback_spec = std::string(mk::probe_platform()) == "amd" ? "mi300x" : "h100";
  std::optional<std::string> synthetic;
  std::optional<std::string> from;
};

struct UsageError {
  std::string message;
};

int parse_device(const std::string& text) {
  size_t used = 0;
  int value = -1;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 0) throw UsageError{fmt::format("--device needs a GPU index >= 0, got '{}'", text)};
  return value;
}

Args parse_args(int argc, char** argv) {
  Args args;
  std::vector<std::string> rest(argv + 1, argv + argc);
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    auto value = [&](std::string_view flag) -> std::string {
      if (i + 1 >= rest.size()) throw UsageError{fmt::format("{} needs a value", flag)};
      return rest[++i];
    };
    if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      std::exit(0);
    } else if (a == "--json") {
      args.json = true;
    } else if (a == "--verbose" || a == "-v") {
      args.verbose = true;
    } else if (a == "--no-fallback") {
      args.fallback = false;
    } else if (a == "--fallback") {
      args.fallback_spec = value(a);
    } else if (a == "--device") {
      args.device = parse_device(value(a));
    } else if (a == "--synthetic") {
      args.synthetic = value(a);
    } else if (a == "--from") {
      args.from = value(a);
    } else {
      throw UsageError{fmt::format("unknown argument '{}'", a)};
    }
  }
  if (args.synthetic && args.from) throw UsageError{"--synthetic and --from exclude each other"};
  return args;
}

mk::Topology read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) mk::fail("cannot open '{}' for reading", path);
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return mk::topology_from_json_string(text.str());
  } catch (const mk::Error& e) {
    mk::fail("{}: {}", path, e.what());
  }
}

mk::Topology obtain(const Args& args) {
  if (args.synthetic) return mk::synthetic_from_spec(*args.synthetic);
  if (args.from) return read_file(*args.from);
  mk::ProbeOptions options;
  options.verbose = args.verbose;
  try {
    return mk::probe_topology(args.device, options);
  } catch (const mk::Error& e) {
    if (!args.fallback) throw;
    mk::Topology t = mk::synthetic_from_spec(args.fallback_spec);
    fmt::print(stderr, "mk-topo: warning: {}\nmk-topo: warning: printing a SYNTHETIC topology ('{}') instead\n",
               e.what(), args.fallback_spec);
    t.notes.push_back(std::string("probe failed, synthetic fallback: ") + e.what());
    return t;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "mk-topo: {} (see mk-topo --help)\n", e.message);
    return 2;
  }
  try {
    const mk::Topology topology = obtain(args);
    if (args.json) {
      fmt::print("{}\n", mk::topology_to_json_string(topology));
    } else {
      fmt::print("{}", mk::format_topology_table(topology));
    }
    std::fflush(stdout);
    return 0;
  } catch (const mk::Error& e) {
    fmt::print(stderr, "mk-topo: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mk-topo: unexpected error: {}\n", e.what());
    return 1;
  }
}
