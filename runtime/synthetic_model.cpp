#include "runtime/synthetic_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <unistd.h>

namespace mk::synthetic {

using nlohmann::json;

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorBytes>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';  // the reference writer pads the header to 8 bytes
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path.string());
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
}

std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * size_t(dtype_size(dtype)));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(&out[i * 4], &values[i], 4);
    } else {
      uint16_t h = dtype == DType::BF16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

namespace {

struct Generator {
  std::mt19937_64 rng;
  const TinyModelSpec& spec;
  std::vector<TensorBytes> tensors;

  void add(const std::string& name, std::vector<int64_t> shape, float scale, float center = 0.0f) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(static_cast<size_t>(n));  // not v(size_t(n)): that declares a function
    for (auto& x : v) x = center + dist(rng);
    tensors.push_back({name, std::string(dtype_name(spec.dtype)), std::move(shape), encode(v, spec.dtype)});
  }
};

const char* model_type(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Mistral: return "mistral";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
    case Arch::Gemma3: return "gemma3_text";
  }
  return "llama";
}

}  // namespace

std::vector<TensorBytes> write_tiny_model(const std::filesystem::path& dir, const TinyModelSpec& s) {
  std::filesystem::create_directories(dir);
  Generator g{std::mt19937_64(s.seed), s, {}};
  const int64_t q_dim = int64_t(s.heads) * s.head_dim, kv_dim = int64_t(s.kv_heads) * s.head_dim;
  // Gemma scales its embedding rows by sqrt(hidden): smaller rows keep the residual stream comparable.
  g.add("model.embed_tokens.weight", {s.vocab, s.hidden}, s.arch == Arch::Gemma3 ? 1.0f / std::sqrt(float(s.hidden)) : 1.0f);
  const bool gemma = s.arch == Arch::Gemma3;
  const float norm_center = gemma ? 0.0f : 1.0f;  // Gemma's norms scale by (1 + w)
  for (int l = 0; l < s.layers; ++l) {
    std::string p = fmt::format("model.layers.{}.", l);
    g.add(p + "input_layernorm.weight", {s.hidden}, 0.2f, norm_center);
    g.add(p + "self_attn.q_proj.weight", {q_dim, s.hidden}, s.weight_scale * 2);
    g.add(p + "self_attn.k_proj.weight", {kv_dim, s.hidden}, s.weight_scale * 2);
    g.add(p + "self_attn.v_proj.weight", {kv_dim, s.hidden}, s.weight_scale * 2);
    if (s.arch == Arch::Qwen2) {
      g.add(p + "self_attn.q_proj.bias", {q_dim}, 0.5f);
      g.add(p + "self_attn.k_proj.bias", {kv_dim}, 0.5f);
      g.add(p + "self_attn.v_proj.bias", {kv_dim}, 0.5f);
    }
    if (s.arch == Arch::Qwen3 || gemma) {
      g.add(p + "self_attn.q_norm.weight", {s.head_dim}, 0.2f, norm_center);
      g.add(p + "self_attn.k_norm.weight", {s.head_dim}, 0.2f, norm_center);
    }
    g.add(p + "self_attn.o_proj.weight", {s.hidden, q_dim}, s.weight_scale);
    g.add(p + "post_attention_layernorm.weight", {s.hidden}, 0.2f, norm_center);
    if (gemma) g.add(p + "pre_feedforward_layernorm.weight", {s.hidden}, 0.2f, norm_center);
    g.add(p + "mlp.gate_proj.weight", {s.intermediate, s.hidden}, s.weight_scale * 2);
    g.add(p + "mlp.up_proj.weight", {s.intermediate, s.hidden}, s.weight_scale * 2);
    g.add(p + "mlp.down_proj.weight", {s.hidden, s.intermediate}, s.weight_scale);
    if (gemma) g.add(p + "post_feedforward_layernorm.weight", {s.hidden}, 0.2f, norm_center);
  }
  g.add("model.norm.weight", {s.hidden}, 0.2f, norm_center);
  if (!s.tied) g.add("lm_head.weight", {s.vocab, s.hidden}, s.weight_scale * 2);

  json cfg = {
      {"architectures", {arch_name(s.arch)}},
      {"model_type", model_type(s.arch)},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.intermediate},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"vocab_size", s.vocab},
      {"max_position_embeddings", s.max_position},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", s.arch == Arch::Llama ? 500000.0 : 1000000.0},
      {gemma ? "hidden_activation" : "hidden_act", gemma ? "gelu_pytorch_tanh" : "silu"},
      {"tie_word_embeddings", s.tied},
      {"torch_dtype", s.dtype == DType::F32 ? "float32" : s.dtype == DType::F16 ? "float16" : "bfloat16"},
      {"bos_token_id", 1},
      {"eos_token_id", s.eos.size() == 1 ? json(s.eos[0]) : json(s.eos)},
  };
  if (s.arch == Arch::Qwen3 || gemma || s.head_dim * s.heads != s.hidden) cfg["head_dim"] = s.head_dim;
  if (gemma) {  // every other layer global, in the transformers 4.5x form
    cfg["sliding_window"] = s.sliding_window;
    cfg["sliding_window_pattern"] = 2;
    cfg["rope_local_base_freq"] = 10000.0;
    cfg["query_pre_attn_scalar"] = s.head_dim + 8;
    cfg["attention_bias"] = false;
  }
  if (s.arch == Arch::Llama) cfg["attention_bias"] = false;
  if (s.arch == Arch::Qwen3) cfg["attention_bias"] = false;
  if (s.arch == Arch::Mistral) cfg["sliding_window"] = s.family_window > 0 ? json(s.family_window) : json(nullptr);
  if ((s.arch == Arch::Qwen2 || s.arch == Arch::Qwen3) && s.family_window > 0) {
    cfg["use_sliding_window"] = true;
    cfg["sliding_window"] = s.family_window;
    cfg["max_window_layers"] = s.max_window_layers;
  }
  if (s.llama3_rope)
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  std::ofstream(dir / "config.json") << cfg.dump(2);
  json gen = {{"bos_token_id", 1}, {"eos_token_id", s.eos.size() == 1 ? json(s.eos[0]) : json(s.eos)}};
  std::ofstream(dir / "generation_config.json") << gen.dump(2);

  if (s.shards <= 1) {
    write_safetensors(dir / "model.safetensors", g.tensors);
  } else {
    json weight_map = json::object();
    size_t per = (g.tensors.size() + size_t(s.shards) - 1) / size_t(s.shards);
    for (int k = 0; k < s.shards; ++k) {
      std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, s.shards);
      std::vector<TensorBytes> part;
      for (size_t i = size_t(k) * per; i < std::min(g.tensors.size(), size_t(k + 1) * per); ++i) {
        part.push_back(g.tensors[i]);
        weight_map[g.tensors[i].name] = file;
      }
      write_safetensors(dir / file, part);
    }
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
  }
  return g.tensors;
}

std::filesystem::path make_temp_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("mk-test-{}-{}-{}", tag, ::getpid(), counter.fetch_add(1));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace mk::synthetic
