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
  // (a & mask) | bits in one instruction.
  __device__ static __forceinline__ uint32_t and_or(uint32_t a, uint32_t mask, uint32_t bits) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
    return d;
  }
  __device__ static __forceinline__ void regs(uint4 p, int w, Param zero, uint32_t (&r)[4]) {
    const uint32_t word = w == 0 ? p.x : w == 1 ? p.y : w == 2 ? p.z : p.w;
    const uint32_t base = (0x6400u + zero) * 0x10001u;           // 1024 + zero, twice
    const uint32_t base16 = (0xd400u + 16u * zero) * 0x10001u;   // -(64 + zero), twice
    const uint32_t sixteenth = 0x2c002c00u;                       // 1/16, twice
    const uint32_t hi = word >> 8;
    r[0] = sub(and_or(word, 0x000f000fu, 0x64006400u), base);
    r[1] = fma(and_or(word, 0x00f000f0u, 0x64006400u), sixteenth, base16);
    r[2] = sub(and_or(hi, 0x000f000fu, 0x64006400u), base);
    r[3] = fma(and_or(hi, 0x00f000f0u, 0x64006400u), sixteenth, base16);
  }
};

// How a step's activation columns (tokens) sit in the products' 8-column blocks, by the most tokens kCols
// a step takes: kCols = 4 puts token n's high parts in column n and its low parts in column n + 4 (one
// product a k-half serves both, and the two columns are added at the end); kCols = 8 and 16 give each
// token a column in one or two blocks, its high and low parts each a product.
template <int kCols>
struct EngineColumns {
  static_assert(kCols == 4 || kCols == 8 || kCols == 16, "4, 8 or 16 columns");
  static constexpr bool kPacked = kCols == 4;
  static constexpr int kBlocks = kCols == 16 ? 2 : 1;
};

// Accumulators of one warp for one tile: block j covers columns 8 j .. 8 j + 7 of the products; lane l
// holds rows l / 4 (c[j][0], [1]) and l / 4 + 8 ([2], [3]) at columns 2 (l % 4) + {0, 1}. Two chains (c
// and d) so that consecutive products do not wait for each other; finish() adds them (and, packed, each
// token's low-part column to its high-part one: lanes l % 4 < 2 then hold the tokens).
template <int kCols>
struct TileAccumulators {
  static constexpr int NT = EngineColumns<kCols>::kBlocks;
  float c[NT][4], d[NT][4];
  __device__ void clear() {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) c[j][e] = d[j][e] = 0.f;
  }
  __device__ void finish() {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        c[j][e] += d[j][e];
        if constexpr (EngineColumns<kCols>::kPacked) c[j][e] += shfl_xor(c[j][e], 2);
      }
  }
  // The token and row half (0: row l / 4, 1: row l / 4 + 8) of finished value c[j][e] on this lane, or
  // a token of -1 where the lane holds none.
  __device__ static int token(int lane, int j, int e) {
    const int t = lane & 3;
    if constexpr (EngineColumns<kCols>::kPacked) return t < 2 ? 2 * t + (e & 1) : -1;
    else return 8 * j + 2 * t + (e & 1);
  }
};

// Step i of a tile slice of `cols` columns: acc += W[16 rows, the step's columns] x X[the step's columns,
// M tokens], W from `tile_slice` (a tile slice of the image), X from `act` (the packed activation slice
// of M <= kCols tokens). Tokens n >= M are zeros: their lanes read `zeros`, act_column_bytes(F) zero
// bytes in shared memory (no divergence, no selects).
// Each token's sums are independent of the other tokens' values (an m16n8k16 product adds each output
// element's own products), so a token's result does not depend on what the others hold.
template <MatrixFormat F, int kCols>
__device__ __forceinline__ void engine_step(const uint8_t* tile_slice, int cols, int i, const uint8_t* act, const uint8_t* zeros, int M,
                                            TileAccumulators<kCols>& acc) {
  using Columns = EngineColumns<kCols>;
  constexpr int NT = Columns::kBlocks;
  constexpr bool kF16 = tile_activations_f16(F);
  constexpr int W = piece_elements(F) / 8;
  constexpr bool kScaled = matrix_format_quantized(F);
  const int lane = lane_id(), g = lane >> 2, t = lane & 3;
  const uint4* pieces = reinterpret_cast<const uint4*>(tile_slice) + i * 64 + lane;
  const uint4 pa = pieces[0], pb = pieces[32];
  // The step's scale group: its scales, then (INT4) its zero points after every group's scales.
  const int group = i * tile_k_step(F) / kTileGroup;
  const uint8_t* params = tile_slice + tile_code_bytes(F, cols);
  typename TileDecode<F>::Param za = 0, zb = 0;
  if constexpr (F == MatrixFormat::INT4) {
    const uint8_t* zeros = params + tile_zero_offset(cols / kTileGroup, group, 0);
    za = zeros[g], zb = zeros[g + 8];
  }
  // Quantized: this step's sums apart, then scaled by their rows' group scales.
  float pc[NT][4], pd[NT][4];
  float (&sc)[NT][4] = kScaled ? pc : acc.c;
  float (&sd)[NT][4] = kScaled ? pd : acc.d;
  if constexpr (kScaled) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) pc[j][e] = pd[j][e] = 0.f;
  }
  auto load_act = [&](int n, int w, int lo) {
    const uint8_t* column = n < M ? act + n * act_column_bytes(F) : zeros;
    return *reinterpret_cast<const uint4*>(column + act_lane_offset(F, 0, i, w, lo, t));
  };
#pragma unroll
  for (int w = 0; w < W; ++w) {
    uint32_t ra[4], rb[4];
    TileDecode<F>::regs(pa, w, za, ra);
    TileDecode<F>::regs(pb, w, zb, rb);
    const uint32_t a1[4] = {ra[0], rb[0], ra[1], rb[1]}, a2[4] = {ra[2], rb[2], ra[3], rb[3]};
    if constexpr (Columns::kPacked) {
      const uint4 v = load_act(g & 3, w, g >> 2);
      mma_k16_as<kF16>(sc[0], a1, v.x, v.y);
      mma_k16_as<kF16>(sd[0], a2, v.z, v.w);
    } else {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint4 hi = load_act(8 * j + g, w, 0), lo = load_act(8 * j + g, w, 1);
        mma_k16_as<kF16>(sc[j], a1, hi.x, hi.y);
        mma_k16_as<kF16>(sd[j], a1, lo.x, lo.y);
        mma_k16_as<kF16>(sc[j], a2, hi.z, hi.w);
        mma_k16_as<kF16>(sd[j], a2, lo.z, lo.w);
      }
    }
  }
  if constexpr (kScaled) {
    const float* scales = reinterpret_cast<const float*>(params + tile_scale_offset(group, 0));
    const float sa = scales[g], sb = scales[g + 8];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      acc.c[j][0] += sa * pc[j][0];
      acc.c[j][1] += sa * pc[j][1];
      acc.c[j][2] += sb * pc[j][2];
      acc.c[j][3] += sb * pc[j][3];
      acc.d[j][0] += sa * pd[j][0];
      acc.d[j][1] += sa * pd[j][1];
      acc.d[j][2] += sb * pd[j][2];
      acc.d[j][3] += sb * pd[j][3];
    }
  }
}

#endif  // MK_WARP_MMA

}  // namespace mk::dev
