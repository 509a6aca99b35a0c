// fp8 checkpoints as Hugging Face stores them, loaded as they are: transformers FineGrainedFP8 (block
// scales in X.weight_scale_inv) and compressed-tensors float-quantized (per-row or per-tensor scales in
// X.weight_scale). The fixtures are tiny bf16 models whose matrices this file quantizes itself, with its
// own scales, independently of runtime/quantize.cpp.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "host/emulator/emulator.h"
#include "runtime/error.h"
#include "runtime/quantize.h"
#include "runtime/reference.h"
#include "runtime/safetensors.h"
#include "tests/helpers/checkpoint_dir.h"
#include "tests/helpers/emulator_vs_reference.h"
#include "tests/helpers/error_of.h"
#include "tests/helpers/logits_compare.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::error_of;
using ::testing::HasSubstr;

constexpr float kFp8Max = 448.0f;

test::TinyModelSpec fp8_spec() {
  test::TinyModelSpec spec;
  spec.hidden = 256;        // two 128-column blocks per row of the hidden-wide matrices
  spec.intermediate = 336;  // three blocks, the last one short (80 columns); 336 rows: a short last row block
  spec.heads = 4, spec.kv_heads = 2, spec.head_dim = 64;
  spec.eos = {};  // the emulator runs the full length
  return spec;
}

// The checkpoint forms. Block*: transformers FineGrainedFP8 (F32 scales); Channel, Tensor: compressed-tensors.
enum class Form { Block128, Block64x256, Channel, Tensor };

const char* form_name(Form f) {
  switch (f) {
    case Form::Block128: return "FineGrainedFp8_128x128";
    case Form::Block64x256: return "FineGrainedFp8_64x256";
    case Form::Channel: return "CompressedTensors_channel";
    case Form::Tensor: return "CompressedTensors_tensor";
  }
  return "?";
}

bool is_block(Form f) { return f == Form::Block128 || f == Form::Block64x256; }

// One matrix as this file quantized it: its fp8 bytes and its scales, row-major over the blocks.
struct Fp8Matrix {
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 0, block_cols = 0, scale_cols = 0;
  std::vector<uint8_t> values;
  std::vector<float> scales;
  float expected(int64_t r, int64_t c) const {
    return fp8_e4m3_to_float(values[size_t(r * cols + c)]) *
           scales[size_t((r / block_rows) * scale_cols + c / block_cols)];
  }
};

float bf16_at(const test::TensorBytes& t, size_t i) {
  uint16_t h;
  std::memcpy(&h, t.bytes.data() + 2 * i, 2);
  return bf16_to_float(h);
}

// Quantizes bf16 matrix `t` [rows, cols] in blocks of block_rows x block_cols: scale = amax / 448 (1 for an
// all-zero block), rounded to `scale_dtype` before the values are divided by it.
Fp8Matrix quantize(const test::TensorBytes& t, int64_t block_rows, int64_t block_cols, DType scale_dtype) {
  Fp8Matrix m;
  m.rows = t.shape[0], m.cols = t.shape[1];
  m.block_rows = block_rows, m.block_cols = block_cols;
  m.scale_cols = (m.cols + block_cols - 1) / block_cols;
  const int64_t scale_rows = (m.rows + block_rows - 1) / block_rows;
  m.values.resize(size_t(m.rows * m.cols));
  m.scales.resize(size_t(scale_rows * m.scale_cols));
  for (int64_t br = 0; br < scale_rows; ++br)
    for (int64_t bc = 0; bc < m.scale_cols; ++bc) {
      const int64_t r0 = br * block_rows, r1 = std::min(m.rows, r0 + block_rows);
      const int64_t c0 = bc * block_cols, c1 = std::min(m.cols, c0 + block_cols);
      float amax = 0.f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(bf16_at(t, size_t(r * m.cols + c))));
      float s = amax > 0.f ? amax / kFp8Max : 1.0f;
      if (scale_dtype == DType::BF16) s = bf16_to_float(float_to_bf16(s));
      m.scales[size_t(br * m.scale_cols + bc)] = s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          m.values[size_t(r * m.cols + c)] = float_to_fp8_e4m3(bf16_at(t, size_t(r * m.cols + c)) / s);
    }
  return m;
}

