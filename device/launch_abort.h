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

// A wait past kAbortCheckAfterNs also beats its workgroup's waiting mark (host-mapped, after the progress
// pairs of KernelParams::progress): it writes the clock in units of 2^kWaitBeatShift ns there whenever
// that changes, so the mark moves every ~67 ms while the wait lasts and stops moving when it ends. The
// host watchdog counts a launch as hung only when no workgroup has progressed for its limit and every
// workgroup still running has a moving mark: one whose mark stands still is inside an instruction, however
// long that takes. Nothing is added to a wait's first 100 ms, nor written when it ends.
inline constexpr uint32_t kWaitBeatShift = 26;

// One wait's state: its start (the clock at its first clock read), its polls so far, and the last beat
// written.
struct AbortableWait {
  const volatile uint32_t* abort_word;
  uint32_t* progress;  // KernelParams::progress
  unsigned long long start = 0;
  uint32_t polls = 0;
  uint32_t beat = 0;

  // After a poll that found the wait unsatisfied: true when the wait should give up.
  __device__ __forceinline__ bool give_up() {
    if ((++polls & (kAbortCheckEvery - 1)) != 0) return false;
    const unsigned long long now = global_timer_ns();
    if (start == 0) {
      start = now;
      return false;
    }
    if (now - start < kAbortCheckAfterNs) return false;
    const uint32_t now_beat = uint32_t(now >> kWaitBeatShift);
    if (now_beat != beat) {
      beat = now_beat;
      *(reinterpret_cast<volatile uint32_t*>(progress) + 2 * gridDim.x + blockIdx.x) = now_beat;
    }
    return load_acquire_system(const_cast<const unsigned*>(abort_word)) != 0;
  }
};

}  // namespace mk::dev
