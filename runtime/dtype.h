// Element types of weights, and exact bit-level conversions usable on CPU and GPU alike.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "runtime/portability.h"

namespace mk {

// F8_E4M3: OCP fp8 E4M3 ("e4m3fn": no infinities, S.1111.111 is NaN, largest finite 448), as torch's
// float8_e4m3fn and the Hugging Face fp8 checkpoints store it.
// U4: 4-bit unsigned codes 0..15, two per byte in element order (element i in byte i / 2, the low nibble
// for even i). Not a safetensors dtype: the loader unpacks the int4 checkpoint forms (AWQ, GPTQ) into it,
// and the quantizer writes it. An element's value is (code - zero) * scale, from its TensorScale.
// X(enumerator, name (safetensors' where it is one), bits per element)
#define MK_FOR_EACH_DTYPE(X) \
  X(F32, "F32", 32)          \
  X(F16, "F16", 16)          \
  X(BF16, "BF16", 16)        \
  X(F8_E4M3, "F8_E4M3", 8)   \
  X(U4, "U4", 4)

enum class DType : uint8_t {
#define MK_DTYPE_ENUMERATOR(E, ...) E,
  MK_FOR_EACH_DTYPE(MK_DTYPE_ENUMERATOR)
#undef MK_DTYPE_ENUMERATOR
};

MK_HD_INLINE constexpr int dtype_bits(DType t) {
  switch (t) {
#define MK_DTYPE_BITS(E, name, bits) \
  case DType::E: return bits;
    MK_FOR_EACH_DTYPE(MK_DTYPE_BITS)
#undef MK_DTYPE_BITS
  }
  return 0;
}
// Bytes per element of the whole-byte dtypes (U4 has none: use dtype_bits).
inline constexpr int dtype_size(DType t) { return dtype_bits(t) / 8; }
inline constexpr std::string_view dtype_name(DType t) {
  switch (t) {
#define MK_DTYPE_NAME(E, name, bits) \
  case DType::E: return name;
    MK_FOR_EACH_DTYPE(MK_DTYPE_NAME)
#undef MK_DTYPE_NAME
  }
  return "?";
}

// nvcc's device pass has the intrinsics; g++ and clang (HIP included) have __builtin_bit_cast.
MK_HD_INLINE float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return __builtin_bit_cast(float, bits);
#endif
}

MK_HD_INLINE uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}

MK_HD_INLINE float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

// Round to nearest even; NaN stays NaN (quiet).
MK_HD_INLINE uint16_t float_to_bf16(float f) {
  uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// IEEE half -> float, exact (subnormals, infinities and NaN included).
MK_HD_INLINE float fp16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400u) == 0);
    bits = sign | uint32_t(112 - e) << 23 | ((man & 0x3ffu) << 13);
  }
  return bits_to_float(bits);
}

// float -> IEEE half, round to nearest even, overflow to infinity.
MK_HD_INLINE uint16_t float_to_fp16(float f) {
  uint32_t bits = float_to_bits(f);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                  // below the smallest normal half
    if (abs < 0x33000000u) return uint16_t(sign);           // below half the smallest subnormal
    uint32_t exp = abs >> 23;
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;  // 14..24 (value = man * 2^(exp-150); half subnormal unit 2^-24)
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

// E4M3's exponent and mantissa bits, placed in a half's, make the half worth value / 256 (the exponent
// biases are 7 and 15), subnormals included: fp8_e4m3_to_half_bits(b) * 256 is the fp8 value, exactly.
MK_HD_INLINE uint16_t fp8_e4m3_to_half_bits(uint8_t b) { return uint16_t((b & 0x80u) << 8 | (b & 0x7fu) << 7); }
constexpr float kFp8HalfScale = 256.0f;

// fp8 E4M3 -> float, exact; NaN for the two NaN codes.
MK_HD_INLINE float fp8_e4m3_to_float(uint8_t b) {
  if ((b & 0x7fu) == 0x7fu) return bits_to_float(0x7fc00000u);
  return fp16_to_float(fp8_e4m3_to_half_bits(b)) * kFp8HalfScale;
}

// float -> fp8 E4M3, round to nearest even, saturating to +-448 (as torch's saturating casts and the
// fp8 quantizers do); NaN stays NaN. Host code (quantization at load time).
uint8_t float_to_fp8_e4m3(float f);

// Element i of an array of T at `data`. On the host `data` may be unaligned: a safetensors file puts a
// tensor at whatever byte offset its header names, and the file is used where it is mapped. Device
// buffers are laid out by the host, aligned.
template <typename T>
MK_HD_INLINE T load_element(const void* data, int64_t i) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return static_cast<const T*>(data)[i];
#else
  T value;
  std::memcpy(&value, static_cast<const unsigned char*>(data) + i * int64_t(sizeof(T)), sizeof(T));
  return value;
#endif
}

// Reads element i of a weight stored as `t` (U4: its code).
MK_HD_INLINE float load_as_float(const void* data, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return load_element<float>(data, i);
    case DType::F16: return fp16_to_float(load_element<uint16_t>(data, i));
    case DType::F8_E4M3: return fp8_e4m3_to_float(static_cast<const uint8_t*>(data)[i]);
    case DType::U4: return float((static_cast<const uint8_t*>(data)[i / 2] >> (4 * (i & 1))) & 0xfu);
    default: return bf16_to_float(load_element<uint16_t>(data, i));
  }
}

// The bits of element i of an array of `t` of at most 8 bits: sub-byte elements in element order (element
// i of 4 bits in byte i / 2, the low nibble for even i).
inline uint32_t load_code(const void* data, DType t, int64_t i) {
  const int bits = dtype_bits(t), per_byte = 8 / bits;
  const uint32_t byte = static_cast<const uint8_t*>(data)[i / per_byte];
  return (byte >> (bits * (i % per_byte))) & ((1u << bits) - 1u);
}
// Sets element i of an array of `t` of at most 8 bits whose bits there are still 0.
inline void store_code(void* data, DType t, int64_t i, uint32_t code) {
  const int bits = dtype_bits(t), per_byte = 8 / bits;
  static_cast<uint8_t*>(data)[i / per_byte] |= uint8_t(code << (bits * (i % per_byte)));
}

}  // namespace mk
