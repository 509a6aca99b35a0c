#include "runtime/weight_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "runtime/error.h"
#include "runtime/quantize.h"

namespace mk {
namespace {

constexpr uint64_t kAlign = 256;

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Hands out aligned offsets in order.
struct Allocator {
  uint64_t next = 0;
  uint64_t take(uint64_t bytes) {
    uint64_t at = next;
    next = align_up(next + bytes);
    return at;
  }
};

// Index of the first NaN or infinity among `count` values of `dtype` at `p`, or `count` if there is none.
// All-ones exponent bits mark both; the scan runs in blocks without a branch per value, which the
// compiler vectorises, so checking every weight costs little next to reading it.
size_t first_non_finite(const uint8_t* p, size_t count, DType dtype) {
  constexpr size_t kBlock = 4096;
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t end = std::min(count, begin + kBlock);
    bool any = false;
    if (dtype == DType::F32) {
      for (size_t i = begin; i < end; ++i) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        any |= (v & 0x7f800000u) == 0x7f800000u;
      }
    } else {
      const uint16_t mask = dtype == DType::BF16 ? 0x7f80u : 0x7c00u;
      for (size_t i = begin; i < end; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        any |= (v & mask) == mask;
      }
    }
    if (!any) continue;
    for (size_t i = begin; i < end; ++i)
      if (!std::isfinite(load_as_float(p, dtype, int64_t(i)))) return i;
  }
  return count;
}

// Converts `count` values starting at element `first` of `t` into `dtype`, appending to `out`; rejects
// values that are not finite after the conversion.
void convert(const TensorView& t, int64_t first, int64_t count, DType dtype, std::vector<uint8_t>& out) {
  const size_t at = out.size();
  out.resize(at + size_t(count) * size_t(dtype_size(dtype)));
  if (t.dtype == dtype) {
    std::memcpy(out.data() + at, static_cast<const uint8_t*>(t.data) + size_t(first) * size_t(dtype_size(dtype)),
                size_t(count) * size_t(dtype_size(dtype)));
  } else {
    for (int64_t i = 0; i < count; ++i) {
      const float v = t.at(first + i);
      uint8_t* dst = out.data() + at + size_t(i) * size_t(dtype_size(dtype));
      if (dtype == DType::F32) {
        std::memcpy(dst, &v, 4);
      } else {
        const uint16_t h = dtype == DType::BF16 ? float_to_bf16(v) : float_to_fp16(v);
        std::memcpy(dst, &h, 2);
      }
    }
  }
  const size_t bad = first_non_finite(out.data() + at, size_t(count), dtype);
  if (bad == size_t(count)) return;
  const int64_t index = first + int64_t(bad);
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 0;
  const std::string where = cols > 0 ? fmt::format("[{}, {}]", index / cols, index % cols) : fmt::format("[{}]", index);
  const float original = t.at(index);
  if (std::isfinite(original))
    throw BadModelError(fmt::format("tensor {}: element {} is {}, which overflows {} (the dtype the kernels read it "
                                    "in); the model cannot run",
                                    t.name, where, original, dtype_name(dtype)));
  throw BadModelError(fmt::format("tensor {}: element {} is {}; a model with NaN or infinite weights cannot run",
                                  t.name, where, original));
}

// The scale (and zero point) of row r's group g of quantized matrix `t`, checked finite.
float group_scale(const TensorView& t, int64_t r, int g, int group_cols) {
  const float s = t.scale.at(r, int64_t(g) * group_cols);
  if (!std::isfinite(s))
    throw BadModelError(fmt::format("tensor {}: the scale of row {}, columns [{}, ...) is {}; the model cannot run",
                                    t.scale.name, r, g * group_cols, s));
  return s;
}

