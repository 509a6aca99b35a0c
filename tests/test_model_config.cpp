// config.json / generation_config.json parsing: defaults as in transformers, every supported variant,
// and a precise message (file, key, expected, found) for everything rejected.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/helpers/error_of.h"
#include "runtime/error.h"
#include "runtime/model_config.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kSource = "/models/x/config.json";

using test::error_of;

// The smallest config each architecture accepts, with sizes chosen so that defaults are visible.
json minimal(const char* arch = "LlamaForCausalLM") {
  return {{"architectures", {arch}}, {"hidden_size", 64},      {"intermediate_size", 96},
          {"num_hidden_layers", 2},  {"num_attention_heads", 4}, {"vocab_size", 160}};
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), kSource); }

// The error for config `j`; checks that it names the file.
std::string parse_error(const json& j) {
  std::string msg = error_of([&] { parse(j); });
  EXPECT_THAT(msg, HasSubstr(kSource));
  return msg;
}

TEST(ModelConfig, ParsesEachArchitecture) {
  struct Case {
    const char* name;
    Arch arch;
    bool qkv_bias, qk_norm;
  };
  for (const Case& c : {Case{"LlamaForCausalLM", Arch::Llama, false, false},
                        Case{"MistralForCausalLM", Arch::Mistral, false, false},
                        Case{"Qwen2ForCausalLM", Arch::Qwen2, true, false},
                        Case{"Qwen3ForCausalLM", Arch::Qwen3, false, true}}) {
    ModelConfig cfg = parse(minimal(c.name));
    EXPECT_EQ(cfg.arch, c.arch) << c.name;
    EXPECT_STREQ(arch_name(cfg.arch), c.name);
    EXPECT_EQ(cfg.qkv_bias, c.qkv_bias) << c.name;
    EXPECT_EQ(cfg.qk_norm, c.qk_norm) << c.name;
  }
}

TEST(ModelConfig, DefaultsFollowTransformers) {
  ModelConfig c = parse(minimal());
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 4);  // absent: one kv head per query head
  EXPECT_EQ(c.head_dim, 16);     // hidden_size / num_attention_heads
  EXPECT_EQ(c.vocab_size, 160);
  EXPECT_EQ(c.max_position, 2048);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::None);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.bos_token_id, -1);
}

TEST(ModelConfig, ReadsOptionalKeys) {
  json j = minimal();
  j["num_key_value_heads"] = 2;
  j["max_position_embeddings"] = 4096;
  j["rms_norm_eps"] = 1e-5;
  j["rope_theta"] = 500000;  // an integer where a number is expected is fine
  j["tie_word_embeddings"] = true;
  j["bos_token_id"] = 1;
  j["eos_token_id"] = {2, 9};
  j["hidden_act"] = "silu";
  ModelConfig c = parse(j);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.group_size(), 2);
  EXPECT_EQ(c.max_position, 4096);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2, 9));
  j["eos_token_id"] = 7;
  EXPECT_THAT(parse(j).eos_token_ids, ElementsAre(7));
}

TEST(ModelConfig, HeadDimFromConfig) {
  json j = minimal();
  j["head_dim"] = 32;  // q_dim 128 != hidden_size 64, as in e.g. Qwen3 and some Llama variants
  ModelConfig c = parse(j);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  j["head_dim"] = nullptr;  // null means "derive it"
  EXPECT_EQ(parse(j).head_dim, 16);
  EXPECT_EQ(parse(minimal("Qwen3ForCausalLM")).head_dim, 128);  // Qwen3Config's default
}

