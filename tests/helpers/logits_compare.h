// Comparing a logits vector against a reference one: relative L2 error and the reference's top-2 margin
// (when the top two are within rounding, a different greedy token is not an error, and tests say so).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace mk::test {

struct LogitsComparison {
  double relative_error = 0;  // ||got - ref|| / ||ref||
  double max_abs_error = 0;
  int32_t reference_argmax = -1, got_argmax = -1;
  double reference_margin = 0;  // top1 - top2 of the reference
  double reference_scale = 0;   // max |ref|
  std::string summary() const {
    return fmt::format("rel err {:.3g}, max abs err {:.3g}, argmax ref {} got {}, ref top-2 margin {:.3g}",
                       relative_error, max_abs_error, reference_argmax, got_argmax, reference_margin);
  }
};

inline LogitsComparison compare_logits(const std::vector<float>& ref, const std::vector<float>& got) {
  LogitsComparison c;
  if (ref.size() != got.size() || ref.empty()) {
    c.relative_error = INFINITY;
    return c;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    if (std::isnan(d)) {
      c.relative_error = INFINITY;
      return c;
    }
    num += d * d;
    den += double(ref[i]) * ref[i];
    c.max_abs_error = std::max(c.max_abs_error, std::fabs(d));
    c.reference_scale = std::max(c.reference_scale, std::fabs(double(ref[i])));
  }
  c.relative_error = std::sqrt(num / std::max(den, 1e-30));
  c.reference_argmax = int32_t(std::max_element(ref.begin(), ref.end()) - ref.begin());
  c.got_argmax = int32_t(std::max_element(got.begin(), got.end()) - got.begin());
  double second = -INFINITY;
  for (size_t i = 0; i < ref.size(); ++i)
    if (int32_t(i) != c.reference_argmax) second = std::max(second, double(ref[i]));
  c.reference_margin = double(ref[size_t(c.reference_argmax)]) - second;
  return c;
}

}  // namespace mk::test
