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
  // Each fp8 value decoded as the token steps' GEMV decodes it (RowFormat<FP8>::decode4: exact, in units
  // of kUnit, brought back exactly: a power of two), then a float times the group's scale.
  __device__ static __forceinline__ uint4 expand(Piece w, Group scale) {
    using R = RowFormat<MatrixFormat::FP8>;
    uint32_t out[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float2 v01, v23;
      R::decode4(h == 0 ? w.x : w.y, v01, v23);
      out[2 * h] = pack_bf16x2(v01.x * R::kUnit * scale, v01.y * R::kUnit * scale);
      out[2 * h + 1] = pack_bf16x2(v23.x * R::kUnit * scale, v23.y * R::kUnit * scale);
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
  }
};

template <>
struct WeightPieces<MatrixFormat::INT4> : QuantizedWeightPieces<MatrixFormat::INT4> {
  // Each code minus the zero point decoded as the token steps' GEMV decodes it (RowFormat<INT4>::decode8:
  // an exact small integer), then times the group's scale.
  __device__ static __forceinline__ uint4 expand(Piece w, Group g) {
    float2 e[4];
    RowFormat<MatrixFormat::INT4>::decode8(w, g, e);
    return make_uint4(pack_bf16x2(e[0].x * g.scale, e[0].y * g.scale), pack_bf16x2(e[1].x * g.scale, e[1].y * g.scale),
                      pack_bf16x2(e[2].x * g.scale, e[2].y * g.scale), pack_bf16x2(e[3].x * g.scale, e[3].y * g.scale));
  }
};

// Piece p (elements 8p .. 8p + 7) of a row of `cols` columns as 8 16-bit values, read and expanded at once
// (the FMA path's use; the tensor-core paths copy or fetch ahead instead).
template <MatrixFormat F>
__device__ __forceinline__ uint4 weight_piece16(const uint8_t* row, int cols, int p) {
  using W = WeightPieces<F>;
  if constexpr (W::kCopied) {
    return load_weight(reinterpret_cast<const uint4*>(row) + p);
  } else {
    return W::expand(W::fetch(row, p), W::group(row, cols, p));
  }
}

}  // namespace mk::dev
