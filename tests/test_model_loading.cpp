// load_model on tiny generated model directories: every architecture and weight dtype loads with views
// onto exactly the bytes written; broken directories fail with the file, tensor and expectation named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "tests/helpers/error_of.h"
#include "runtime/error.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using test::error_of;

// Every view in `w` that is present, by HF tensor name (lm_head under its own name only when untied).
std::map<std::string, const TensorView*> views_by_name(const ModelWeights& w) {
  std::map<std::string, const TensorView*> out;
  auto add = [&](const TensorView& t) {
    if (t.present()) out.emplace(t.name, &t);
  };
  add(w.embed);
  for (const LayerWeights& l : w.layers)
    for (auto member : LayerWeights::kAll) add(l.*member);
  add(w.final_norm);
  add(w.lm_head);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Success: 4 architectures x 3 dtypes x tied/untied.

using LoadCase = std::tuple<Arch, DType, bool>;

class LoadsEveryVariant : public ::testing::TestWithParam<LoadCase> {};

TEST_P(LoadsEveryVariant, ViewsMatchTheBytesWritten) {
  const auto [arch, dtype, tied] = GetParam();
  fs::path dir = test::make_temp_dir("load");
  test::TinyModelSpec spec;
  spec.arch = arch;
  spec.dtype = dtype;
  spec.tied = tied;
  std::vector<test::TensorBytes> written = test::write_tiny_model(dir, spec);

  std::unique_ptr<Model> m = load_model(dir);
  EXPECT_EQ(m->dir, dir);
  EXPECT_EQ(m->config.arch, arch);
  EXPECT_EQ(m->config.tie_word_embeddings, tied);
  EXPECT_EQ(m->files.size(), 1u);
  ASSERT_EQ(m->weights.layers.size(), size_t(spec.layers));

  // Every tensor written is loaded, with its dtype, shape and bytes; nothing else is.
  std::map<std::string, const TensorView*> views = views_by_name(m->weights);
  uint64_t total = 0;
  for (const test::TensorBytes& t : written) {
    auto it = views.find(t.name);
    ASSERT_NE(it, views.end()) << t.name;
    const TensorView& v = *it->second;
    EXPECT_EQ(v.dtype, dtype) << t.name;
    EXPECT_EQ(v.shape, t.shape) << t.name;
    ASSERT_EQ(v.nbytes(), t.bytes.size()) << t.name;
    EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), t.bytes.size()), 0) << t.name;
    total += t.bytes.size();
  }
  EXPECT_EQ(views.size(), written.size());
  EXPECT_EQ(m->weight_bytes(), total);  // a tied lm_head is not counted twice

  const LayerWeights& l0 = m->weights.layers[0];
  EXPECT_EQ(l0.bq.present(), arch == Arch::Qwen2);
  EXPECT_EQ(l0.q_norm.present(), arch == Arch::Qwen3 || arch == Arch::Gemma3);
  EXPECT_EQ(l0.post_attn_norm.present(), arch == Arch::Gemma3);
  EXPECT_EQ(l0.post_mlp_norm.present(), arch == Arch::Gemma3);
  if (tied) {
    EXPECT_EQ(m->weights.lm_head.data, m->weights.embed.data);
    EXPECT_EQ(m->weights.lm_head.shape, m->weights.embed.shape);
  } else {
    EXPECT_EQ(m->weights.lm_head.name, "lm_head.weight");
  }
  const float center = arch == Arch::Gemma3 ? 0.0f : 1.0f;  // Gemma's norms scale by (1 + w)
  for (int64_t i = 0; i < spec.hidden; ++i) {  // norms are written as center +- 0.2; at() decodes the dtype
    EXPECT_GE(m->weights.final_norm.at(i), center - 0.21f);
    EXPECT_LE(m->weights.final_norm.at(i), center + 0.21f);
  }
  m.reset();
  fs::remove_all(dir);
}

