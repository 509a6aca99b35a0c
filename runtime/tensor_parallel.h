// Tensor parallel: one token step split over N devices of a host (Megatron's split), each running its own
// persistent program over its shard of the weights.
//   - qkv and attention by kv heads (a device takes whole kv groups and their query heads; its K/V cache
//     holds its kv heads), gate_up by rows of h;
//   - o_proj and down by their input columns: each device's product is a partial of every output row,
//     pushed into every device's Partials (one set for o_proj, one for down, so that a push never lands
//     on a set a slower device still reads); an all_reduce stage then sums the devices' partials in device
//     order, so that every device holds the same residual bit for bit;
//   - the LM head by vocabulary rows: each device pushes its logits and its blocks' partials to the home
//     device (device 0), whose sample op pushes the token and the stop flag back to every device.
// A push signals the counter on the device it lands on: the stage after it waits for the instructions of
// every device, as for a local stage's. The recipe says which stages push (Stage::pushes); the schedule
// and the executors do the rest.
#pragma once

#include <memory>

#include "runtime/model.h"
#include "runtime/model_config.h"
#include "runtime/step_recipe.h"

namespace mk {

inline constexpr int kMaxTensorParallel = 8;

// Checks that a model splits over `devices` devices; throws mk::Error naming the config field or the
// tensor that does not (devices out of 1..kMaxTensorParallel; kv heads or the MLP width not divisible; a
// shard's width off its matrix format's column multiple; a quantized matrix's scale blocks cut).
void check_tensor_parallel(const Model& model, int devices);

// The config of one device's shard: its query and kv heads and its part of the MLP width (the hidden
// size, the vocabulary and the rest as the model's).
ModelConfig shard_config(const ModelConfig& config, int devices);

// Device `rank`'s shard of a model (check_tensor_parallel first): its heads' rows of q, k, v (and biases),
// its columns of o_proj, its rows of gate and up, its columns of down; the norms, the embedding and the
// LM head whole (each device computes its vocabulary rows of the head from the whole matrix). Row slices
// view the model's memory; column slices are copies the shard owns. The shard keeps the model's mappings
// alive, not the model itself.
std::unique_ptr<Model> shard_model(const Model& model, int devices, int rank);

// The step recipe of device `rank`: the shard's architecture recipe with o_proj and down pushing
// partials, an all_reduce stage after each, the LM head on the device's vocabulary rows pushing to the
// home device, and the sample op on the home device only. No chunk steps (prefill runs through token
// steps). Checked (check_step_recipe).
StepRecipe tensor_parallel_recipe(const ModelConfig& shard, int devices, int rank);

}  // namespace mk