using test::is_linear_weight;
using test::module_of;

// A tiny model directory in one fp8 form, with what this file wrote into it.
struct Checkpoint : test::CheckpointDir {
  Form form = Form::Block128;
  std::map<std::string, Fp8Matrix> fp8;               // by weight name
  std::map<std::string, test::TensorBytes> original;  // the bf16 matrices before quantization, by name

  // The scales go to a second shard in the FineGrainedFP8 forms: a scale need not sit beside its weight.
  void write() const {
    fs::remove(dir / "model.safetensors");
    fs::remove(dir / "model.safetensors.index.json");
    if (!is_block(form)) {
      test::write_safetensors(dir / "model.safetensors", tensors);
      return;
    }
    std::vector<test::TensorBytes> shard[2];
    json weight_map = json::object();
    for (const auto& t : tensors) {
      const int k = t.name.find("_scale") != std::string::npos ? 1 : 0;
      shard[k].push_back(t);
      weight_map[t.name] = fmt::format("model-{:05d}-of-00002.safetensors", k + 1);
    }
    for (int k = 0; k < 2; ++k)
      test::write_safetensors(dir / fmt::format("model-{:05d}-of-00002.safetensors", k + 1), shard[k]);
    std::ofstream(dir / "model.safetensors.index.json")
        << json{{"metadata", json::object()}, {"weight_map", weight_map}}.dump();
  }
};

json fine_grained_fp8_config(int block_rows, int block_cols) {
  return {{"quant_method", "fp8"},
          {"activation_scheme", "dynamic"},
          {"weight_block_size", {block_rows, block_cols}},
          {"modules_to_not_convert", {"lm_head"}}};
}

