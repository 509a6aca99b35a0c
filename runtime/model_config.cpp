// config.json parsing for the supported Hugging Face decoder architectures. Defaults follow the
// transformers config classes (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Gemma3TextConfig), so
// a config that omits a key means here what it means to transformers. Anything the runtime does not model
// (other activations, rope types, biases, soft-capping, Qwen's per-layer windows) is rejected rather
// than ignored.
#include "runtime/model_config.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <string_view>

#include "runtime/error.h"
#include "runtime/json_file.h"
#include "runtime/limits.h"
#include "runtime/matrix_format.h"

namespace mk {

using nlohmann::json;

namespace {

struct ArchInfo {
  Arch arch;
  const char* hf_name;
  int default_max_position;  // max_position_embeddings default of the transformers config class
};

constexpr ArchInfo kArchs[] = {
    {Arch::Llama, "LlamaForCausalLM", 2048},
    {Arch::Mistral, "MistralForCausalLM", 4096 * 32},
    {Arch::Qwen2, "Qwen2ForCausalLM", 32768},
    {Arch::Qwen3, "Qwen3ForCausalLM", 32768},
    {Arch::Gemma3, "Gemma3ForCausalLM", 131072},
};

const ArchInfo& arch_info(Arch a) {
  for (const ArchInfo& info : kArchs)
    if (info.arch == a) return info;
  return kArchs[0];
}

// A value for an error message. Containers are summarised: config files are small, but the found
// value only needs to be recognisable, not complete.
std::string describe(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return fmt::format("an array of {} elements", v.size());
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Typed access to the keys of one JSON object, failing with the file, the key, the expected type and
// the value found. `prefix` names nested objects ("rope_scaling.").
class Keys {
 public:
  Keys(const json& object, const std::string& source, std::string prefix = "")
      : obj_(object), source_(source), prefix_(std::move(prefix)) {}

  // Present with a non-null value. transformers writes null for "not set", so null means absent.
  bool has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }
  bool contains(const char* key) const { return obj_.contains(key); }  // null included

  const json& get(const char* key) const {
    if (!has(key)) fail("{}: missing required key '{}{}'", source_, prefix_, key);
    return obj_[key];
  }

  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    const json& v = get(key);
    if (!v.is_number_integer()) wrong_type(key, "an integer", v);
    // Compare in the representation nlohmann chose so that huge unsigned values do not wrap.
    bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi) : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    if (!in_range) fail("{}: '{}{}' = {} is out of range [{}, {}]", source_, prefix_, key, describe(v), lo, hi);
    return v.get<int64_t>();
  }
  int required_int(const char* key) const {
    return int(integer(key, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  }
  int optional_int(const char* key, int fallback) const { return has(key) ? required_int(key) : fallback; }
  // A size in [1, limit]: checked on the JSON value itself, so nothing derived from it can overflow.
  int size(const char* key, int64_t limit) const {
    const json& v = get(key);
    if (!v.is_number_integer()) wrong_type(key, "an integer", v);
    const bool is_unsigned = v.is_number_unsigned();
    if (is_unsigned ? v.get<uint64_t>() == 0 : v.get<int64_t>() <= 0)
      fail("{}: '{}{}' must be positive, found {}", source_, prefix_, key, describe(v));
    if (is_unsigned ? v.get<uint64_t>() > uint64_t(limit) : v.get<int64_t>() > limit)
      fail("{}: '{}{}' = {} is larger than the limit of {} (docs/limits.md)", source_, prefix_, key, describe(v), limit);
    return int(v.get<int64_t>());
  }
  int optional_size(const char* key, int fallback, int64_t limit) const { return has(key) ? size(key, limit) : fallback; }

  double number(const char* key) const {
    const json& v = get(key);
    if (!v.is_number()) wrong_type(key, "a number", v);
    return v.get<double>();
  }
  double optional_number(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }

  bool optional_bool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_[key];
    if (!v.is_boolean()) wrong_type(key, "true or false", v);
    return v.get<bool>();
  }

  std::string string(const char* key) const {
    const json& v = get(key);
    if (!v.is_string()) wrong_type(key, "a string", v);
    return v.get<std::string>();
  }

  const json* optional_object(const char* key) const {
    if (!has(key)) return nullptr;
    const json& v = obj_[key];
    if (!v.is_object()) wrong_type(key, "an object", v);
    return &v;
  }

  // Token ids are written either as one integer or as a list of them (several stop tokens).
  std::vector<int32_t> token_ids(const char* key) const {
    if (!has(key)) return {};
    const json& v = obj_[key];
    if (v.is_number_integer()) return {token_id(key)};
    if (!v.is_array()) wrong_type(key, "an integer or a list of integers", v);
    std::vector<int32_t> ids;
    for (const json& id : v) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(limits::kMaxVocabSize))
        fail("{}: '{}{}' must be an integer or a list of integers in [0, {}) (docs/limits.md), found {}", source_,
             prefix_, key, limits::kMaxVocabSize, describe(v));
      ids.push_back(int32_t(id.get<uint64_t>()));
    }
    return ids;
  }
  int32_t token_id(const char* key) const { return int32_t(integer(key, 0, limits::kMaxVocabSize - 1)); }

  const std::string& source() const { return source_; }
  std::string name(const char* key) const { return prefix_ + key; }  // as written in messages

 private:
  [[noreturn]] void wrong_type(const char* key, const char* expected, const json& found) const {
    fail("{}: '{}{}' must be {}, found {}", source_, prefix_, key, expected, describe(found));
  }

  const json& obj_;
  const std::string& source_;
  std::string prefix_;
};

