// Fills the packed weight image with seeded random values on the GPU (presets: real shapes, no files).
#pragma once

#include <cstdint>

#include "runtime/model_config.h"
#include "runtime/weight_layout.h"

namespace mk::dev {

// Matrices ~ uniform(-1, 1) / sqrt(input width) in the matrix formats (FP8, INT4: random codes, see the .cu); norm weights ~ 1 + uniform(-0.1, 0.1);
// biases ~ uniform(-0.1, 0.1). Synchronous; throws mk::Error on a GPU error.
// Fills `count` bf16 values with uniform(-scale, scale).
void fill_random_bf16(uint16_t* device_data, uint64_t count, float scale, uint64_t seed);

void fill_random_weights(uint8_t* device_image, const ModelConfig& config, const WeightLayout& layout, uint64_t seed);

}  // namespace mk::dev