json compressed_tensors_config(const std::string& strategy) {
  const json weights = {
      {"num_bits", 8},       {"type", "float"},       {"strategy", strategy},       {"symmetric", true},
      {"dynamic", false},    {"group_size", nullptr}, {"block_structure", nullptr}, {"actorder", nullptr},
      {"observer", "minmax"}};
  const json input = {
      {"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}, {"symmetric", true}, {"dynamic", false}};
  return {
      {"quant_method", "compressed-tensors"},
      {"format", "float-quantized"},
      {"quantization_status", "compressed"},
      {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", input}}}}},
      {"ignore", {"lm_head"}},
      {"kv_cache_scheme", nullptr}};
}

// Writes a tiny bf16 model and rewrites its linear layers' matrices in `form`. lm_head and the embedding
// stay bf16, as both quantizers leave them (modules_to_not_convert, ignore).
Checkpoint make_checkpoint(Form form, const std::string& tag) {
  Checkpoint ck;
  ck.form = form;
  ck.make_dir(tag);
  ck.tensors = test::write_tiny_model(ck.dir, fp8_spec());
  std::vector<test::TensorBytes> extra;
  for (test::TensorBytes& t : ck.tensors) {
    if (!is_linear_weight(t.name)) continue;
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const std::string module = module_of(t.name);
    ck.original.emplace(t.name, t);
    Fp8Matrix m;
    test::TensorBytes scale;
    switch (form) {
      case Form::Block128:
      case Form::Block64x256: {
        const int64_t br = form == Form::Block128 ? 128 : 64, bc = form == Form::Block128 ? 128 : 256;
        m = quantize(t, br, bc, DType::F32);
        scale = {module + ".weight_scale_inv",
                 "F32",
                 {(rows + br - 1) / br, m.scale_cols},
                 test::encode(m.scales, DType::F32)};
        break;
      }
      case Form::Channel:  // bf16 scales: the loader takes them as well as F32
        m = quantize(t, 1, cols, DType::BF16);
        scale = {module + ".weight_scale", "BF16", {rows, 1}, test::encode(m.scales, DType::BF16)};
        break;
      case Form::Tensor: {  // [1] for the attention matrices, a scalar [] for the MLP ones: both occur
        m = quantize(t, rows, cols, DType::F32);
        const bool attn = t.name.find("self_attn") != std::string::npos;
        scale = {module + ".weight_scale", "F32", attn ? std::vector<int64_t>{1} : std::vector<int64_t>{},
                 test::encode(m.scales, DType::F32)};
        break;
      }
    }
    t.dtype = "F8_E4M3";
    t.bytes = m.values;
    extra.push_back(std::move(scale));
    // Static activation scales: present in compressed-tensors checkpoints, unused by weight-only kernels.
    if (!is_block(form)) extra.push_back({module + ".input_scale", "F32", {1}, test::encode({0.05f}, DType::F32)});
    ck.fp8.emplace(t.name, std::move(m));
  }
  for (auto& t : extra) ck.tensors.push_back(std::move(t));
  ck.write();
  switch (form) {
    case Form::Block128: ck.set_quantization_config(fine_grained_fp8_config(128, 128)); break;
    case Form::Block64x256: ck.set_quantization_config(fine_grained_fp8_config(64, 256)); break;
    case Form::Channel: ck.set_quantization_config(compressed_tensors_config("channel")); break;
    case Form::Tensor: ck.set_quantization_config(compressed_tensors_config("tensor")); break;
  }
  return ck;
}

std::map<std::string, const TensorView*> matrices_by_name(const Model& model) {
  std::map<std::string, const TensorView*> out;
  for (const TensorView* t : weight_matrices(model)) out.emplace(t->name, t);
  return out;
}

bool points_into(const void* p, const Model& model) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (const auto& f : model.files)
    if (b >= f->data() && b < f->data() + f->size()) return true;
  return false;
}

class Fp8Checkpoint : public ::testing::TestWithParam<Form> {};

// Every fp8 matrix is the file's bytes in place, with the file's scales, and at() gives exactly
// fp8 value * scale for every element; the bf16 embedding and LM head stay as stored.
TEST_P(Fp8Checkpoint, LoadsAsStoredWithItsScales) {
  const Checkpoint ck = make_checkpoint(GetParam(), "fp8-ckpt");
  const auto model = ck.load();
  EXPECT_EQ(model->formats.body, MatrixFormat::FP8);
  const auto views = matrices_by_name(*model);
  ASSERT_EQ(ck.fp8.size(), size_t(7 * fp8_spec().layers));
  for (const auto& [name, m] : ck.fp8) {
    SCOPED_TRACE(name);
    ASSERT_EQ(views.count(name), 1u);
    const TensorView& v = *views.at(name);
    ASSERT_EQ(v.dtype, DType::F8_E4M3);
    ASSERT_TRUE(v.quantized());
    EXPECT_TRUE(points_into(v.data, *model)) << "the values are not a view of the mapped file";
    EXPECT_TRUE(points_into(v.scale.data, *model)) << "the scales are not a view of the mapped file";
    ASSERT_EQ(std::memcmp(v.data, m.values.data(), m.values.size()), 0);
    const int64_t scale_rows = (m.rows + m.block_rows - 1) / m.block_rows;
    EXPECT_EQ(v.scale.name, module_of(name) + (is_block(ck.form) ? ".weight_scale_inv" : ".weight_scale"));
    EXPECT_EQ(v.scale.dtype, ck.form == Form::Channel ? DType::BF16 : DType::F32);
    EXPECT_EQ(v.scale.block_rows, m.block_rows);
    EXPECT_EQ(v.scale.block_cols, m.block_cols);
    EXPECT_EQ(v.scale.cols, m.scale_cols);
    EXPECT_EQ(v.scale.count, scale_rows * m.scale_cols);
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols; ++c)
        ASSERT_EQ(v.at(r * m.cols + c), m.expected(r, c)) << "[" << r << ", " << c << "]";
    EXPECT_TRUE(scale_group_problem(v).empty()) << scale_group_problem(v);
  }
  EXPECT_EQ(model->formats.head, MatrixFormat::BF16);
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(views.count(name), 1u);
    const TensorView& v = *views.at(name);
    EXPECT_EQ(v.dtype, DType::BF16);
    EXPECT_FALSE(v.quantized());
    EXPECT_TRUE(points_into(v.data, *model));
  }
}