std::string case_name(const ::testing::TestParamInfo<LoadCase>& info) {
  const auto [arch, dtype, tied] = info.param;
  std::string name = arch_name(arch);
  name = name.substr(0, name.find("ForCausalLM"));
  return name + "_" + std::string(dtype_name(dtype)) + (tied ? "_tied" : "_untied");
}

INSTANTIATE_TEST_SUITE_P(Loader, LoadsEveryVariant,
                         ::testing::Combine(::testing::Values(Arch::Llama, Arch::Mistral, Arch::Qwen2, Arch::Qwen3, Arch::Gemma3),
                                            ::testing::Values(DType::BF16, DType::F16, DType::F32),
                                            ::testing::Bool()),
                         case_name);

// ---------------------------------------------------------------------------------------------------
// Other successes and every failure, on one model directory per test.

class Loader : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("loader"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the tiny model of `spec` and keeps its tensors for tests that rewrite them.
  void write_model(const test::TinyModelSpec& spec = {}) { tensors_ = test::write_tiny_model(dir_, spec); }

  // Rewrites model.safetensors from tensors_ after `edit` changed them.
  template <typename Edit>
  void rewrite_weights(Edit&& edit) {
    edit(tensors_);
    test::write_safetensors(dir_ / "model.safetensors", tensors_);
  }

  test::TensorBytes& tensor(const std::string& name) {
    for (auto& t : tensors_)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }

  std::string load_error() {
    std::string msg = error_of([&] { load_model(dir_); });
    EXPECT_THAT(msg, HasSubstr(dir_.string()));  // every message says which model
    return msg;
  }

  fs::path dir_;
  std::vector<test::TensorBytes> tensors_;
};

TEST_F(Loader, Sharded) {
  test::TinyModelSpec spec;
  spec.arch = Arch::Qwen2;
  spec.shards = 3;
  write_model(spec);
  std::unique_ptr<Model> m = load_model(dir_);
  EXPECT_EQ(m->files.size(), 3u);
  std::map<std::string, const TensorView*> views = views_by_name(m->weights);
  for (const test::TensorBytes& t : tensors_) {
    ASSERT_TRUE(views.count(t.name)) << t.name;
    EXPECT_EQ(std::memcmp(views[t.name]->data, t.bytes.data(), t.bytes.size()), 0) << t.name;
  }
}

TEST_F(Loader, ConfigDetailsReachTheModel) {
  test::TinyModelSpec spec;
  spec.llama3_rope = true;
  spec.head_dim = 32;  // != hidden / heads: written to config.json as head_dim
  spec.eos = {2, 3};
  write_model(spec);
  std::ofstream(dir_ / "generation_config.json") << json{{"eos_token_id", {7, 8, 9}}}.dump();
  std::unique_ptr<Model> m = load_model(dir_);
  EXPECT_EQ(m->config.head_dim, 32);
  EXPECT_THAT(m->weights.layers[1].wq.shape, ElementsAre(4 * 32, 64));
  EXPECT_THAT(m->weights.layers[1].wo.shape, ElementsAre(64, 4 * 32));
  EXPECT_EQ(m->config.rope_scaling.kind, RopeScaling::Kind::Llama3);
  EXPECT_FLOAT_EQ(m->config.rope_scaling.factor, 8.0f);
  EXPECT_THAT(m->config.eos_token_ids, ElementsAre(7, 8, 9));
}

TEST_F(Loader, TiedCheckpointWithAStoredLmHead) {
  test::TinyModelSpec spec;
  spec.tied = true;
  write_model(spec);
  rewrite_weights([](auto& t) { t.push_back({"lm_head.weight", "BF16", {1}, {0, 0}}); });  // ignored when tied
  std::unique_ptr<Model> m = load_model(dir_);
  EXPECT_EQ(m->weights.lm_head.data, m->weights.embed.data);
}

TEST_F(Loader, MissingDirectory) {
  fs::path missing = dir_ / "nope";
  std::string msg = error_of([&] { load_model(missing); });
  EXPECT_THAT(msg, HasSubstr(missing.string()));
  EXPECT_THAT(msg, HasSubstr("does not exist"));
}

