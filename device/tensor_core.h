// Warp-level tensor-core instructions (NVIDIA sm_80+: ldmatrix and mma.sync on bf16 with fp32
// accumulators). MK_WARP_MMA (kernel_params.h) says whether the platform has them; code using them keeps a
// portable path beside (AMD builds compile that one).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 / m16n8k8", bf16): a lane holds row
// lane / 4 and columns 2 * (lane % 4) + {0, 1} of an accumulator; of A, the same row and columns (and
// columns + 8 for k16); of B, rows (k) 2 * (lane % 4) + {0, 1} (and + 8 for k16) of column lane / 4.
// A 32-bit register holds two bf16, the lower column (or row, for B) in its low half.
#pragma once

#include <cstdint>

#include "device/kernel_params.h"
#include "device/platform.h"

namespace mk::dev {

#if MK_WARP_MMA
// The 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// Four 8x8 bf16 matrices from shared memory: lane l gives the shared address of row l % 8 of matrix l / 8
// (16-byte aligned); r[i] gets matrix i's row lane / 4, columns 2 * (lane % 4) + {0, 1}.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}
// The same, transposed: r[i] gets matrix i's rows 2 * (lane % 4) + {0, 1} of column lane / 4.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}

// c += A (16 x 16) * B (16 x 8): a[0] holds A's row lane / 4, columns 2 * (lane % 4) + {0, 1}; a[1] row
// lane / 4 + 8; a[2], a[3] the same rows at columns + 8 (ldmatrix_x4's order for matrices (rows 0-7,
// columns 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)). b_lo holds B's rows 2 * (lane % 4) + {0, 1} of
// column lane / 4, b_hi the same rows + 8. c as for mma_k8.
__device__ __forceinline__ void mma_k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b_lo, uint32_t b_hi) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_lo), "r"(b_hi));
}
// mma_k16 with IEEE f16 operands (kF16) or bf16 ones.
template <bool kF16>
__device__ __forceinline__ void mma_k16_as(float (&c)[4], const uint32_t (&a)[4], uint32_t b_lo, uint32_t b_hi) {
  if constexpr (kF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_lo), "r"(b_hi));
  } else {
    mma_k16(c, a, b_lo, b_hi);
  }
}
// c += A (16 x 8) * B (8 x 8): a_lo holds A's row lane / 4, a_hi its row lane / 4 + 8; c[0], c[1] are the
// accumulator's row lane / 4, c[2], c[3] its row lane / 4 + 8.
__device__ __forceinline__ void mma_k8(float (&c)[4], uint32_t a_lo, uint32_t a_hi, uint32_t b) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a_lo), "r"(a_hi), "r"(b));
}

// Two floats as bf16 (round to nearest even; one cvt), the first in the low half; and what rounding left
// of each, likewise, so that hi + lo carries a float to ~16 bits of mantissa through bf16 products.
__device__ __forceinline__ uint32_t pack_bf16(float x, float y) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));  // the first source goes high
  return r;
}
__device__ __forceinline__ uint32_t pack_bf16_residual(float x, float y, uint32_t hi) {
  return pack_bf16(x - __uint_as_float(hi << 16), y - __uint_as_float(hi & 0xffff0000u));
}
#endif

}  // namespace mk::dev
