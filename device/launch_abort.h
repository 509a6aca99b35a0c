// Stopping a hung launch from the host (issue 18). A wait in the kernel that has lasted past
// kAbortCheckAfterNs starts reading a host-written abort word (KernelParams::abort); once the host has
// set it, the wait gives up and its workgroup leaves the kernel. A healthy launch never waits that long,
// so its waits never read the word, and the ones that end within kAbortCheckEvery polls never read the
// clock either: the first check is the same load as before, and each further poll adds an increment
// and a test.
#pragma once

#include <cstdint>

#include "device/device_atomics.h"

namespace mk::dev {

// Far above any wait of a healthy launch (one decode step of an 8B model is ~5 ms) and far below the
// host watchdog (seconds), which sets the word only after no workgroup has progressed for that long.
inline constexpr unsigned long long kAbortCheckAfterNs = 100ull * 1000 * 1000;
inline constexpr uint32_t kAbortCheckEvery = 256;  // polls between clock reads; a power of two

// One wait's state: its start (the clock at its first clock read) and its polls so far.
struct AbortableWait {
  const volatile uint32_t* abort_word;
  unsigned long long start = 0;
  uint32_t polls = 0;

  // After a poll that found the wait unsatisfied: true when the wait should give up.
  __device__ __forceinline__ bool give_up() {
    if ((++polls & (kAbortCheckEvery - 1)) != 0) return false;
    const unsigned long long now = global_timer_ns();
    if (start == 0) {
      start = now;
      return false;
    }
    return now - start >= kAbortCheckAfterNs && load_acquire_system(const_cast<const unsigned*>(abort_word)) != 0;
  }
};

}  // namespace mk::dev