TEST(ModelConfig, Llama3RopeScaling) {
  json j = minimal();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  RopeScaling r = parse(j).rope_scaling;
  EXPECT_EQ(r.kind, RopeScaling::Kind::Llama3);
  EXPECT_FLOAT_EQ(r.factor, 8.0f);
  EXPECT_FLOAT_EQ(r.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(r.high_freq_factor, 4.0f);
  EXPECT_EQ(r.original_max_position, 8192);

  j["rope_scaling"].erase("rope_type");
  j["rope_scaling"]["type"] = "llama3";  // the older spelling of the key
  EXPECT_EQ(parse(j).rope_scaling.kind, RopeScaling::Kind::Llama3);

  j["rope_scaling"].erase("factor");
  EXPECT_THAT(parse_error(j), HasSubstr("missing required key 'rope_scaling.factor'"));
}

TEST(ModelConfig, RopeScalingDefaultOrNullIsNone) {
  json j = minimal();
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse(j).rope_scaling.kind, RopeScaling::Kind::None);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(j).rope_scaling.kind, RopeScaling::Kind::None);
}

TEST(ModelConfig, RopeParametersOfTransformers5) {
  json j = minimal();
  j["rope_parameters"] = {{"rope_type", "llama3"},           {"rope_theta", 500000.0},
                          {"factor", 32.0},                  {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},         {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::Llama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  c = parse(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 1000000.0f);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::None);
}

TEST(ModelConfig, UnsupportedRopeType) {
  json j = minimal();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  std::string msg = parse_error(j);
  EXPECT_THAT(msg, HasSubstr("unsupported rope scaling type 'yarn'"));
  EXPECT_THAT(msg, HasSubstr("llama3"));
}

TEST(ModelConfig, UnsupportedArchitecture) {
  std::string msg = error_of([&] { parse(minimal("GPT2LMHeadModel")); });
  EXPECT_THAT(msg, HasSubstr(std::string("unsupported architecture 'GPT2LMHeadModel' in ") + kSource));
  EXPECT_THAT(msg, HasSubstr("supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"));
  json j = minimal();
  j.erase("architectures");
  EXPECT_THAT(parse_error(j), HasSubstr("missing required key 'architectures'"));
  j["architectures"] = json::array();
  EXPECT_THAT(parse_error(j), HasSubstr("'architectures' must be a non-empty list of strings"));
}

TEST(ModelConfig, UnsupportedActivation) {
  json j = minimal();
  j["hidden_act"] = "gelu_pytorch_tanh";
  EXPECT_THAT(parse_error(j), HasSubstr("unsupported activation 'hidden_act': 'gelu_pytorch_tanh'"));
}

TEST(ModelConfig, WrongKeyType) {
  json j = minimal();
  j["hidden_size"] = "64";
  EXPECT_THAT(parse_error(j), HasSubstr("'hidden_size' must be an integer, found \"64\""));
  j = minimal();
  j["num_hidden_layers"] = 2.5;
  EXPECT_THAT(parse_error(j), HasSubstr("'num_hidden_layers' must be an integer, found 2.5"));
  j = minimal();
  j["tie_word_embeddings"] = "yes";
  EXPECT_THAT(parse_error(j), HasSubstr("'tie_word_embeddings' must be true or false, found \"yes\""));
  j = minimal();
  j["rms_norm_eps"] = {1e-5};
  EXPECT_THAT(parse_error(j), HasSubstr("'rms_norm_eps' must be a number, found an array of 1 elements"));
  j = minimal();
  j["rope_scaling"] = "llama3";
  EXPECT_THAT(parse_error(j), HasSubstr("'rope_scaling' must be an object, found \"llama3\""));
  j = minimal();
  j["eos_token_id"] = {1, "two"};
  EXPECT_THAT(parse_error(j), HasSubstr("'eos_token_id' must be an integer or a list of integers in [0, 4194304)"));
  j = minimal();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", "8"}};
  EXPECT_THAT(parse_error(j), HasSubstr("'rope_scaling.factor' must be a number, found \"8\""));
}

TEST(ModelConfig, MissingRequiredKey) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"}) {
    json j = minimal();
    j.erase(key);
    EXPECT_THAT(parse_error(j), HasSubstr(std::string("missing required key '") + key + "'"));
    j[key] = nullptr;
    EXPECT_THAT(parse_error(j), HasSubstr(std::string("missing required key '") + key + "'"));
  }
}

