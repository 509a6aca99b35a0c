// Loading a Hugging Face model directory: config, then every weight located in the safetensors file(s)
// and checked against the shape the config implies. Nothing is copied: the views point into the
// mappings that Model::files keeps alive.
#include "runtime/model.h"

#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/json_file.h"
#include "runtime/safetensors.h"

namespace mk {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// exists() without the throwing overload: an unreadable directory should read as "not there" and get
// our message, not a std::filesystem_error.
bool file_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// The shape a tensor must have, and the config values it comes from (for the error message).
struct Expected {
  std::vector<int64_t> shape;
  std::string why;
};

// The weight dtypes the kernels read; anything else (integer or fp8 tensors) is rejected here.
DType weight_dtype(const SafetensorsEntry& e, const fs::path& file) {
  for (DType t : {DType::BF16, DType::F16, DType::F32})
    if (e.dtype == dtype_name(t)) return t;
  fail("tensor {} in {} has dtype {}; expected one of BF16, F16, F32", e.name, file.string(), e.dtype);
}

json read_json_file(const fs::path& path) { return parse_model_json(read_model_text_file(path), path.string()); }

// The safetensors files of one model and which of them holds each tensor.
class WeightFiles {
 public:
  static WeightFiles open(const fs::path& dir) {
    WeightFiles w;
    w.dir_ = dir;
    if (file_exists(dir / kSingleFile)) {
      w.open_single();
    } else if (file_exists(dir / kIndexFile)) {
      w.open_sharded();
    } else {
      fail("no weights in {}: looked for {} and {}", dir.string(), kSingleFile, kIndexFile);
    }
    return w;
  }

  // The view of tensor `name`, after checking its dtype and shape.
  TensorView get(const std::string& name, const Expected& expected) const {
    auto it = where_.find(name);
    if (it == where_.end())
      fail("tensor {} not found in {} (looked in: {})", name, dir_.string(), fmt::join(file_names_, ", "));
    const SafetensorsFile& f = files_[it->second];
    const SafetensorsEntry& e = f.header.tensors.at(name);
    TensorView view;
    view.name = name;
    view.dtype = weight_dtype(e, f.file->path());
    if (e.shape != expected.shape)
      fail("tensor {} in {} has shape [{}]; expected [{}] from config.json ({})", name, f.file->path().string(),
           fmt::join(e.shape, ", "), fmt::join(expected.shape, ", "), expected.why);
    view.shape = e.shape;
    view.data = e.data;
    return view;
  }

  std::vector<std::shared_ptr<const MappedFile>> mappings() const {
    std::vector<std::shared_ptr<const MappedFile>> out;
    for (const SafetensorsFile& f : files_) out.push_back(f.file);
    return out;
  }

 private:
  void open_single() {
    files_.push_back(SafetensorsFile::open(dir_ / kSingleFile));
    file_names_.push_back(kSingleFile);
    for (const auto& [name, entry] : files_[0].header.tensors) where_.emplace(name, 0);
  }

  // model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor name: shard file name}}.
  void open_sharded() {
    const fs::path index_path = dir_ / kIndexFile;
    const std::string index = index_path.string();
    const json j = read_json_file(index_path);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: expected an object with a 'weight_map' object", index);

    std::map<std::string, std::string> shard_of;  // tensor name -> shard file name
    std::map<std::string, size_t> shard_index;    // shard file name -> position in files_
    for (const auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string()) fail("{}: weight_map entry '{}' must be a file name string", index, name);
      shard_of.emplace(name, shard.get<std::string>());
      shard_index.emplace(shard.get<std::string>(), 0);
    }
    if (shard_index.empty()) fail("{}: weight_map is empty", index);
    for (auto& [file, position] : shard_index) {  // in name order, so messages list them in order
      position = files_.size();
      open_shard(index, file);
    }
    for (const auto& [name, file] : shard_of) {
      const size_t position = shard_index.at(file);
      if (files_[position].header.tensors.count(name) == 0)
        fail("{} maps tensor {} to {}, which has no such tensor", index, name, file);
      where_.emplace(name, position);
    }
  }

  void open_shard(const std::string& index, const std::string& file) {
    // Shards live next to the index; a path could make the loader map arbitrary files.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail("{}: shard name '{}' is not a plain file name", index, file);
    if (!file_exists(dir_ / file)) fail("{} references shard {}, which does not exist in {}", index, file, dir_.string());
    files_.push_back(SafetensorsFile::open(dir_ / file));
    file_names_.push_back(file);
  }

  fs::path dir_;
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> file_names_;     // parallel to files_, for messages
  std::map<std::string, size_t> where_;     // tensor name -> index in files_
};

// Expected shapes, in terms of the config keys they derive from.
struct Shapes {
  const ModelConfig& c;

