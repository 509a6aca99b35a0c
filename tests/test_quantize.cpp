// Load-time quantization (fp8, int4) and the quantized matrix formats of the weight image.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/error.h"
#include "runtime/presets.h"
#include "runtime/quantize.h"
#include "runtime/synthetic_model.h"
#include "runtime/weight_layout.h"
#include "tests/helpers/error_of.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

using ::testing::HasSubstr;

test::TinyModelSpec fp8_spec() {
  test::TinyModelSpec spec;
  spec.hidden = 256;        // two 128-column groups per row of the hidden-wide matrices
  spec.intermediate = 336;  // three groups, the last one short (80 columns)
  spec.heads = 4, spec.kv_heads = 2, spec.head_dim = 64;
  return spec;
}

struct Pair {
  std::unique_ptr<Model> original, quantized;
};

Pair load_both(const test::TinyModelSpec& spec, const std::string& tag, Quantize quantize = MatrixFormat::FP8, bool head = true) {
  const auto dir = test::make_temp_dir(tag);
  test::write_tiny_model(dir, spec);
  LoadOptions options;
  options.quantize = quantize;
  options.quantize_head = head;
  return {load_model(dir), load_model(dir, options)};
}

test::TinyModelSpec int4_spec() {
  test::TinyModelSpec spec = fp8_spec();
  spec.intermediate = 352;  // a multiple of 32; three groups, the last one 96 columns
  return spec;
}

// The nibble of its 32-bit word that element e (0..7) of an INT4 word occupies, as
// runtime/matrix_format.h documents it, written out: pairs (0, 1), (2, 3), ... 16 bits apart.
constexpr int kInt4Nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

TEST(Quantize, EveryMatrixBecomesFp8WithOneScalePerGroupOfARow) {
  const Pair m = load_both(fp8_spec(), "quantize");
  EXPECT_EQ(m.original->formats.body, MatrixFormat::BF16);
  EXPECT_EQ(m.quantized->formats.body, MatrixFormat::FP8);
  const auto originals = weight_matrices(*m.original);
  const auto quantized = weight_matrices(*m.quantized);
  ASSERT_EQ(originals.size(), quantized.size());
  for (size_t i = 0; i < originals.size(); ++i) {
    const TensorView& o = *originals[i];
    const TensorView& q = *quantized[i];
    SCOPED_TRACE(o.name);
    ASSERT_EQ(q.dtype, DType::F8_E4M3);
    ASSERT_TRUE(q.quantized());
    EXPECT_EQ(q.shape, o.shape);
    const int64_t rows = o.shape[0], cols = o.shape[1];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += 128) {
        const int64_t c1 = std::min(cols, c0 + 128);
        float amax = 0.f;
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(o.at(r * cols + c)));
        const float s = q.scale.at(r, c0);
        ASSERT_EQ(s, amax / 448.0f) << "row " << r << ", group at " << c0;
        for (int64_t c = c0; c < c1; ++c) {
          // Half an fp8 step: 2^-4 of the value for normals, 2^-10 of the scale for subnormals.
          const float v = o.at(r * cols + c), d = q.at(r * cols + c);
          const float bound = std::max(std::fabs(v) * 0x1p-4f, s * 0x1p-10f) * 1.0001f;
          ASSERT_LE(std::fabs(d - v), bound) << "[" << r << ", " << c << "]: " << v << " became " << d;
        }
      }
    }
  }
}

TEST(Quantize, ATiedLmHeadStaysTheEmbedding) {
  test::TinyModelSpec spec = fp8_spec();
  spec.tied = true;
  const Pair m = load_both(spec, "quantize-tied");
  EXPECT_EQ(m.quantized->weights.lm_head.data, m.quantized->weights.embed.data);
  EXPECT_EQ(m.quantized->weights.lm_head.scale.data, m.quantized->weights.embed.scale.data);
  EXPECT_EQ(m.quantized->weights.lm_head.dtype, DType::F8_E4M3);
}

