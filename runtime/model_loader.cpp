// Loading a Hugging Face model directory: config, then every weight located in the safetensors file(s)
// and checked against the shape the config implies. Nothing is copied: the views point into the
// mappings that Model::files keeps alive.
#include "runtime/model.h"

#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/json_file.h"
#include "runtime/quantize.h"
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

// The weight dtypes the kernels read. F8_E4M3 only for the matrices of the linear layers, which come with
// scales (WeightFiles::get_matrix): neither fp8 checkpoint form quantizes the embedding, norms or biases,
// so an fp8 one there has no scale convention to follow and is rejected.
DType weight_dtype(const SafetensorsEntry& e, const fs::path& file, bool fp8_allowed) {
  for (DType t : {DType::BF16, DType::F16, DType::F32})
    if (e.dtype == dtype_name(t)) return t;
  if (fp8_allowed) {
    if (e.dtype == dtype_name(DType::F8_E4M3)) return DType::F8_E4M3;
    fail("tensor {} in {} has dtype {}; expected one of BF16, F16, F32, F8_E4M3", e.name, file.string(), e.dtype);
  }
  if (e.dtype == dtype_name(DType::F8_E4M3))
    fail("tensor {} in {} has dtype F8_E4M3; expected one of BF16, F16, F32 (fp8 is read only for the weight "
         "matrices of the linear layers: q/k/v/o_proj, gate/up/down_proj and lm_head)",
         e.name, file.string());
  fail("tensor {} in {} has dtype {}; expected one of BF16, F16, F32", e.name, file.string(), e.dtype);
}

// The dtypes a scale tensor may have: F32, as both quantizers write them, or a 16-bit float.
DType scale_dtype(const SafetensorsEntry& e, const fs::path& file) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (e.dtype == dtype_name(t)) return t;
  fail("scale tensor {} in {} has dtype {}; expected one of F32, BF16, F16", e.name, file.string(), e.dtype);
}

