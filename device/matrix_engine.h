// The tensor-core matrix engine's step: one warp multiplies a 16-row tile slice of a weight matrix (its
// tile image, runtime/matrix_tiles.h, in shared memory) by up to 8 * NT packed activation columns, with
// m16n8k16 products (weights as A, decoded exactly to 16-bit in registers; activations as B, their high
// and low parts each a product), into fp32 accumulators. One engine for every weight format: a format is
// its decoder (TileDecode) and, for quantized ones, the group scale applied to each step's partial sums.
// NVIDIA only (MK_WARP_MMA); device code.
#pragma once

#include <cstdint>

#include "device/kernel_params.h"
#include "device/platform.h"
#include "device/tensor_core.h"
#include "runtime/matrix_tiles.h"

namespace mk::dev {

#if MK_WARP_MMA

// The four A registers of k-group w of a 16-byte piece: (e0, e1), (e2, e3), (e4, e5), (e6, e7) of the
// group's 8 elements, each pair a 32-bit register of two 16-bit values, the lower element in the low half.
template <MatrixFormat F>
struct TileDecode;

// 16-bit formats: the piece is one k-group, its words are the registers.
template <>
struct TileDecode<MatrixFormat::BF16> {
  using Param = uint32_t;  // unused
  __device__ static __forceinline__ void regs(uint4 p, int, Param, uint32_t (&r)[4]) { r[0] = p.x, r[1] = p.y, r[2] = p.z, r[3] = p.w; }
};
template <>
struct TileDecode<MatrixFormat::F16> : TileDecode<MatrixFormat::BF16> {};

// fp8 E4M3: two k-groups a piece; Hopper converts two fp8 to a half2 exactly (every e4m3 value is a half).
template <>
struct TileDecode<MatrixFormat::FP8> {
  using Param = uint32_t;  // unused
  __device__ static __forceinline__ uint32_t pair(uint32_t word, bool high) {
    uint32_t h;
    if (high) asm("{ .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, h; }" : "=r"(h) : "r"(word));
    else asm("{ .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l; }" : "=r"(h) : "r"(word));
    return h;
  }
  __device__ static __forceinline__ void regs(uint4 p, int w, Param, uint32_t (&r)[4]) {
    const uint32_t a = w == 0 ? p.x : p.z, b = w == 0 ? p.y : p.w;
    r[0] = pair(a, false), r[1] = pair(a, true), r[2] = pair(b, false), r[3] = pair(b, true);
  }
};

// int4 with a zero point: four k-groups a piece, word w being group w. A code under a mask that leaves it
// in a half's low mantissa bits, OR 0x6400 (1024), is the half 1024 + q; minus 1024 + zero it is
// q - zero, exactly. A code four bits higher makes 1024 + 16 q, and (1024 + 16 q) / 16 - (64 + zero) is
// q - zero in one exact fused step. Param: the row's zero point.
template <>
struct TileDecode<MatrixFormat::INT4> {
  using Param = uint32_t;
  __device__ static __forceinline__ uint32_t sub(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
  __device__ static __forceinline__ uint32_t fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
  }
  __device__ static __forceinline__ void regs(uint4 p, int w, Param zero, uint32_t (&r)[4]) {
    const uint32_t word = w == 0 ? p.x : w == 1 ? p.y : w == 2 ? p.z : p.w;
    const uint32_t base = (0x6400u + zero) * 0x10001u;           // 1024 + zero, twice
    const uint32_t base16 = (0xd400u + 16u * zero) * 0x10001u;   // -(64 + zero), twice
    const uint32_t sixteenth = 0x2c002c00u;                       // 1/16, twice
    const uint32_t hi = word >> 8;
    r[0] = sub((word & 0x000f000fu) | 0x64006400u, base);
    r[1] = fma((word & 0x00f000f0u) | 0x64006400u, sixteenth, base16);
    r[2] = sub((hi & 0x000f000fu) | 0x64006400u, base);
    r[3] = fma((hi & 0x00f000f0u) | 0x64006400u, sixteenth, base16);
  }
};

// Accumulators of one warp for one tile: acc[j] is the m16n8 block of activation columns 8 j .. 8 j + 7;
// lane l holds rows l / 4 (acc[j][0], [1]) and l / 4 + 8 ([2], [3]) at columns 2 (l % 4) + {0, 1}.
template <int NT>
struct TileAccumulators {
  float c[NT][4];
  __device__ void clear() {
#pragma unroll
    for (int j = 0; j < NT; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
  }
  __device__ void add(const TileAccumulators& o) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) c[j][e] += o.c[j][e];
  }
};

