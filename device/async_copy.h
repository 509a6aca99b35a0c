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

// The same for one 4-byte word (a float of a per-row constant, at any 4-byte boundary).
__device__ __forceinline__ void copy_async_4(void* shared_dst, const void* global_src) {
#if defined(MK_PLATFORM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(uint32_t(__cvta_generic_to_shared(shared_dst))),
               "l"(global_src)
               : "memory");
#else
  *static_cast<uint32_t*>(shared_dst) = *static_cast<const uint32_t*>(global_src);
#endif
}

// The calling thread's asynchronous copies have landed (other threads' need a barrier after this).
__device__ __forceinline__ void wait_async_copies() {
#if defined(MK_PLATFORM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// Groups of asynchronous copies: commit closes the calling thread's group; wait_async_groups(n) returns
// once at most n of its groups are still in flight (n < 4). AMD: the copies were synchronous.
__device__ __forceinline__ void commit_async_group() {
#if defined(MK_PLATFORM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_async_groups(int n) {
#if defined(MK_PLATFORM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  switch (n) {  // the count is an immediate operand
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
  }
#else
  (void)n;
#endif
}

// Orders the calling thread's generic-proxy writes to shared memory (asynchronous copies included) before
// later async-proxy operations on it (the weight stream's bulk copies), once a barrier follows.
__device__ __forceinline__ void fence_shared_for_async_proxy() {
#if defined(MK_PLATFORM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

}  // namespace mk::dev
