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

}  // namespace
}  // namespace mk
