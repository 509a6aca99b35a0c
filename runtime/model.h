// A loaded model: its config and read-only views of every weight, memory-mapped from the safetensors files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/model_config.h"

namespace mk {

// A view of one tensor inside a mapped file. `data == nullptr` marks an absent optional tensor.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return size_t(numel()) * size_t(dtype_size(dtype)); }
  bool present() const { return data != nullptr; }
  float at(int64_t i) const { return load_as_float(data, dtype, i); }
};

// Shapes follow PyTorch nn.Linear: weight [out_features, in_features].
struct LayerWeights {
  TensorView attn_norm;            // [hidden]                     input_layernorm.weight
  TensorView wq, wk, wv;           // [q_dim|kv_dim, hidden]        self_attn.{q,k,v}_proj.weight
  TensorView bq, bk, bv;           // [q_dim|kv_dim]  (Qwen2 only)  self_attn.{q,k,v}_proj.bias
  TensorView q_norm, k_norm;       // [head_dim]      (Qwen3 only)  self_attn.{q,k}_norm.weight
  TensorView wo;                   // [hidden, q_dim]               self_attn.o_proj.weight
  TensorView mlp_norm;             // [hidden]                      post_attention_layernorm.weight
  TensorView w_gate, w_up;         // [intermediate, hidden]        mlp.{gate,up}_proj.weight
  TensorView w_down;               // [hidden, intermediate]        mlp.down_proj.weight
};

struct ModelWeights {
  TensorView embed;       // [vocab, hidden]  model.embed_tokens.weight
  std::vector<LayerWeights> layers;
  TensorView final_norm;  // [hidden]         model.norm.weight
  TensorView lm_head;     // [vocab, hidden]  lm_head.weight, or the embedding when tied
};

class MappedFile;  // runtime/safetensors.h

struct Model {
  std::filesystem::path dir;
  ModelConfig config;
  ModelWeights weights;
  std::vector<std::shared_ptr<const MappedFile>> files;  // keep the mappings alive
  uint64_t weight_bytes() const;                          // bytes of all tensors in `weights`, lm_head once if tied
};

// Loads a Hugging Face model directory: config.json, model.safetensors or sharded files with
// model.safetensors.index.json, generation_config.json. Validates every tensor's presence, dtype and shape.
// Throws mk::Error naming the file, tensor, expected and found values.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir);

}  // namespace mk
