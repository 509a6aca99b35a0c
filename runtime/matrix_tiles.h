// The tile image of a weight matrix: the form the tensor-core matrix engine (device/matrix_engine.h)
// streams, and the packed activations it multiplies. Plain C++, usable on the host and in device code;
// the one place that knows both layouts.
//
// Why a second image. A tensor-core product takes 16 rows at once (one m16n8k16 operand), and a
// workgroup owns few rows of a matrix at batch 1 (Llama-3.1-8B's down: 31 rows on 132 SMs), so it must
// cut K across its warps, and a chunk of the weight stream must hold 16 rows x a slice of K rather than
// whole rows. In the tile image every such chunk is one contiguous run, already in the order the lanes
// read it (one 16-byte load per lane per row half, conflict-free), so one bulk copy fetches it.
//
// The image. Rows are grouped in tiles of kTileRows (the last tile padded with zero rows); columns in
// slices (tile_slice_cols). Slice-major: slice s holds tile 0, 1, ... in order, so the tiles
// a workgroup owns are contiguous within each slice. A tile slice is its codes, then (quantized formats)
// its parameters:
//   codes: the row-major image's 16-byte pieces (runtime/matrix_format.h: 8 bf16 / f16 values, 16 fp8,
//          or 32 int4 codes in their word order), relocated. Piece p of the slice (elements p * E ..
//          p * E + E - 1, E = piece_elements) of tile row r = 8 h + g goes to place
//          ((p / 4) * 2 + h) * 32 + 4 g + p % 4: in step i = p / 4, lane 4 g + t reads its row g piece
//          and its row g + 8 piece 512 bytes later.
//   params: per scale group of the slice, the 16 rows' f32 scales; then (INT4) per group the 16 rows'
//           zero-point bytes; 16-byte aligned.
//
// Activations. Column n of a step's M activation columns is split into a high and a low 16-bit part
// (bf16 next to bf16 weights, f16 next to the others: the tensor cores take two operands of one type), so
// hi + lo carries ~16 (bf16) or ~22 (f16) bits of each value. Slice s of the packed activations holds
// column n at n * act_column_bytes: 16-byte pieces (one k-group of 8 values each) in the order the lanes
// that hold the weights read them, the high part's piece then the low part's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/matrix_format.h"
#include "runtime/portability.h"

namespace mk {

inline constexpr int kTileRows = 16;
// Slices are wide enough that a workgroup's chunk of one is cheap to stream: measured on an H200
// (docs/log.md, 2026-11-29), int4 slices of 128 columns (~3 KiB chunks) streamed at 1.9 TB/s and bf16
// ran at 80% of the read ceiling with 512-byte rows and 92% with 1 KiB. bf16 / f16: 512 columns (1 KiB
// a row), fp8: 1024 (1 KiB), int4: 1024 (512 bytes: at 2048, 16 packed activation columns of a slice,
// 132 KiB, would not leave room for two chunks in shared memory). The last slice of a matrix may be
// narrower (a multiple of kTileGroup).
// Columns of a scale group; a matrix's columns must be a multiple of it.
inline constexpr int kTileGroup = 128;
// The most activation columns a step multiplies (ScheduleParams::step_tokens' limit).
inline constexpr int kMaxActColumns = 16;

// Elements in a 16-byte piece of a row, and the columns a warp covers in one step (4 lanes of pieces).
MK_HD_INLINE constexpr int piece_elements(MatrixFormat f) { return 128 / matrix_element_bits(f); }
MK_HD_INLINE constexpr int tile_k_step(MatrixFormat f) { return 4 * piece_elements(f); }
MK_HD_INLINE constexpr int tile_slice_cols(MatrixFormat f) { return matrix_format_quantized(f) ? 1024 : 512; }
// Whether the activations of a matrix in format `f` are split into f16 parts (else bf16).
MK_HD_INLINE constexpr bool tile_activations_f16(MatrixFormat f) { return f != MatrixFormat::BF16; }

// Bytes of a tile slice of `cols` columns: its codes, then (quantized formats) its parameters: per scale
// group, the 16 rows' f32 scales; then (formats with zero points) per group the 16 rows' zero-point bytes.
MK_HD_INLINE constexpr int tile_code_bytes(MatrixFormat f, int cols) { return kTileRows * row_value_bytes(f, cols); }
MK_HD_INLINE constexpr int tile_param_bytes(MatrixFormat f, int cols) {
  return !matrix_format_quantized(f) ? 0 : (cols / kTileGroup) * kTileRows * (4 + (matrix_format_zero_points(f) ? 1 : 0));
}
MK_HD_INLINE constexpr int tile_slice_bytes(MatrixFormat f, int cols) { return tile_code_bytes(f, cols) + tile_param_bytes(f, cols); }
// A packed activation column's bytes per slice: the slice's values x (hi + lo) x 2 bytes, then 64 bytes
// that put consecutive columns in different shared-memory banks.
MK_HD_INLINE constexpr int act_column_bytes(MatrixFormat f) { return tile_slice_cols(f) * 4 + 64; }

// The shape of one matrix's tile image.
struct MatrixTiles {
  int rows = 0, cols = 0;
  MatrixFormat format = MatrixFormat::BF16;

