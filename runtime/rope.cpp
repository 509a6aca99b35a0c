#include "runtime/rope.h"

#include <cmath>

namespace mk {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
    float exponent = float(2 * i) / float(c.head_dim);
    inv[size_t(i)] = 1.0f / std::pow(c.rope_theta, exponent);
  }
  if (c.rope_scaling.kind == RopeScaling::Kind::Llama3) {
    // transformers' _compute_llama3_parameters.
    const auto& s = c.rope_scaling;
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

std::vector<float> rope_table(const ModelConfig& config, int context) {
  const auto inv = rope_inv_freq(config);
  const size_t half = inv.size();
  std::vector<float> table(size_t(context) * half * 2);
  float* cos_part = table.data();
  float* sin_part = table.data() + size_t(context) * half;
  for (int p = 0; p < context; ++p) rope_cos_sin(inv, p, cos_part + size_t(p) * half, sin_part + size_t(p) * half);
  return table;
}

}  // namespace mk