json parse_json_object(const std::string& text, const std::string& source) {
  json j = parse_model_json(text, source);
  if (!j.is_object()) fail("{}: expected a JSON object at the top level, found {}", source, describe(j));
  return j;
}

Arch parse_arch(const json& j, const std::string& source) {
  if (!j.contains("architectures")) fail("{}: missing required key 'architectures'", source);
  const json& list = j["architectures"];
  if (!list.is_array() || list.empty() || !list[0].is_string())
    fail("{}: 'architectures' must be a non-empty list of strings, found {}", source, describe(list));
  std::string name = list[0].get<std::string>();
  std::vector<std::string_view> supported;
  for (const ArchInfo& info : kArchs) {
    if (name == info.hf_name) return info.arch;
    supported.push_back(info.hf_name);
  }
  fail("unsupported architecture '{}' in {} (supported: {})", name, source, fmt::join(supported, ", "));
}

void read_sizes(const Keys& k, ModelConfig& c) {
  c.hidden_size = k.size("hidden_size", limits::kMaxHiddenSize);
  c.intermediate_size = k.size("intermediate_size", limits::kMaxIntermediateSize);
  c.num_layers = k.size("num_hidden_layers", limits::kMaxLayers);
  c.num_heads = k.size("num_attention_heads", limits::kMaxHeads);
  c.vocab_size = k.size("vocab_size", limits::kMaxVocabSize);
  // Absent: multi-head attention. At most num_attention_heads, which it must divide (below).
  c.num_kv_heads = k.optional_size("num_key_value_heads", c.num_heads, limits::kMaxHeads);
  c.max_position = k.optional_size("max_position_embeddings", arch_info(c.arch).default_max_position, limits::kMaxPositions);
  if (c.num_heads % c.num_kv_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", k.source(), c.num_heads,
         c.num_kv_heads);
}