// The image's FP8 rows, read back by the format's definition (runtime/matrix_format.h): the values, then
// one f32 scale per 128 columns, padded to 16 bytes.
TEST(Quantize, TheImageHoldsEachRowsValuesThenItsScales) {
  const Pair m = load_both(fp8_spec(), "quantize-image");
  const Model& model = *m.quantized;
  const WeightLayout layout = plan_weight_layout(model.config, MatrixFormat::FP8);
  const std::vector<uint8_t> image = pack_weights_to_host(model, layout);
  struct Case {
    uint64_t offset;
    const TensorView* t;
  };
  const LayerWeights& L = model.weights.layers[1];
  const LayerOffsets& o = layout.layers[1];
  for (const Case& c : {Case{o.w_down, &L.w_down}, Case{o.w_gate, &L.w_gate}, Case{o.wo, &L.wo}, Case{layout.embed, &model.weights.embed}}) {
    SCOPED_TRACE(c.t->name);
    const int64_t rows = c.t->shape[0], cols = c.t->shape[1];
    const int64_t groups = (cols + 127) / 128, row_bytes = cols + (groups * 4 + 15) / 16 * 16;
    EXPECT_EQ(uint64_t(row_bytes), layout.row_bytes(int(cols)));
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = image.data() + c.offset + uint64_t(r * row_bytes);
      ASSERT_EQ(std::memcmp(row, static_cast<const uint8_t*>(c.t->data) + r * cols, size_t(cols)), 0) << "row " << r;
      for (int64_t g = 0; g < groups; ++g) {
        float s;
        std::memcpy(&s, row + cols + 4 * g, 4);
        ASSERT_EQ(s, c.t->scale.at(r, g * 128)) << "row " << r << ", group " << g;
      }
      for (int64_t pad = cols + 4 * groups; pad < row_bytes; ++pad) ASSERT_EQ(row[pad], 0) << "row " << r;
    }
  }
  // The fused QKV rows are the q, k and v rows in the kv-group order, each with its own scales.
  const int64_t H = model.config.hidden_size, row_bytes = H + 16;
  const int fused = layout.qkv_row(model.config, 2, 5);  // v row 5
  EXPECT_EQ(std::memcmp(image.data() + o.wqkv + uint64_t(fused * row_bytes), static_cast<const uint8_t*>(L.wv.data) + 5 * H,
                        size_t(H)),
            0);
}

TEST(Quantize, AnFp8ImageRefusesAnUnquantizedMatrixAndAForeignBlockShape) {
  const Pair m = load_both(fp8_spec(), "quantize-refuse");
  Model& model = *m.quantized;
  const WeightLayout layout = plan_weight_layout(model.config, MatrixFormat::FP8);
  const TensorView quantized_down = model.weights.layers[0].w_down;
  model.weights.layers[0].w_down = m.original->weights.layers[0].w_down;  // bf16 among fp8
  EXPECT_THAT(test::error_of([&] { pack_weights_to_host(model, layout); }),
              HasSubstr("tensor model.layers.0.mlp.down_proj.weight is BF16, but it is packed as fp8"));
  model.weights.layers[0].w_down = quantized_down;
  model.weights.layers[0].w_down.scale.block_cols = 64;  // a block scale that splits a 128-column group
  EXPECT_THAT(test::error_of([&] { pack_weights_to_host(model, layout); }),
              HasSubstr("scale blocks of 64 columns do not cover whole 128-column groups"));
}

TEST(Quantize, AnFp8ImageNeedsColumnsInMultiplesOf16) {
  test::TinyModelSpec spec = fp8_spec();
  spec.intermediate = 328;  // a multiple of 8, not of 16
  const auto dir = test::make_temp_dir("quantize-cols");
  test::write_tiny_model(dir, spec);
  const auto model = load_model(dir);
  EXPECT_THAT(test::error_of([&] { plan_weight_layout(model->config, MatrixFormat::FP8); }),
              HasSubstr("intermediate_size = 328 is not a multiple of 16, which fp8 matrices need"));
}