// Asked to quantize to fp8, an fp8 checkpoint keeps its matrices and quantizes its embedding and LM
// head at load; to int4, it is refused (no re-quantization of quantized weights).
TEST(Fp8Checkpoints, QuantizeOptionBringsTheHeadAlong) {
  const Checkpoint ck = make_checkpoint(Form::Block128, "fp8-head");
  LoadOptions fp8;
  fp8.quantize = MatrixFormat::FP8;
  const auto model = ck.load(fp8);
  EXPECT_EQ(model->formats.body, MatrixFormat::FP8);
  EXPECT_EQ(model->formats.head, MatrixFormat::FP8);
  const auto views = matrices_by_name(*model);
  for (const auto& [name, m] : ck.fp8) EXPECT_TRUE(points_into(views.at(name)->data, *model)) << name;
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    SCOPED_TRACE(name);
    const TensorView& v = *views.at(name);
    EXPECT_EQ(v.dtype, DType::F8_E4M3);
    EXPECT_TRUE(v.quantized());
    EXPECT_FALSE(points_into(v.data, *model));  // made at load time
  }
  LoadOptions int4;
  int4.quantize = MatrixFormat::INT4;
  EXPECT_THAT(error_of([&] { ck.load(int4); }), HasSubstr("is stored in fp8; it cannot be quantized to int4"));
}

// The emulator reads the FP8 image packed from the checkpoint's own values and scales; the reference
// computes on the dequantized weights (TensorView::at).
TEST_P(Fp8Checkpoint, EmulatorMatchesTheReference) {
  const Checkpoint ck = make_checkpoint(GetParam(), "fp8-emu");
  const auto model = ck.load();
  EmulatorOptions opt;
  opt.num_workgroups = 11;
  opt.context = 48;
  opt.record_logits = true;
  test::expect_emulator_matches_reference(*model, {1, 5, 9, 33, 7}, opt, 16);
}

INSTANTIATE_TEST_SUITE_P(Forms, Fp8Checkpoint,
                         ::testing::Values(Form::Block128, Form::Block64x256, Form::Channel, Form::Tensor),
                         [](const auto& test_info) { return std::string(form_name(test_info.param)); });

// A config with both compressed-tensors strategies: each scale's shape says which one its matrix has.
TEST(Fp8Checkpoints, CompressedTensorsGroupsWithBothStrategies) {
  Checkpoint ck = make_checkpoint(Form::Channel, "fp8-mixed");
  json q = compressed_tensors_config("channel");
  q["config_groups"]["group_1"] = q["config_groups"]["group_0"];
  q["config_groups"]["group_1"]["weights"]["strategy"] = "tensor";
  q["config_groups"]["group_1"]["targets"] = {"re:.*mlp.*"};
  ck.set_quantization_config(q);
  // The MLP matrices per tensor: one scale each.
  for (auto& [name, m] : ck.fp8) {
    if (name.find("mlp") == std::string::npos) continue;
    m = quantize(ck.original.at(name), m.rows, m.cols, DType::F32);
    ck.tensor(name).bytes = m.values;
    test::TensorBytes& s = ck.tensor(module_of(name) + ".weight_scale");
    s = {s.name, "F32", {}, test::encode(m.scales, DType::F32)};
  }
  ck.write();
  const auto model = ck.load();
  const auto views = matrices_by_name(*model);
  for (const auto& [name, m] : ck.fp8) {
    SCOPED_TRACE(name);
    const TensorView& v = *views.at(name);
    EXPECT_EQ(v.scale.count, name.find("mlp") != std::string::npos ? 1 : m.rows);
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols; ++c)
        ASSERT_EQ(v.at(r * m.cols + c), m.expected(r, c)) << "[" << r << ", " << c << "]";
  }
}

// ---------------------------------------------------------------------------------------------------
// Errors: each names the tensor or key and what was expected.

