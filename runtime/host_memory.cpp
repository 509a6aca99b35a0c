#include "runtime/host_memory.h"

#include <fmt/format.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "runtime/error.h"

namespace mk {
namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  return v;
}

constexpr uint64_t kNone = ~uint64_t(0);

// The number a one-number file (memory.max, memory.limit_in_bytes) holds; kNone if there is none.
uint64_t read_number(const std::string& path) {
  const auto text = read_text(path);
  if (!text) return kNone;
  return parse_u64(*text).value_or(kNone);
}

// The value of `key` in a "key value" per line file (memory.stat).
std::optional<uint64_t> stat_value(std::string_view text, std::string_view key) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ')
      return parse_u64(line.substr(key.size() + 1));
    at = end + 1;
  }
  return std::nullopt;
}

// The cgroup (v2 unified, or v1 with the memory controller) this process is in, from /proc/self/cgroup.
struct CgroupMemory {
  std::string base;  // where the hierarchy is mounted
  std::string path;  // the process's cgroup in it
  const char* limit_file;
  const char* usage_file;
  const char* inactive_key;  // memory.stat's reclaimable page cache
};

std::optional<CgroupMemory> own_cgroup() {
  const auto text = read_text("/proc/self/cgroup");
  if (!text) return std::nullopt;
  std::optional<CgroupMemory> v2;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      v2 = CgroupMemory{"/sys/fs/cgroup", path, "memory.max", "memory.current", "inactive_file"};
      continue;
    }
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "memory")  // a v1 memory controller takes precedence: v2 then has no memory files
        return CgroupMemory{"/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                            "total_inactive_file"};
  }
  return v2;
}

// The least headroom (limit - usage not counting reclaimable page cache) of the cgroup and its ancestors
// that have a limit, with the cgroup that sets it.
std::optional<std::pair<uint64_t, std::string>> cgroup_headroom() {
  const auto cg = own_cgroup();
  if (!cg) return std::nullopt;
  std::optional<std::pair<uint64_t, std::string>> best;
  std::string path = cg->path;
  for (;;) {
    const std::string dir = cg->base + (path == "/" ? "" : path);
    // A missing file or v2's "max" read as no limit; v1 writes "no limit" as a number near 2^63.
    const uint64_t limit = read_number(dir + "/" + cg->limit_file), usage = read_number(dir + "/" + cg->usage_file);
    if (limit < (uint64_t(1) << 60) && usage != kNone) {
      uint64_t used = usage;
      if (const auto stat = read_text(dir + "/memory.stat"))
        if (const auto inactive = stat_value(*stat, cg->inactive_key)) used -= std::min(used, *inactive);
      const uint64_t headroom = limit > used ? limit - used : 0;
      if (!best || headroom < best->first)
        best = {headroom, fmt::format("what the memory limit of cgroup {} leaves ({}/{})", path, dir, cg->limit_file)};
    }
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

std::optional<uint64_t> parse_mem_available(std::string_view meminfo) {
  const auto kb = stat_value(meminfo, "MemAvailable:");
  if (!kb) return std::nullopt;
  return *kb * 1024;
}

HostMemory available_host_memory() {
  HostMemory m;
  if (const auto text = read_text("/proc/meminfo"))
    if (const auto bytes = parse_mem_available(*text)) m = {*bytes, "MemAvailable in /proc/meminfo"};
  if (m.source.empty()) {  // no /proc: free plus buffer memory, a lower estimate
    struct sysinfo si = {};
    if (sysinfo(&si) == 0) m = {(uint64_t(si.freeram) + uint64_t(si.bufferram)) * si.mem_unit, "free memory (sysinfo)"};
  }
  if (const auto cg = cgroup_headroom(); cg && (m.source.empty() || cg->first < m.available_bytes))
    m = {cg->first, cg->second};
  return m;
}

void check_host_memory(std::string_view who, const std::vector<MemoryNeed>& needs, const HostMemory& available,
                       std::string_view hint) {
  if (available.source.empty()) return;  // unknown: nothing to compare with
  uint64_t total = 0;
  std::string parts;
  for (const MemoryNeed& n : needs) {
    total += n.bytes;
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n.what, format_bytes(n.bytes));
  }
  if (total <= available.available_bytes) return;
  throw OutOfMemoryError(fmt::format("{} needs {} of host memory ({}) but {} is available ({}); {}", who,
                                     format_bytes(total), parts, format_bytes(available.available_bytes),
                                     available.source, hint));
}

std::string format_bytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 6) {
    v /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.1f} {}", v, kUnits[unit]);
}

}  // namespace mk
