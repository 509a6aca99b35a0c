// 4-bit checkpoints as Hugging Face stores them, loaded as stored into U4 codes with per-group scales and
// zero points: AutoAWQ's GEMM form (quant_method "awq") and AutoGPTQ / GPTQModel's form (quant_method
// "gptq", checkpoint_format "gptq" and "gptq_v2"). The fixtures draw random codes, zero points and f16 scales
// and pack them with this file's own packers, written from the formats' reference packing code (AutoAWQ
// WQLinear_GEMM.from_linear, AutoGPTQ QuantLinear.pack); an independent per-nibble unpacker and literal
// words check those packers, so a packer and a loader agreeing on a wrong order would be caught.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "host/emulator/emulator.h"
#include "runtime/error.h"
#include "runtime/model.h"
#include "runtime/quantize.h"
#include "runtime/reference.h"
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

// AutoAWQ's order_map (AWQ_ORDER): bits 4i..4i+3 of a packed word hold column 8k + kAwqOrder[i].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
// AWQ_REVERSE_ORDER, which AutoAWQ's dequantize_gemm applies after unpacking the nibbles in bit order.
constexpr int kAwqReverseOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// ---------------------------------------------------------------------------------------------------
// Packers, as the formats' reference code packs (values are a row-major [rows, cols] array of codes).

// AWQ GEMM (WQLinear_GEMM.from_linear): along the columns, word [r][k] |= v[r][8k + kAwqOrder[i]] << 4i.
std::vector<uint32_t> pack_awq(const std::vector<uint8_t>& v, int64_t rows, int64_t cols) {
  std::vector<uint32_t> w(size_t(rows * (cols / 8)), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols / 8; ++k)
      for (int i = 0; i < 8; ++i)
        w[size_t(r * (cols / 8) + k)] |= uint32_t(v[size_t(r * cols + 8 * k + kAwqOrder[i])]) << (4 * i);
  return w;
}

// GPTQ qweight (QuantLinear.pack): along the rows, qweight[row] |= intweight[8 row + j] << 4j.
std::vector<uint32_t> pack_gptq_rows(const std::vector<uint8_t>& v, int64_t rows, int64_t cols) {
  std::vector<uint32_t> w(size_t((rows / 8) * cols), 0);
  for (int64_t i = 0; i < rows / 8; ++i)
    for (int j = 0; j < 8; ++j)
      for (int64_t c = 0; c < cols; ++c)
        w[size_t(i * cols + c)] |= uint32_t(v[size_t((8 * i + j) * cols + c)]) << (4 * j);
  return w;
}

// GPTQ qzeros (QuantLinear.pack): along the columns, qzeros[:, col] |= zeros[:, 8 col + j] << 4j.
std::vector<uint32_t> pack_gptq_cols(const std::vector<uint8_t>& v, int64_t rows, int64_t cols) {
  std::vector<uint32_t> w(size_t(rows * (cols / 8)), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols / 8; ++k)
      for (int j = 0; j < 8; ++j) w[size_t(r * (cols / 8) + k)] |= uint32_t(v[size_t(r * cols + 8 * k + j)]) << (4 * j);
  return w;
}

std::vector<uint8_t> le_bytes(const std::vector<uint32_t>& words) {
  std::vector<uint8_t> b(words.size() * 4);
  for (size_t i = 0; i < words.size(); ++i)
    for (int k = 0; k < 4; ++k) b[4 * i + size_t(k)] = uint8_t(words[i] >> (8 * k));
  return b;
}

uint32_t le_word(const std::vector<uint8_t>& bytes, int64_t i) {
  uint32_t w = 0;
  for (int k = 0; k < 4; ++k) w |= uint32_t(bytes[size_t(4 * i + k)]) << (8 * k);
  return w;
}

void set_le_word(std::vector<uint8_t>& bytes, int64_t i, uint32_t w) {
  for (int k = 0; k < 4; ++k) bytes[size_t(4 * i + k)] = uint8_t(w >> (8 * k));
}

// ---------------------------------------------------------------------------------------------------
// Independent unpackers, per nibble, the way the formats' dequantizers read them, returning [out, in] codes.

// AutoAWQ dequantize_gemm: unpack_awq (nibble s of word [c][k] -> column 8k + s, bit order), then
// reverse_awq_order (column 8k + j takes unpacked column 8k + kAwqReverseOrder[j]), which gives the [in, out]
// codes; returned transposed, [out, in].
std::vector<uint8_t> unpack_awq_qweight(const std::vector<uint8_t>& bytes, int64_t out, int64_t in) {
  std::vector<uint8_t> bit_order(size_t(in * out));
  for (int64_t c = 0; c < in; ++c)
    for (int64_t s = 0; s < out; ++s)
      bit_order[size_t(c * out + s)] = uint8_t((le_word(bytes, c * (out / 8) + s / 8) >> (4 * (s % 8))) & 0xf);
  std::vector<uint8_t> codes(size_t(out * in));
  for (int64_t c = 0; c < in; ++c)
    for (int64_t o = 0; o < out; ++o)
      codes[size_t(o * in + c)] = bit_order[size_t(c * out + (o / 8) * 8 + kAwqReverseOrder[o % 8])];
  return codes;
}