TEST_F(Loader, PathIsAFile) {
  write_model();
  std::string msg = error_of([&] { load_model(dir_ / "config.json"); });
  EXPECT_THAT(msg, HasSubstr((dir_ / "config.json").string()));
  EXPECT_THAT(msg, HasSubstr("is not a directory"));
}

TEST_F(Loader, MissingConfigJson) {
  write_model();
  fs::remove(dir_ / "config.json");
  EXPECT_THAT(load_error(), HasSubstr((dir_ / "config.json").string() + " not found"));
}

TEST_F(Loader, MalformedConfigJson) {
  write_model();
  std::ofstream(dir_ / "config.json") << "{\"hidden_size\": ";
  std::string msg = load_error();
  EXPECT_THAT(msg, HasSubstr((dir_ / "config.json").string()));
  EXPECT_THAT(msg, HasSubstr("not valid JSON"));
}

// Issue 18, finding 4: with head_dim = 1073741840, 4 x head_dim wrapped to 64 in int, so k/v tensors of
// [64, 64] matched the config and the model loaded (and asked for 128 GiB when packed).
TEST(LoaderLimits, AConfigWhoseProductsWrapIsRejectedEvenWhenTheTensorsMatchTheWrappedValue) {
  const fs::path dir = test::make_temp_dir("load-wrap");
  test::TinyModelSpec spec;
  spec.hidden = 64, spec.intermediate = 96, spec.layers = 1, spec.heads = 4, spec.kv_heads = 4, spec.head_dim = 16;
  spec.vocab = 114;
  test::write_tiny_model(dir, spec);
  ASSERT_NO_THROW(load_model(dir));
  std::ofstream(dir / "config.json")
      << R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,)"
         R"("num_attention_heads":4,"num_key_value_heads":4,"vocab_size":114,"head_dim":1073741840})";
  const std::string msg = error_of([&] { load_model(dir); });
  EXPECT_THAT(msg, HasSubstr((dir / "config.json").string()));
  EXPECT_THAT(msg, HasSubstr("'head_dim' = 1073741840 is larger than the limit of 1024"));
  fs::remove_all(dir);
}

TEST_F(Loader, NoWeightFiles) {
  write_model();
  fs::remove(dir_ / "model.safetensors");
  std::string msg = load_error();
  EXPECT_THAT(msg, HasSubstr("looked for model.safetensors and model.safetensors.index.json"));
}

TEST_F(Loader, TruncatedWeights) {
  write_model();
  fs::path file = dir_ / "model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  std::string msg = load_error();
  EXPECT_THAT(msg, HasSubstr(file.string()));
  EXPECT_THAT(msg, HasSubstr("tensor 'lm_head.weight': data_offsets"));
  EXPECT_THAT(msg, HasSubstr("run past the end of the data region"));
}