// Step i of a tile slice of `cols` columns: acc += W[16 rows, the step's columns] x X[the step's columns, M
// columns], W from `tile_slice` (a tile slice of the image), X from `act` (the packed activation slice, M
// columns).
// Columns n >= M are zeros and read nothing. Each column's sums are independent of the others (an
// m16n8k16 product adds each output element's own products), so a column's result does not depend on M.
template <MatrixFormat F, int NT>
__device__ __forceinline__ void engine_step(const uint8_t* tile_slice, int cols, int i, const uint8_t* act, int M, TileAccumulators<NT>& acc) {
  constexpr bool kF16 = tile_activations_f16(F);
  constexpr int W = piece_elements(F) / 8;
  const int lane = lane_id(), g = lane >> 2, t = lane & 3;
  const uint4* pieces = reinterpret_cast<const uint4*>(tile_slice) + i * 64 + lane;
  const uint4 pa = pieces[0], pb = pieces[32];
  // The step's scale group: its scales, then (INT4) its zero points after every group's scales.
  const int group = i * tile_k_step(F) / kTileGroup;
  const uint8_t* params = tile_slice + tile_code_bytes(F, cols);
  typename TileDecode<F>::Param za = 0, zb = 0;
  if constexpr (F == MatrixFormat::INT4) {
    const uint8_t* zeros = params + 4 * kTileRows * (cols / kTileGroup) + group * kTileRows;
    za = zeros[g], zb = zeros[g + 8];
  }
  // Four independent sums (high and low parts, even and odd k-halves), so that consecutive products do
  // not wait for each other's results; added in a fixed order at the end.
  TileAccumulators<NT> part[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) part[q].clear();
#pragma unroll
  for (int w = 0; w < W; ++w) {
    uint32_t ra[4], rb[4];
    TileDecode<F>::regs(pa, w, za, ra);
    TileDecode<F>::regs(pb, w, zb, rb);
    const uint32_t a1[4] = {ra[0], rb[0], ra[1], rb[1]}, a2[4] = {ra[2], rb[2], ra[3], rb[3]};
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int n = 8 * j + g;
      uint4 hi = make_uint4(0, 0, 0, 0), lo = make_uint4(0, 0, 0, 0);
      if (n < M) {
        hi = *reinterpret_cast<const uint4*>(act + act_lane_offset(F, n, i, w, 0, t));
        lo = *reinterpret_cast<const uint4*>(act + act_lane_offset(F, n, i, w, 1, t));
      }
      mma_k16_as<kF16>(part[0].c[j], a1, hi.x, hi.y);
      mma_k16_as<kF16>(part[1].c[j], a1, lo.x, lo.y);
      mma_k16_as<kF16>(part[2].c[j], a2, hi.z, hi.w);
      mma_k16_as<kF16>(part[3].c[j], a2, lo.z, lo.w);
    }
  }
  part[0].add(part[2]);
  part[1].add(part[3]);
  part[0].add(part[1]);
  if constexpr (matrix_format_quantized(F)) {
    const float* scales = reinterpret_cast<const float*>(params) + group * kTileRows;
    const float sa = scales[g], sb = scales[g + 8];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      acc.c[j][0] += sa * part[0].c[j][0];
      acc.c[j][1] += sa * part[0].c[j][1];
      acc.c[j][2] += sb * part[0].c[j][2];
      acc.c[j][3] += sb * part[0].c[j][3];
    }
  } else {
    acc.add(part[0]);
  }
}

#endif  // MK_WARP_MMA

}  // namespace mk::dev