// AutoGPTQ's torch dequantizer: row c of the weight is bits 4 (c % 8) of qweight row c / 8.
std::vector<uint8_t> unpack_gptq_qweight(const std::vector<uint8_t>& bytes, int64_t out, int64_t in) {
  std::vector<uint8_t> codes(size_t(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c = 0; c < in; ++c)
      codes[size_t(o * in + c)] = uint8_t((le_word(bytes, (c / 8) * out + o) >> (4 * (c % 8))) & 0xf);
  return codes;
}

// ---------------------------------------------------------------------------------------------------
// Fixtures.

enum class Form { Awq, AwqPerRow, GptqV1Sym, GptqV1Asym, GptqV2Asym, GptqV2Sym, GptqPerRow, GptqGroup256 };

struct FormInfo {
  const char* name;
  bool awq;
  int group_size;  // -1: one group per row
  bool v2;         // GPTQ checkpoint_format "gptq_v2"
  bool sym;
  bool g_idx;  // GPTQ: write X.g_idx (trivial)
};

FormInfo form_info(Form f) {
  switch (f) {
    case Form::Awq:
      return {"Awq_g128", true, 128, false, false, false};
    case Form::AwqPerRow:
      return {"Awq_per_row", true, -1, false, false, false};
    case Form::GptqV1Sym:
      return {"Gptq_v1_sym_g128", false, 128, false, true, true};
    case Form::GptqV1Asym:
      return {"Gptq_v1_asym_g128", false, 128, false, false, true};
    case Form::GptqV2Asym:
      return {"Gptq_v2_asym_g128", false, 128, true, false, false};
    case Form::GptqV2Sym:
      return {"Gptq_v2_sym_g128", false, 128, true, true, true};
    case Form::GptqPerRow:
      return {"Gptq_v1_per_row", false, -1, false, true, true};
    case Form::GptqGroup256:
      return {"Gptq_v1_asym_g256", false, 256, false, false, true};  // 384 = 256 + a short group
  }
  return {};
}

test::TinyModelSpec int4_spec(Arch arch = Arch::Llama) {
  test::TinyModelSpec spec;
  spec.arch = arch;
  spec.hidden = 256;        // two 128-column groups
  spec.intermediate = 384;  // three
  spec.heads = 4, spec.kv_heads = 2, spec.head_dim = 64;
  spec.dtype = DType::F16;  // as AWQ and GPTQ checkpoints keep their unquantized tensors
  return spec;
}

// One matrix as this file drew it, [out, in].
struct Int4Matrix {
  int64_t out = 0, in = 0, group = 0, groups = 0;
  std::vector<uint8_t> codes;    // [out, in]
  std::vector<uint8_t> zeros;    // [out, groups]
  std::vector<uint16_t> scales;  // f16 bits, [out, groups]
  int64_t index(int64_t r, int64_t c) const { return r * groups + c / group; }
  float expected(int64_t r, int64_t c) const {
    const int64_t g = index(r, c);
    return (float(codes[size_t(r * in + c)]) - float(zeros[size_t(g)])) * fp16_to_float(scales[size_t(g)]);
  }
};

using test::is_linear_weight;
using test::module_of;

struct Checkpoint : test::CheckpointDir {
  Form form = Form::Awq;
  std::map<std::string, Int4Matrix> int4;  // by module name

  void write() const { test::write_safetensors(dir / "model.safetensors", tensors); }
};

json awq_config(int group_size) {
  return {{"quant_method", "awq"}, {"bits", 4},         {"group_size", group_size},
          {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
}

json gptq_config(int group_size, bool sym, bool v2, bool desc_act = false) {
  return {{"quant_method", "gptq"},
          {"bits", 4},
          {"group_size", group_size},
          {"desc_act", desc_act},
          {"sym", sym},
          {"damp_percent", 0.01},
          {"true_sequential", true},
          {"static_groups", false},
          {"checkpoint_format", v2 ? "gptq_v2" : "gptq"},
          {"meta", {{"quantizer", {"gptqmodel:1.0.0"}}}}};
}

// Writes a tiny f16 model and replaces its linear layers' X.weight by the packed tensors of `form`, drawn at
// random. The embedding, norms and LM head stay f16, as both forms leave them (unless `quantize_lm_head`, as
// GPTQModel's lm_head option does).
Checkpoint make_checkpoint(Form form, const std::string& tag, const test::TinyModelSpec& spec = int4_spec(),
                           bool quantize_lm_head = false) {
  const FormInfo f = form_info(form);
  Checkpoint ck;
  ck.form = form;
  ck.make_dir(tag);
  const std::vector<test::TensorBytes> written = test::write_tiny_model(ck.dir, spec);
  std::mt19937 rng(1234u + unsigned(form));
  std::uniform_int_distribution<int> code(0, 15);
  // v1 stores zero point - 1 in a nibble, so a zero point 0 cannot be stored there (it wraps).
  std::uniform_int_distribution<int> zero(!f.awq && !f.v2 ? 1 : 0, 15);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  for (const test::TensorBytes& t : written) {
    if (!is_linear_weight(t.name) && !(quantize_lm_head && t.name == "lm_head.weight")) {
      ck.tensors.push_back(t);
      continue;
    }
    const std::string module = module_of(t.name);
    Int4Matrix m;
    m.out = t.shape[0], m.in = t.shape[1];
    m.group = f.group_size == -1 ? m.in : f.group_size;
    m.groups = (m.in + m.group - 1) / m.group;
    m.codes.resize(size_t(m.out * m.in));
    for (auto& c : m.codes) c = uint8_t(code(rng));
    m.zeros.resize(size_t(m.out * m.groups));
    for (auto& z : m.zeros) z = uint8_t(f.sym ? 8 : zero(rng));
    m.scales.resize(size_t(m.out * m.groups));
    for (auto& s : m.scales) s = float_to_fp16(scale(rng));
    // The checkpoint's arrays: codes transposed to [in, out], zeros and scales to [groups, out].
    std::vector<uint8_t> intweight(size_t(m.in * m.out)), zeros_t(size_t(m.groups * m.out));
    std::vector<uint8_t> scales_t(size_t(m.groups * m.out) * 2);
    for (int64_t o = 0; o < m.out; ++o) {
      for (int64_t c = 0; c < m.in; ++c) intweight[size_t(c * m.out + o)] = m.codes[size_t(o * m.in + c)];
      for (int64_t g = 0; g < m.groups; ++g) {
        const uint8_t z = m.zeros[size_t(o * m.groups + g)];
        zeros_t[size_t(g * m.out + o)] = f.awq || f.v2 ? z : uint8_t(z - 1);  // v1: zero point - 1
        const uint16_t s = m.scales[size_t(o * m.groups + g)];
        std::memcpy(&scales_t[size_t(g * m.out + o) * 2], &s, 2);
      }
    }
    if (f.awq) {
      ck.tensors.push_back({module + ".qweight", "I32", {m.in, m.out / 8}, le_bytes(pack_awq(intweight, m.in, m.out))});
      ck.tensors.push_back(
          {module + ".qzeros", "I32", {m.groups, m.out / 8}, le_bytes(pack_awq(zeros_t, m.groups, m.out))});
    } else {
      ck.tensors.push_back(
          {module + ".qweight", "I32", {m.in / 8, m.out}, le_bytes(pack_gptq_rows(intweight, m.in, m.out))});
      ck.tensors.push_back(
          {module + ".qzeros", "I32", {m.groups, m.out / 8}, le_bytes(pack_gptq_cols(zeros_t, m.groups, m.out))});
    }
    ck.tensors.push_back({module + ".scales", "F16", {m.groups, m.out}, scales_t});
    if (f.g_idx) {
      std::vector<uint32_t> g_idx(size_t(m.in));
      for (int64_t c = 0; c < m.in; ++c) g_idx[size_t(c)] = uint32_t(c / m.group);
      ck.tensors.push_back({module + ".g_idx", "I32", {m.in}, le_bytes(g_idx)});
    }
    ck.int4.emplace(module, std::move(m));
  }
  ck.write();
  ck.set_quantization_config(f.awq ? awq_config(f.group_size) : gptq_config(f.group_size, f.sym, f.v2));
  return ck;
}

std::map<std::string, const TensorView*> matrices_by_name(const Model& model) {
  std::map<std::string, const TensorView*> out;
  for (const TensorView* t : weight_matrices(model)) out.emplace(t->name, t);
  return out;
}

// Every element of every matrix: its code, zero point and scale, and at() = (code - zero) * scale exactly.
void expect_matrices(const Checkpoint& ck, const Model& model) {
  const auto views = matrices_by_name(model);
  const bool lm_head_quantized = ck.int4.count("lm_head") != 0;
  ASSERT_EQ(ck.int4.size(), size_t(7 * int4_spec().layers) + (lm_head_quantized ? 1 : 0));
  for (const auto& [module, m] : ck.int4) {
    SCOPED_TRACE(module);
    ASSERT_EQ(views.count(module + ".qweight"), 1u);
    const TensorView& v = *views.at(module + ".qweight");
    ASSERT_EQ(v.dtype, DType::U4);
    ASSERT_EQ(v.shape, (std::vector<int64_t>{m.out, m.in}));
    ASSERT_TRUE(v.quantized());
    EXPECT_EQ(v.scale.name, module + ".scales");
    EXPECT_EQ(v.scale.dtype, DType::F16);
    EXPECT_EQ(v.scale.block_rows, 1);
    EXPECT_EQ(v.scale.block_cols, std::min(m.group, m.in));
    EXPECT_EQ(v.scale.cols, m.groups);
    EXPECT_EQ(v.scale.count, m.out * m.groups);
    ASSERT_NE(v.scale.zero, nullptr);
    EXPECT_EQ(v.nbytes(), size_t(m.out * m.in / 2 + m.out * m.groups * 3));
    for (int64_t r = 0; r < m.out; ++r)
      for (int64_t c = 0; c < m.in; ++c) {
        const int64_t i = r * m.in + c;
        ASSERT_EQ(load_as_float(v.data, DType::U4, i), float(m.codes[size_t(i)])) << "code [" << r << ", " << c << "]";
        ASSERT_EQ(v.scale.zero_at(r, c), float(m.zeros[size_t(m.index(r, c))])) << "zero [" << r << ", " << c << "]";
        ASSERT_EQ(v.at(i), m.expected(r, c)) << "[" << r << ", " << c << "]";
      }
  }
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    SCOPED_TRACE(name);
    if (lm_head_quantized) break;  // the embedding is then brought along into int4 (runtime/quantize.h)
    ASSERT_EQ(views.count(name), 1u);
    EXPECT_EQ(views.at(name)->dtype, DType::F16);
    EXPECT_FALSE(views.at(name)->quantized());
  }
}

class Int4Checkpoint : public ::testing::TestWithParam<Form> {};

TEST_P(Int4Checkpoint, LoadsEveryElement) {
  const Checkpoint ck = make_checkpoint(GetParam(), "int4-ckpt");
  const auto model = ck.load();
  expect_matrices(ck, *model);
  EXPECT_EQ(model->formats.body, MatrixFormat::INT4);
}

// The packed words this file wrote, unpacked per nibble as the formats' dequantizers do, are the drawn codes:
// the packers follow the documented order, so the loader is checked against the format, not against them.
TEST_P(Int4Checkpoint, WrittenWordsUnpackToTheDrawnCodes) {
  Checkpoint ck = make_checkpoint(GetParam(), "int4-unpack");
  const bool awq = form_info(GetParam()).awq;
  for (const auto& [module, m] : ck.int4) {
    SCOPED_TRACE(module);
    const auto& bytes = ck.tensor(module + ".qweight").bytes;
    const std::vector<uint8_t> codes =
        awq ? unpack_awq_qweight(bytes, m.out, m.in) : unpack_gptq_qweight(bytes, m.out, m.in);
    ASSERT_EQ(codes, m.codes);
  }
}

// The emulator reads the INT4 image packed from the checkpoint's own codes, scales and zero points, with
// the f16 embedding and LM head as stored; the reference computes on the dequantized weights.
TEST_P(Int4Checkpoint, EmulatorMatchesTheReference) {
  const Checkpoint ck = make_checkpoint(GetParam(), "int4-emu");
  auto model = ck.load();
  model->config.eos_token_ids.clear();
  ASSERT_EQ(model->formats.head, MatrixFormat::F16);
  EmulatorOptions opt;
  opt.num_workgroups = 11;
  opt.context = 48;
  opt.record_logits = true;
  test::expect_emulator_matches_reference(*model, {1, 5, 9, 33, 7}, opt, 16);
}

INSTANTIATE_TEST_SUITE_P(Forms, Int4Checkpoint,
                         ::testing::Values(Form::Awq, Form::AwqPerRow, Form::GptqV1Sym, Form::GptqV1Asym,
                                           Form::GptqV2Asym, Form::GptqV2Sym, Form::GptqPerRow, Form::GptqGroup256),
                         [](const auto& test_info) { return std::string(form_info(test_info.param).name); });

// Literal words: codes 0..7 in AWQ's order (nibble i holds column kAwqOrder[i]) and in GPTQ's (nibble j holds
// row j), from the packers and back through the independent unpackers.
TEST(Int4Checkpoints, PackersGiveTheDocumentedWords) {
  const std::vector<uint8_t> ramp = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(pack_awq(ramp, 1, 8), std::vector<uint32_t>{0x75316420u});
  EXPECT_EQ(pack_gptq_rows(ramp, 8, 1), std::vector<uint32_t>{0x76543210u});
  EXPECT_EQ(pack_gptq_cols(ramp, 1, 8), std::vector<uint32_t>{0x76543210u});
  // [in 1, out 8] AWQ qweight of one word, and [in 8, out 1] GPTQ qweight of one word: row r / column c = r.
  EXPECT_EQ(unpack_awq_qweight(le_bytes({0x75316420u}), 8, 1), ramp);
  EXPECT_EQ(unpack_gptq_qweight(le_bytes({0x76543210u}), 1, 8), ramp);
}

// The loader on literal words: AWQ qweight word [c 0][k 0] = 0x75316420 is column 0 of rows 0..7 = 0..7, and
// the same qzeros word is the zero points 0..7 of rows 0..7, group 0. GPTQ v1 qweight word [0][o 0] =
// 0x76543210 is columns 0..7 of row 0 = 0..7, and qzeros word [g 0][k 0] = 0x76543210 is zero points 1..8 of
// rows 0..7 (stored minus 1).
TEST(Int4Checkpoints, LoaderReadsLiteralWords) {
  const std::string module = "model.layers.1.mlp.down_proj";
  for (Form form : {Form::Awq, Form::GptqV1Asym}) {
    SCOPED_TRACE(form_info(form).name);
    Checkpoint ck = make_checkpoint(form, "int4-literal");
    const bool awq = form == Form::Awq;
    set_le_word(ck.tensor(module + ".qweight").bytes, 0, awq ? 0x75316420u : 0x76543210u);
    set_le_word(ck.tensor(module + ".qzeros").bytes, 0, awq ? 0x75316420u : 0x76543210u);
    ck.write();
    const auto model = ck.load();
    const TensorView& v = *matrices_by_name(*model).at(module + ".qweight");
    const int64_t in = v.shape[1];
    for (int k = 0; k < 8; ++k) {
      const int64_t i = awq ? int64_t(k) * in : k;  // AWQ: row k, column 0; GPTQ: row 0, column k
      EXPECT_EQ(load_as_float(v.data, DType::U4, i), float(k)) << k;
      EXPECT_EQ(v.scale.zero_at(k, 0), float(awq ? k : k + 1)) << k;
    }
  }
}

// Qwen2 has q/k/v biases, kept f16 beside the packed matrices.
TEST(Int4Checkpoints, Qwen2WithBiases) {
  const Checkpoint ck = make_checkpoint(Form::Awq, "int4-qwen2", int4_spec(Arch::Qwen2));
  const auto model = ck.load();
  expect_matrices(ck, *model);
  EXPECT_TRUE(model->weights.layers[0].bq.present());
  EXPECT_EQ(model->weights.layers[0].bq.dtype, DType::F16);
}

// GPTQModel can quantize the LM head too: lm_head.qweight.
TEST(Int4Checkpoints, QuantizedLmHead) {
  const Checkpoint ck = make_checkpoint(Form::GptqV2Asym, "int4-lm-head", int4_spec(), /*quantize_lm_head=*/true);
  expect_matrices(ck, *ck.load());
}

// Matrices large enough for the loader to unpack them on several threads (when the machine has several cores).
TEST(Int4Checkpoints, LargerMatrices) {
  test::TinyModelSpec spec = int4_spec();
  spec.hidden = 512, spec.intermediate = 1024, spec.heads = 8, spec.kv_heads = 2;
  for (Form form : {Form::Awq, Form::GptqV1Asym}) {
    SCOPED_TRACE(form_info(form).name);
    const Checkpoint ck = make_checkpoint(form, "int4-larger", spec);
    expect_matrices(ck, *ck.load());
  }
}

// GPTQ checkpoints may carry all-zero biases on layers that have none: ignored; a nonzero one is refused.
TEST(Int4Checkpoints, ExtraBiases) {
  Checkpoint ck = make_checkpoint(Form::GptqV1Sym, "int4-bias");
  const std::string bias = "model.layers.0.self_attn.o_proj.bias";
  ck.tensors.push_back({bias, "F16", {256}, test::encode(std::vector<float>(256, 0.f), DType::F16)});
  ck.write();
  expect_matrices(ck, *ck.load());
  std::vector<float> b(256, 0.f);
  b[3] = 0.5f;
  ck.tensor(bias).bytes = test::encode(b, DType::F16);
  ck.write();
  EXPECT_THAT(ck.load_error(), HasSubstr("tensor " + bias + " in " + ck.file() +
                                         " has a nonzero element ([3] = 0.5), but the architecture has no bias on this "
                                         "layer"));
}

// A trivial g_idx with desc_act true (act-order that changed nothing, e.g. one group per row) is accepted.
TEST(Int4Checkpoints, TrivialGIdxWithDescAct) {
  const Checkpoint ck = make_checkpoint(Form::GptqPerRow, "int4-desc-act");
  ck.set_quantization_config(gptq_config(-1, true, false, /*desc_act=*/true));
  expect_matrices(ck, *ck.load());
}

// quantization_config keys at their defaults when absent: GPTQ group_size 128, sym, v1; AWQ bits 4, gemm.
TEST(Int4Checkpoints, ConfigDefaults) {
  {
    const Checkpoint ck = make_checkpoint(Form::GptqV1Sym, "int4-gptq-defaults");
    ck.set_quantization_config({{"quant_method", "gptq"}, {"bits", 4}});
    expect_matrices(ck, *ck.load());
    const WeightQuantization q = ck.load()->config.quantization;
    EXPECT_EQ(q.method, WeightQuantization::Method::Gptq);
    EXPECT_EQ(q.group_size, 128);
    EXPECT_TRUE(q.zeros_minus_one);
    EXPECT_FALSE(q.desc_act);
  }
  {
    const Checkpoint ck = make_checkpoint(Form::Awq, "int4-awq-defaults");
    ck.set_quantization_config({{"quant_method", "awq"}, {"version", "GEMM"}});  // transformers lowercases it
    expect_matrices(ck, *ck.load());
  }
}

// ---------------------------------------------------------------------------------------------------
// Errors: each names the tensor or key and what was expected.

TEST(Int4Checkpoints, UnsupportedAwqVersion) {
  const Checkpoint ck = make_checkpoint(Form::Awq, "int4-gemv");
  for (const char* version : {"gemv", "gemv_fast", "marlin", "exllama", "ipex"}) {
    json q = awq_config(128);
    q["version"] = version;
    ck.set_quantization_config(q);
    EXPECT_THAT(ck.load_error(),
                HasSubstr((ck.dir / "config.json").string() + ": unsupported 'quantization_config.version' = \"" +
                          version + "\" for quant_method \"awq\" (supported: \"gemm\""));
  }
  json q = awq_config(128);
  q["backend"] = "llm-awq";
  ck.set_quantization_config(q);
  EXPECT_THAT(ck.load_error(),
              HasSubstr("unsupported 'quantization_config.backend' = \"llm-awq\" for quant_method \"awq\" "
                        "(supported: \"autoawq\""));
}

TEST(Int4Checkpoints, Bits8) {
  const Checkpoint ck = make_checkpoint(Form::GptqV1Sym, "int4-bits8");
  json q = gptq_config(128, true, false);
  q["bits"] = 8;
  ck.set_quantization_config(q);
  EXPECT_THAT(ck.load_error(), HasSubstr("'quantization_config.bits' = 8 is not supported for quant_method \"gptq\" "
                                         "(supported: 4"));
  q = awq_config(128);
  q["bits"] = 8;
  ck.set_quantization_config(q);
  EXPECT_THAT(ck.load_error(), HasSubstr("'quantization_config.bits' = 8 is not supported for quant_method \"awq\""));
  q = gptq_config(128, true, false);
  q.erase("bits");  // GPTQConfig has no default for it
  ck.set_quantization_config(q);
  EXPECT_THAT(ck.load_error(), HasSubstr("missing required key 'quantization_config.bits'"));
}

TEST(Int4Checkpoints, GroupSizeNotAMultipleOf128) {
  const Checkpoint ck = make_checkpoint(Form::GptqV1Sym, "int4-g64");
  for (int g : {64, 32}) {
    ck.set_quantization_config(gptq_config(g, true, false));
    EXPECT_THAT(ck.load_error(),
                HasSubstr(fmt::format("tensor model.layers.0.self_attn.q_proj.qweight in {}: "
                                      "quantization_config.group_size = {} is not supported for the [256, 256] matrix",
                                      ck.file(), g)));
    EXPECT_THAT(ck.load_error(), HasSubstr("so a group must be a multiple of 128 columns, or -1 (one group per row)"));
  }
  ck.set_quantization_config(awq_config(64));
  EXPECT_THAT(ck.load_error(), HasSubstr("quantization_config.group_size = 64 is not supported"));
  ck.set_quantization_config(gptq_config(0, true, false));
  EXPECT_THAT(ck.load_error(),
              HasSubstr("'quantization_config.group_size' must be positive, or -1 for one group per row"));
}

TEST(Int4Checkpoints, MissingQzerosOrScales) {
  for (const char* part : {".qzeros", ".scales"}) {
    Checkpoint ck = make_checkpoint(Form::Awq, "int4-missing");
    const std::string module = "model.layers.1.mlp.down_proj";
    ck.erase(module + part);
    ck.write();
    const std::string msg = ck.load_error();
    EXPECT_THAT(msg, HasSubstr("tensor " + module + ".qweight in " + ck.file() + " is a packed int4 matrix, but its " +
                               (part == std::string(".qzeros") ? "zero points " : "scales ") + module + part +
                               " is not in " + ck.dir.string()));
    EXPECT_THAT(msg, HasSubstr(part == std::string(".qzeros") ? "expected shape [3, 32]" : "expected shape [3, 256]"));
  }
}

// AWQ's zero_point false: the GEMM form has no symmetric variant, so qzeros are read as stored (as AutoAWQ's
// kernels do); without them the message says so.
TEST(Int4Checkpoints, AwqZeroPointFalse) {
  Checkpoint ck = make_checkpoint(Form::Awq, "int4-awq-sym");
  json q = awq_config(128);
  q["zero_point"] = false;
  ck.set_quantization_config(q);
  expect_matrices(ck, *ck.load());
  ck.erase("model.layers.0.self_attn.q_proj.qzeros");
  ck.write();
  const std::string msg = ck.load_error();
  EXPECT_THAT(msg, HasSubstr("its zero points model.layers.0.self_attn.q_proj.qzeros is not in"));
  EXPECT_THAT(msg, HasSubstr("; quantization_config.zero_point is false, but AWQ's GEMM form has no symmetric "
                             "variant: it always stores qzeros, which its kernels read"));
}

TEST(Int4Checkpoints, MissingQweight) {
  Checkpoint ck = make_checkpoint(Form::GptqV2Asym, "int4-missing-qweight");
  ck.erase("model.layers.0.mlp.up_proj.qweight");
  ck.write();
  EXPECT_THAT(ck.load_error(), HasSubstr("tensor model.layers.0.mlp.up_proj.weight not found in " + ck.dir.string() +
                                         ", nor its packed int4 form model.layers.0.mlp.up_proj.qweight"));
}

TEST(Int4Checkpoints, PackedTensorsWithoutQuantizationConfig) {
  const Checkpoint ck = make_checkpoint(Form::Awq, "int4-no-config");
  json j = ck.config();
  j.erase("quantization_config");
  ck.set_config(j);
  EXPECT_THAT(ck.load_error(),
              HasSubstr("the files have model.layers.0.self_attn.q_proj.qweight, a packed int4 matrix, but " +
                        (ck.dir / "config.json").string() + " has no quantization_config to say how it is packed"));
}

TEST(Int4Checkpoints, WrongShapes) {
  {
    // AWQ's config over GPTQ's packing: qweight [in / 8, out] where AWQ has [in, out / 8].
    const Checkpoint ck = make_checkpoint(Form::GptqV2Asym, "int4-shape-form");
    ck.set_quantization_config(awq_config(128));
    const std::string msg = ck.load_error();
    EXPECT_THAT(msg, HasSubstr("tensor model.layers.0.self_attn.q_proj.qweight in " + ck.file() +
                               " has shape [32, 256]; expected [256, 32] from config.json (quant_method \"awq\" packs "
                               "the codes of eight consecutive output rows into each int32, [in, out / 8], for the "
                               "[256, 256] matrix (num_attention_heads=4 x head_dim=64, hidden_size=256))"));
  }
  {
    Checkpoint ck = make_checkpoint(Form::GptqV1Sym, "int4-shape-scales");
    ck.tensor("model.layers.1.self_attn.k_proj.scales").shape = {128, 2};  // [out, groups]: not transposed
    ck.write();
    EXPECT_THAT(ck.load_error(),
                HasSubstr("tensor model.layers.1.self_attn.k_proj.scales in " + ck.file() +
                          " has shape [128, 2]; expected [2, 128] from config.json (one scale per group "
                          "and output row, [groups, out], for group_size 128 of the [128, 256] matrix"));
  }
  {
    Checkpoint ck = make_checkpoint(Form::GptqV1Sym, "int4-shape-g-idx");
    ck.tensor("model.layers.0.mlp.down_proj.g_idx").shape = {192, 2};
    ck.write();
    EXPECT_THAT(ck.load_error(), HasSubstr("tensor model.layers.0.mlp.down_proj.g_idx in " + ck.file() +
                                           " has shape [192, 2]; expected [384]"));
  }
}

TEST(Int4Checkpoints, WrongDtypes) {
  {
    Checkpoint ck = make_checkpoint(Form::Awq, "int4-dtype-scales");
    ck.tensor("model.layers.0.mlp.gate_proj.scales").dtype = "I16";  // same bytes per element as F16
    ck.write();
    EXPECT_THAT(ck.load_error(),
                HasSubstr("tensor model.layers.0.mlp.gate_proj.scales in " + ck.file() +
                          " has dtype I16; expected F16 or BF16 or F32 (the scales of packed int4 matrix "
                          "model.layers.0.mlp.gate_proj.qweight)"));
  }
  {
    Checkpoint ck = make_checkpoint(Form::Awq, "int4-dtype-scales-i32");
    test::TensorBytes& s = ck.tensor("model.layers.0.mlp.gate_proj.scales");
    s.dtype = "I32";
    s.shape = {2, 192};  // the same bytes read as I32
    ck.write();
    EXPECT_THAT(ck.load_error(), HasSubstr("tensor model.layers.0.mlp.gate_proj.scales in " + ck.file() +
                                           " has dtype I32; expected F16 or BF16 or F32"));
  }
  {
    Checkpoint ck = make_checkpoint(Form::GptqV2Asym, "int4-dtype-qweight");
    ck.tensor("model.layers.1.self_attn.v_proj.qweight").dtype = "F32";
    ck.write();
    EXPECT_THAT(ck.load_error(), HasSubstr("tensor model.layers.1.self_attn.v_proj.qweight in " + ck.file() +
                                           " has dtype F32; expected I32 (the codes of packed int4 matrix "
                                           "model.layers.1.self_attn.v_proj.qweight)"));
  }
  {
    Checkpoint ck = make_checkpoint(Form::GptqV2Asym, "int4-dtype-qzeros");
    ck.tensor("model.layers.1.self_attn.v_proj.qzeros").dtype = "F32";
    ck.write();
    EXPECT_THAT(ck.load_error(), HasSubstr("tensor model.layers.1.self_attn.v_proj.qzeros in " + ck.file() +
                                           " has dtype F32; expected I32 (the zero points of packed int4 matrix"));
  }
}

TEST(Int4Checkpoints, PermutedGIdx) {
  Checkpoint ck = make_checkpoint(Form::GptqV1Asym, "int4-act-order");
  const std::string g_idx = "model.layers.0.self_attn.o_proj.g_idx";
  // Act-order: columns 0 and 200 swap groups.
  set_le_word(ck.tensor(g_idx).bytes, 0, 1);
  set_le_word(ck.tensor(g_idx).bytes, 200, 0);
  ck.write();
  ck.set_quantization_config(gptq_config(128, false, false, /*desc_act=*/true));
  EXPECT_THAT(ck.load_error(),
              HasSubstr("tensor " + g_idx + " in " + ck.file() +
                        ": g_idx[0] = 1, but contiguous groups of group_size 128 put input column 0 in "
                        "group 0: act-order (desc_act true, a permuted g_idx) is not supported"));
  // The same without desc_act in the config: g_idx is what counts.
  ck.set_quantization_config(gptq_config(128, false, false));
  EXPECT_THAT(ck.load_error(), HasSubstr("act-order (desc_act false, a permuted g_idx) is not supported"));
}

TEST(Int4Checkpoints, DescActWithoutGIdx) {
  Checkpoint ck = make_checkpoint(Form::GptqV2Asym, "int4-no-g-idx");  // writes no g_idx
  ck.set_quantization_config(gptq_config(128, false, true, /*desc_act=*/true));
  EXPECT_THAT(ck.load_error(),
              HasSubstr("tensor model.layers.0.self_attn.q_proj.qweight in " + ck.file() +
                        " is a packed int4 matrix and quantization_config.desc_act is true (act-order), "
                        "but its group index model.layers.0.self_attn.q_proj.g_idx is not in"));
}

// v1 stores zero point - 1: a stored 15 is zero point 16 (a zero point 0 that wrapped), outside 0..15.
TEST(Int4Checkpoints, GptqV1WrappedZeroPoint) {
  Checkpoint ck = make_checkpoint(Form::GptqV1Asym, "int4-wrapped-zero");
  const std::string qzeros = "model.layers.1.mlp.up_proj.qzeros";
  uint32_t w = le_word(ck.tensor(qzeros).bytes, 5);                   // group 0, rows 40..47
  set_le_word(ck.tensor(qzeros).bytes, 5, (w & ~0xf000u) | 0xf000u);  // row 43
  ck.write();
  EXPECT_THAT(ck.load_error(), HasSubstr("tensor " + qzeros + " in " + ck.file() +
                                         ": the zero point of output row 43, group 0 is stored as 15, which "
                                         "checkpoint_format \"gptq\" (zero points stored minus 1) reads as 16"));
  // gptq_v2 stores zero points as they are: 15 is 15.
  ck.set_quantization_config(gptq_config(128, false, true));
  const auto model = ck.load();
  EXPECT_EQ(matrices_by_name(*model).at("model.layers.1.mlp.up_proj.qweight")->scale.zero_at(43, 0), 15.f);
}

TEST(Int4Checkpoints, UnsupportedGptqForms) {
  const Checkpoint ck = make_checkpoint(Form::GptqV1Sym, "int4-gptq-forms");
  for (const char* format : {"marlin", "bitblas", "gptq_v3"}) {
    json q = gptq_config(128, true, false);
    q["checkpoint_format"] = format;
    ck.set_quantization_config(q);
    EXPECT_THAT(ck.load_error(), HasSubstr(std::string("unsupported 'quantization_config.checkpoint_format' = \"") +
                                           format + "\" for quant_method \"gptq\" (supported: \"gptq\""));
  }
  json q = gptq_config(128, true, false);
  q["is_marlin_format"] = true;
  ck.set_quantization_config(q);
  EXPECT_THAT(ck.load_error(), HasSubstr("'quantization_config.is_marlin_format' = true is not supported"));
  q = gptq_config(128, true, false);
  q["pack_dtype"] = "int64";
  ck.set_quantization_config(q);
  EXPECT_THAT(ck.load_error(),
              HasSubstr("unsupported 'quantization_config.pack_dtype' = \"int64\" (supported: \"int32\""));
}

TEST(Int4Checkpoints, UnknownQuantMethodListsTheInt4Ones) {
  const Checkpoint ck = make_checkpoint(Form::Awq, "int4-unknown");
  ck.set_quantization_config({{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}});
  const std::string msg = ck.load_error();
  EXPECT_THAT(msg, HasSubstr("unsupported quantization method 'quantization_config.quant_method' = \"bitsandbytes\""));
  EXPECT_THAT(msg, HasSubstr("\"awq\" (AutoAWQ, version \"gemm\""));
  EXPECT_THAT(msg, HasSubstr("\"gptq\" (AutoGPTQ / GPTQModel, checkpoint_format \"gptq\" or \"gptq_v2\""));
}

// An fp8 matrix in a checkpoint whose config says AWQ.
TEST(Int4Checkpoints, Fp8MatrixInAnInt4Checkpoint) {
  Checkpoint ck = make_checkpoint(Form::Awq, "int4-fp8");
  const std::string module = "model.layers.0.mlp.up_proj";
  for (const char* part : {".qweight", ".qzeros", ".scales"}) ck.erase(module + part);
  ck.tensors.push_back({module + ".weight", "F8_E4M3", {384, 256}, std::vector<uint8_t>(384 * 256, 0x38)});
  ck.write();
  EXPECT_THAT(ck.load_error(), HasSubstr("tensor " + module + ".weight in " + ck.file() + " has dtype F8_E4M3, but " +
                                         (ck.dir / "config.json").string() + " says quant_method \"awq\""));
}

}  // namespace
}  // namespace mk