// Rows of a quantized matrix in its row form (runtime/matrix_format.h): the codes, then each column
// group's scale (and zero point), padded. A code that is no number is refused with its element.
template <MatrixFormat F>
void append_quantized_rows(const TensorView& t, int64_t first_row, int64_t rows, std::vector<uint8_t>& out) {
  constexpr DType kDType = matrix_format_dtype(F);
  constexpr int kGroupCols = matrix_scale_group(F);
  if (t.dtype != kDType)
    throw BadModelError(fmt::format("tensor {} is {}, but it is packed as {}: every matrix of a part of the image (the layers, "
                                    "or the embedding and LM head) has one format (runtime/quantize.h converts them)",
                                    t.name, dtype_name(t.dtype), matrix_format_name(F)));
  if (const std::string problem = scale_group_problem(t); !problem.empty()) throw BadModelError(problem);
  const int64_t cols = t.shape[1];
  const int groups = scale_groups(F, int(cols));
  const size_t row_bytes = size_t(matrix_row_bytes(F, int(cols))), value_bytes = size_t(row_value_bytes(F, int(cols)));
  for (int64_t r = first_row; r < first_row + rows; ++r) {
    const size_t at = out.size();
    out.resize(at + row_bytes, 0);
    uint8_t* row = out.data() + at;
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t code = load_code(t.data, kDType, r * cols + c);
      if (!MatrixCodec<F>::valid(code))
        throw BadModelError(fmt::format("tensor {}: element [{}, {}] is NaN; a model with NaN weights cannot run", t.name, r, c));
      set_row_code(F, row, int(c), code);
    }
    for (int g = 0; g < groups; ++g) {
      const float s = group_scale(t, r, g, kGroupCols);
      std::memcpy(row + value_bytes + 4 * size_t(g), &s, 4);
      if constexpr (matrix_format_zero_points(F))
        row[value_bytes + 4 * size_t(groups) + size_t(g)] = uint8_t(t.scale.zero_at(r, int64_t(g) * kGroupCols));
    }
  }
}

// Rows [first_row, first_row + rows) of matrix `t` in format `f`, appended to `out`.
void append_matrix_rows(const TensorView& t, int64_t first_row, int64_t rows, MatrixFormat f, std::vector<uint8_t>& out) {
  if (matrix_format_quantized(f))
    return with_matrix_format(f, [&](auto format) {
      constexpr MatrixFormat F = decltype(format)::value;
      if constexpr (matrix_format_quantized(F)) append_quantized_rows<F>(t, first_row, rows, out);
    });
  if (t.quantized())
    throw BadModelError(fmt::format("tensor {} is {} but it is packed as {}", t.name, dtype_name(t.dtype), matrix_format_name(f)));
  const int64_t cols = t.shape[1];
  convert(t, first_row * cols, rows * cols, matrix_format_dtype(f), out);
}

}  // namespace

int WeightLayout::qkv_row(const ModelConfig& c, int part, int r) const {
  const int hd = c.head_dim, G = c.group_size();
  if (part == 0) {
    const int head = r / hd, g = head / G;
    return g * qkv_group_rows + (head % G) * hd + r % hd;
  }
  const int g = r / hd;
  return g * qkv_group_rows + (G + part - 1) * hd + r % hd;
}

WeightLayout plan_weight_layout(const ModelConfig& c, MatrixFormat format, MatrixFormat head_format) {
  // Quantized rows must stay 16-byte aligned in the image itself; the 16-bit formats' multiple of 8 is the
  // GPU kernel's need (its validate_model), and the emulator runs any width.
  for (auto [cols, what, f] : {std::tuple{c.hidden_size, "hidden_size", format}, std::tuple{c.q_dim(), "num_attention_heads x head_dim", format},
                               std::tuple{c.intermediate_size, "intermediate_size", format}, std::tuple{c.hidden_size, "hidden_size", head_format}})
    if (matrix_format_quantized(f) && cols % matrix_cols_multiple(f) != 0)
      fail("weight layout: {} = {} is not a multiple of {}, which {} matrices need", what, cols, matrix_cols_multiple(f), matrix_format_name(f));
  if (matrix_format_quantized(head_format) && head_format != format)
    fail("weight layout: a {} head next to {} layers is not a combination the kernels run", matrix_format_name(head_format), matrix_format_name(format));
  WeightLayout w;
  w.format = format;
  w.head_format = head_format;
  w.has_qkv_bias = c.qkv_bias;
  w.has_qk_norm = c.qk_norm;
  w.has_post_norms = c.post_norms;
  w.qkv_rows = c.q_dim() + 2 * c.kv_dim();
  w.qkv_group_rows = (c.group_size() + 2) * c.head_dim;
  const uint64_t H = uint64_t(c.hidden_size), I = uint64_t(c.intermediate_size);
  const uint64_t row_h = w.row_bytes(c.hidden_size), row_i = w.row_bytes(c.intermediate_size), row_q = w.row_bytes(c.q_dim());
  const uint64_t row_head = w.head_row_bytes(c.hidden_size);
  Allocator a;
  w.embed = a.take(uint64_t(c.vocab_size) * row_head);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerOffsets L{};
    L.attn_norm = a.take(H * 4);
    L.wqkv = a.take(uint64_t(w.qkv_rows) * row_h);
    L.bqkv = c.qkv_bias ? a.take(uint64_t(w.qkv_rows) * 4) : 0;
    L.q_norm = c.qk_norm ? a.take(uint64_t(c.head_dim) * 4) : 0;
    L.k_norm = c.qk_norm ? a.take(uint64_t(c.head_dim) * 4) : 0;
    L.wo = a.take(H * row_q);
    L.post_attn_norm = c.post_norms ? a.take(H * 4) : 0;
    L.mlp_norm = a.take(H * 4);
    L.w_gate = a.take(I * row_h);
    L.w_up = a.take(I * row_h);
    L.w_down = a.take(H * row_i);
    L.post_mlp_norm = c.post_norms ? a.take(H * 4) : 0;
    w.layers.push_back(L);
  }
  w.final_norm = a.take(H * 4);
  w.lm_head = c.tie_word_embeddings ? w.embed : a.take(uint64_t(c.vocab_size) * row_head);
  w.total_bytes = a.next;
  return w;
}

