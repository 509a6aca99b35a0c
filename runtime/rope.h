// Rotary position embedding tables, computed the way Hugging Face does (float32 inverse frequencies,
// float32 angle = position * inv_freq), so that the reference, the emulator and the GPU agree with it.
// Pairs are (i, i + head_dim/2) ("rotate_half" convention).
#pragma once

#include <vector>

#include "runtime/model_config.h"

namespace mk {

// head_dim/2 inverse frequencies, with llama3 rope_scaling applied when configured.
std::vector<float> rope_inv_freq(const ModelConfig& config);
// The same for a given base and scaling (a layer's, runtime/step_recipe.h).
std::vector<float> rope_inv_freq(int head_dim, float theta, const RopeScaling& scaling);

// cos/sin of the angles at one position: out_cos[i], out_sin[i] for i < head_dim/2.
void rope_cos_sin(const std::vector<float>& inv_freq, int position, float* out_cos, float* out_sin);

// Table for positions [0, context): [context][head_dim/2] cos values followed by the same for sin.
std::vector<float> rope_table(const ModelConfig& config, int context);
std::vector<float> rope_table(const std::vector<float>& inv_freq, int context);

}  // namespace mk
