// Host memory a new allocation can take, for checking a large request (the CPU emulator's KV cache) before
// making it: an allocation beyond it either throws std::bad_alloc deep inside or, since Linux overcommits,
// succeeds and gets the process OOM-killed once the pages are touched.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mk {

struct HostMemory {
  uint64_t available_bytes = 0;
  std::string source;  // where the number comes from, for messages ("MemAvailable in /proc/meminfo", ...)
};

// The kernel's estimate of memory available without swapping (MemAvailable), lowered to the headroom of
// the process's cgroup when one limits it (containers see the whole machine's MemAvailable).
HostMemory available_host_memory();

// "MemAvailable:  123456 kB" in /proc/meminfo's text, in bytes.
std::optional<uint64_t> parse_mem_available(std::string_view meminfo);

// One part of a memory request, for the message ("KV cache for 4096 tokens", bytes).
struct MemoryNeed {
  std::string what;
  uint64_t bytes = 0;
};

// Throws OutOfMemoryError when the needs add up to more than `available`, naming each part, the total,
// the limit and where it comes from, then `hint` (what to lower).
void check_host_memory(std::string_view who, const std::vector<MemoryNeed>& needs, const HostMemory& available,
                       std::string_view hint);

// 1536 -> "1.5 KiB"; for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace mk
