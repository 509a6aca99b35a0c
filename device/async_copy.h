// Asynchronous 16-byte copies global -> shared memory that do not hold registers or stall the issuing
// thread: for constants (norm weights) staged before an instruction waits for its inputs, so that their
// HBM round trip overlaps the wait instead of following it. NVIDIA (sm_80+): cp.async, waited with
// cp.async.wait_all. AMD: a plain copy (this build has no asynchronous copy into LDS); the round trip
// then happens before the wait rather than overlapping it, which is correct and merely slower.
#pragma once

#include "device/gpu.h"

namespace mk::dev {

__device__ __forceinline__ void copy_async_16(void* shared_dst, const void* global_src) {
#if defined(MK_PLATFORM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(uint32_t(__cvta_generic_to_shared(shared_dst))),
               "l"(global_src)
               : "memory");
#else
  *static_cast<uint4*>(shared_dst) = *static_cast<const uint4*>(global_src);
#endif
}

// The calling thread's asynchronous copies have landed (other threads' need a barrier after this).
__device__ __forceinline__ void wait_async_copies() {
#if defined(MK_PLATFORM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

}  // namespace mk::dev
