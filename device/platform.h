// Device-side spellings of CUDA and HIP: the one place where kernel code differs by platform, apart from
// the Hopper-only instructions (device/weight_stream.h, device/async_copy.h), which have portable paths
// beside them. device/gpu.h maps the runtime API. Only device code includes this file.
#pragma once

#include <cstdint>

#include "device/gpu.h"

#if defined(MK_PLATFORM_NVIDIA)
#include <cuda_fp16.h>
#else
#include <hip/hip_fp16.h>
#endif

// A kernel parameter whose address device functions may take without a copy to local memory (NVIDIA:
// __grid_constant__; HIP has no such copy to avoid).
#if defined(MK_PLATFORM_NVIDIA)
#define MK_GRID_CONSTANT __grid_constant__
#else
#define MK_GRID_CONSTANT
#endif

namespace mk::dev {

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) % MK_WARP_SIZE; }

// Data produced inside this launch by other workgroups. NVIDIA: ld.global.cg (L2, bypassing the
// non-coherent L1). AMD: plain loads; the agent-scope acquire before the instruction invalidated L1 (and
// on gfx94x the non-coherent L2 lines of other XCDs).
template <typename T>
__device__ __forceinline__ T load_fresh(const T* p) {
#if defined(MK_PLATFORM_NVIDIA)
  return __ldcg(p);
#else
  return *p;
#endif
}

// Weights never change during a launch: the read-only path (T: a 16- or 8-byte piece, or a scale).
template <typename T>
__device__ __forceinline__ T load_weight(const T* p) {
#if defined(MK_PLATFORM_NVIDIA)
  return __ldg(p);
#else
  return *p;  // AMD: the same global loads; weights are never written during the launch
#endif
}

__device__ __forceinline__ float shfl_xor(float v, int mask) {
#if defined(MK_PLATFORM_NVIDIA)
  return __shfl_xor_sync(0xffffffffu, v, mask);
#else
  return __shfl_xor(v, mask);
#endif
}

__device__ __forceinline__ float shfl(float v, int src_lane) {
#if defined(MK_PLATFORM_NVIDIA)
  return __shfl_sync(0xffffffffu, v, src_lane);
#else
  return __shfl(v, src_lane);
#endif
}

// 64-bit values (the sampler's token composites) as their two 32-bit halves.
__device__ __forceinline__ unsigned long long shfl_xor_u64(unsigned long long v, int mask) {
  const unsigned lo = __float_as_uint(shfl_xor(__uint_as_float(unsigned(v)), mask));
  const unsigned hi = __float_as_uint(shfl_xor(__uint_as_float(unsigned(v >> 32)), mask));
  return (unsigned long long)hi << 32 | lo;
}

__device__ __forceinline__ unsigned long long shfl_u64(unsigned long long v, int src_lane) {
  const unsigned lo = __float_as_uint(shfl(__uint_as_float(unsigned(v)), src_lane));
  const unsigned hi = __float_as_uint(shfl(__uint_as_float(unsigned(v >> 32)), src_lane));
  return (unsigned long long)hi << 32 | lo;
}

__device__ __forceinline__ unsigned long long ballot(bool pred) {
#if defined(MK_PLATFORM_NVIDIA)
  return __ballot_sync(0xffffffffu, pred);
#else
  return __ballot(pred);
#endif
}

__device__ __forceinline__ void sync_warp() {
#if defined(MK_PLATFORM_NVIDIA)
  __syncwarp();
#else
  __builtin_amdgcn_wave_barrier();
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = MK_WARP_SIZE / 2; o > 0; o >>= 1) v += shfl_xor(v, o);
  return v;
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// Two halves in one word (the low one first), as floats.
__device__ __forceinline__ float2 half2_bits_to_float2(uint32_t bits) {
  __half2 h;
  static_assert(sizeof(h) == 4, "half2 is two halves");
  __builtin_memcpy(&h, &bits, 4);
  return __half22float2(h);
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

}  // namespace mk::dev
