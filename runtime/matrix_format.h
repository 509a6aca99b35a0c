// The forms a weight matrix takes in the device image, and the byte layout of one row in each. The one
// place that knows them: the weight layout, the weight stream, the kernels' GEMV bodies and the emulator
// all ask here. Plain C++, usable on the host and in device code.
//
// - BF16, F16: a row is `cols` 2-byte values.
// - FP8: a row is `cols` fp8 E4M3 bytes, then one f32 scale per group of matrix_scale_group(FP8) columns
//   (the last group may be shorter), padded to 16 bytes. Element c of the row is fp8(c) * scale[c / group].
//   Every fp8 checkpoint form maps onto it: a 128x128 block scale, a per-row scale and a per-tensor scale
//   are the same scale repeated over the row's groups (runtime/quantize.h).
// - INT4: a row is cols / 2 bytes of 4-bit codes, then one f32 scale per group, then one uint8 zero point
//   per group, padded to 16 bytes. Element c is (code(c) - zero[g]) * scale[g], g = c / group.
//   The codes of elements 8k..8k+7 form the 32-bit word k, in the nibble order int4_nibble gives: pairs
//   (8k, 8k+1), (8k+2, 8k+3), ... sit 16 bits apart, so one mask lifts two codes into the two halves of
//   a half2 (device/gemv.h). AWQ and GPTQ checkpoints, symmetric or not, map onto it (the loader).
// The scales travel with the row, so a row is one contiguous piece for the weight stream.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/dtype.h"
#include "runtime/portability.h"

namespace mk {

enum class MatrixFormat : uint8_t { BF16, F16, FP8, INT4 };

// The formats of a model's weight image, resolved once when the model is loaded (runtime/quantize.h's
// prepare_matrix_formats, or given by a preset) and read from Model::formats by everything after: the
// layers' matrices (body) and the embedding and LM head (head).
struct WeightFormats {
  MatrixFormat body = MatrixFormat::BF16;
  MatrixFormat head = MatrixFormat::BF16;
};

inline constexpr std::string_view matrix_format_name(MatrixFormat f) {
  switch (f) {
    case MatrixFormat::BF16: return "bf16";
    case MatrixFormat::F16: return "fp16";
    case MatrixFormat::FP8: return "fp8";
    case MatrixFormat::INT4: return "int4";
  }
  return "?";
}

MK_HD_INLINE constexpr bool matrix_format_quantized(MatrixFormat f) { return f == MatrixFormat::FP8 || f == MatrixFormat::INT4; }
// The columns of a row that share one scale (and, for INT4, one zero point): a property of the format.
// Every fp8 and int4 checkpoint form the loader takes maps onto 128 (runtime/quantize.h); 16-bit rows
// have no scales (0).
MK_HD_INLINE constexpr int matrix_scale_group(MatrixFormat f) { return matrix_format_quantized(f) ? 128 : 0; }
MK_HD_INLINE constexpr bool matrix_format_zero_points(MatrixFormat f) { return f == MatrixFormat::INT4; }
// Scale groups of a row of `cols` columns in quantized format `f`.
MK_HD_INLINE constexpr int scale_groups(MatrixFormat f, int cols) {
  return (cols + matrix_scale_group(f) - 1) / matrix_scale_group(f);
}
// Bytes of a row's values.
MK_HD_INLINE constexpr int row_value_bytes(MatrixFormat f, int cols) {
  return f == MatrixFormat::INT4 ? cols / 2 : f == MatrixFormat::FP8 ? cols : 2 * cols;
}
// Bytes of a row's scales and zero points (after its values), a multiple of 16.
MK_HD_INLINE constexpr int row_scale_bytes(MatrixFormat f, int cols) {
  return !matrix_format_quantized(f) ? 0
         : (scale_groups(f, cols) * (4 + (matrix_format_zero_points(f) ? 1 : 0)) + 15) / 16 * 16;
}
MK_HD_INLINE constexpr int matrix_row_bytes(MatrixFormat f, int cols) { return row_value_bytes(f, cols) + row_scale_bytes(f, cols); }
// The columns a matrix in format `f` must be a multiple of: rows stay 16-byte aligned for 16-byte loads
// and bulk copies.
MK_HD_INLINE constexpr int matrix_cols_multiple(MatrixFormat f) {
  return f == MatrixFormat::INT4 ? 32 : f == MatrixFormat::FP8 ? 16 : 8;
}

// Nibble (bits 4n..4n+3) of its 32-bit word that element e (0..7) of an INT4 word occupies: elements
// 0, 2, 4, 6 in nibbles 0..3 and 1, 3, 5, 7 in nibbles 4..7.
MK_HD_INLINE constexpr int int4_nibble(int e) { return (e >> 1) + 4 * (e & 1); }

// The scale of column c's group in a quantized row (after the row's values).
MK_HD_INLINE float row_group_scale(MatrixFormat f, const uint8_t* row, int cols, int c) {
  float s;
  __builtin_memcpy(&s, row + row_value_bytes(f, cols) + 4 * (c / matrix_scale_group(f)), 4);
  return s;
}
// The zero point of column c's group in an INT4 row (after the scales).
MK_HD_INLINE int row_group_zero(const uint8_t* row, int cols, int c) {
  constexpr MatrixFormat f = MatrixFormat::INT4;
  return row[row_value_bytes(f, cols) + 4 * scale_groups(f, cols) + c / matrix_scale_group(f)];
}
// The 4-bit code of element c of an INT4 row.
MK_HD_INLINE int int4_code(const uint8_t* row, int c) {
  const int bit = 32 * (c / 8) + 4 * int4_nibble(c % 8);
  return (row[bit / 8] >> (bit % 8)) & 0xf;
}

// Element c of a row of a matrix in format `f` with `cols` columns, as a float: the definition the
// emulator computes with and the kernels' decoders reproduce.
MK_HD_INLINE float matrix_row_element(MatrixFormat f, const uint8_t* row, int cols, int c) {
  switch (f) {
    case MatrixFormat::F16: return load_as_float(row, DType::F16, c);
    case MatrixFormat::FP8: return fp8_e4m3_to_float(row[c]) * row_group_scale(f, row, cols, c);
    case MatrixFormat::INT4: return float(int4_code(row, c) - row_group_zero(row, cols, c)) * row_group_scale(f, row, cols, c);
    default: return load_as_float(row, DType::BF16, c);
  }
}

}  // namespace mk