  Expected vector(int64_t n, std::string why) const { return {{n}, std::move(why)}; }
  Expected hidden_vec() const { return vector(c.hidden_size, fmt::format("hidden_size={}", c.hidden_size)); }
  Expected embedding() const {
    return {{c.vocab_size, c.hidden_size}, fmt::format("vocab_size={}, hidden_size={}", c.vocab_size, c.hidden_size)};
  }
  std::string q_why() const {
    return fmt::format("num_attention_heads={} x head_dim={}, hidden_size={}", c.num_heads, c.head_dim, c.hidden_size);
  }
  std::string kv_why() const {
    return fmt::format("num_key_value_heads={} x head_dim={}, hidden_size={}", c.num_kv_heads, c.head_dim,
                       c.hidden_size);
  }
  Expected wq() const { return {{c.q_dim(), c.hidden_size}, q_why()}; }
  Expected wkv() const { return {{c.kv_dim(), c.hidden_size}, kv_why()}; }
  Expected wo() const { return {{c.hidden_size, c.q_dim()}, q_why()}; }
  Expected bq() const { return vector(c.q_dim(), q_why()); }
  Expected bkv() const { return vector(c.kv_dim(), kv_why()); }
  Expected head_norm() const { return vector(c.head_dim, fmt::format("head_dim={}", c.head_dim)); }
  std::string mlp_why() const {
    return fmt::format("intermediate_size={}, hidden_size={}", c.intermediate_size, c.hidden_size);
  }
  Expected up() const { return {{c.intermediate_size, c.hidden_size}, mlp_why()}; }
  Expected down() const { return {{c.hidden_size, c.intermediate_size}, mlp_why()}; }
};

LayerWeights read_layer(const WeightFiles& files, const ModelConfig& c, int layer) {
  const Shapes s{c};
  const std::string p = fmt::format("model.layers.{}.", layer);
  LayerWeights w;
  w.attn_norm = files.get(p + "input_layernorm.weight", s.hidden_vec());
  w.wq = files.get(p + "self_attn.q_proj.weight", s.wq());
  w.wk = files.get(p + "self_attn.k_proj.weight", s.wkv());
  w.wv = files.get(p + "self_attn.v_proj.weight", s.wkv());
  if (c.qkv_bias) {
    w.bq = files.get(p + "self_attn.q_proj.bias", s.bq());
    w.bk = files.get(p + "self_attn.k_proj.bias", s.bkv());
    w.bv = files.get(p + "self_attn.v_proj.bias", s.bkv());
  }
  if (c.qk_norm) {
    w.q_norm = files.get(p + "self_attn.q_norm.weight", s.head_norm());
    w.k_norm = files.get(p + "self_attn.k_norm.weight", s.head_norm());
  }
  w.wo = files.get(p + "self_attn.o_proj.weight", s.wo());
  w.mlp_norm = files.get(p + "post_attention_layernorm.weight", s.hidden_vec());
  w.w_gate = files.get(p + "mlp.gate_proj.weight", s.up());
  w.w_up = files.get(p + "mlp.up_proj.weight", s.up());
  w.w_down = files.get(p + "mlp.down_proj.weight", s.down());
  return w;
}

ModelWeights read_weights(const WeightFiles& files, const ModelConfig& c) {
  const Shapes s{c};
  ModelWeights w;
  w.embed = files.get("model.embed_tokens.weight", s.embedding());
  w.layers.reserve(size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) w.layers.push_back(read_layer(files, c, l));
  w.final_norm = files.get("model.norm.weight", s.hidden_vec());
  // Tied models reuse the embedding as the output projection; some checkpoints store a copy as
  // lm_head.weight anyway, which transformers ignores too.
  w.lm_head = c.tie_word_embeddings ? w.embed : files.get("lm_head.weight", s.embedding());
  return w;
}

void check_model_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("model directory {} does not exist", dir.string());
  if (!fs::is_directory(dir, ec)) fail("model path {} is not a directory", dir.string());
}

}  // namespace

uint64_t Model::weight_bytes() const {
  uint64_t total = 0;
  auto add = [&](const TensorView& t) {
    if (t.present()) total += t.nbytes();
  };
  add(weights.embed);
  for (const LayerWeights& l : weights.layers)
    for (const TensorView* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm, &l.wo,
                                &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down})
      add(*t);
  add(weights.final_norm);
  if (weights.lm_head.data != weights.embed.data) add(weights.lm_head);  // tied: the same bytes, counted once
  return total;
}

std::unique_ptr<Model> load_model(const fs::path& dir) {
  check_model_dir(dir);
  auto model = std::make_unique<Model>();
  model->dir = dir;
  model->config = load_model_config(dir);
  const WeightFiles files = WeightFiles::open(dir);
  model->weights = read_weights(files, model->config);
  model->files = files.mappings();
  return model;
}

}  // namespace mk