TEST(Fp8Checkpoints, MissingWeightScaleInv) {
  Checkpoint ck = make_checkpoint(Form::Block128, "fp8-missing-scale");
  ck.erase("model.layers.1.mlp.down_proj.weight_scale_inv");
  ck.write();
  const std::string msg = ck.load_error();
  EXPECT_THAT(msg,
              HasSubstr("tensor model.layers.1.mlp.down_proj.weight in " +
                        (ck.dir / "model-00001-of-00002.safetensors").string() +
                        " has dtype F8_E4M3, but its scale tensor model.layers.1.mlp.down_proj.weight_scale_inv is "
                        "not in " +
                        ck.dir.string()));
  EXPECT_THAT(
      msg, HasSubstr("quant_method \"fp8\" stores one scale per 128x128 block (quantization_config.weight_block_size) "
                     "of the [256, 336] matrix"));
}

TEST(Fp8Checkpoints, MissingWeightScaleOfCompressedTensors) {
  Checkpoint ck = make_checkpoint(Form::Channel, "fp8-missing-ct-scale");
  ck.erase("model.layers.0.self_attn.k_proj.weight_scale");
  ck.write();
  EXPECT_THAT(
      ck.load_error(),
      HasSubstr("tensor model.layers.0.self_attn.k_proj.weight in " + (ck.dir / "model.safetensors").string() +
                " has dtype F8_E4M3, but its scale tensor model.layers.0.self_attn.k_proj.weight_scale is not in " +
                ck.dir.string() +
                " (compressed-tensors stores it with shape [128, 1] (strategy \"channel\": "
                "one scale per row)"));
}

// A config naming one form over the other's files: the message says which scale the files do have.
TEST(Fp8Checkpoints, ConfigOfTheOtherForm) {
  Checkpoint ck = make_checkpoint(Form::Block128, "fp8-other-form");
  ck.set_quantization_config(compressed_tensors_config("channel"));
  const std::string msg = ck.load_error();
  EXPECT_THAT(msg, HasSubstr("its scale tensor model.layers.0.self_attn.q_proj.weight_scale is not in"));
  EXPECT_THAT(msg, HasSubstr("the files have model.layers.0.self_attn.q_proj.weight_scale_inv instead, which "
                             "quantization_config's quant_method does not use"));
}

TEST(Fp8Checkpoints, ScaleOfTheWrongShape) {
  {
    Checkpoint ck = make_checkpoint(Form::Block128, "fp8-scale-shape");
    test::TensorBytes& s = ck.tensor("model.layers.0.self_attn.o_proj.weight_scale_inv");
    s.shape = {4, 1};  // same bytes, the wrong shape
    ck.write();
    EXPECT_THAT(ck.load_error(), HasSubstr("scale tensor model.layers.0.self_attn.o_proj.weight_scale_inv in " +
                                           (ck.dir / "model-00002-of-00002.safetensors").string() +
                                           " has shape [4, 1]; expected [2, 2] (one scale per 128x128 block "
                                           "(quantization_config.weight_block_size) of the [256, 256] matrix)"));
  }
  {
    Checkpoint ck = make_checkpoint(Form::Channel, "fp8-scale-shape-ct");
    ck.tensor("model.layers.1.mlp.gate_proj.weight_scale").shape = {336};  // [out] instead of [out, 1]
    ck.write();
    EXPECT_THAT(ck.load_error(),
                HasSubstr("scale tensor model.layers.1.mlp.gate_proj.weight_scale in " +
                          (ck.dir / "model.safetensors").string() +
                          " has shape [336]; expected [336, 1] (strategy \"channel\": one scale per row) "
                          "(quantization_config.config_groups, for the [336, 256] matrix)"));
  }
}

TEST(Fp8Checkpoints, ScaleOfAnUnsupportedDtype) {
  Checkpoint ck = make_checkpoint(Form::Tensor, "fp8-scale-dtype");
  test::TensorBytes& s = ck.tensor("model.layers.0.mlp.up_proj.weight_scale");
  s.dtype = "I32";
  ck.write();
  EXPECT_THAT(ck.load_error(),
              HasSubstr("scale tensor model.layers.0.mlp.up_proj.weight_scale in " +
                        (ck.dir / "model.safetensors").string() + " has dtype I32; expected one of F32, BF16, F16"));
}