TEST(ModelConfig, SizesMustBePositiveAndInRange) {
  json j = minimal();
  j["intermediate_size"] = 0;
  EXPECT_THAT(parse_error(j), HasSubstr("'intermediate_size' must be positive, found 0"));
  j = minimal();
  j["vocab_size"] = 10000000000;
  EXPECT_THAT(parse_error(j), HasSubstr("'vocab_size' = 10000000000 is larger than the limit of 4194304"));
  j = minimal();
  j["rms_norm_eps"] = 0;
  EXPECT_THAT(parse_error(j), HasSubstr("'rms_norm_eps' must be a positive number"));
  j = minimal();
  j["head_dim"] = -8;
  EXPECT_THAT(parse_error(j), HasSubstr("'head_dim' must be positive, found -8"));
}

// Issue 18, finding 4: 4 x head_dim overflowed int (to 64), so q_dim() matched [64, 64] tensors.
TEST(ModelConfig, HugeHeadDimIsRejectedBeforeAnyProductIsFormed) {
  const std::string text =
      R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,)"
      R"("num_attention_heads":4,"vocab_size":114,"head_dim":1073741840})";
  const std::string msg = error_of([&] { parse_model_config(text, kSource); });
  EXPECT_THAT(msg, HasSubstr(kSource));
  EXPECT_THAT(msg, HasSubstr("'head_dim' = 1073741840 is larger than the limit of 1024"));
}

TEST(ModelConfig, EverySizeHasAnUpperLimit) {
  const std::pair<const char*, int64_t> limits[] = {
      {"hidden_size", 65536},        {"intermediate_size", 262144}, {"num_hidden_layers", 1024},
      {"num_attention_heads", 1024}, {"num_key_value_heads", 1024}, {"vocab_size", 4194304},
      {"head_dim", 1024},            {"max_position_embeddings", 16777216}};
  for (const auto& [key, limit] : limits) {
    json j = minimal();
    j[key] = limit + 1;
    EXPECT_THAT(parse_error(j), HasSubstr(fmt::format("'{}' = {} is larger than the limit of {}", key, limit + 1, limit)));
    j[key] = uint64_t(1) << 63;  // stored unsigned by the parser: must not wrap to a negative int64
    EXPECT_THAT(parse_error(j), HasSubstr(fmt::format("is larger than the limit of {}", limit)));
  }
  json j = minimal();
  j["max_position_embeddings"] = 16777216;
  EXPECT_EQ(parse(j).max_position, 16777216);
  j = minimal();
  j["bos_token_id"] = 4194304;
  EXPECT_THAT(parse_error(j), HasSubstr("'bos_token_id' = 4194304 is out of range [0, 4194303]"));
  j = minimal();
  j["eos_token_id"] = 4194304;
  EXPECT_THAT(parse_error(j), HasSubstr("'eos_token_id' = 4194304 is out of range [0, 4194303]"));
}

TEST(ModelConfig, AttentionWidthIsBounded) {
  // Each factor within its limit, the product not: 1024 heads x 1024 = 2^20 > 2^17.
  json j = minimal();
  j["num_attention_heads"] = 1024;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = 1024;
  EXPECT_THAT(parse_error(j), HasSubstr("num_attention_heads (1024) x head_dim (1024) = 1048576 is larger than the limit of 131072"));
  j["head_dim"] = 128;  // 2^17 exactly: accepted
  EXPECT_EQ(parse(j).q_dim(), 131072);
  // head_dim derived from hidden_size: bounded too.
  j = minimal();
  j["hidden_size"] = 4096;
  j["num_attention_heads"] = 2;
  EXPECT_THAT(parse_error(j), HasSubstr("head_dim (2048 = hidden_size / num_attention_heads) is larger than the limit of 1024"));
}

TEST(ModelConfig, HeadCountsMustDivide) {
  json j = minimal();
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(parse_error(j), HasSubstr("num_attention_heads (4) must be a multiple of num_key_value_heads (3)"));
  j = minimal();
  j["num_attention_heads"] = 6;  // 64 / 6 is not whole
  EXPECT_THAT(parse_error(j), HasSubstr("hidden_size (64) is not a multiple of num_attention_heads (6)"));
}

