// The CPU reference forward pass: plain fp32 math on the weights as loaded, one token at a time, walking
// the model's step recipe (runtime/step_recipe.h) stage by stage. Written for clarity, not speed: it is
// the oracle the emulator and the GPU kernel are checked against.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model.h"
#include "runtime/step_recipe.h"

namespace mk {

class ReferenceModel {
 public:
  ReferenceModel(const Model& model, int context);

  // Feeds `token` at the next position and returns the logits for the position after it.
  std::vector<float> forward(int32_t token);

  int position() const { return position_; }
  void reset() { position_ = 0; }

 private:
  // What the stages of one token step hand to each other (the recipe's buffers).
  struct StepState {
    int32_t token = 0;
    std::vector<float> x, q, k, v, attn, h, projected, logits;
  };
  void run(const Stage& stage, int layer, StepState& state);
  // A row stage's output: added to the residual stream, or kept for the post-norm stage after it.
  static void residual_or_projected(const Stage& stage, std::vector<float> out, StepState& state);

  const Model& model_;
  const ModelConfig& cfg_;
  StepRecipe recipe_;
  int context_;
  int position_ = 0;
  std::vector<std::vector<float>> inv_freq_;  // per layer
  std::vector<float> k_cache_, v_cache_;  // [layer][position][kv_dim], fp32
};

}  // namespace mk