TEST(Fp8Checkpoints, UnknownQuantMethod) {
  const Checkpoint ck = make_checkpoint(Form::Block128, "fp8-awq");
  for (const char* method : {"bitsandbytes", "hqq", "eetq"}) {
    ck.set_quantization_config({{"quant_method", method}, {"bits", 4}});
    const std::string msg = ck.load_error();
    EXPECT_THAT(msg, HasSubstr((ck.dir / "config.json").string() +
                               ": unsupported quantization method 'quantization_config.quant_method' = \"" + method +
                               "\" (supported: \"fp8\""));
    EXPECT_THAT(msg, HasSubstr("\"compressed-tensors\" with format \"float-quantized\""));
  }
}

TEST(Fp8Checkpoints, CompressedTensorsGroupStrategy) {
  const Checkpoint ck = make_checkpoint(Form::Channel, "fp8-group");
  json q = compressed_tensors_config("group");
  q["config_groups"]["group_0"]["weights"]["group_size"] = 128;
  ck.set_quantization_config(q);
  EXPECT_THAT(
      ck.load_error(),
      HasSubstr("'quantization_config.config_groups.group_0.weights' has an unsupported weight scheme (num_bits 8, "
                "type \"float\", strategy \"group\"); supported: num_bits 8, type \"float\" (fp8 E4M3), strategy "
                "\"channel\" or \"tensor\""));
  q = compressed_tensors_config("channel");
  q["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  q["config_groups"]["group_0"]["weights"]["type"] = "int";
  ck.set_quantization_config(q);
  EXPECT_THAT(ck.load_error(), HasSubstr("unsupported weight scheme (num_bits 4, type \"int\", strategy \"channel\")"));
}

TEST(Fp8Checkpoints, Fp8NormOrEmbeddingIsRejected) {
  for (const char* name : {"model.layers.0.input_layernorm.weight", "model.embed_tokens.weight"}) {
    SCOPED_TRACE(name);
    Checkpoint ck = make_checkpoint(Form::Block128, "fp8-norm");
    test::TensorBytes& t = ck.tensor(name);
    t.dtype = "F8_E4M3";
    t.bytes.assign(t.bytes.size() / 2, 0x38);  // fp8 1.0
    ck.write();
    EXPECT_THAT(ck.load_error(), HasSubstr(std::string("tensor ") + name + " in " +
                                           (ck.dir / "model-00001-of-00002.safetensors").string() +
                                           " has dtype F8_E4M3; expected one of BF16, F16, F32 (fp8 is read only for "
                                           "the weight matrices of the linear layers"));
  }
}

TEST(Fp8Checkpoints, Fp8MatrixWithoutQuantizationConfig) {
  const Checkpoint ck = make_checkpoint(Form::Channel, "fp8-no-config");
  json j = ck.config();
  j.erase("quantization_config");
  ck.set_config(j);
  EXPECT_THAT(
      ck.load_error(),
      HasSubstr("tensor model.layers.0.self_attn.q_proj.weight in " + (ck.dir / "model.safetensors").string() +
                " has dtype F8_E4M3, but " + (ck.dir / "config.json").string() +
                " has no quantization_config to say how its scales are stored (supported: quant_method \"fp8\""));
}

TEST(Fp8Checkpoints, BlockColumnsMustBeAMultipleOf128) {
  const Checkpoint ck = make_checkpoint(Form::Block128, "fp8-block64");
  ck.set_quantization_config(fine_grained_fp8_config(128, 64));
  EXPECT_THAT(ck.load_error(), HasSubstr("'quantization_config.weight_block_size' = [128, 64] is not supported: its "
                                         "column size must be a multiple of 128"));
}

// A non-fp8 matrix of an unreadable dtype: the message lists F8_E4M3, which matrices may have.
TEST(Fp8Checkpoints, MatrixOfAnUnsupportedDtype) {
  Checkpoint ck = make_checkpoint(Form::Block128, "fp8-i8");
  ck.tensor("model.layers.0.mlp.up_proj.weight").dtype = "I8";
  ck.write();
  EXPECT_THAT(ck.load_error(), HasSubstr("tensor model.layers.0.mlp.up_proj.weight in " +
                                         (ck.dir / "model-00001-of-00002.safetensors").string() +
                                         " has dtype I8; expected one of BF16, F16, F32, F8_E4M3"));
}

}  // namespace
}  // namespace mk
