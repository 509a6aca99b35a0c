// The CPU reference forward pass: plain fp32 math on the weights as loaded, one token at a time.
// Written for clarity, not speed: it is the oracle the emulator and the GPU kernel are checked against.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model.h"

namespace mk {

class ReferenceModel {
 public:
  ReferenceModel(const Model& model, int context);

  // Feeds `token` at the next position and returns the logits for the position after it.
  std::vector<float> forward(int32_t token);

  int position() const { return position_; }
  void reset() { position_ = 0; }

 private:
  const Model& model_;
  const ModelConfig& cfg_;
  int context_;
  int position_ = 0;
  std::vector<float> inv_freq_;
  std::vector<float> k_cache_, v_cache_;  // [layer][position][kv_dim], fp32
};

}  // namespace mk
