// Memory-ordered atomics at device ("agent") scope, and system scope for host-mapped memory.
// Producer: release-add on a counter after its writes. Consumer: acquire-load until the count is reached.
// NVIDIA: PTX ld.acquire.gpu / red.release.gpu. AMD: __hip_atomic builtins at agent scope; on gfx94x an
// agent-scope release writes back the XCD's L2 (buffer_wbl2) and an acquire invalidates it (buffer_inv sc1),
// which is what makes data written on one XCD visible on another.
#pragma once

#include "device/gpu.h"

namespace mk::dev {

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
#if defined(MK_PLATFORM_NVIDIA)
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

__device__ __forceinline__ void add_release(unsigned* p, unsigned v) {
#if defined(MK_PLATFORM_NVIDIA)
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

// Add with acquire and release (a read-modify-write): returns the value before the add. The add that
// completes a count sees, through the chain of earlier adds, everything each adder wrote before its own
// add (the last arriver of a group of producers).
__device__ __forceinline__ unsigned fetch_add_acq_rel(unsigned* p, unsigned v) {
#if defined(MK_PLATFORM_NVIDIA)
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
#else
  return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

// Every thread of a workgroup, before the barrier after which one thread release-adds the workgroup's
// "done" counter. NVIDIA: nothing to do: bar.sync orders the block's writes before thread 0's
// red.release.gpu, and a release is cumulative over what its thread has synchronised with (PTX memory
// model), so one release covers the whole block. AMD: thread 0's agent-scope release waits only for its
// own wave's memory counters, so each wave first makes its own stores agent-visible (on gfx94x: L2
// write-back) before the barrier.
__device__ __forceinline__ void release_block_writes() {
#if defined(MK_PLATFORM_AMD)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
#endif
}

// Plain release store and relaxed accesses at device scope (barrier flags, generation words).
__device__ __forceinline__ void store_release_gpu(unsigned* p, unsigned v) {
#if defined(MK_PLATFORM_NVIDIA)
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

__device__ __forceinline__ void store_relaxed_gpu(unsigned* p, unsigned v) {
#if defined(MK_PLATFORM_NVIDIA)
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

__device__ __forceinline__ unsigned load_relaxed_gpu(const unsigned* p) {
#if defined(MK_PLATFORM_NVIDIA)
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

// Host-mapped memory: the host reads these while the kernel runs.
__device__ __forceinline__ void store_release_system(unsigned* p, unsigned v) {
#if defined(MK_PLATFORM_NVIDIA)
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#endif
}

__device__ __forceinline__ unsigned load_acquire_system(const unsigned* p) {
#if defined(MK_PLATFORM_NVIDIA)
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
#endif
}

// Release-add at system scope: for a counter in another GPU's memory (a peer window, device/peer_windows.h),
// which that GPU's waiter reads with load_acquire_system.
__device__ __forceinline__ void add_release_system(unsigned* p, unsigned v) {
#if defined(MK_PLATFORM_NVIDIA)
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#endif
}

// Polite spin: lets the other warps of the SM/CU run while one lane waits.
__device__ __forceinline__ void spin_pause() {
#if defined(MK_PLATFORM_NVIDIA)
  __nanosleep(32);
#else
  __builtin_amdgcn_s_sleep(1);
#endif
}

// A 64-bit nanosecond-ish clock shared by all SMs/CUs (NVIDIA %globaltimer; AMD s_memrealtime at 100 MHz).
__device__ __forceinline__ unsigned long long global_timer_ns() {
#if defined(MK_PLATFORM_NVIDIA)
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return __builtin_amdgcn_s_memrealtime() * 10ull;
#endif
}

}  // namespace mk::dev
