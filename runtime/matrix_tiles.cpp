#include "runtime/matrix_tiles.h"

#include <cstring>

#include "runtime/error.h"

namespace mk {

std::vector<uint8_t> pack_matrix_tiles(const uint8_t* row_major, int rows, int cols, MatrixFormat format, const char* what) {
  if (cols <= 0 || cols % kTileGroup != 0)
    fail("{}: {} columns; the tensor-core tile image needs a positive multiple of {}", what, cols, kTileGroup);
  if (rows <= 0) fail("{}: {} rows", what, rows);
  const MatrixTiles shape{rows, cols, format};
  std::vector<uint8_t> out(shape.bytes(), 0);
  const size_t row_bytes = size_t(matrix_row_bytes(format, cols));
  const int groups = matrix_format_quantized(format) ? scale_groups(format, cols) : 0;
  const int slice_groups = tile_slice_cols(format) / kTileGroup;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = row_major + size_t(r) * row_bytes;
    const int tile = r / kTileRows, tr = r % kTileRows;
    for (int s = 0; s < shape.slices(); ++s) {
      const int cols_s = shape.slice_cols(s);
      uint8_t* ts = out.data() + shape.offset(s, tile);
      const uint8_t* codes = row + size_t(s) * row_value_bytes(format, tile_slice_cols(format));
      for (int p = 0; p < row_value_bytes(format, cols_s) / 16; ++p) std::memcpy(ts + 16 * tile_piece_place(p, tr), codes + 16 * p, 16);
      if (!matrix_format_quantized(format)) continue;
      uint8_t* params = ts + tile_code_bytes(format, cols_s);
      const int n_groups = cols_s / kTileGroup;
      for (int gi = 0; gi < n_groups; ++gi) {
        const int g = s * slice_groups + gi;
        std::memcpy(params + tile_scale_offset(gi, tr), row + row_value_bytes(format, cols) + 4 * g, 4);
        if (matrix_format_zero_points(format)) params[tile_zero_offset(n_groups, gi, tr)] = row[row_value_bytes(format, cols) + 4 * groups + g];
      }
    }
  }
  return out;
}

float matrix_tiles_element(const uint8_t* tiles, const MatrixTiles& shape, int r, int c) {
  const MatrixFormat f = shape.format;
  const int s = c / tile_slice_cols(f), k = c % tile_slice_cols(f), tr = r % kTileRows;
  const int cols_s = shape.slice_cols(s);
  const uint8_t* ts = tiles + shape.offset(s, r / kTileRows);
  const int E = piece_elements(f), p = k / E, e = k % E;
  const uint8_t* piece = ts + 16 * tile_piece_place(p, tr);
  if (!matrix_format_quantized(f)) return load_as_float(piece, matrix_format_dtype(f), e);
  const uint8_t* params = ts + tile_code_bytes(f, cols_s);
  const int gi = k / kTileGroup, n_groups = cols_s / kTileGroup;
  float scale;
  std::memcpy(&scale, params + tile_scale_offset(gi, tr), 4);
  const int zero = matrix_format_zero_points(f) ? int(params[tile_zero_offset(n_groups, gi, tr)]) : 0;
  return with_matrix_format(f, [&](auto format) {
    constexpr MatrixFormat F = decltype(format)::value;
    if constexpr (matrix_format_quantized(F)) return MatrixCodec<F>::value(row_code(F, piece, e), scale, zero);
    else return 0.0f;
  });
}

std::vector<uint8_t> pack_activations(const float* x, int M, int cols, MatrixFormat format) {
  if (M < 1 || M > kMaxActColumns) fail("pack_activations: {} columns; the engine takes 1..{}", M, kMaxActColumns);
  if (cols <= 0 || cols % kTileGroup != 0) fail("pack_activations: {} columns of K; needs a multiple of {}", cols, kTileGroup);
  const MatrixTiles shape{1, cols, format};
  const size_t slice_bytes = shape.act_slice_bytes(M);
  std::vector<uint8_t> out(size_t(shape.slices()) * slice_bytes, 0);
  const bool f16 = tile_activations_f16(format);
  for (int s = 0; s < shape.slices(); ++s) {
    uint8_t* slice = out.data() + size_t(s) * slice_bytes;
    for (int n = 0; n < M; ++n)
      for (int k = 0; k < shape.slice_cols(s); ++k) {
        const ActParts parts = split_activation(x[size_t(n) * cols + size_t(s) * tile_slice_cols(format) + k], f16);
        const int q = k / 8, e = k % 8;
        std::memcpy(slice + act_piece_offset(format, n, q, 0) + 2 * e, &parts.hi, 2);
        std::memcpy(slice + act_piece_offset(format, n, q, 1) + 2 * e, &parts.lo, 2);
      }
  }
  return out;
}

}  // namespace mk
