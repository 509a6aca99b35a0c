// The GEMV building blocks shared by the ops: 16-byte weight pieces times activations kept in shared
// memory in "planes", the batched loads that fill the planes, and the RMSNorm prologue. Device code only.
#pragma once

#include <cstdint>

#include "device/async_copy.h"
#include "device/kernel_params.h"
#include "device/platform.h"

namespace mk::dev {

constexpr int kWarps = kThreads / MK_WARP_SIZE;
__device__ __forceinline__ int warp_id() { return int(threadIdx.x) / MK_WARP_SIZE; }

// 8 weights (one 16-byte load) times 8 activations (a: the first four, b: the last four).
template <bool kFp16>
__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  float lo[4], hi[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kFp16) {
      __half2 h2;
      static_assert(sizeof(h2) == 4, "half2 is two halves");
      __builtin_memcpy(&h2, &words[i], 4);
      const float2 f = __half22float2(h2);
      lo[i] = f.x;
      hi[i] = f.y;
    } else {
      lo[i] = __uint_as_float(words[i] << 16);
      hi[i] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
  return lo[0] * a.x + hi[0] * a.y + lo[1] * a.z + hi[1] * a.w + lo[2] * b.x + hi[2] * b.y + lo[3] * b.z + hi[3] * b.w;
}

// The activation vector of a GEMV lives in shared memory in two planes: float4 c of the first plane holds
// elements 8c..8c+3, float4 c of the second (starting at n / 8) holds 8c+4..8c+7. A lane that multiplies
// the 16-byte weight piece c then reads two consecutive float4s of each plane: conflict-free, where the
// natural order would make lanes 32 bytes apart collide on banks.
// Float4 index, in the planes, of float4 q (elements 4q..4q+3) of an n-element vector.
__device__ __forceinline__ int plane_quad(int q, int n8) { return (q & 1) ? n8 + (q >> 1) : (q >> 1); }

// The first batch of 16-byte weight loads of two rows (the rest follow in warp_two_row_dot).
constexpr int kUnroll = 4;
constexpr int kFirst = 4;
struct FirstBatch {
  uint4 a[kFirst], b[kFirst];
};

__device__ __forceinline__ void issue_first_batch(const uint8_t* row0, const uint8_t* row1, int cols, FirstBatch& f) {
  const uint4* a = reinterpret_cast<const uint4*>(row0);
  const uint4* b = reinterpret_cast<const uint4*>(row1);
  const int n = cols / 8;
#pragma unroll
  for (int u = 0; u < kFirst; ++u) {
    const int c = lane_id() + u * MK_WARP_SIZE;
    f.a[u] = (row0 && c < n) ? load_weight(a + c) : make_uint4(0, 0, 0, 0);
    f.b[u] = (row1 && c < n) ? load_weight(b + c) : make_uint4(0, 0, 0, 0);
  }
}

// One warp, two rows at once (their loads interleaved): out0 = dot(row0, x), out1 = dot(row1, x), x in
// planes; row1 may be null. `first` holds the already issued first batch.
template <bool kFp16>
__device__ void warp_two_row_dot(const uint8_t* row0, const uint8_t* row1, int cols, const float4* x, const FirstBatch& first,
                                 float& out0, float& out1) {
  const uint4* a = reinterpret_cast<const uint4*>(row0);
  const uint4* b = reinterpret_cast<const uint4*>(row1);
  const int n = cols / 8;
  float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
  for (int u = 0; u < kFirst; ++u) {
    const int c = lane_id() + u * MK_WARP_SIZE;
    if (c < n) {
      const float4 lo = x[c], hi = x[n + c];
      acc0 += dot8<kFp16>(first.a[u], lo, hi);
      if (row1) acc1 += dot8<kFp16>(first.b[u], lo, hi);
    }
  }
  for (int c0 = lane_id() + MK_WARP_SIZE * kFirst; c0 < n; c0 += MK_WARP_SIZE * kUnroll) {
    uint4 wa[kUnroll], wb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * MK_WARP_SIZE;
      wa[u] = c < n ? load_weight(a + c) : make_uint4(0, 0, 0, 0);
      wb[u] = (row1 && c < n) ? load_weight(b + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * MK_WARP_SIZE;
      if (c < n) {
        const float4 lo = x[c], hi = x[n + c];
        acc0 += dot8<kFp16>(wa[u], lo, hi);
        if (row1) acc1 += dot8<kFp16>(wb[u], lo, hi);
      }
    }
  }
  out0 = warp_sum(acc0);
  out1 = warp_sum(acc1);
}

// Reads n floats (n % 8 == 0) produced in this launch, 16 bytes at a time with four loads in flight per
// thread before the first use (a plain loop would wait one L2 round trip per element), and hands each
// piece to put(q, v): its float4 index q in the planes, its value. Thread t gets pieces t, t + kThreads,
// ..., the same ones stage_norm_weight gives it; `first()` runs once, after the loads of its first batch
// are issued and before the first put.
template <typename First, typename Put>
__device__ __forceinline__ void for_each_fresh_quad(const float* src, int n, First first, Put put) {
  const float4* s4 = reinterpret_cast<const float4*>(src);
  const int n4 = n / 4, n8 = n / 8;
  constexpr int kBatch = 4;
  for (int base = int(threadIdx.x); base < n4; base += kThreads * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      v[b] = i < n4 ? load_fresh(s4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (base == int(threadIdx.x)) first();
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kThreads;
      if (i < n4) put(plane_quad(i, n8), v[b]);
    }
  }
}

// Copies n floats (n % 8 == 0) produced in this launch into shared memory, in planes.
__device__ inline void load_to_planes(const float* src, int n, float* dst) {
  float4* d4 = reinterpret_cast<float4*>(dst);
  for_each_fresh_quad(src, n, [] {}, [&](int q, float4 v) { d4[q] = v; });
}

// Starts copying an n-element f32 norm weight (constant) into shared memory in the planes' order; the
// copies land while the instruction waits for its inputs (norm_input_to_planes waits for them).
__device__ inline void stage_norm_weight(const float* weight, int n, float* dst) {
  const int n8 = n / 8;
  for (int q = threadIdx.x; q < n / 4; q += kThreads) copy_async_16(dst + 4 * plane_quad(q, n8), weight + 4 * q);
}

// The input of a GEMV behind an RMSNorm: xs = x * weight in shared memory, in planes, and 1 / rms(x), which
// the emit applies to each dot product (they are linear in xs). Deferring the factor leaves one block
// barrier on the critical path instead of three (sum of squares, then scale). Each thread handles the
// same 16-byte pieces that stage_norm_weight gave it, so its own asynchronous copies of `weight_planes`
// are all it waits for. `red`: 2 * kWarps floats; the factor ends in red[kWarps + w] for warp w, where
// that warp's emits read it (kept in a register through the GEMV, it made the kernel spill).
__device__ inline void norm_input_to_planes(const float* x, const float* weight_planes, int n, float eps, float* xs, float* red) {
  const float4* w4 = reinterpret_cast<const float4*>(weight_planes);
  float4* d4 = reinterpret_cast<float4*>(xs);
  float ss = 0.f;
  for_each_fresh_quad(x, n, [] { wait_async_copies(); }, [&](int q, float4 v) {
    const float4 w = w4[q];
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    d4[q] = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
  });
  ss = warp_sum(ss);
  if (lane_id() == 0) red[warp_id()] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += red[w];  // fixed order: every warp gets the same value
  if (lane_id() == 0) red[kWarps + warp_id()] = 1.0f / sqrtf(total / float(n) + eps);
}

template <bool kFp16>
__device__ __forceinline__ float weight_value(uint16_t bits) {
  if constexpr (kFp16) {
    return __half2float(__ushort_as_half(bits));
  } else {
    return bf16_bits_to_float(bits);
  }
}

}  // namespace mk::dev