WeightLayout plan_weight_layout(const Model& model) {
  return plan_weight_layout(model.config, model.formats.body, model.formats.head);
}

void pack_weights(const Model& model, const WeightLayout& w, const PackSink& sink) {
  const ModelConfig& c = model.config;
  const MatrixFormat md = w.format;
  std::vector<uint8_t> buf;
  // A norm weight as the executors multiply by it: offset + w (runtime/step_recipe.h, norm_weight_offset).
  auto emit_norm = [&](uint64_t offset, const TensorView& t) {
    buf.clear();
    convert(t, 0, t.numel(), DType::F32, buf);
    if (c.norm_weight_offset != 0.0f)
      for (size_t i = 0; i < buf.size(); i += 4) {
        float v;
        std::memcpy(&v, buf.data() + i, 4);
        v += c.norm_weight_offset;
        std::memcpy(buf.data() + i, &v, 4);
      }
    sink(offset, buf.data(), buf.size());
  };
  auto emit_matrix = [&](uint64_t offset, const TensorView& t, MatrixFormat f) {
    buf.clear();
    append_matrix_rows(t, 0, t.shape[0], f, buf);
    sink(offset, buf.data(), buf.size());
  };
  emit_matrix(w.embed, model.weights.embed, w.head_format);
  const int hd = c.head_dim, G = c.group_size();
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = model.weights.layers[size_t(l)];
    const LayerOffsets& o = w.layers[size_t(l)];
    emit_norm(o.attn_norm, L.attn_norm);
    // Fused QKV, grouped by kv head (see header); the bias follows the same row order.
    buf.clear();
    std::vector<uint8_t> bias;
    for (int g = 0; g < c.num_kv_heads; ++g) {
      auto rows = [&](const TensorView& m, const TensorView& b, int first_row) {
        append_matrix_rows(m, first_row, hd, md, buf);
        if (w.has_qkv_bias) convert(b, first_row, hd, DType::F32, bias);
      };
      for (int j = 0; j < G; ++j) rows(L.wq, L.bq, (g * G + j) * hd);
      rows(L.wk, L.bk, g * hd);
      rows(L.wv, L.bv, g * hd);
    }
    sink(o.wqkv, buf.data(), buf.size());
    if (w.has_qkv_bias) sink(o.bqkv, bias.data(), bias.size());
    if (w.has_qk_norm) {
      emit_norm(o.q_norm, L.q_norm);
      emit_norm(o.k_norm, L.k_norm);
    }
    emit_matrix(o.wo, L.wo, md);
    if (w.has_post_norms) emit_norm(o.post_attn_norm, L.post_attn_norm);
    emit_norm(o.mlp_norm, L.mlp_norm);
    emit_matrix(o.w_gate, L.w_gate, md);
    emit_matrix(o.w_up, L.w_up, md);
    emit_matrix(o.w_down, L.w_down, md);
    if (w.has_post_norms) emit_norm(o.post_mlp_norm, L.post_mlp_norm);
  }
  emit_norm(w.final_norm, model.weights.final_norm);
  if (!c.tie_word_embeddings) emit_matrix(w.lm_head, model.weights.lm_head, w.head_format);
}

std::vector<uint8_t> pack_weights_to_host(const Model& model, const WeightLayout& layout) {
  std::vector<uint8_t> image(layout.total_bytes, 0);
  pack_weights(model, layout, [&](uint64_t offset, const void* bytes, size_t size) {
    if (offset + size > image.size()) fail("weight layout: piece at {} of {} bytes overruns the image", offset, size);
    std::memcpy(image.data() + offset, bytes, size);
  });
  return image;
}

}  // namespace mk
