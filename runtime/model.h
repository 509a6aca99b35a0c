// A loaded model: its config and read-only views of every weight, memory-mapped from the safetensors files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/matrix_format.h"
#include "runtime/model_config.h"

namespace mk {

// The scales of a quantized matrix [rows, cols]: element (r, c) is (its stored value - zero) times
// scale[r / block_rows][c / block_cols] of a [ceil(rows / block_rows), ceil(cols / block_cols)] tensor.
// A 128x128 block scale, a per-row scale (block_rows 1, block_cols cols) and a per-tensor scale (one
// block) are all this form. `zero`: one uint8 zero point per scale, same index (int4 codes: 0..15); none
// means 0 (fp8).
struct TensorScale {
  std::string name;
  DType dtype = DType::F32;
  const void* data = nullptr;
  int64_t block_rows = 0, block_cols = 0;
  int64_t cols = 0;  // scales per row of blocks
  int64_t count = 0;  // scales in all
  const uint8_t* zero = nullptr;
  bool present() const { return data != nullptr; }
  int64_t index(int64_t r, int64_t c) const { return (r / block_rows) * cols + c / block_cols; }
  float at(int64_t r, int64_t c) const { return load_as_float(data, dtype, index(r, c)); }
  float zero_at(int64_t r, int64_t c) const { return zero ? float(zero[index(r, c)]) : 0.f; }
};

// A view of one tensor inside a mapped file (or a buffer Model::owned keeps). `data == nullptr` marks an
// absent optional tensor. A quantized matrix (F8_E4M3, U4) has its scales in `scale`; at() dequantizes.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  TensorScale scale;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t nbytes() const {
    const size_t values = (size_t(numel()) * size_t(dtype_bits(dtype)) + 7) / 8;
    return values + (scale.present() ? size_t(scale.count) * size_t(dtype_size(scale.dtype) + (scale.zero ? 1 : 0)) : 0);
  }
  bool present() const { return data != nullptr; }
  bool quantized() const { return scale.present(); }
  float at(int64_t i) const {
    const float v = load_as_float(data, dtype, i);
    if (!quantized()) return v;
    const int64_t r = i / shape[1], c = i % shape[1];
    return (v - scale.zero_at(r, c)) * scale.at(r, c);
  }
};

// Shapes follow PyTorch nn.Linear: weight [out_features, in_features].
struct LayerWeights {
  TensorView attn_norm;            // [hidden]                     input_layernorm.weight
  TensorView wq, wk, wv;           // [q_dim|kv_dim, hidden]        self_attn.{q,k,v}_proj.weight
  TensorView bq, bk, bv;           // [q_dim|kv_dim]  (Qwen2 only)  self_attn.{q,k,v}_proj.bias
  TensorView q_norm, k_norm;       // [head_dim]      (Qwen3 only)  self_attn.{q,k}_norm.weight
  TensorView wo;                   // [hidden, q_dim]               self_attn.o_proj.weight
  TensorView post_attn_norm;       // [hidden]        (Gemma 3)     post_attention_layernorm.weight
  TensorView mlp_norm;             // [hidden]                      post_attention_layernorm.weight
                                   //                 (Gemma 3:     pre_feedforward_layernorm.weight)
  TensorView w_gate, w_up;         // [intermediate, hidden]        mlp.{gate,up}_proj.weight
  TensorView w_down;               // [hidden, intermediate]        mlp.down_proj.weight
  TensorView post_mlp_norm;        // [hidden]        (Gemma 3)     post_feedforward_layernorm.weight

  // Every member, present or not, as member pointers (for code that visits each tensor of a layer).
  using Member = TensorView LayerWeights::*;
  static constexpr Member kAll[] = {
      &LayerWeights::attn_norm, &LayerWeights::wq,       &LayerWeights::wk,       &LayerWeights::wv,
      &LayerWeights::bq,        &LayerWeights::bk,       &LayerWeights::bv,       &LayerWeights::q_norm,
      &LayerWeights::k_norm,    &LayerWeights::wo,       &LayerWeights::post_attn_norm, &LayerWeights::mlp_norm,
      &LayerWeights::w_gate,    &LayerWeights::w_up,     &LayerWeights::w_down,   &LayerWeights::post_mlp_norm};
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
  WeightFormats formats;  // resolved once at load (runtime/quantize.h); what the weight image is packed in
  std::vector<std::shared_ptr<const MappedFile>> files;  // keep the mappings alive
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> owned;  // tensors made at load time (quantized)
  uint64_t weight_bytes() const;                          // bytes of all tensors in `weights`, lm_head once if tied
};

// Load-time quantization of a bf16/fp16/fp32 checkpoint (runtime/quantize.h): the quantized matrix format
// asked for, or none (std::nullopt).
using Quantize = std::optional<MatrixFormat>;

struct LoadOptions {
  Quantize quantize;
  std::function<void(int done, int total)> on_quantize_progress;  // matrices quantized so far
  // With `quantize`: whether the embedding and the LM head are quantized too (else they keep 16 bits).
  bool quantize_head = true;
};

// Loads a Hugging Face model directory: config.json, model.safetensors or sharded files with
// model.safetensors.index.json, generation_config.json. Validates every tensor's presence, dtype and shape.
// Throws mk::Error naming the file, tensor, expected and found values.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, const LoadOptions& options = {});

}  // namespace mk