TEST(ModelConfig, HeadDimMustBeEven) {
  json j = minimal();
  j["head_dim"] = 15;
  EXPECT_THAT(parse_error(j), HasSubstr("head_dim (15) must be even"));
}

TEST(ModelConfig, AttentionBias) {
  json j = minimal();
  j["attention_bias"] = false;
  EXPECT_FALSE(parse(j).qkv_bias);
  j["attention_bias"] = true;
  EXPECT_THAT(parse_error(j), HasSubstr("attention_bias=true is not supported for LlamaForCausalLM"));
  j = minimal("Qwen3ForCausalLM");
  j["attention_bias"] = true;
  EXPECT_THAT(parse_error(j), HasSubstr("attention_bias=true is not supported for Qwen3ForCausalLM"));
}

TEST(ModelConfig, MistralSlidingWindow) {
  json j = minimal("MistralForCausalLM");
  EXPECT_EQ(parse(j).sliding_window, 4096);  // MistralConfig's default when the key is absent
  EXPECT_EQ(parse(j).max_position, 4096 * 32);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["sliding_window"] = 1024;
  EXPECT_EQ(parse(j).sliding_window, 1024);
  j["sliding_window"] = "big";
  EXPECT_THAT(parse_error(j), HasSubstr("'sliding_window' must be an integer, found \"big\""));
}

TEST(ModelConfig, QwenSlidingWindowOnTheLayersFromMaxWindowLayersOn) {
  json j = minimal("Qwen2ForCausalLM");
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 0;
  EXPECT_EQ(parse(j).sliding_window, 0);  // use_sliding_window absent: off
  j["use_sliding_window"] = true;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.sliding_window, 4096);  // layers >= max_window_layers = 0: all of them
  EXPECT_TRUE(c.sliding_layers.empty());
  EXPECT_TRUE(c.layer_slides(0) && c.layer_slides(1));
  j["max_window_layers"] = 28;
  EXPECT_EQ(parse(j).sliding_window, 0);  // no layer reaches max_window_layers
  j["max_window_layers"] = 1;             // layer 1 slides, layer 0 is global
  c = parse(j);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.sliding_layers, (std::vector<uint8_t>{0, 1}));
  EXPECT_FALSE(c.layer_slides(0));
  EXPECT_TRUE(c.layer_slides(1));

  j.erase("max_window_layers");  // layer_types, written by newer transformers, takes precedence
  j["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["layer_types"] = {"sliding_attention", "sliding_attention"};
  EXPECT_EQ(parse(j).sliding_window, 4096);
  j["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_EQ(parse(j).sliding_layers, (std::vector<uint8_t>{1, 0}));
  j["layer_types"] = {"sliding_attention"};
  EXPECT_THAT(parse_error(j), HasSubstr("'layer_types' must be a list of 2 strings"));
}

// quantization_config: the fp8 checkpoint forms the loader reads as stored (tests/test_fp8_checkpoints.cpp
// loads them); everything else is named and rejected.
json compressed_tensors(const json& weights) {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
          {"ignore", {"lm_head"}}};
}

