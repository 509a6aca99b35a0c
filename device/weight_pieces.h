// A chunk tile's weight operand (device/chunk_gemm.h): a weight row of any matrix format, read in pieces
// of 8 elements and handed to the tensor cores as 8 16-bit values. 16-bit rows are the values themselves
// (copied straight to shared memory); a quantized row's piece is decoded and each element rounded to bf16:
//   value(c) = bf16_rn(matrix_row_element(f, row, cols, c))
// (runtime/matrix_format.h), the definition the emulator's chunk steps compute with. Device code only.
#pragma once

#include <cstdint>

#include "device/gemv.h"
#include "device/platform.h"
#include "runtime/matrix_format.h"

namespace mk::dev {

template <MatrixFormat F>
struct WeightPieces {
  // 16-bit rows: a piece is 16 bytes copied as they are, with cp.async where the path has it.
  static constexpr bool kCopied = true;
  using Piece = uint4;
  struct Group {};
};

// Quantized rows: a piece and its group's parameters are loaded into registers (fetch, group), then
// expanded into 16 bytes of bf16 (expand). All pieces of a k-tile of 32 or 64 columns share one group (a
// group is 128 columns, a multiple of every k-tile).
template <MatrixFormat F>
struct QuantizedWeightPieces {
  static_assert(matrix_format_quantized(F), "a quantized format");
  static constexpr bool kCopied = false;
  using Piece = typename RowFormat<F>::Piece;
  using Group = typename RowFormat<F>::Group;
  // Piece p (elements 8p .. 8p + 7) of a row.
  __device__ static __forceinline__ Piece fetch(const uint8_t* row, int p) {
    return load_weight(reinterpret_cast<const Piece*>(row + size_t(p) * size_t(row_value_bytes(F, 8))));
  }
  // The parameters of piece p's group in a row of `cols` columns.
  __device__ static __forceinline__ Group group(const uint8_t* row, int cols, int p) { return RowFormat<F>::group_global(row, cols, p); }
};

// Two floats as a word of two bf16, rounded to nearest even (x in the low half).
__device__ __forceinline__ uint32_t pack_bf16x2(float x, float y) {
#if defined(MK_PLATFORM_NVIDIA)
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
  return r;
#else
  return uint32_t(float_to_bf16_bits(x)) | uint32_t(float_to_bf16_bits(y)) << 16;
#endif
}

template <>
struct WeightPieces<MatrixFormat::FP8> : QuantizedWeightPieces<MatrixFormat::FP8> {
  // Each fp8 value is exact as a half (on NVIDIA one conversion makes two; elsewhere the bit form worth
  // value / 256, brought back exactly by a power of two), then a float times the group's scale.
  __device__ static __forceinline__ uint4 expand(Piece w, Group scale) {
    uint32_t out[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t word = h == 0 ? w.x : w.y;
#if defined(MK_PLATFORM_NVIDIA)
      uint32_t lo, hi;  // bytes 0, 1 and bytes 2, 3 as half2
      asm("{ .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h; }"
          : "=r"(lo), "=r"(hi)
          : "r"(word));
      const float2 p = half2_bits_to_float2(lo), q = half2_bits_to_float2(hi);
      out[2 * h] = pack_bf16x2(p.x * scale, p.y * scale);
      out[2 * h + 1] = pack_bf16x2(q.x * scale, q.y * scale);
#else
      const float2 even = half2_bits_to_float2(((word & 0x00800080u) << 8) | ((word & 0x007f007fu) << 7));  // bytes 0, 2
      const float2 odd = half2_bits_to_float2((word & 0x80008000u) | ((word & 0x7f007f00u) >> 1));         // bytes 1, 3
      out[2 * h] = pack_bf16x2(even.x * kFp8HalfScale * scale, odd.x * kFp8HalfScale * scale);
      out[2 * h + 1] = pack_bf16x2(even.y * kFp8HalfScale * scale, odd.y * kFp8HalfScale * scale);
#endif
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
  }
};

template <>
struct WeightPieces<MatrixFormat::INT4> : QuantizedWeightPieces<MatrixFormat::INT4> {
  // Each code minus the zero point is an exact small integer (as a float), then times the group's scale.
  // The word's element pairs (2j, 2j + 1) sit in nibbles j and j + 4 (runtime/matrix_format.h).
  __device__ static __forceinline__ uint4 expand(Piece w, Group g) {
    // 2^23 + q as a float, for a code q in the low mantissa bits; minus 2^23 + zero it is q - zero.
    const float base = __uint_as_float(0x4b000000u + g.zero);
    auto element = [&](int nibble) { return (__uint_as_float(0x4b000000u | ((w >> (4 * nibble)) & 0xfu)) - base) * g.scale; };
    return make_uint4(pack_bf16x2(element(0), element(4)), pack_bf16x2(element(1), element(5)), pack_bf16x2(element(2), element(6)),
                      pack_bf16x2(element(3), element(7)));
  }
};

}  // namespace mk::dev