  MK_HD_INLINE int tiles() const { return (rows + kTileRows - 1) / kTileRows; }
  MK_HD_INLINE int slices() const { return (cols + tile_slice_cols(format) - 1) / tile_slice_cols(format); }
  MK_HD_INLINE int slice_cols(int s) const { return s + 1 < slices() ? tile_slice_cols(format) : cols - s * tile_slice_cols(format); }
  // Byte offset of tile t's slice s (every slice before the last is full).
  MK_HD_INLINE size_t offset(int s, int t) const {
    return size_t(s) * size_t(tiles()) * size_t(tile_slice_bytes(format, tile_slice_cols(format))) +
           size_t(t) * size_t(tile_slice_bytes(format, slice_cols(s)));
  }
  MK_HD_INLINE size_t bytes() const { return offset(slices() - 1, tiles()); }
  // Bytes of slice s of M packed activation columns.
  MK_HD_INLINE size_t act_slice_bytes(int M) const { return size_t(M) * size_t(act_column_bytes(format)); }
};

// Byte offsets, from a tile slice's parameters (after its codes; `groups` scale groups), of tile row r's
// scale and (INT4) zero point in group g.
MK_HD_INLINE constexpr int tile_scale_offset(int g, int r) { return 4 * (g * kTileRows + r); }
MK_HD_INLINE constexpr int tile_zero_offset(int groups, int g, int r) { return 4 * kTileRows * groups + g * kTileRows + r; }

// Place (16-byte units from the tile slice's start) of piece p of tile row r.
MK_HD_INLINE constexpr int tile_piece_place(int p, int r) { return ((p / 4) * 2 + r / 8) * 32 + 4 * (r % 8) + p % 4; }

// Byte offset, within a packed activation slice, of the 16-byte piece of column n holding the values of
// k-group q (slice columns 8 q .. 8 q + 7), part `lo` (0: high, 1: low), for weights in format f: lane
// t = (q / W) % 4 of step i = q / (4 W) reads it as its k-group w = q % W (W = piece_elements / 8).
MK_HD_INLINE constexpr int act_lane_offset(MatrixFormat f, int n, int i, int w, int lo, int t) {
  return n * act_column_bytes(f) + (((i * (piece_elements(f) / 8) + w) * 2 + lo) * 4 + t) * 16;
}
MK_HD_INLINE constexpr int act_piece_offset(MatrixFormat f, int n, int q, int lo) {
  const int W = piece_elements(f) / 8;
  return act_lane_offset(f, n, q / (4 * W), q % W, lo, (q / W) % 4);
}

// The 16-bit parts of an activation value: hi = round(x), lo = round(x - hi), each bf16 or f16 (round to
// nearest even). The engine's products are what hi + lo gives, on every platform.
struct ActParts {
  uint16_t hi, lo;
};
MK_HD_INLINE ActParts split_activation(float x, bool f16) {
  if (f16) {
    const uint16_t hi = float_to_fp16(x);
    return {hi, float_to_fp16(x - fp16_to_float(hi))};
  }
  const uint16_t hi = float_to_bf16(x);
  return {hi, float_to_bf16(x - bf16_to_float(hi))};
}
MK_HD_INLINE float joined_activation(ActParts p, bool f16) {
  return f16 ? fp16_to_float(p.hi) + fp16_to_float(p.lo) : bf16_to_float(p.hi) + bf16_to_float(p.lo);
}

// Packs a row-major image (rows of matrix_row_bytes(format, cols)) into the tile image. Throws mk::Error
// naming `what` when cols is not a multiple of kTileGroup.
std::vector<uint8_t> pack_matrix_tiles(const uint8_t* row_major, int rows, int cols, MatrixFormat format, const char* what);
// Element (r, c) of a tile image, as a float (the definition of matrix_row_element, read from the tiles).
float matrix_tiles_element(const uint8_t* tiles, const MatrixTiles& shape, int r, int c);
// Packs M columns of activations (column n: cols floats at x + n * cols) for a matrix of `format`:
// MatrixTiles::act_slice_bytes(M) bytes a slice, slice after slice.
std::vector<uint8_t> pack_activations(const float* x, int M, int cols, MatrixFormat format);

}  // namespace mk