TEST(Quantize, ANonFiniteWeightIsNamed) {
  test::TinyModelSpec spec = fp8_spec();
  const auto dir = test::make_temp_dir("quantize-nan");
  auto tensors = test::write_tiny_model(dir, spec);
  for (auto& t : tensors)
    if (t.name == "model.layers.1.self_attn.o_proj.weight") {
      const uint16_t inf = 0x7f80;  // bf16 +inf
      std::memcpy(t.bytes.data() + 2 * (3 * 256 + 7), &inf, 2);
    }
  test::write_safetensors(dir / "model.safetensors", tensors);
  LoadOptions fp8;
  fp8.quantize = MatrixFormat::FP8;
  EXPECT_THAT(test::error_of([&] { load_model(dir, fp8); }),
              HasSubstr("tensor model.layers.1.self_attn.o_proj.weight: element [3, 7] is inf"));
}

// A preset has no tensors; mk-bench's --quantize asks for the quantized image through it.
TEST(Quantize, APresetCarriesItsMatrixFormats) {
  EXPECT_EQ(preset_model("llama-3.2-1b")->formats.body, MatrixFormat::BF16);
  EXPECT_EQ(preset_model("llama-3.2-1b", MatrixFormat::FP8)->formats.body, MatrixFormat::FP8);
  EXPECT_EQ(preset_model("llama-3.2-1b", MatrixFormat::FP8)->formats.head, MatrixFormat::FP8);
  EXPECT_EQ(preset_model("qwen2.5-0.5b", MatrixFormat::F16)->formats.body, MatrixFormat::F16);
  const auto int4 = preset_model("llama-3.1-8b", MatrixFormat::INT4, MatrixFormat::BF16);
  EXPECT_EQ(int4->formats.body, MatrixFormat::INT4);
  EXPECT_EQ(int4->formats.head, MatrixFormat::BF16);
}

// int4: per row and 128-column group, min-max scale (max - min) / 15 and zero point round(-min / s);
// every weight within half a step of its original.
TEST(Quantize, EveryMatrixBecomesInt4WithAScaleAndZeroPointPerGroupOfARow) {
  const Pair m = load_both(int4_spec(), "quantize-int4", MatrixFormat::INT4);
  EXPECT_EQ(m.quantized->formats.body, MatrixFormat::INT4);
  EXPECT_EQ(m.quantized->formats.head, MatrixFormat::INT4);
  const auto originals = weight_matrices(*m.original);
  const auto quantized = weight_matrices(*m.quantized);
  ASSERT_EQ(originals.size(), quantized.size());
  for (size_t i = 0; i < originals.size(); ++i) {
    const TensorView& o = *originals[i];
    const TensorView& q = *quantized[i];
    SCOPED_TRACE(o.name);
    ASSERT_EQ(q.dtype, DType::U4);
    ASSERT_TRUE(q.quantized());
    ASSERT_NE(q.scale.zero, nullptr);
    const int64_t rows = o.shape[0], cols = o.shape[1];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += 128) {
        const int64_t c1 = std::min(cols, c0 + 128);
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t c = c0; c < c1; ++c) lo = std::min(lo, o.at(r * cols + c)), hi = std::max(hi, o.at(r * cols + c));
        const float s = q.scale.at(r, c0);
        ASSERT_GT(hi, lo);
        ASSERT_EQ(s, (hi - lo) / 15.0f) << "row " << r << ", group at " << c0;
        ASSERT_EQ(q.scale.zero_at(r, c0), std::nearbyint(-lo / s)) << "row " << r << ", group at " << c0;
        for (int64_t c = c0; c < c1; ++c) {
          const float v = o.at(r * cols + c), d = q.at(r * cols + c);
          ASSERT_LE(std::fabs(d - v), 0.5001f * s) << "[" << r << ", " << c << "]: " << v << " became " << d;
        }
      }
    }
  }
}

