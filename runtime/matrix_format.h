// The forms a weight matrix takes in the device image, and the byte layout of one row in each. The one
// place that knows them: the weight layout, the quantizer, the weight stream, the kernels' GEMV bodies,
// the random weights of presets and the emulator all ask here. Plain C++, usable on the host and in
// device code.
//
// A row is `cols` codes of the format's element bits, then (quantized formats) one f32 scale per group of
// matrix_scale_group(f) columns (the last group may be shorter), then (formats with zero points) one
// uint8 zero point per group, padded to 16 bytes. The scales travel with the row, so a row is one
// contiguous piece for the weight stream.
// - BF16, F16: the codes are the 2-byte values.
// - FP8: fp8 E4M3 bytes; element c is fp8(c) * scale[c / group]. Every fp8 checkpoint form maps onto it: a
//   128x128 block scale, a per-row scale and a per-tensor scale are the same scale repeated over the
//   row's groups (runtime/quantize.h).
// - INT4: 4-bit codes; element c is (code(c) - zero[g]) * scale[g], g = c / group. AWQ and GPTQ
//   checkpoints, symmetric or not, map onto it (the loader).
// 4-bit codes of elements 8k..8k+7 form the 32-bit word k, in the nibble order int4_nibble gives: pairs
// (8k, 8k+1), (8k+2, 8k+3), ... sit 16 bits apart, so one mask lifts two codes into the two halves of a
// half2 (device/gemv.h).
//
// A new format is a line of MK_FOR_EACH_MATRIX_FORMAT and its MatrixCodec (below), its stored dtype
// (runtime/dtype.h) and its RowFormat (device/gemv.h); everything else reads them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/portability.h"