TEST_F(Loader, MissingTensor) {
  write_model();
  rewrite_weights([](auto& t) {
    std::erase_if(t, [](const auto& x) { return x.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  std::string msg = load_error();
  EXPECT_THAT(msg, HasSubstr("tensor model.layers.1.mlp.up_proj.weight not found in " + dir_.string()));
  EXPECT_THAT(msg, HasSubstr("(looked in: model.safetensors)"));
}

TEST_F(Loader, UntiedWithoutLmHead) {
  write_model();
  rewrite_weights([](auto& t) { std::erase_if(t, [](const auto& x) { return x.name == "lm_head.weight"; }); });
  EXPECT_THAT(load_error(), HasSubstr("tensor lm_head.weight not found in"));
}

TEST_F(Loader, MissingQwenBias) {
  test::TinyModelSpec spec;
  spec.arch = Arch::Qwen2;
  write_model(spec);
  rewrite_weights([](auto& t) {
    std::erase_if(t, [](const auto& x) { return x.name == "model.layers.0.self_attn.k_proj.bias"; });
  });
  EXPECT_THAT(load_error(), HasSubstr("tensor model.layers.0.self_attn.k_proj.bias not found"));
}

TEST_F(Loader, WrongShape) {
  write_model();
  rewrite_weights([this](auto&) {
    std::vector<int64_t>& shape = tensor("model.layers.0.self_attn.k_proj.weight").shape;
    std::swap(shape[0], shape[1]);  // same bytes, transposed shape
  });
  std::string msg = load_error();
  EXPECT_THAT(msg, HasSubstr("tensor model.layers.0.self_attn.k_proj.weight in " + (dir_ / "model.safetensors").string()));
  EXPECT_THAT(msg, HasSubstr("has shape [64, 32]; expected [32, 64] from config.json "
                             "(num_key_value_heads=2 x head_dim=16, hidden_size=64)"));
}

TEST_F(Loader, WrongVocabShape) {
  write_model();
  json cfg = json::parse(std::ifstream(dir_ / "config.json"));
  cfg["vocab_size"] = 161;
  std::ofstream(dir_ / "config.json") << cfg.dump();
  EXPECT_THAT(load_error(), HasSubstr("tensor model.embed_tokens.weight in " + (dir_ / "model.safetensors").string() +
                                      " has shape [160, 64]; expected [161, 64] from config.json "
                                      "(vocab_size=161, hidden_size=64)"));
}

TEST_F(Loader, UnsupportedWeightDtype) {
  write_model();
  rewrite_weights([this](auto&) {
    test::TensorBytes& norm = tensor("model.norm.weight");
    norm.dtype = "I64";
    norm.bytes.assign(64 * 8, 0);  // still a well-formed safetensors entry
  });
  std::string msg = load_error();
  EXPECT_THAT(msg, HasSubstr("tensor model.norm.weight in " + (dir_ / "model.safetensors").string() +
                             " has dtype I64; expected one of BF16, F16, F32"));
}

TEST_F(Loader, ShardedIndexWithMissingShard) {
  test::TinyModelSpec spec;
  spec.shards = 3;
  write_model(spec);
  fs::remove(dir_ / "model-00002-of-00003.safetensors");
  std::string msg = load_error();
  EXPECT_THAT(msg, HasSubstr((dir_ / "model.safetensors.index.json").string()));
  EXPECT_THAT(msg, HasSubstr("references shard model-00002-of-00003.safetensors, which does not exist"));
}

TEST_F(Loader, ShardedIndexProblems) {
  test::TinyModelSpec spec;
  spec.shards = 3;
  write_model(spec);
  fs::path index_path = dir_ / "model.safetensors.index.json";
  json index = json::parse(std::ifstream(index_path));
  auto write_index = [&](const json& j) { std::ofstream(index_path) << j.dump(); };

  json bad = index;  // the map names a shard that lacks the tensor
  bad["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
  write_index(bad);
  EXPECT_THAT(load_error(), HasSubstr("maps tensor model.norm.weight to model-00001-of-00003.safetensors, which has no such tensor"));

  bad = index;  // a tensor the map does not list
  bad["weight_map"].erase("model.norm.weight");
  write_index(bad);
  EXPECT_THAT(load_error(), HasSubstr("tensor model.norm.weight not found in " + dir_.string() +
                                      " (looked in: model-00001-of-00003.safetensors, "
                                      "model-00002-of-00003.safetensors, model-00003-of-00003.safetensors)"));

  bad = index;  // shards must sit next to the index
  bad["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  write_index(bad);
  EXPECT_THAT(load_error(), HasSubstr("shard name '../elsewhere.safetensors' is not a plain file name"));

  bad = index;
  bad.erase("weight_map");
  write_index(bad);
  EXPECT_THAT(load_error(), HasSubstr("expected an object with a 'weight_map' object"));

  std::ofstream(index_path) << "{\"weight_map\": ";
  EXPECT_THAT(load_error(), HasSubstr("not valid JSON"));
}

}  // namespace
}  // namespace mk
