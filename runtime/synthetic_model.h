// A safetensors writer and a generator of small random Hugging Face model directories (all supported
// architectures): the built-in model of the main job, and the models the tests are made of.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/model_config.h"

namespace mk::synthetic {

struct TensorBytes {
  std::string name;
  std::string dtype;  // safetensors dtype string
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes a well-formed safetensors file (tensors packed in the given order).
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorBytes>& tensors);

// Encodes float values as `dtype` ("F32", "F16" or "BF16").
std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype);

struct TinyModelSpec {
  Arch arch = Arch::Llama;
  int hidden = 64;
  int intermediate = 96;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 16;  // written to config.json for Qwen3 (and Llama when != hidden/heads)
  int vocab = 160;
  int max_position = 512;
  DType dtype = DType::BF16;
  bool tied = false;
  bool llama3_rope = false;  // add rope_scaling {rope_type: llama3}
  int sliding_window = 6;    // Gemma3: the sliding layers' window (every other layer slides)
  // Mistral: sliding_window on every layer; Qwen2 / Qwen3: use_sliding_window with this window from layer
  // max_window_layers on. 0: none (null for Mistral).
  int family_window = 0;
  int max_window_layers = 0;
  int shards = 1;            // >1: model-0000k-of-0000n.safetensors + index json
  uint64_t seed = 1;
  float weight_scale = 0.08f;  // uniform(-scale, scale) for matrices
  std::vector<int32_t> eos = {2};
};

// Writes config.json, generation_config.json and the safetensors file(s) of a random model into `dir`
// (created if missing). Returns the tensors written (name -> data), for tests that corrupt them.
std::vector<TensorBytes> write_tiny_model(const std::filesystem::path& dir, const TinyModelSpec& spec);

// A fresh empty directory under the system temp dir, unique per call.
std::filesystem::path make_temp_dir(const std::string& tag);

}  // namespace mk::synthetic