void read_head_dim(const Keys& k, ModelConfig& c) {
  if (k.has("head_dim")) {
    c.head_dim = k.size("head_dim", limits::kMaxHeadDim);
  } else if (c.arch == Arch::Qwen3 || c.arch == Arch::Gemma3) {
    c.head_dim = c.arch == Arch::Qwen3 ? 128 : 256;  // the config classes' defaults, not derived from hidden_size
  } else {
    if (c.hidden_size % c.num_heads != 0)
      fail("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim is given", k.source(),
           c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  // Derived from hidden_size: within it, but not necessarily within the head size limit.
  if (c.head_dim > limits::kMaxHeadDim)
    fail("{}: head_dim ({} = hidden_size / num_attention_heads) is larger than the limit of {} (docs/limits.md)",
         k.source(), c.head_dim, limits::kMaxHeadDim);
  // RoPE rotates pairs of dimensions.
  if (c.head_dim % 2 != 0) fail("{}: head_dim ({}) must be even for rotary embeddings", k.source(), c.head_dim);
  // Both factors are bounded, so the product is exact in 64 bits (and, once checked, in int).
  const int64_t q_dim = int64_t(c.num_heads) * c.head_dim;
  if (q_dim > limits::kMaxAttentionWidth)
    fail("{}: num_attention_heads ({}) x head_dim ({}) = {} is larger than the limit of {} (docs/limits.md)", k.source(),
         c.num_heads, c.head_dim, q_dim, limits::kMaxAttentionWidth);
}

// Gemma 3 names its activation "hidden_activation" (default GELU-tanh); the others "hidden_act" (silu).
void read_activation(const Keys& k, ModelConfig& c) {
  if (c.arch == Arch::Gemma3) {
    const std::string act = k.has("hidden_activation") ? k.string("hidden_activation") : "gelu_pytorch_tanh";
    if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
      fail("{}: unsupported activation 'hidden_activation': '{}' (supported: gelu_pytorch_tanh)", k.source(), act);
    c.activation = Activation::GeluTanh;
    return;
  }
  std::string act = k.has("hidden_act") ? k.string("hidden_act") : "silu";
  if (act != "silu") fail("{}: unsupported activation 'hidden_act': '{}' (supported: silu)", k.source(), act);
  c.activation = Activation::SiLU;
}

// A positive number that fits a float; `fallback` (if any) stands in for an absent key.
float positive_number(const Keys& k, const char* key, std::optional<double> fallback = std::nullopt) {
  double v = fallback && !k.has(key) ? *fallback : k.number(key);
  if (!(v > 0) || !std::isfinite(float(v)))
    fail("{}: '{}' must be a positive number, found {}", k.source(), k.name(key), v);
  return float(v);
}

RopeScaling read_llama3_scaling(const Keys& s) {
  RopeScaling r;
  r.kind = RopeScaling::Kind::Llama3;
  r.factor = positive_number(s, "factor");
  r.low_freq_factor = positive_number(s, "low_freq_factor");
  r.high_freq_factor = positive_number(s, "high_freq_factor");
  r.original_max_position = s.required_int("original_max_position_embeddings");
  if (r.original_max_position <= 0)
    fail("{}: '{}' must be positive, found {}", s.source(), s.name("original_max_position_embeddings"),
         r.original_max_position);
  // The llama3 formula interpolates between the two wavelength bounds and divides by their difference.
  if (r.high_freq_factor <= r.low_freq_factor)
    fail("{}: '{}' ({}) must be greater than '{}' ({})", s.source(), s.name("high_freq_factor"), r.high_freq_factor,
         s.name("low_freq_factor"), r.low_freq_factor);
  return r;
}

// rope_theta and rope_scaling. transformers 5 moves both into "rope_parameters"
// ({rope_type, rope_theta, factor, ...}); older configs have top-level rope_theta and rope_scaling.
void read_rope(const Keys& k, ModelConfig& c) {
  const json* params = k.optional_object("rope_parameters");
  if (k.has("rope_theta")) {
    c.rope_theta = positive_number(k, "rope_theta");
  } else if (params != nullptr) {
    c.rope_theta = positive_number(Keys(*params, k.source(), "rope_parameters."), "rope_theta", 10000.0);
  } else {
    c.rope_theta = 10000.0f;
  }

  std::string where = "rope_scaling";
  const json* scaling = k.optional_object("rope_scaling");
  if (scaling == nullptr) {
    scaling = params;
    where = "rope_parameters";
  }
  c.rope_scaling = RopeScaling{};
  if (scaling == nullptr) return;
  Keys s(*scaling, k.source(), where + ".");
  // transformers renamed "type" to "rope_type"; both spellings occur in published configs.
  std::string type = s.has("rope_type") ? s.string("rope_type") : s.has("type") ? s.string("type") : "default";
  if (type == "default") return;
  if (type == "llama3") {
    c.rope_scaling = read_llama3_scaling(s);
    return;
  }
  fail("{}: unsupported rope scaling type '{}' in '{}' (supported: default, llama3)", k.source(), type, where);
}

// Gemma 3's RoPE: the global layers' base and scaling, and the sliding layers' own base (unscaled).
// transformers 5 writes "rope_parameters": {"full_attention": {rope_type, rope_theta, factor},
// "sliding_attention": {rope_type, rope_theta}}; 4.5x configs have rope_theta (default 1e6),
// rope_local_base_freq (default 1e4) and rope_scaling (null, or linear with a factor).
void read_gemma_rope(const Keys& k, ModelConfig& c) {
  auto scaling_of = [&](const Keys& s, const std::string& where) {
    const std::string type = s.has("rope_type") ? s.string("rope_type") : s.has("type") ? s.string("type") : "default";
    RopeScaling r;
    if (type == "default") return r;
    if (type != "linear")
      fail("{}: unsupported rope scaling type '{}' in '{}' (supported for Gemma 3: default, linear)", k.source(), type, where);
    r.kind = RopeScaling::Kind::Linear;
    r.factor = positive_number(s, "factor");
    return r;
  };
  if (const json* params = k.optional_object("rope_parameters")) {
    const Keys p(*params, k.source(), "rope_parameters.");
    const json* full = p.optional_object("full_attention");
    const json* sliding = p.optional_object("sliding_attention");
    if (full == nullptr || sliding == nullptr)
      fail("{}: 'rope_parameters' must hold 'full_attention' and 'sliding_attention' objects for Gemma 3", k.source());
    const Keys f(*full, k.source(), "rope_parameters.full_attention.");
    const Keys sl(*sliding, k.source(), "rope_parameters.sliding_attention.");
    c.rope_theta = positive_number(f, "rope_theta", 1000000.0);
    c.rope_scaling = scaling_of(f, "rope_parameters.full_attention");
    c.sliding_rope_theta = positive_number(sl, "rope_theta", 10000.0);
    if (scaling_of(sl, "rope_parameters.sliding_attention").kind != RopeScaling::Kind::None)
      fail("{}: scaled RoPE on the sliding layers ('rope_parameters.sliding_attention') is not supported", k.source());
    return;
  }
  c.rope_theta = positive_number(k, "rope_theta", 1000000.0);
  c.sliding_rope_theta = positive_number(k, "rope_local_base_freq", 10000.0);
  c.rope_scaling = RopeScaling{};
  if (const json* scaling = k.optional_object("rope_scaling")) c.rope_scaling = scaling_of(Keys(*scaling, k.source(), "rope_scaling."), "rope_scaling");
}

// Gemma 3: sliding-window layers and global ones, from "layer_types" or, in configs without it, from
// "sliding_window_pattern" (every pattern-th layer global: transformers' default 6); the window
// (default 4096). The extras its layer has and the ones it does not model.
void read_gemma_layers(const Keys& k, ModelConfig& c) {
  c.sliding_window = k.optional_size("sliding_window", 4096, limits::kMaxPositions);
  c.sliding_layers.assign(size_t(c.num_layers), 0);
  if (k.has("layer_types")) {
    const json& types = k.get("layer_types");
    if (!types.is_array() || types.size() != size_t(c.num_layers))
      fail("{}: 'layer_types' must be a list of {} strings (num_hidden_layers), found {}", k.source(), c.num_layers,
           describe(types));
    for (size_t l = 0; l < types.size(); ++l) {
      if (types[l] != "sliding_attention" && types[l] != "full_attention")
        fail("{}: 'layer_types[{}]' = {} (supported: \"sliding_attention\", \"full_attention\")", k.source(), l, describe(types[l]));
      c.sliding_layers[l] = types[l] == "sliding_attention";
    }
  } else {
    const int pattern = k.has("sliding_window_pattern") ? k.size("sliding_window_pattern", limits::kMaxLayers)
                                                        : k.optional_size("_sliding_window_pattern", 6, limits::kMaxLayers);
    for (int l = 0; l < c.num_layers; ++l) c.sliding_layers[size_t(l)] = (l + 1) % pattern != 0;
  }
  c.query_pre_attn_scalar = positive_number(k, "query_pre_attn_scalar", 256.0);
  c.norm_weight_offset = 1.0f;
  c.scaled_embedding = true;
  c.post_norms = true;
  c.qk_norm = true;
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (k.has(key)) fail("{}: '{}' = {} is not supported (logit soft-capping is not modelled)", k.source(), key, describe(k.get(key)));
  if (k.optional_bool("attention_bias", false)) fail("{}: attention_bias=true is not supported for Gemma3ForCausalLM", k.source());
  if (k.optional_bool("use_bidirectional_attention", false))
    fail("{}: use_bidirectional_attention=true is not supported (decoding is causal)", k.source());
}

// Which attention extras each architecture has. Llama/Mistral attention_bias=true also adds an o_proj
// bias, and Qwen3 attention_bias adds q/k/v/o biases; neither is modelled, so both are rejected.
void read_attention_variant(const Keys& k, ModelConfig& c) {
  if (c.arch == Arch::Gemma3) return;  // read_gemma_layers
  c.qkv_bias = c.arch == Arch::Qwen2;  // Qwen2 always has q/k/v biases and never an o_proj bias
  c.qk_norm = c.arch == Arch::Qwen3;
  if (c.arch != Arch::Qwen2 && k.optional_bool("attention_bias", false))
    fail("{}: attention_bias=true is not supported for {} (its o_proj bias is not modelled)", k.source(),
         arch_name(c.arch));
}

// "sliding_window" of Mistral, Qwen2 and Qwen3: their config classes default to 4096 when the key is
// absent, and published configs write null for "no window" (0 here).
int window_size(const Keys& k) {
  if (!k.contains("sliding_window")) return 4096;
  int window = k.optional_int("sliding_window", 0);
  if (window < 0) fail("{}: 'sliding_window' must be non-negative or null, found {}", k.source(), window);
  return window;
}

// Qwen2/Qwen3 slide the window only when use_sliding_window is set, and then only on the layers listed
// as "sliding_attention" in layer_types or, in configs without layer_types, on layers
// i >= max_window_layers (transformers' Qwen2Config / Qwen3Config). Some sliding and some global layers
// are per-layer data of the recipe (ModelConfig::sliding_layers), as for Gemma 3.
void read_qwen_sliding_window(const Keys& k, ModelConfig& c) {
  const int window = k.optional_bool("use_sliding_window", false) ? window_size(k) : 0;
  std::vector<uint8_t> slides(size_t(c.num_layers), 0);
  if (k.has("layer_types")) {
    const json& types = k.get("layer_types");
    if (!types.is_array() || types.size() != size_t(c.num_layers))
      fail("{}: 'layer_types' must be a list of {} strings (num_hidden_layers), found {}", k.source(), c.num_layers,
           describe(types));
    for (size_t l = 0; l < types.size(); ++l) slides[l] = types[l] == "sliding_attention";
  } else {
    const int first = k.optional_int("max_window_layers", 28);  // Qwen2Config / Qwen3Config default
    for (int l = std::max(0, first); l < c.num_layers; ++l) slides[size_t(l)] = 1;
  }
  const auto sliding = std::count(slides.begin(), slides.end(), uint8_t(1));
  c.sliding_window = window > 0 && sliding > 0 ? window : 0;
  c.sliding_layers.clear();
  if (c.sliding_window > 0 && sliding < c.num_layers) c.sliding_layers = std::move(slides);
}

void read_sliding_window(const Keys& k, ModelConfig& c) {
  switch (c.arch) {
    case Arch::Llama: c.sliding_window = 0; break;  // LlamaConfig has no window
    case Arch::Mistral: c.sliding_window = window_size(k); break;
    case Arch::Qwen2:
    case Arch::Qwen3: read_qwen_sliding_window(k, c); break;
    case Arch::Gemma3: read_gemma_layers(k, c); break;
  }
}

// quantization_config: the fp8 checkpoint forms whose F8_E4M3 weights the kernels read as stored, and the
// int4 forms the loader unpacks into 4-bit codes with group scales and zero points.
constexpr const char* kSupportedQuantization =
    "\"fp8\" (transformers FineGrainedFP8: fp8 E4M3 weights with block scales), \"compressed-tensors\" with format "
    "\"float-quantized\" (fp8 E4M3 weights with per-channel or per-tensor scales), \"awq\" (AutoAWQ, version "
    "\"gemm\": 4-bit weights with group scales and zero points), \"gptq\" (AutoGPTQ / GPTQModel, checkpoint_format "
    "\"gptq\" or \"gptq_v2\": 4-bit weights with group scales and zero points)";

// transformers FineGrainedFP8Config: {"quant_method": "fp8", "weight_block_size": [rows, cols],
// "activation_scheme": ..., "modules_to_not_convert": [...]}. Each fp8 X.weight has X.weight_scale_inv,
// one float per block, which multiplies the block's values despite its name.
void read_fine_grained_fp8(const Keys& q, WeightQuantization& w) {
  w.method = WeightQuantization::Method::FineGrainedFp8;
  // DeepSeek-V3's configs name the fp8 format; E4M3 is the only one transformers' FP8Linear reads.
  if (q.has("fmt") && q.string("fmt") != "e4m3")
    fail("{}: unsupported '{}': \"{}\" (supported: \"e4m3\")", q.source(), q.name("fmt"), q.string("fmt"));
  w.block_rows = w.block_cols = 128;  // FineGrainedFP8Config's default
  if (!q.has("weight_block_size")) return;
  const json& b = q.get("weight_block_size");
  auto block = [](const json& v) {
    return v.is_number_unsigned() && v.get<uint64_t>() >= 1 &&
           v.get<uint64_t>() <= uint64_t(std::numeric_limits<int>::max());
  };
  if (!b.is_array() || b.size() != 2 || !block(b[0]) || !block(b[1]))
    fail("{}: '{}' must be a list of two positive integers [rows, columns], found {}", q.source(),
         q.name("weight_block_size"), b.is_array() && b.size() <= 4 ? b.dump() : describe(b));
  w.block_rows = b[0].get<int>();
  w.block_cols = b[1].get<int>();
  // The FP8 matrix format gives each group of a row one scale (runtime/matrix_format.h), so a block must
  // not split a group.
  constexpr int kGroup = matrix_scale_group(MatrixFormat::FP8);
  if (w.block_cols % kGroup != 0)
    fail("{}: '{}' = [{}, {}] is not supported: its column size must be a multiple of {} (the fp8 kernels read one "
         "scale per {} columns of a row)",
         q.source(), q.name("weight_block_size"), w.block_rows, w.block_cols, kGroup, kGroup);
}

bool float_quantized_format(const std::string& format) {
  return format == "float-quantized" || format == "naive-quantized";
}

// One config group's "weights" (compressed-tensors QuantizationArgs; absent keys take its defaults).
// Only fp8 E4M3 with one scale per row ("channel") or per matrix ("tensor") maps onto the FP8 matrix
// format as stored.
void read_weight_scheme(const Keys& s, const std::string& where, WeightQuantization& w) {
  const int64_t bits = s.has("num_bits") ? s.integer("num_bits", 1, 64) : 8;
  const std::string type = s.has("type") ? s.string("type") : "int";
  const std::string strategy = s.has("strategy") ? s.string("strategy") : s.has("group_size") ? "group" : "tensor";
  if (bits != 8 || type != "float" || (strategy != "channel" && strategy != "tensor"))
    fail("{}: '{}' has an unsupported weight scheme (num_bits {}, type \"{}\", strategy \"{}\"); supported: "
         "num_bits 8, type \"float\" (fp8 E4M3), strategy \"channel\" or \"tensor\"",
         s.source(), where, bits, type, strategy);
  if (!s.optional_bool("symmetric", true))
    fail("{}: '{}' = false is not supported (asymmetric weights need zero points, which fp8 kernels do not read)",
         s.source(), s.name("symmetric"));
  if (s.has("dynamic") && s.get("dynamic") != json(false))
    fail("{}: '{}' = {} is not supported for weights (the checkpoint must store their scales)", s.source(),
         s.name("dynamic"), describe(s.get("dynamic")));
  (strategy == "channel" ? w.per_channel : w.per_tensor) = true;
}

// compressed-tensors: {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups":
// {name: {"targets": [...], "weights": {...}, "input_activations": {...}}}, "ignore": [...]}. Each fp8
// X.weight has X.weight_scale; X.input_scale (static activation scales) is unused by weight-only kernels.
// A KV-cache scheme is unused too: the cache stays in higher precision.
void read_compressed_tensors(const Keys& q, WeightQuantization& w) {
  w.method = WeightQuantization::Method::CompressedTensors;
  const std::string format = q.string("format");
  const bool mixed = format == "mixed-precision";  // then each group names its own format
  auto check_format = [&](const std::string& f, const std::string& key) {
    if (!float_quantized_format(f))
      fail("{}: unsupported compressed-tensors format '{}' = \"{}\" (supported: \"float-quantized\", "
           "\"naive-quantized\": fp8 E4M3 weights stored with their scales)",
           q.source(), key, f);
  };
  if (!mixed) check_format(format, q.name("format"));
  const json* groups = q.optional_object("config_groups");
  if (groups == nullptr || groups->empty())
    fail("{}: '{}' must be a non-empty object of quantization schemes", q.source(), q.name("config_groups"));
  for (const auto& [name, group] : groups->items()) {
    const std::string where = q.name("config_groups.") + name;
    if (!group.is_object()) fail("{}: '{}' must be an object, found {}", q.source(), where, describe(group));
    const Keys g(group, q.source(), where + ".");
    if (g.has("format"))
      check_format(g.string("format"), g.name("format"));
    else if (mixed)
      fail("{}: missing required key '{}' (the top-level format is \"mixed-precision\")", q.source(), g.name("format"));
    // A group without weights quantizes only activations, which weight-only kernels do not.
    if (const json* weights = g.optional_object("weights"))
      read_weight_scheme(Keys(*weights, q.source(), where + ".weights."), where + ".weights", w);
  }
}

// The keys AWQ and GPTQ share: "bits" (only 4-bit codes are read) and "group_size" (input columns per scale
// and zero point; -1: one group per row). Whether a group size fits the kernels depends on each matrix's
// width and is checked by the loader, which names the matrix.
void read_int4_common(const Keys& q, const char* method, std::optional<int> default_bits, WeightQuantization& w) {
  w.bits = default_bits && !q.has("bits") ? *default_bits : q.required_int("bits");
  if (w.bits != 4)
    fail("{}: '{}' = {} is not supported for quant_method \"{}\" (supported: 4, the int4 kernels' codes)", q.source(),
         q.name("bits"), w.bits, method);
  w.group_size = 128;  // the default of AwqConfig and GPTQConfig
  if (q.has("group_size")) {
    w.group_size = int(q.integer("group_size", -1, std::numeric_limits<int>::max()));
    if (w.group_size == 0)
      fail("{}: '{}' must be positive, or -1 for one group per row, found 0", q.source(), q.name("group_size"));
  }
}

std::string lowercase(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// AutoAWQ through transformers' AwqConfig: {"quant_method": "awq", "bits": 4, "group_size": 128,
// "zero_point": true, "version": "gemm", "backend": "autoawq", "modules_to_not_convert": [...]} (absent keys
// take AwqConfig's defaults, shown here). Only the GEMM packing (WQLinear_GEMM) is read: the GEMV, GEMV-fast
// and Marlin forms pack their codes differently, and "exllama" / "ipex" name kernels chosen at load time (they
// read the GEMM layout, but AutoAWQ cannot quantize to them, so no checkpoint is written under those names).
// llm-awq (backend "llm-awq") packs differently too.
void read_awq(const Keys& q, WeightQuantization& w) {
  w.method = WeightQuantization::Method::Awq;
  read_int4_common(q, "awq", 4, w);
  w.zero_point = q.optional_bool("zero_point", true);
  // transformers lowercases both strings (AWQLinearVersion.from_str, AwqBackendPackingMethod).
  const std::string version = q.has("version") ? lowercase(q.string("version")) : "gemm";
  if (version != "gemm")
    fail("{}: unsupported '{}' = \"{}\" for quant_method \"awq\" (supported: \"gemm\", AutoAWQ's WQLinear_GEMM "
         "packing; \"gemv\", \"gemv_fast\" and \"marlin\" pack their codes differently, and \"exllama\" and "
         "\"ipex\" name kernels chosen at load time, which AutoAWQ does not quantize to)",
         q.source(), q.name("version"), q.string("version"));
  const std::string backend = q.has("backend") ? lowercase(q.string("backend")) : "autoawq";
  if (backend != "autoawq")
    fail("{}: unsupported '{}' = \"{}\" for quant_method \"awq\" (supported: \"autoawq\"; llm-awq checkpoints pack "
         "their codes differently)",
         q.source(), q.name("backend"), q.string("backend"));
}

// AutoGPTQ / GPTQModel through transformers' GPTQConfig: {"quant_method": "gptq", "bits": 4, "group_size": 128,
// "desc_act": false, "sym": true, "checkpoint_format": "gptq"} ("bits" is required, the rest default as
// shown). checkpoint_format "gptq" (v1) stores each zero point minus 1, "gptq_v2" stores it as is; "marlin",
// "bitblas" and the like repack the codes for their kernels and are not read. GPTQModel's "pack_dtype" (the
// integer the codes are packed in) must be its default, int32.
void read_gptq(const Keys& q, WeightQuantization& w) {
  w.method = WeightQuantization::Method::Gptq;
  read_int4_common(q, "gptq", std::nullopt, w);
  w.desc_act = q.optional_bool("desc_act", false);
  w.sym = q.optional_bool("sym", true);
  const std::string format = q.has("checkpoint_format") ? lowercase(q.string("checkpoint_format")) : "gptq";
  if (format != "gptq" && format != "gptq_v2")
    fail("{}: unsupported '{}' = \"{}\" for quant_method \"gptq\" (supported: \"gptq\", zero points stored minus "
         "1, and \"gptq_v2\", zero points stored as they are)",
         q.source(), q.name("checkpoint_format"), q.string("checkpoint_format"));
  w.zeros_minus_one = format == "gptq";
  if (q.optional_bool("is_marlin_format", false))
    fail("{}: '{}' = true is not supported (AutoGPTQ's Marlin form repacks the codes for its kernel; supported: the "
         "plain GPTQ packing)",
         q.source(), q.name("is_marlin_format"));
  if (q.has("pack_dtype") && q.string("pack_dtype") != "int32")
    fail("{}: unsupported '{}' = \"{}\" (supported: \"int32\", eight 4-bit codes per 32-bit integer)", q.source(),
         q.name("pack_dtype"), q.string("pack_dtype"));
}

WeightQuantization read_quantization(const Keys& k) {
  WeightQuantization w;
  const json* config = k.optional_object("quantization_config");
  if (config == nullptr) return w;
  const Keys q(*config, k.source(), "quantization_config.");
  const std::string method = q.string("quant_method");
  if (method == "fp8")
    read_fine_grained_fp8(q, w);
  else if (method == "compressed-tensors")
    read_compressed_tensors(q, w);
  else if (method == "awq")
    read_awq(q, w);
  else if (method == "gptq")
    read_gptq(q, w);
  else
    fail("{}: unsupported quantization method '{}' = \"{}\" (supported: {})", k.source(), q.name("quant_method"),
         method, kSupportedQuantization);
  return w;
}

}  // namespace

const char* arch_name(Arch a) { return arch_info(a).hf_name; }

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::SiLU: return "silu";
    case Activation::GeluTanh: return "gelu_pytorch_tanh";
  }
  return "?";
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  const json j = parse_json_object(json_text, source);
  const Keys k(j, source);
  ModelConfig c;
  c.arch = parse_arch(j, source);
  read_sizes(k, c);
  read_head_dim(k, c);
  read_activation(k, c);
  c.rms_norm_eps = positive_number(k, "rms_norm_eps", 1e-6);  // 1e-6 in all the transformers configs
  if (c.arch == Arch::Gemma3) read_gemma_rope(k, c);
  else read_rope(k, c);
  c.tie_word_embeddings = k.optional_bool("tie_word_embeddings", c.arch == Arch::Gemma3);  // Gemma3TextConfig ties
  read_attention_variant(k, c);
  read_sliding_window(k, c);
  c.eos_token_ids = k.token_ids("eos_token_id");
  c.bos_token_id = k.has("bos_token_id") ? k.token_id("bos_token_id") : -1;
  c.quantization = read_quantization(k);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path config_path = dir / "config.json";
  std::error_code ec;  // the non-throwing overloads: a failure reads as "absent"
  if (!std::filesystem::is_regular_file(config_path, ec)) fail("model config {} not found", config_path.string());
  ModelConfig c = parse_model_config(read_model_text_file(config_path), config_path.string());
  const std::filesystem::path gen_path = dir / "generation_config.json";
  if (std::filesystem::is_regular_file(gen_path, ec))
    apply_generation_config(c, read_model_text_file(gen_path), gen_path.string());
  return c;
}

void apply_generation_config(ModelConfig& c, const std::string& json_text, const std::string& source) {
  const json gen = parse_json_object(json_text, source);
  const Keys g(gen, source);
  if (g.has("eos_token_id")) c.eos_token_ids = g.token_ids("eos_token_id");
}

}  // namespace mk
