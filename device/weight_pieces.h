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

// 16-bit rows: a piece is 16 bytes copied as they are, with cp.async where the path has it. Quantized
// rows: a piece and its group's parameters are loaded into registers (fetch, group), then expanded into
// 16 bytes of bf16 (expand): each element decoded as the token steps' GEMV decodes it (RowFormat's
// decode8: exact, in units of kUnit, brought back exactly: a power of two), then a float times the
// group's scale. All pieces of a k-tile of 32 or 64 columns share one group (a group is 128 columns, a
// multiple of every k-tile).
template <MatrixFormat F, bool kQuantized = matrix_format_quantized(F)>
struct WeightPieces {
  static constexpr bool kCopied = true;
  using Piece = uint4;
  struct Group {};
};

template <MatrixFormat F>
struct WeightPieces<F, true> {
  using R = RowFormat<F>;
  static constexpr bool kCopied = false;
  using Piece = typename R::Piece;
  using Group = typename R::Group;
  // Piece p (elements 8p .. 8p + 7) of a row.
  __device__ static __forceinline__ Piece fetch(const uint8_t* row, int p) {
    return load_weight(reinterpret_cast<const Piece*>(row + size_t(p) * size_t(row_value_bytes(F, 8))));
  }
  // The parameters of piece p's group in a row of `cols` columns.
  __device__ static __forceinline__ Group group(const uint8_t* row, int cols, int p) { return R::group_global(row, cols, p); }
  __device__ static __forceinline__ uint4 expand(Piece w, Group g) {
    float2 e[4];
    R::decode8(w, g, e);
    const float s = R::scale(g);
    uint32_t out[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = pack_bf16x2(e[k].x * R::kUnit * s, e[k].y * R::kUnit * s);
    return make_uint4(out[0], out[1], out[2], out[3]);
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
