#include "runtime/presets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/error.h"
#include "runtime/quantize.h"

namespace mk {
namespace {

struct Preset {
  const char* name;
  ModelConfig config;
};

ModelConfig llama3(int hidden, int inter, int layers, int heads, int kv, int hd, bool tied, float factor) {
  ModelConfig c;
  c.arch = Arch::Llama;
  c.hidden_size = hidden, c.intermediate_size = inter, c.num_layers = layers;
  c.num_heads = heads, c.num_kv_heads = kv, c.head_dim = hd, c.vocab_size = 128256;
  c.max_position = 131072, c.rms_norm_eps = 1e-5f, c.rope_theta = 500000.0f;
  c.rope_scaling = RopeScaling{RopeScaling::Kind::Llama3, factor, 1.0f, 4.0f, 8192};
  c.tie_word_embeddings = tied;
  c.eos_token_ids = {128001, 128008, 128009};
  c.bos_token_id = 128000;
  return c;
}

ModelConfig qwen(Arch arch, int hidden, int inter, int layers, int heads, int kv, int hd) {
  ModelConfig c;
  c.arch = arch;
  c.hidden_size = hidden, c.intermediate_size = inter, c.num_layers = layers;
  c.num_heads = heads, c.num_kv_heads = kv, c.head_dim = hd, c.vocab_size = 151936;
  c.max_position = 32768, c.rms_norm_eps = 1e-6f, c.rope_theta = 1000000.0f;
  c.tie_word_embeddings = true;
  c.qkv_bias = arch == Arch::Qwen2;
  c.qk_norm = arch == Arch::Qwen3;
  c.eos_token_ids = {151645, 151643};
  return c;
}

// Gemma 3 (text): every sixth layer global, the others a sliding window with their own RoPE base; the
// global layers' RoPE scaled linearly where the model does (4B).
ModelConfig gemma3(int hidden, int inter, int layers, int heads, int kv, int vocab, int window, float rope_factor) {
  ModelConfig c;
  c.arch = Arch::Gemma3;
  c.hidden_size = hidden, c.intermediate_size = inter, c.num_layers = layers;
  c.num_heads = heads, c.num_kv_heads = kv, c.head_dim = 256, c.vocab_size = vocab;
  c.max_position = 131072, c.rms_norm_eps = 1e-6f, c.rope_theta = 1000000.0f, c.sliding_rope_theta = 10000.0f;
  if (rope_factor > 1.0f) c.rope_scaling = RopeScaling{RopeScaling::Kind::Linear, rope_factor, 1.0f, 4.0f, 8192};
  c.sliding_window = window;
  c.sliding_layers.assign(size_t(layers), 1);
  for (int l = 5; l < layers; l += 6) c.sliding_layers[size_t(l)] = 0;
  c.activation = Activation::GeluTanh;
  c.query_pre_attn_scalar = 256.0f, c.norm_weight_offset = 1.0f;
  c.scaled_embedding = c.post_norms = c.qk_norm = true;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {1, 106};
  c.bos_token_id = 2;
  return c;
}

// Shapes from each model's config.json on the Hugging Face hub (Gemma 3 4B: its text_config).
const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"llama-3.2-1b", llama3(2048, 8192, 16, 32, 8, 64, true, 32.0f)},
      {"llama-3.2-3b", llama3(3072, 8192, 28, 24, 8, 128, true, 32.0f)},
      {"llama-3.1-8b", llama3(4096, 14336, 32, 32, 8, 128, false, 8.0f)},
      {"qwen2.5-0.5b", qwen(Arch::Qwen2, 896, 4864, 24, 14, 2, 64)},
      {"qwen3-1.7b", qwen(Arch::Qwen3, 2048, 6144, 28, 16, 8, 128)},
      {"gemma-3-1b", gemma3(1152, 6912, 26, 4, 1, 262144, 512, 1.0f)},
      {"gemma-3-4b", gemma3(2560, 10240, 34, 8, 4, 262208, 1024, 8.0f)},
  };
  return all;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

ModelConfig preset_config(const std::string& name) {
  for (const auto& p : presets())
    if (name == p.name) return p.config;
  fail("unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

std::unique_ptr<Model> preset_model(const std::string& name, MatrixFormat format, std::optional<MatrixFormat> head_format) {
  auto m = std::make_unique<Model>();
  m->config = preset_config(name);
  m->dir = "preset:" + name;
  // No tensors: the formats are given, and the head's dtypes say them too.
  m->formats = WeightFormats{format, head_format.value_or(format)};
  m->weights.embed.dtype = matrix_format_dtype(m->formats.head);
  m->weights.lm_head.dtype = matrix_format_dtype(m->formats.head);
  return m;
}

std::unique_ptr<Model> preset_model(const std::string& name, const LoadOptions& options) {
  if (!options.quantize) return preset_model(name);
  const MatrixFormat f = quantize_target(options, "preset:" + name);
  return preset_model(name, f, options.quantize_head ? f : MatrixFormat::BF16);
}

}  // namespace mk