// A group of equal values keeps its value exactly; an all-zero group stays zero.
TEST(Quantize, Int4ConstantGroupsAreExact) {
  const auto dir = test::make_temp_dir("quantize-int4-const");
  auto tensors = test::write_tiny_model(dir, int4_spec());
  for (auto& t : tensors)
    if (t.name == "model.layers.0.mlp.up_proj.weight") {
      const uint16_t minus_three = 0xc040, zero = 0;  // bf16 -3.0, 0.0
      for (int c = 0; c < 128; ++c) std::memcpy(t.bytes.data() + 2 * c, &minus_three, 2);          // row 0, group 0
      for (int c = 128; c < 256; ++c) std::memcpy(t.bytes.data() + 2 * c, &zero, 2);               // row 0, group 1
    }
  test::write_safetensors(dir / "model.safetensors", tensors);
  LoadOptions int4;
  int4.quantize = MatrixFormat::INT4;
  const auto model = load_model(dir, int4);
  const TensorView& up = model->weights.layers[0].w_up;
  for (int c = 0; c < 128; ++c) ASSERT_EQ(up.at(c), -3.0f) << c;
  for (int c = 128; c < 256; ++c) ASSERT_EQ(up.at(c), 0.0f) << c;
}

// The image's INT4 rows, read back by the format's definition (runtime/matrix_format.h): cols / 2 bytes
// of codes in the documented nibble order, one f32 scale per 128 columns, one byte zero point per
// group, padded to 16 bytes.
TEST(Quantize, TheImageHoldsEachInt4RowsCodesThenScalesThenZeroPoints) {
  const Pair m = load_both(int4_spec(), "quantize-int4-image", MatrixFormat::INT4);
  const Model& model = *m.quantized;
  const WeightLayout layout = plan_weight_layout(model);
  ASSERT_EQ(layout.format, MatrixFormat::INT4);
  const std::vector<uint8_t> image = pack_weights_to_host(model, layout);
  struct Case {
    uint64_t offset;
    const TensorView* t;
  };
  const LayerWeights& L = model.weights.layers[1];
  const LayerOffsets& o = layout.layers[1];
  for (const Case& c : {Case{o.w_down, &L.w_down}, Case{o.w_gate, &L.w_gate}, Case{o.wo, &L.wo}, Case{layout.embed, &model.weights.embed}}) {
    SCOPED_TRACE(c.t->name);
    const int64_t rows = c.t->shape[0], cols = c.t->shape[1];
    const int64_t groups = (cols + 127) / 128, row_bytes = cols / 2 + (groups * 5 + 15) / 16 * 16;
    EXPECT_EQ(uint64_t(row_bytes), layout.row_bytes(int(cols)));
    const auto* codes = static_cast<const uint8_t*>(c.t->data);  // U4: element i in byte i / 2, low nibble first
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = image.data() + c.offset + uint64_t(r * row_bytes);
      for (int64_t col = 0; col < cols; ++col) {
        const int64_t i = r * cols + col;
        const int expected = (codes[i / 2] >> (4 * (i % 2))) & 15;
        uint32_t word;
        std::memcpy(&word, row + 4 * (col / 8), 4);
        ASSERT_EQ(int(word >> (4 * kInt4Nibble[col % 8]) & 15u), expected) << "[" << r << ", " << col << "]";
      }
      for (int64_t g = 0; g < groups; ++g) {
        float s;
        std::memcpy(&s, row + cols / 2 + 4 * g, 4);
        ASSERT_EQ(s, c.t->scale.at(r, g * 128)) << "row " << r << ", group " << g;
        ASSERT_EQ(row[cols / 2 + 4 * groups + g], c.t->scale.zero_at(r, g * 128)) << "row " << r << ", group " << g;
      }
      for (int64_t pad = cols / 2 + 5 * groups; pad < row_bytes; ++pad) ASSERT_EQ(row[pad], 0) << "row " << r;
    }
  }
}

// The format's element decoder on a literal row: codes 1..8 for elements 0..7 make the word 0x86427531
// (element 0 in nibble 0, element 1 in nibble 4, ...); scale 0.5 and zero point 3 follow 32 columns of
// codes.
TEST(Quantize, Int4RowElementsFromALiteralWord) {
  uint8_t row[16 + 16] = {};
  const uint32_t word = 0x86427531u;
  std::memcpy(row, &word, 4);
  const float scale = 0.5f;
  std::memcpy(row + 16, &scale, 4);
  row[20] = 3;
  for (int e = 0; e < 8; ++e) {
    EXPECT_EQ(int4_code(row, e), e + 1) << e;
    EXPECT_EQ(matrix_row_element(MatrixFormat::INT4, row, 32, e), float(e + 1 - 3) * 0.5f) << e;
  }
  EXPECT_EQ(matrix_row_bytes(MatrixFormat::INT4, 32), 32);
  EXPECT_EQ(matrix_row_bytes(MatrixFormat::INT4, 4096), 2048 + 160);
}

