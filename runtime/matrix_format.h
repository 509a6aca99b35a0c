// The forms a weight matrix takes in the device image, and the byte layout of one row in each. The one
// place that knows them: the weight layout, the weight stream, the kernels' GEMV bodies and the emulator
// all ask here. Plain C++, usable on the host and in device code.
//
// - BF16, F16: a row is `cols` 2-byte values.
// - FP8: a row is `cols` fp8 E4M3 bytes, then one f32 scale per group of kScaleGroup columns (the last
//   group may be shorter), padded to 16 bytes. Element c of the row is fp8(c) * scale[c / kScaleGroup].
//   Every fp8 checkpoint form maps onto it: a 128x128 block scale, a per-row scale and a per-tensor scale
//   are the same scale repeated over the row's groups (runtime/quantize.h). The scales travel with the
//   row, so a row is one contiguous piece for the weight stream.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/portability.h"

namespace mk {

enum class MatrixFormat : uint8_t { BF16, F16, FP8 };

constexpr int kScaleGroup = 128;

inline constexpr std::string_view matrix_format_name(MatrixFormat f) {
  return f == MatrixFormat::BF16 ? "bf16" : f == MatrixFormat::F16 ? "fp16" : "fp8";
}

MK_HD_INLINE constexpr int matrix_element_bytes(MatrixFormat f) { return f == MatrixFormat::FP8 ? 1 : 2; }
MK_HD_INLINE constexpr int scale_groups(int cols) { return (cols + kScaleGroup - 1) / kScaleGroup; }
// Bytes of a row's scales (after its values), a multiple of 16.
MK_HD_INLINE constexpr int row_scale_bytes(MatrixFormat f, int cols) {
  return f == MatrixFormat::FP8 ? (scale_groups(cols) * 4 + 15) / 16 * 16 : 0;
}
MK_HD_INLINE constexpr int matrix_row_bytes(MatrixFormat f, int cols) {
  return cols * matrix_element_bytes(f) + row_scale_bytes(f, cols);
}
// The columns a matrix in format `f` must be a multiple of: rows stay 16-byte aligned for 16-byte loads
// and bulk copies.
MK_HD_INLINE constexpr int matrix_cols_multiple(MatrixFormat f) { return f == MatrixFormat::FP8 ? 16 : 8; }

}  // namespace mk