TEST(ModelConfig, QuantizationConfigForms) {
  EXPECT_EQ(parse(minimal()).quantization.method, WeightQuantization::Method::None);
  json j = minimal();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
  WeightQuantization q = parse(j).quantization;
  EXPECT_EQ(q.method, WeightQuantization::Method::FineGrainedFp8);
  EXPECT_EQ(q.block_rows, 128);  // FineGrainedFP8Config's default block
  EXPECT_EQ(q.block_cols, 128);
  j["quantization_config"]["weight_block_size"] = {64, 256};
  j["quantization_config"]["fmt"] = "e4m3";  // DeepSeek-V3's configs
  q = parse(j).quantization;
  EXPECT_EQ(q.block_rows, 64);
  EXPECT_EQ(q.block_cols, 256);

  j["quantization_config"] = compressed_tensors({{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}});
  q = parse(j).quantization;
  EXPECT_EQ(q.method, WeightQuantization::Method::CompressedTensors);
  EXPECT_TRUE(q.per_channel);
  EXPECT_FALSE(q.per_tensor);
  // A second group per tensor, and one that quantizes only activations.
  j["quantization_config"]["config_groups"]["group_1"] = {
      {"targets", {"re:.*mlp.*"}}, {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}}};
  j["quantization_config"]["config_groups"]["group_2"] = {
      {"targets", {"Linear"}}, {"weights", nullptr}, {"input_activations", {{"num_bits", 8}}}};
  q = parse(j).quantization;
  EXPECT_TRUE(q.per_channel);
  EXPECT_TRUE(q.per_tensor);
  // "mixed-precision": each group names its format.
  j["quantization_config"]["format"] = "mixed-precision";
  EXPECT_THAT(parse_error(j), HasSubstr("missing required key 'quantization_config.config_groups.group_0.format' "
                                        "(the top-level format is \"mixed-precision\")"));
  for (const char* g : {"group_0", "group_1", "group_2"})
    j["quantization_config"]["config_groups"][g]["format"] = "float-quantized";
  EXPECT_TRUE(parse(j).quantization.per_tensor);
}

TEST(ModelConfig, UnsupportedQuantization) {
  json j = minimal();
  j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"bits", 4}};
  std::string msg = parse_error(j);
  EXPECT_THAT(msg, HasSubstr("unsupported quantization method 'quantization_config.quant_method' = \"bitsandbytes\""));
  EXPECT_THAT(msg, HasSubstr("supported: \"fp8\""));
  EXPECT_THAT(msg, HasSubstr("\"compressed-tensors\" with format \"float-quantized\""));
  j["quantization_config"] = {{"bits", 4}};
  EXPECT_THAT(parse_error(j), HasSubstr("missing required key 'quantization_config.quant_method'"));
  j["quantization_config"] = "fp8";
  EXPECT_THAT(parse_error(j), HasSubstr("'quantization_config' must be an object, found \"fp8\""));

  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 64}}};
  EXPECT_THAT(parse_error(j),
              HasSubstr("'quantization_config.weight_block_size' = [128, 64] is not supported: its column "
                        "size must be a multiple of 128 (the fp8 kernels read one scale per 128 columns "
                        "of a row)"));
  j["quantization_config"]["weight_block_size"] = {128, 0};
  EXPECT_THAT(parse_error(j),
              HasSubstr("'quantization_config.weight_block_size' must be a list of two positive integers "
                        "[rows, columns], found [128,0]"));
  j["quantization_config"]["weight_block_size"] = 128;
  EXPECT_THAT(parse_error(j),
              HasSubstr("'quantization_config.weight_block_size' must be a list of two positive integers"));
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e5m2"}};
  EXPECT_THAT(parse_error(j), HasSubstr("unsupported 'quantization_config.fmt': \"e5m2\" (supported: \"e4m3\")"));

  const json fp8_channel = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}};
  j["quantization_config"] = compressed_tensors(fp8_channel);
  j["quantization_config"]["format"] = "pack-quantized";
  EXPECT_THAT(parse_error(j), HasSubstr("unsupported compressed-tensors format 'quantization_config.format' = "
                                        "\"pack-quantized\" (supported: \"float-quantized\", \"naive-quantized\""));
  struct Case {
    json weights;
    const char* message;
  };
  for (const Case& c : {
           Case{{{"num_bits", 8}, {"type", "float"}, {"strategy", "block"}, {"block_structure", {128, 128}}},
                "'quantization_config.config_groups.group_0.weights' has an unsupported weight scheme (num_bits 8, "
                "type \"float\", strategy \"block\")"},
           Case{{{"num_bits", 4}, {"type", "int"}, {"group_size", 128}},
                "unsupported weight scheme (num_bits 4, type \"int\", strategy \"group\")"},
           Case{{{"num_bits", 8}, {"strategy", "channel"}}, "unsupported weight scheme (num_bits 8, type \"int\""},
           Case{{{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"symmetric", false}},
                "'quantization_config.config_groups.group_0.weights.symmetric' = false is not supported"},
           Case{{{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"dynamic", true}},
                "'quantization_config.config_groups.group_0.weights.dynamic' = true is not supported for weights"},
       }) {
    j["quantization_config"] = compressed_tensors(c.weights);
    EXPECT_THAT(parse_error(j), HasSubstr(c.message)) << c.weights.dump();
  }
  j["quantization_config"] = compressed_tensors(fp8_channel);
  j["quantization_config"]["config_groups"] = json::object();
  EXPECT_THAT(parse_error(j),
              HasSubstr("'quantization_config.config_groups' must be a non-empty object of quantization schemes"));
}

