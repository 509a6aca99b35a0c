// Warpgroup-level tensor-core instructions (NVIDIA sm_90a: wgmma.mma_async) for operands in shared
// memory. MK_WGMMA says whether the compiling target has them (device code for sm_90a; 0 elsewhere, where
// callers keep the warp-level path of device/tensor_core.h or a portable one).
//
// A warpgroup is 4 consecutive warps (128 threads). wgmma.mma_async m64nNk16 multiplies a 64 x 16 tile of
// A by a 16 x N tile of B (both read from shared memory through descriptors) into fp32 accumulators spread
// over the warpgroup: warp w of the group holds rows 16 w .. 16 w + 15; within it, accumulator 4 j + {0, 1}
// of lane l is row 16 w + l / 4, columns 8 j + 2 (l % 4) + {0, 1}, and 4 j + {2, 3} the same columns 8 rows
// lower (the mma.sync m16n8 layout, one n8 block per j).
//
// Order: the instructions run asynchronously. wgmma_fence() before the first of a batch (it orders the
// accumulators' earlier register writes before the products read them); wgmma_commit() closes the batch;
// wgmma_wait<N>() returns once at most N batches of this thread's warpgroup are still running, after which
// their shared-memory reads are done. Shared memory written by ordinary stores or cp.async must be made
// visible to the products' (async) proxy with fence_proxy_async_shared() by the writing threads, before the
// barrier that publishes it.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MK_WGMMA 1
#else
#define MK_WGMMA 0
#endif

namespace mk::dev {

#if MK_WGMMA
// The descriptor of a K-major operand whose rows are 128 bytes (64 16-bit elements), each row's 16-byte
// chunk c stored at chunk c ^ (row % 8) (the 128-byte swizzle), 8-row groups 1024 bytes apart, the tile
// 1024-byte aligned. `address`: the shared address of the k16 step's first element in row 0, the tile's
// plus 32 bytes a step (the swizzle is a function of the address bits, so a step is a plain offset).
// Fields: start address >> 4 (bits 0-13), leading-dimension offset (unused with a swizzle: 1), stride
// between 8-row groups >> 4 (bits 32-45), swizzle mode 1 = 128 bytes (bits 62-63).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t address) {
  return uint64_t((address & 0x3ffffu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Keeps the compiler from moving reads or writes of the accumulators across a wgmma_wait (the products
// write them asynchronously, unseen by the compiler).
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The product's PTX for operand type TYPE ("bf16" or "f16").
#define MK_WGMMA_M64N128K16(TYPE)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                     \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " "                   \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}"                                     \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                             \
               : "l"(a), "l"(b), "r"(accumulate))

// d (+)= A (64 x 16) * B (16 x 128) on bf16 (kF16: IEEE f16) operands: a and b are descriptors of the
// K-major tiles (A: 64 rows of K, B: 128 rows of K, i.e. B^T); accumulate = 0 overwrites d.
template <bool kF16>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (kF16) MK_WGMMA_M64N128K16("f16");
  else MK_WGMMA_M64N128K16("bf16");
}
#undef MK_WGMMA_M64N128K16
#endif

}  // namespace mk::dev