namespace mk {

// X(enumerator, name, element bits, dtype of its codes in memory, scale group (0: none), zero points,
//   the columns a matrix must be a multiple of (rows stay 16-byte aligned for 16-byte loads and bulk
//   copies, and whole pieces: device/gemv.h))
#define MK_FOR_EACH_MATRIX_FORMAT(X)          \
  X(BF16, "bf16", 16, BF16, 0, false, 8)      \
  X(F16, "fp16", 16, F16, 0, false, 8)        \
  X(FP8, "fp8", 8, F8_E4M3, 128, false, 16)   \
  X(INT4, "int4", 4, U4, 128, true, 32)

enum class MatrixFormat : uint8_t {
#define MK_MATRIX_FORMAT_ENUMERATOR(E, ...) E,
  MK_FOR_EACH_MATRIX_FORMAT(MK_MATRIX_FORMAT_ENUMERATOR)
#undef MK_MATRIX_FORMAT_ENUMERATOR
};

// The formats of a model's weight image, resolved once when the model is loaded (runtime/quantize.h's
// prepare_matrix_formats, or given by a preset) and read from Model::formats by everything after: the
// layers' matrices (body) and the embedding and LM head (head).
struct WeightFormats {
  MatrixFormat body = MatrixFormat::BF16;
  MatrixFormat head = MatrixFormat::BF16;
};

// Calls fn(std::integral_constant<MatrixFormat, f>{}): runtime format to compile-time format, one case
// per format of the list (kernel instantiations, the packer, the random fill).
template <class Fn>
MK_HD_INLINE decltype(auto) with_matrix_format(MatrixFormat f, Fn&& fn) {
  switch (f) {
#define MK_MATRIX_FORMAT_CASE(E, ...) \
  case MatrixFormat::E: return fn(std::integral_constant<MatrixFormat, MatrixFormat::E>{});
    MK_FOR_EACH_MATRIX_FORMAT(MK_MATRIX_FORMAT_CASE)
#undef MK_MATRIX_FORMAT_CASE
  }
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  __builtin_unreachable();  // every format is a case above: device code branches on no other value
#else
  return fn(std::integral_constant<MatrixFormat, MatrixFormat::BF16>{});
#endif
}

#define MK_MATRIX_FORMAT_FIELD(function, type, field)                                      \
  MK_HD_INLINE constexpr type function(MatrixFormat f) {                                   \
    switch (f) { MK_FOR_EACH_MATRIX_FORMAT(MK_MATRIX_FORMAT_FIELD_CASE_##field) }          \
    return type{};                                                                         \
  }
#define MK_MATRIX_FORMAT_FIELD_CASE_bits(E, name, bits, ...) \
  case MatrixFormat::E: return bits;
#define MK_MATRIX_FORMAT_FIELD_CASE_dtype(E, name, bits, dtype, ...) \
  case MatrixFormat::E: return DType::dtype;
#define MK_MATRIX_FORMAT_FIELD_CASE_group(E, name, bits, dtype, group, ...) \
  case MatrixFormat::E: return group;
#define MK_MATRIX_FORMAT_FIELD_CASE_zeros(E, name, bits, dtype, group, zeros, ...) \
  case MatrixFormat::E: return zeros;
#define MK_MATRIX_FORMAT_FIELD_CASE_multiple(E, name, bits, dtype, group, zeros, multiple) \
  case MatrixFormat::E: return multiple;
// Bits of one element's code.
MK_MATRIX_FORMAT_FIELD(matrix_element_bits, int, bits)
// The dtype a matrix in this format has in memory on the host (its codes; scales apart, TensorScale).
MK_MATRIX_FORMAT_FIELD(matrix_format_dtype, DType, dtype)
// The columns of a row that share one scale (and zero point); 0 for 16-bit rows, which have no scales.
// Every fp8 and int4 checkpoint form the loader takes maps onto 128 (runtime/quantize.h).
MK_MATRIX_FORMAT_FIELD(matrix_scale_group, int, group)
MK_MATRIX_FORMAT_FIELD(matrix_format_zero_points, bool, zeros)
// The columns a matrix in format `f` must be a multiple of.
MK_MATRIX_FORMAT_FIELD(matrix_cols_multiple, int, multiple)
#undef MK_MATRIX_FORMAT_FIELD
#undef MK_MATRIX_FORMAT_FIELD_CASE_bits
#undef MK_MATRIX_FORMAT_FIELD_CASE_dtype
#undef MK_MATRIX_FORMAT_FIELD_CASE_group
#undef MK_MATRIX_FORMAT_FIELD_CASE_zeros
#undef MK_MATRIX_FORMAT_FIELD_CASE_multiple

inline constexpr std::string_view matrix_format_name(MatrixFormat f) {
  switch (f) {
#define MK_MATRIX_FORMAT_NAME(E, name, ...) \
  case MatrixFormat::E: return name;
    MK_FOR_EACH_MATRIX_FORMAT(MK_MATRIX_FORMAT_NAME)
#undef MK_MATRIX_FORMAT_NAME
  }
  return "?";
}

// Every format of the list, in its order (for names offered to users and for tests).
inline constexpr MatrixFormat kMatrixFormats[] = {
#define MK_MATRIX_FORMAT_VALUE(E, ...) MatrixFormat::E,
    MK_FOR_EACH_MATRIX_FORMAT(MK_MATRIX_FORMAT_VALUE)
#undef MK_MATRIX_FORMAT_VALUE
};

MK_HD_INLINE constexpr bool matrix_format_quantized(MatrixFormat f) { return matrix_scale_group(f) > 0; }
// Scale groups of a row of `cols` columns in quantized format `f`.
MK_HD_INLINE constexpr int scale_groups(MatrixFormat f, int cols) {
  return (cols + matrix_scale_group(f) - 1) / matrix_scale_group(f);
}
// Bytes of a row's values.
MK_HD_INLINE constexpr int row_value_bytes(MatrixFormat f, int cols) { return cols * matrix_element_bits(f) / 8; }
// Bytes of a row's scales and zero points (after its values), a multiple of 16.
MK_HD_INLINE constexpr int row_scale_bytes(MatrixFormat f, int cols) {
  return !matrix_format_quantized(f) ? 0
         : (scale_groups(f, cols) * (4 + (matrix_format_zero_points(f) ? 1 : 0)) + 15) / 16 * 16;
}
MK_HD_INLINE constexpr int matrix_row_bytes(MatrixFormat f, int cols) { return row_value_bytes(f, cols) + row_scale_bytes(f, cols); }

// Nibble (bits 4n..4n+3) of its 32-bit word that element e (0..7) of a word of 4-bit codes occupies:
// elements 0, 2, 4, 6 in nibbles 0..3 and 1, 3, 5, 7 in nibbles 4..7.
MK_HD_INLINE constexpr int int4_nibble(int e) { return (e >> 1) + 4 * (e & 1); }

// The first bit of element c's 4-bit code in a row: nibble int4_nibble(c % 8) of 32-bit word c / 8.
MK_HD_INLINE constexpr int int4_code_bit(int c) { return 32 * (c / 8) + 4 * int4_nibble(c % 8); }

// The code of element c of a quantized row (8 bits: byte c; 4 bits: at int4_code_bit).
MK_HD_INLINE uint32_t row_code(MatrixFormat f, const uint8_t* row, int c) {
  if (matrix_element_bits(f) == 8) return row[c];
  const int bit = int4_code_bit(c);
  return (row[bit / 8] >> (bit % 8)) & 0xfu;
}
// Sets the code of element c of a quantized row whose code bits there are still 0.
MK_HD_INLINE void set_row_code(MatrixFormat f, uint8_t* row, int c, uint32_t code) {
  if (matrix_element_bits(f) == 8) {
    row[c] = uint8_t(code);
    return;
  }
  const int bit = int4_code_bit(c);
  row[bit / 8] |= uint8_t(code << (bit % 8));
}
// The 4-bit code of element c of an INT4 row.
MK_HD_INLINE int int4_code(const uint8_t* row, int c) { return int(row_code(MatrixFormat::INT4, row, c)); }

// The scale of column c's group in a quantized row (after the row's values).
MK_HD_INLINE float row_group_scale(MatrixFormat f, const uint8_t* row, int cols, int c) {
  float s;
  __builtin_memcpy(&s, row + row_value_bytes(f, cols) + 4 * (c / matrix_scale_group(f)), 4);
  return s;
}
// The zero point of column c's group in a row of a format with zero points (after the scales); 0 for the
// others.
MK_HD_INLINE int row_group_zero(MatrixFormat f, const uint8_t* row, int cols, int c) {
  if (!matrix_format_zero_points(f)) return 0;
  return row[row_value_bytes(f, cols) + 4 * scale_groups(f, cols) + c / matrix_scale_group(f)];
}

// A quantized group's parameters: element = MatrixCodec<F>::value(code, scale, zero).
struct GroupParams {
  float scale = 1.0f;
  int zero = 0;
};

// What a format's codes mean, per format:
// - value(code, scale, zero): an element's value (the definition the emulator computes with and the
//   kernels' decoders reproduce);
// - fit(lo, hi) and encode(v, params) (host): the group parameters and the code load-time quantization
//   gives a group whose values span [lo, hi], values rounded to nearest (even);
// - valid(code): false for a code that is no number (a checkpoint holding one is refused);
// - random_code(r) and random_group(scale): the random weights of presets, values in about
//   (-scale, scale); a word's codes take one 64-bit draw, code k reading it shifted by k * kRandomBits.
// 16-bit formats have value() only (their code is the value's bits).
template <MatrixFormat F>
struct MatrixCodec {
  MK_HD_INLINE static float value(uint32_t code, float, int) { return load_as_float(&code, matrix_format_dtype(F), 0); }
};

template <>
struct MatrixCodec<MatrixFormat::FP8> {
  static constexpr float kMax = 448.0f;
  MK_HD_INLINE static float value(uint32_t code, float scale, int) { return fp8_e4m3_to_float(uint8_t(code)) * scale; }
  // amax / 448: the largest magnitude is the largest finite code.
  static GroupParams fit(float lo, float hi) {
    const float amax = std::fmax(std::fabs(lo), std::fabs(hi));
    return {amax > 0.f ? amax / kMax : 1.0f, 0};
  }
  static uint32_t encode(float v, GroupParams g) { return float_to_fp8_e4m3(v / g.scale); }
  MK_HD_INLINE static bool valid(uint32_t code) { return (code & 0x7fu) != 0x7fu; }
  // Random sign, exponent 1..7 and mantissa: |v| in [2^-6, 1.875], never a NaN code.
  static constexpr int kRandomBits = 16;
  MK_HD_INLINE static uint32_t random_code(uint32_t r) { return (r & 0x80u) | ((1u + (r >> 8) % 7u) << 3) | (r & 7u); }
  MK_HD_INLINE static GroupParams random_group(float scale) { return {scale, 0}; }
};

template <>
struct MatrixCodec<MatrixFormat::INT4> {
  static constexpr int kMaxCode = 15;
  MK_HD_INLINE static float value(uint32_t code, float scale, int zero) { return float(int(code) - zero) * scale; }
  // Asymmetric min-max: the 16 codes span [lo, hi]; a constant group (hi == lo) keeps its value exactly as
  // code 8 + 7 or 8 - 7 around zero point 8, a zero group as code 8.
  static GroupParams fit(float lo, float hi) {
    if (hi > lo) {
      const float s = (hi - lo) / float(kMaxCode);
      return {s, int(std::fmin(std::fmax(std::nearbyint(-lo / s), 0.0f), float(kMaxCode)))};
    }
    return {lo != 0.f ? std::fabs(lo) / 7.0f : 1.0f, 8};
  }
  static uint32_t encode(float v, GroupParams g) {
    return uint32_t(std::fmin(std::fmax(std::nearbyint(v / g.scale) + float(g.zero), 0.0f), float(kMaxCode)));
  }
  MK_HD_INLINE static bool valid(uint32_t) { return true; }
  // Uniform codes around zero point 8: values (-8..7) * scale / 8.
  static constexpr int kRandomBits = 4;
  MK_HD_INLINE static uint32_t random_code(uint32_t r) { return r & 0xfu; }
  MK_HD_INLINE static GroupParams random_group(float scale) { return {scale / 8.0f, 8}; }
};

// Element c of a row of a matrix in format `f` with `cols` columns, as a float.
MK_HD_INLINE float matrix_row_element(MatrixFormat f, const uint8_t* row, int cols, int c) {
  return with_matrix_format(f, [&](auto format) {
    constexpr MatrixFormat F = decltype(format)::value;
    if constexpr (!matrix_format_quantized(F)) {
      return load_as_float(row, matrix_format_dtype(F), c);
    } else {
      return MatrixCodec<F>::value(row_code(F, row, c), row_group_scale(F, row, cols, c), row_group_zero(F, row, cols, c));
    }
  });
}

}  // namespace mk