// Directory-level loading: config.json plus the optional generation_config.json.
class ModelConfigDir : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("config"); }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

TEST_F(ModelConfigDir, LoadsConfigAndGenerationConfigEos) {
  json cfg = minimal();
  cfg["eos_token_id"] = 2;
  write("config.json", cfg.dump());
  EXPECT_THAT(load_model_config(dir_).eos_token_ids, ElementsAre(2));
  write("generation_config.json", json{{"eos_token_id", {128001, 128008, 128009}}}.dump());
  EXPECT_THAT(load_model_config(dir_).eos_token_ids, ElementsAre(128001, 128008, 128009));
  write("generation_config.json", json{{"temperature", 0.6}}.dump());  // no eos: config.json's stays
  EXPECT_THAT(load_model_config(dir_).eos_token_ids, ElementsAre(2));
}

TEST_F(ModelConfigDir, TinyModelConfigsParse) {
  test::TinyModelSpec spec;
  spec.arch = Arch::Qwen3;
  spec.llama3_rope = true;
  spec.eos = {5, 6};
  test::write_tiny_model(dir_, spec);
  ModelConfig c = load_model_config(dir_);
  EXPECT_EQ(c.arch, Arch::Qwen3);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::Llama3);
  EXPECT_EQ(c.rope_scaling.original_max_position, 64);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(5, 6));
  EXPECT_EQ(c.bos_token_id, 1);
}

TEST_F(ModelConfigDir, MissingConfigJson) {
  std::string msg = error_of([&] { load_model_config(dir_); });
  EXPECT_THAT(msg, HasSubstr((dir_ / "config.json").string()));
  EXPECT_THAT(msg, HasSubstr("not found"));
}

TEST_F(ModelConfigDir, MalformedConfigJson) {
  write("config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,,})");
  std::string msg = error_of([&] { load_model_config(dir_); });
  EXPECT_THAT(msg, HasSubstr((dir_ / "config.json").string()));
  EXPECT_THAT(msg, HasSubstr("not valid JSON"));
  EXPECT_THAT(msg, HasSubstr("parse error"));
  write("config.json", R"({"hidden_size": 1e999})");
  EXPECT_THAT(error_of([&] { load_model_config(dir_); }), HasSubstr("number overflow"));
  write("config.json", "[1, 2]");
  EXPECT_THAT(error_of([&] { load_model_config(dir_); }), HasSubstr("expected a JSON object at the top level"));
}

TEST_F(ModelConfigDir, DeeplyNestedOrHugeFilesAreRejected) {
  write("config.json", std::string(100000, '[') + std::string(100000, ']'));
  std::string msg = error_of([&] { load_model_config(dir_); });
  EXPECT_THAT(msg, HasSubstr((dir_ / "config.json").string()));
  EXPECT_THAT(msg, HasSubstr("nested deeper than 64 levels"));
  write("config.json", minimal().dump());
  std::ofstream(dir_ / "generation_config.json").seekp((int64_t(1) << 28) + 1) << ' ';  // sparse: no disk used
  msg = error_of([&] { load_model_config(dir_); });
  EXPECT_THAT(msg, HasSubstr((dir_ / "generation_config.json").string()));
  EXPECT_THAT(msg, HasSubstr("is larger than the 268435456 bytes a model JSON file may have"));
}

