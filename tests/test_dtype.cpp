#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/dtype.h"

namespace mk {
namespace {

TEST(DType, Bf16RoundTripsEveryBitPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_float(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    EXPECT_EQ(float_to_bf16(f), uint16_t(h)) << h;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), float_to_bf16(1.0f));               // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), float_to_bf16(1.0f + 4.0f / 256));  // tie -> even (up)
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.5f / 256)), 1.0f + 2.0f / 256);
}

TEST(DType, Fp16RoundTripsEveryBitPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = fp16_to_float(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_fp16(f), uint16_t(h)) << h;
  }
}

TEST(DType, Fp16KnownValues) {
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7c00)));
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);          // tie to even (zero)
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);          // above the tie
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);          // 1.5 units: tie -> even (2)
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
}

// E4M3 ("e4m3fn") by its definition: exponent bias 7, 3 mantissa bits, subnormals at exponent 0, no
// infinities, S.1111.111 NaN.
double e4m3_by_definition(uint8_t code) {
  const int sign = code >> 7, exp = (code >> 3) & 15, man = code & 7;
  const double magnitude = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -magnitude : magnitude;
}

TEST(DType, Fp8E4M3DecodesEveryCodeAsDefined) {
  for (int code = 0; code < 256; ++code) {
    const float f = fp8_e4m3_to_float(uint8_t(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << code;
      continue;
    }
    EXPECT_EQ(double(f), e4m3_by_definition(uint8_t(code))) << code;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(DType, Fp8E4M3RoundTripsEveryCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(int(float_to_fp8_e4m3(fp8_e4m3_to_float(uint8_t(code)))), code) << code;
  }
  EXPECT_EQ(int(float_to_fp8_e4m3(std::nanf(""))) & 0x7f, 0x7f);
}

TEST(DType, Fp8E4M3RoundsToNearestEvenAndSaturates) {
  // Between 1 (0x38) and 1.125 (0x39): the midpoint goes to the even code, 0x38; just above it, up.
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_fp8_e4m3(1.0626f), 0x39);
  // Between 1.125 (0x39) and 1.25 (0x3a): the midpoint goes up to the even code.
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);
  // Mantissa overflow carries into the exponent: 1.96875 is halfway between 1.875 (0x3f) and 2 (0x40).
  EXPECT_EQ(float_to_fp8_e4m3(1.96875f), 0x40);
  // Subnormals: multiples of 2^-9; half of the smallest rounds to zero (even), 0.75 of it up.
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(0.5f, -9)), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(0.75f, -9)), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3(-std::ldexp(3.0f, -9)), 0x83);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(7.6f, -9)), 0x08);
  // Beyond 448: saturate, never NaN.
  EXPECT_EQ(float_to_fp8_e4m3(460.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(1e9f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
}

TEST(DType, Fp8E4M3HalfBitsAreTheValueOver256) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(fp16_to_float(fp8_e4m3_to_half_bits(uint8_t(code))) * 256.0f, float(e4m3_by_definition(uint8_t(code)))) << code;
  }
}

}  // namespace
}  // namespace mk