// The formats are resolved once at load, and a checkpoint that mixes 16-bit types among the layers'
// matrices, or between the embedding and the LM head, is refused naming the tensor (the packer would
// otherwise convert it silently).
TEST(Quantize, MixedSixteenBitTypesAreRefusedNamingTheTensor) {
  const auto check = [](const std::string& tensor, bool tied, const std::string& expected) {
    const auto dir = test::make_temp_dir("mixed-16-bit");
    test::TinyModelSpec spec;  // bf16
    spec.tied = tied;
    std::vector<synthetic::TensorBytes> tensors = test::write_tiny_model(dir, spec);
    bool found = false;
    for (synthetic::TensorBytes& t : tensors)
      if (t.name == tensor) {
        size_t n = 1;
        for (const int64_t d : t.shape) n *= size_t(d);
        t.dtype = "F16";
        t.bytes = synthetic::encode(std::vector<float>(n, 0.01f), DType::F16);
        found = true;
      }
    ASSERT_TRUE(found) << tensor;
    synthetic::write_safetensors(dir / "model.safetensors", tensors);
    const std::string msg = test::error_of([&] { load_model(dir); });
    EXPECT_THAT(msg, HasSubstr(expected)) << msg;
  };
  check("model.layers.1.mlp.down_proj.weight", true,
        "tensor model.layers.1.mlp.down_proj.weight is F16, but the model's layer matrices are bf16");
  check("lm_head.weight", false, "tensor lm_head.weight is F16, but the model's embedding and LM head are packed as bf16");
  // A model in one type resolves to it.
  const auto dir = test::make_temp_dir("one-16-bit");
  test::TinyModelSpec spec;
  spec.dtype = DType::F16;
  test::write_tiny_model(dir, spec);
  const WeightFormats f = load_model(dir)->formats;
  EXPECT_EQ(f.body, MatrixFormat::F16);
  EXPECT_EQ(f.head, MatrixFormat::F16);
}

// quantize_head = false: the layers are int4, the embedding and LM head stay bf16, and the image packs
// the head in 16 bits next to the quantized layers.
TEST(Quantize, TheHeadCanStayBf16) {
  const Pair m = load_both(int4_spec(), "quantize-int4-head", MatrixFormat::INT4, false);
  const Model& model = *m.quantized;
  EXPECT_EQ(model.formats.body, MatrixFormat::INT4);
  EXPECT_EQ(model.formats.head, MatrixFormat::BF16);
  EXPECT_EQ(model.weights.embed.dtype, DType::BF16);
  EXPECT_EQ(model.weights.lm_head.dtype, DType::BF16);
  const WeightLayout layout = plan_weight_layout(model);
  EXPECT_EQ(layout.head_format, MatrixFormat::BF16);
  const std::vector<uint8_t> image = pack_weights_to_host(model, layout);
  const int64_t H = model.config.hidden_size;
  EXPECT_EQ(std::memcmp(image.data() + layout.lm_head + 3 * 2 * H, static_cast<const uint8_t*>(model.weights.lm_head.data) + 3 * 2 * H,
                        size_t(2 * H)),
            0);
}

TEST(Quantize, AnInt4ImageNeedsColumnsInMultiplesOf32) {
  const auto dir = test::make_temp_dir("quantize-int4-cols");
  test::write_tiny_model(dir, fp8_spec());  // intermediate 336: a multiple of 16, not of 32
  LoadOptions int4;
  int4.quantize = MatrixFormat::INT4;
  const auto model = load_model(dir, int4);
  EXPECT_THAT(test::error_of([&] { plan_weight_layout(*model); }),
              HasSubstr("intermediate_size = 336 is not a multiple of 32, which int4 matrices need"));
}