constexpr const char* kFp8Methods =
    "quant_method \"fp8\" with X.weight_scale_inv, or \"compressed-tensors\" float-quantized with X.weight_scale";

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

  // The view of tensor `name`, after checking its dtype and shape. Not fp8: see weight_dtype.
  TensorView get(const std::string& name, const Expected& expected) const { return view(name, expected, false); }

  // The view of weight matrix `name` (X.weight of a linear layer): bf16/fp16/fp32, or F8_E4M3 with its
  // scales as `q` (config.json's quantization_config) says they are stored.
  TensorView get_matrix(const std::string& name, const Expected& expected, const WeightQuantization& q) const {
    TensorView v = view(name, expected, true);
    if (v.dtype == DType::F8_E4M3) v.scale = scale_of(v, q);
    return v;
  }

  std::vector<std::shared_ptr<const MappedFile>> mappings() const {
    std::vector<std::shared_ptr<const MappedFile>> out;
    for (const SafetensorsFile& f : files_) out.push_back(f.file);
    return out;
  }

 private:
  TensorView view(const std::string& name, const Expected& expected, bool fp8_allowed) const {
    const SafetensorsFile& f = file_of(name);
    const SafetensorsEntry& e = f.header.tensors.at(name);
    TensorView v;
    v.name = name;
    v.dtype = weight_dtype(e, f.file->path(), fp8_allowed);
    if (e.shape != expected.shape)
      fail("tensor {} in {} has shape [{}]; expected [{}] from config.json ({})", name, f.file->path().string(),
           fmt::join(e.shape, ", "), fmt::join(expected.shape, ", "), expected.why);
    v.shape = e.shape;
    v.data = e.data;
    return v;
  }

  const SafetensorsFile& file_of(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end())
      fail("tensor {} not found in {} (looked in: {})", name, dir_.string(), fmt::join(file_names_, ", "));
    return files_[it->second];
  }

  // The scales of fp8 matrix `w` [out, in], pointing into the mapped file as the values do. FineGrainedFP8:
  // X.weight_scale_inv [ceil(out / block_rows), ceil(in / block_cols)]; compressed-tensors: X.weight_scale
  // [out, 1] (strategy "channel") or [1] / [] (strategy "tensor"). Either multiplies the stored values.
  TensorScale scale_of(const TensorView& w, const WeightQuantization& q) const {
    const std::string config = (dir_ / "config.json").string();
    const std::string file = file_of(w.name).file->path().string();
    if (q.method == WeightQuantization::Method::None)
      fail("tensor {} in {} has dtype F8_E4M3, but {} has no quantization_config to say how its scales are stored "
           "(supported: {})",
           w.name, file, config, kFp8Methods);
    const bool blocks = q.method == WeightQuantization::Method::FineGrainedFp8;
    const std::string module = w.name.substr(0, w.name.size() - std::string_view(".weight").size());
    const std::string scale_name = module + (blocks ? ".weight_scale_inv" : ".weight_scale");
    const std::string other_name = module + (blocks ? ".weight_scale" : ".weight_scale_inv");
    const int64_t rows = w.shape[0], cols = w.shape[1];
    if (blocks) {
      const std::string why =
          fmt::format("one scale per {}x{} block (quantization_config.weight_block_size) of the [{}, {}] matrix",
                      q.block_rows, q.block_cols, rows, cols);
      if (where_.count(scale_name) == 0)
        missing_scale(w, file, scale_name, "quant_method \"fp8\" stores " + why, other_name);
      const SafetensorsEntry& e = entry(scale_name);
      const int64_t scale_rows = (rows + q.block_rows - 1) / q.block_rows;
      const int64_t scale_cols = (cols + q.block_cols - 1) / q.block_cols;
      if (e.shape != std::vector<int64_t>{scale_rows, scale_cols})
        wrong_scale_shape(e, fmt::format("[{}, {}]", scale_rows, scale_cols), why);
      return scale(e, q.block_rows, q.block_cols, scale_cols, scale_rows * scale_cols);
    }
    if (!q.per_channel && !q.per_tensor)
      fail("tensor {} in {} has dtype F8_E4M3, but no group of quantization_config.config_groups in {} quantizes "
           "weights",
           w.name, file, config);
    std::vector<std::string> allowed;  // the shapes the config's strategies allow, for messages
    if (q.per_channel) allowed.push_back(fmt::format("[{}, 1] (strategy \"channel\": one scale per row)", rows));
    if (q.per_tensor) allowed.push_back("[1] or [] (strategy \"tensor\": one scale for the matrix)");
    const std::string expected = fmt::format("{}", fmt::join(allowed, " or "));
    if (where_.count(scale_name) == 0)
      missing_scale(w, file, scale_name, "compressed-tensors stores it with shape " + expected, other_name);
    const SafetensorsEntry& e = entry(scale_name);
    // With both strategies in the config, the shape tells which one this matrix has.
    if (q.per_channel && e.shape == std::vector<int64_t>{rows, 1}) return scale(e, 1, cols, 1, rows);
    if (q.per_tensor && (e.shape.empty() || e.shape == std::vector<int64_t>{1})) return scale(e, rows, cols, 1, 1);
    wrong_scale_shape(e, expected,
                      fmt::format("quantization_config.config_groups, for the [{}, {}] matrix", rows, cols));
  }

  const SafetensorsEntry& entry(const std::string& name) const { return file_of(name).header.tensors.at(name); }

  TensorScale scale(const SafetensorsEntry& e, int64_t block_rows, int64_t block_cols, int64_t cols,
                    int64_t count) const {
    TensorScale s;
    s.name = e.name;
    s.dtype = scale_dtype(e, file_of(e.name).file->path());
    s.data = e.data;
    s.block_rows = block_rows;
    s.block_cols = block_cols;
    s.cols = cols;
    s.count = count;
    return s;
  }

  // `other_name`, the other form's scale, in the files points at a config that names the wrong method.
  [[noreturn]] void missing_scale(const TensorView& w, const std::string& file, const std::string& scale_name,
                                  const std::string& why, const std::string& other_name) const {
    const std::string hint =
        where_.count(other_name) != 0
            ? fmt::format("; the files have {} instead, which quantization_config's quant_method does not use",
                          other_name)
            : "";
    fail("tensor {} in {} has dtype F8_E4M3, but its scale tensor {} is not in {} ({}; looked in: {}){}", w.name, file,
         scale_name, dir_.string(), why, fmt::join(file_names_, ", "), hint);
  }

  [[noreturn]] void wrong_scale_shape(const SafetensorsEntry& e, const std::string& expected,
                                      const std::string& why) const {
    fail("scale tensor {} in {} has shape [{}]; expected {} ({})", e.name, file_of(e.name).file->path().string(),
         fmt::join(e.shape, ", "), expected, why);
  }

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
  const WeightQuantization& q = c.quantization;
  LayerWeights w;
  w.attn_norm = files.get(p + "input_layernorm.weight", s.hidden_vec());
  w.wq = files.get_matrix(p + "self_attn.q_proj.weight", s.wq(), q);
  w.wk = files.get_matrix(p + "self_attn.k_proj.weight", s.wkv(), q);
  w.wv = files.get_matrix(p + "self_attn.v_proj.weight", s.wkv(), q);
  if (c.qkv_bias) {
    w.bq = files.get(p + "self_attn.q_proj.bias", s.bq());
    w.bk = files.get(p + "self_attn.k_proj.bias", s.bkv());
    w.bv = files.get(p + "self_attn.v_proj.bias", s.bkv());
  }
  if (c.qk_norm) {
    w.q_norm = files.get(p + "self_attn.q_norm.weight", s.head_norm());
    w.k_norm = files.get(p + "self_attn.k_norm.weight", s.head_norm());
  }
  w.wo = files.get_matrix(p + "self_attn.o_proj.weight", s.wo(), q);
  w.mlp_norm = files.get(p + "post_attention_layernorm.weight", s.hidden_vec());
  w.w_gate = files.get_matrix(p + "mlp.gate_proj.weight", s.up(), q);
  w.w_up = files.get_matrix(p + "mlp.up_proj.weight", s.up(), q);
  w.w_down = files.get_matrix(p + "mlp.down_proj.weight", s.down(), q);
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
  w.lm_head = c.tie_word_embeddings ? w.embed : files.get_matrix("lm_head.weight", s.embedding(), c.quantization);
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

std::unique_ptr<Model> load_model(const fs::path& dir, const LoadOptions& options) {
  check_model_dir(dir);
  auto model = std::make_unique<Model>();
  model->dir = dir;
  model->config = load_model_config(dir);
  const WeightFiles files = WeightFiles::open(dir);
  model->weights = read_weights(files, model->config);
  model->files = files.mappings();
  // One matrix format per image: an fp8 checkpoint's unquantized matrices (often the embedding and the
  // LM head) are quantized too.
  if (options.quantize == Quantize::Fp8 || matrix_format_for(*model) == MatrixFormat::FP8)
    quantize_to_fp8(*model, options.on_quantize_progress);
  return model;
}

}  // namespace mk