TEST_F(ModelConfigDir, MalformedGenerationConfig) {
  write("config.json", minimal().dump());
  write("generation_config.json", R"({"eos_token_id": "</s>"})");
  std::string msg = error_of([&] { load_model_config(dir_); });
  EXPECT_THAT(msg, HasSubstr((dir_ / "generation_config.json").string()));
  EXPECT_THAT(msg, HasSubstr("'eos_token_id' must be an integer or a list of integers, found \"</s>\""));
}

}  // namespace
}  // namespace mk

namespace mk {
namespace {

// Gemma 3 as transformers 4.5x writes it: the defaults of Gemma3TextConfig for what is left out.
TEST(ModelConfig, Gemma3TakesTheConfigClassDefaults) {
  json j = minimal("Gemma3ForCausalLM");
  j["num_hidden_layers"] = 12;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.arch, Arch::Gemma3);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_EQ(c.sliding_window, 4096);
  // sliding_window_pattern 6: layers 5 and 11 are global, the others slide.
  std::vector<uint8_t> want(12, 1);
  want[5] = want[11] = 0;
  EXPECT_EQ(c.sliding_layers, want);
  EXPECT_TRUE(c.layer_slides(0));
  EXPECT_FALSE(c.layer_slides(5));
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.sliding_rope_theta, 1e4f);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::None);
  EXPECT_FLOAT_EQ(c.query_pre_attn_scalar, 256.0f);
  EXPECT_FLOAT_EQ(c.norm_weight_offset, 1.0f);
  EXPECT_TRUE(c.scaled_embedding);
  EXPECT_TRUE(c.post_norms);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);

  j["sliding_window_pattern"] = 3;
  j["rope_local_base_freq"] = 5000;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  j["sliding_window"] = 512;
  const ModelConfig d = parse(j);
  EXPECT_EQ(d.sliding_layers, (std::vector<uint8_t>{1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(d.sliding_window, 512);
  EXPECT_FLOAT_EQ(d.sliding_rope_theta, 5000.0f);
  EXPECT_EQ(d.rope_scaling.kind, RopeScaling::Kind::Linear);
  EXPECT_FLOAT_EQ(d.rope_scaling.factor, 8.0f);
}

// Gemma 3 as transformers 5 writes it: layer_types and per-layer-type rope_parameters.
TEST(ModelConfig, Gemma3ReadsLayerTypesAndPerTypeRopeParameters) {
  json j = minimal("Gemma3ForCausalLM");
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"rope_theta", 1000000.0}, {"factor", 4.0}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  j["query_pre_attn_scalar"] = 24;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.sliding_layers, (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::Linear);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.0f);
  EXPECT_FLOAT_EQ(c.sliding_rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.query_pre_attn_scalar, 24.0f);
}

TEST(ModelConfig, Gemma3RefusesWhatItDoesNotModelNamingTheKey) {
  json j = minimal("Gemma3ForCausalLM");
  j["final_logit_softcapping"] = 30.0;
  EXPECT_THAT(parse_error(j), HasSubstr("'final_logit_softcapping' = 30.0 is not supported"));
  j = minimal("Gemma3ForCausalLM");
  j["hidden_activation"] = "relu";
  EXPECT_THAT(parse_error(j), HasSubstr("'hidden_activation': 'relu'"));
  j = minimal("Gemma3ForCausalLM");
  j["layer_types"] = {"sliding_attention"};
  EXPECT_THAT(parse_error(j), HasSubstr("'layer_types' must be a list of 2 strings"));
  j = minimal("Gemma3ForCausalLM");
  j["layer_types"] = {"sliding_attention", "chunked_attention"};
  EXPECT_THAT(parse_error(j), HasSubstr("'layer_types[1]' = \"chunked_attention\""));
  j = minimal("Gemma3ForCausalLM");
  j["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}}}};
  EXPECT_THAT(parse_error(j), HasSubstr("'full_attention' and 'sliding_attention'"));
  j["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(parse_error(j), HasSubstr("scaled RoPE on the sliding layers"));
  j = minimal("Gemma3ForCausalLM");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_THAT(parse_error(j), HasSubstr("unsupported rope scaling type 'yarn'"));
}

}  // namespace
}  // namespace mk
