#include "runtime/rope.h"

#include <cmath>

namespace mk {

std::vector<float> rope_inv_freq(const ModelConfig& c) { return rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling); }

std::vector<float> rope_inv_freq(int head_dim, float theta, const RopeScaling& scaling) {
  const int half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
    float exponent = float(2 * i) / float(head_dim);
    inv[size_t(i)] = 1.0f / std::pow(theta, exponent);
  }
  if (scaling.kind == RopeScaling::Kind::Linear)
    for (auto& f : inv) f /= scaling.factor;  // transformers' _compute_linear_scaling_rope_parameters
  if (scaling.kind == RopeScaling::Kind::Llama3) {
    // transformers' _compute_llama3_parameters.
    const auto& s = scaling;
    const float old_len = float(s.original_max_position);
    const float low_freq_wavelen = old_len / s.low_freq_factor;
    const float high_freq_wavelen = old_len / s.high_freq_factor;
    for (auto& f : inv) {
      const float wavelen = 2.0f * float(M_PI) / f;
      float scaled = wavelen > low_freq_wavelen ? f / s.factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        scaled = (1.0f - smooth) * scaled / s.factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

void rope_cos_sin(const std::vector<float>& inv_freq, int position, float* out_cos, float* out_sin) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = float(position) * inv_freq[i];  // float32 product, as HF's matmul
    out_cos[i] = float(std::cos(double(angle)));
    out_sin[i] = float(std::sin(double(angle)));
  }
}

std::vector<float> rope_table(const ModelConfig& config, int context) { return rope_table(rope_inv_freq(config), context); }

std::vector<float> rope_table(const std::vector<float>& inv, int context) {
  const size_t half = inv.size();
  std::vector<float> table(size_t(context) * half * 2);
  float* cos_part = table.data();
  float* sin_part = table.data() + size_t(context) * half;
  for (int p = 0; p < context; ++p) rope_cos_sin(inv, p, cos_part + size_t(p) * half, sin_part + size_t(p) * half);
  return table;
}

}  // namespace mk