// Every quantized format of runtime/matrix_format.h's list, from the list: what load-time quantization
// made, the packed image holds (each packed element, read with the format's definition, equals the
// quantized tensor's dequantized element, which TensorView::at computes from the dtype and the scales
// apart from the packer), within an eighth of its group's largest magnitude of the original weight, and
// the codes read back as they were written. A new format is checked here by its line in the list.
class EveryQuantizedFormat : public ::testing::TestWithParam<MatrixFormat> {};

TEST_P(EveryQuantizedFormat, PacksWhatTheQuantizerMadeCloseToTheOriginal) {
  const MatrixFormat f = GetParam();
  const Pair m = load_both(int4_spec(), "quantize-every-" + std::string(matrix_format_name(f)), f);
  const Model& model = *m.quantized;
  EXPECT_EQ(model.formats.body, f);
  EXPECT_EQ(model.formats.head, f);
  const WeightLayout layout = plan_weight_layout(model.config, f);
  const std::vector<uint8_t> image = pack_weights_to_host(model, layout);
  const LayerWeights& L = model.weights.layers[1];
  const LayerWeights& original = m.original->weights.layers[1];
  const LayerOffsets& o = layout.layers[1];
  struct Case {
    uint64_t offset;
    const TensorView* t;
    const TensorView* original;
  };
  for (const Case& c : {Case{o.w_down, &L.w_down, &original.w_down}, Case{o.w_gate, &L.w_gate, &original.w_gate}}) {
    SCOPED_TRACE(c.t->name);
    ASSERT_EQ(c.t->dtype, matrix_format_dtype(f));
    const int rows = int(c.t->shape[0]), cols = int(c.t->shape[1]), group = matrix_scale_group(f);
    const size_t row_bytes = size_t(matrix_row_bytes(f, cols));
    for (int r = 0; r < rows; ++r) {
      const uint8_t* row = image.data() + c.offset + r * row_bytes;
      for (int g = 0; g * group < cols; ++g) {
        float amax = 0.0f;
        for (int k = g * group; k < std::min(cols, (g + 1) * group); ++k)
          amax = std::max(amax, std::fabs(c.original->at(int64_t(r) * cols + k)));
        for (int k = g * group; k < std::min(cols, (g + 1) * group); ++k) {
          const float packed = matrix_row_element(f, row, cols, k), dequantized = c.t->at(int64_t(r) * cols + k);
          ASSERT_EQ(packed, dequantized) << "row " << r << ", column " << k;
          ASSERT_LE(std::fabs(packed - c.original->at(int64_t(r) * cols + k)), amax / 8) << "row " << r << ", column " << k;
        }
      }
    }
  }
  // Codes written into a zeroed row read back, wherever they sit.
  std::vector<uint8_t> row(size_t(matrix_row_bytes(f, 64)), 0);
  const uint32_t mask = (1u << matrix_element_bits(f)) - 1u;
  for (int c = 0; c < 64; ++c) set_row_code(f, row.data(), c, uint32_t(c * 7 + 3) & mask);
  for (int c = 0; c < 64; ++c) EXPECT_EQ(row_code(f, row.data(), c), uint32_t(c * 7 + 3) & mask) << c;
}

std::vector<MatrixFormat> quantized_formats() {
  std::vector<MatrixFormat> out;
  for (const MatrixFormat f : kMatrixFormats)
    if (matrix_format_quantized(f)) out.push_back(f);
  return out;
}

INSTANTIATE_TEST_SUITE_P(List, EveryQuantizedFormat, ::testing::ValuesIn(quantized_formats()),
                         [](const ::testing::TestParamInfo<MatrixFormat>& p) { return std::string(matrix_format_name(p.param)); });

TEST(Quantize, ASixteenBitFormatIsNoQuantization) {
  const auto dir = test::make_temp_dir("quantize-to-bf16");
  test::write_tiny_model(dir, fp8_spec());
  LoadOptions options;
  options.quantize = MatrixFormat::BF16;
  EXPECT_THAT(test::error_of([&] { load_model(dir, options); }), HasSubstr("bf16 is not a quantized format"));
  EXPECT_THAT(test::error_of([&] { preset_model("llama-3.2-1b", options); }), HasSubstr("bf16 is not a quantized format"));
}

}  // namespace
}  // namespace mk
