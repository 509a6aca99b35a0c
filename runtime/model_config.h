// The model's hyper-parameters, read from a Hugging Face config.json (+ generation_config.json).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mk {

enum class Arch { Llama, Mistral, Qwen2, Qwen3, Gemma3 };

const char* arch_name(Arch a);  // the HF "architectures" string, e.g. "LlamaForCausalLM"

// The activation between the MLP's gate and up rows: h = act(gate) * up. GeluTanh: GELU with the tanh
// approximation (transformers' "gelu_pytorch_tanh").
enum class Activation : uint8_t { SiLU, GeluTanh };
const char* activation_name(Activation a);

struct RopeScaling {
  // Linear: every inverse frequency divided by `factor` (transformers' "linear").
  enum class Kind { None, Llama3, Linear } kind = Kind::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

// How a quantized checkpoint stores its weight matrices, from config.json's "quantization_config".
// Only the weights are described: the kernels multiply quantized weights, dequantized by their scales (and
// zero points), with activations kept in higher precision (weight-only), so activation schemes and input
// scales are unused. A matrix the config leaves unquantized (modules_to_not_convert, ignore) is simply
// stored in bf16/fp16 as X.weight, so the tensors present, not those lists, say whether a matrix is
// quantized.
struct WeightQuantization {
  enum class Method : uint8_t {
    None,               // no quantization_config
    FineGrainedFp8,     // quant_method "fp8" (transformers FineGrainedFP8): X.weight_scale_inv per block
    CompressedTensors,  // quant_method "compressed-tensors", float-quantized: X.weight_scale per row or matrix
    Awq,                // quant_method "awq", version "gemm" (AutoAWQ): X.qweight, X.qzeros, X.scales
    Gptq,               // quant_method "gptq" (AutoGPTQ / GPTQModel): X.qweight, X.qzeros, X.scales, X.g_idx
  };
  Method method = Method::None;
  int block_rows = 0, block_cols = 0;  // FineGrainedFp8: weight_block_size
  // CompressedTensors: the weight strategies its config groups use; a scale's shape tells which one a
  // matrix has ([out, 1]: "channel", [1] or []: "tensor").
  bool per_channel = false, per_tensor = false;
  // Awq, Gptq: 4-bit codes, one scale and zero point per `group_size` input columns of a row (-1: one group
  // per row). Whether a group size fits the kernels is checked per matrix, when its width is known.
  int bits = 0;
  int group_size = 0;
  bool zero_point = true;   // Awq "zero_point" (the GEMM form stores, and its kernels read, qzeros either way)
  bool sym = true;          // Gptq "sym" (informational: the zero points are read from qzeros either way)
  bool desc_act = false;    // Gptq "desc_act": act-order; X.g_idx must then be read and checked
  bool zeros_minus_one = false;  // Gptq checkpoint_format "gptq" (v1): qzeros hold zero point - 1
  bool is_int4() const { return method == Method::Awq || method == Method::Gptq; }
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  int hidden_size = 0;        // d_model
  int intermediate_size = 0;  // MLP width
  int num_layers = 0;
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // key/value heads (grouped-query attention: num_heads % num_kv_heads == 0)
  int head_dim = 0;      // from config when present, else hidden_size / num_heads
  int vocab_size = 0;
  int max_position = 0;  // max_position_embeddings
  // 0: none. With `sliding_layers` empty, every layer's window (Mistral, Qwen2/3 sliding on all layers);
  // else the window of the layers marked there (Gemma 3, Qwen2/3 from max_window_layers on), the others
  // being global. The KV cache keeps every position; attention reads a sliding layer's last `window`.
  int sliding_window = 0;
  std::vector<uint8_t> sliding_layers;  // per layer, 1: a sliding-window layer; empty: see sliding_window
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  float sliding_rope_theta = 0.0f;  // the sliding layers' RoPE base, unscaled (Gemma 3); 0: rope_theta and rope_scaling
  Activation activation = Activation::SiLU;
  // Gemma 3's layer: attention scores scaled by query_pre_attn_scalar^-0.5 (0: head_dim^-0.5); norms that
  // scale by (norm_weight_offset + w); the embedding rows scaled by sqrt(hidden_size); and a norm on
  // attention's and the MLP's outputs before each residual add (post_norms: four norms a layer).
  float query_pre_attn_scalar = 0.0f;
  float norm_weight_offset = 0.0f;
  bool scaled_embedding = false;
  bool post_norms = false;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2: biases on q/k/v projections
  bool qk_norm = false;   // Qwen3: per-head RMSNorm on q and k before RoPE
  std::vector<int32_t> eos_token_ids;  // from generation_config.json, else config.json
  int32_t bos_token_id = -1;
  WeightQuantization quantization;

  // Exact in int for any parsed config: each factor and the product are bounded (runtime/limits.h).
  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int group_size() const { return num_heads / num_kv_heads; }  // query heads per kv head
  // Whether layer l attends through the sliding window (sliding_window, sliding_layers).
  bool layer_slides(int l) const { return sliding_window > 0 && (sliding_layers.empty() || sliding_layers[size_t(l)] != 0); }
};

// Parses config.json (required) and generation_config.json (optional) in `dir`.
// Throws mk::Error naming the file and key on anything missing, malformed, unsupported or beyond the
// limits of runtime/limits.h (checked before anything is derived from the value).
ModelConfig load_model_config(const std::filesystem::path& dir);

// Parses the JSON text of a config.json; `source` names it in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);

// Applies the JSON text of a generation_config.json (its "eos_token_id", if any) to `config`.
void apply_generation_config(ModelConfig& config, const std::string& json_text, const std::string& source);

}  // namespace mk
