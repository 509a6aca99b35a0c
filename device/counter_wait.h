// Waiting for a schedule counter, shared by the token steps' kernel (device/monokernel.cu) and the chunk
// steps' kernel (device/chunk_kernel.cu). Device code only.
#pragma once

#include "device/device_atomics.h"
#include "device/kernel_params.h"
#include "device/launch_abort.h"
#include "device/platform.h"

namespace mk::dev {

// What counter wait `w` must reach at step (or chunk) `step`.
__device__ __forceinline__ uint32_t wait_target(const Wait& w, uint32_t step) { return w.per_step * (step + 1 - w.lag); }

// Thread 0 spins until the counter reaches the target; false if it gave up instead (the host aborted a
// hung launch, device/launch_abort.h).
static __device__ bool spin_until(const KernelParams& p, const unsigned* counter, uint32_t target) {
  AbortableWait wait{p.abort, p.progress};
  while (load_acquire(counter) < target) {
    spin_pause();
    if (wait.give_up()) return false;
  }
  return true;
}

}  // namespace mk::dev
