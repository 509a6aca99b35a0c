#include "runtime/dtype.h"

#include <cmath>

namespace mk {

uint8_t float_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(double(f));
  if (std::isinf(a)) return uint8_t(sign | 0x7e);
  constexpr double kMinNormal = 1.0 / 64;  // 2^-6
  if (a < kMinNormal) {  // subnormals: multiples of 2^-9; 8 of them round up into the smallest normal, code 0x08
    return uint8_t(sign | uint8_t(std::nearbyint(a * 512.0)));
  }
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 7;                 // biased exponent of 1.xxx * 2^(e-1)
  int man = int(std::nearbyint((m * 2.0 - 1.0) * 8.0));
  if (man == 8) man = 0, ++exp;
  if (exp > 15 || (exp == 15 && man > 6)) return uint8_t(sign | 0x7e);  // beyond 448: saturate
  return uint8_t(sign | exp << 3 | man);
}

}  // namespace mk
