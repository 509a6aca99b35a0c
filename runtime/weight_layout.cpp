#include "runtime/weight_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime/error.h"

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

}  // namespace

DType matrix_dtype_for(const Model& model) {
  const DType t = model.weights.layers.empty() ? model.weights.embed.dtype : model.weights.layers[0].wq.dtype;
  return t == DType::F32 ? DType::BF16 : t;
}

int WeightLayout::qkv_row(const ModelConfig& c, int part, int r) const {
  const int hd = c.head_dim, G = c.group_size();
  if (part == 0) {
    const int head = r / hd, g = head / G;
    return g * qkv_group_rows + (head % G) * hd + r % hd;
  }
  const int g = r / hd;
  return g * qkv_group_rows + (G + part - 1) * hd + r % hd;
}

WeightLayout plan_weight_layout(const ModelConfig& c, DType matrix_dtype) {
  if (matrix_dtype == DType::F32) fail("weight layout: matrices must be BF16 or F16 on the device");
  WeightLayout w;
  w.matrix_dtype = matrix_dtype;
  w.has_qkv_bias = c.qkv_bias;
  w.has_qk_norm = c.qk_norm;
  w.qkv_rows = c.q_dim() + 2 * c.kv_dim();
  w.qkv_group_rows = (c.group_size() + 2) * c.head_dim;
  const uint64_t e = uint64_t(dtype_size(matrix_dtype)), H = uint64_t(c.hidden_size), I = uint64_t(c.intermediate_size);
  Allocator a;
  w.embed = a.take(uint64_t(c.vocab_size) * H * e);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerOffsets L{};
    L.attn_norm = a.take(H * 4);
    L.wqkv = a.take(uint64_t(w.qkv_rows) * H * e);
    L.bqkv = c.qkv_bias ? a.take(uint64_t(w.qkv_rows) * 4) : 0;
    L.q_norm = c.qk_norm ? a.take(uint64_t(c.head_dim) * 4) : 0;
    L.k_norm = c.qk_norm ? a.take(uint64_t(c.head_dim) * 4) : 0;
    L.wo = a.take(H * uint64_t(c.q_dim()) * e);
    L.mlp_norm = a.take(H * 4);
    L.w_gate = a.take(I * H * e);
    L.w_up = a.take(I * H * e);
    L.w_down = a.take(H * I * e);
    w.layers.push_back(L);
  }
  w.final_norm = a.take(H * 4);
  w.lm_head = c.tie_word_embeddings ? w.embed : a.take(uint64_t(c.vocab_size) * H * e);
  w.total_bytes = a.next;
  return w;
}

void pack_weights(const Model& model, const WeightLayout& w, const PackSink& sink) {
  const ModelConfig& c = model.config;
  const DType md = w.matrix_dtype;
  std::vector<uint8_t> buf;
  auto emit = [&](uint64_t offset, const TensorView& t, DType dtype) {
    buf.clear();
    convert(t, 0, t.numel(), dtype, buf);
    sink(offset, buf.data(), buf.size());
  };
  emit(w.embed, model.weights.embed, md);
  const int hd = c.head_dim, G = c.group_size();
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = model.weights.layers[size_t(l)];
    const LayerOffsets& o = w.layers[size_t(l)];
    emit(o.attn_norm, L.attn_norm, DType::F32);
    // Fused QKV, grouped by kv head (see header); the bias follows the same row order.
    buf.clear();
    std::vector<uint8_t> bias;
    for (int g = 0; g < c.num_kv_heads; ++g) {
      auto rows = [&](const TensorView& m, const TensorView& b, int first_row) {
        convert(m, int64_t(first_row) * c.hidden_size, int64_t(hd) * c.hidden_size, md, buf);
        if (w.has_qkv_bias) convert(b, first_row, hd, DType::F32, bias);
      };
      for (int j = 0; j < G; ++j) rows(L.wq, L.bq, (g * G + j) * hd);
      rows(L.wk, L.bk, g * hd);
      rows(L.wv, L.bv, g * hd);
    }
    sink(o.wqkv, buf.data(), buf.size());
    if (w.has_qkv_bias) sink(o.bqkv, bias.data(), bias.size());
    if (w.has_qk_norm) {
      emit(o.q_norm, L.q_norm, DType::F32);
      emit(o.k_norm, L.k_norm, DType::F32);
    }
    emit(o.wo, L.wo, md);
    emit(o.mlp_norm, L.mlp_norm, DType::F32);
    emit(o.w_gate, L.w_gate, md);
    emit(o.w_up, L.w_up, md);
    emit(o.w_down, L.w_down, md);
  }
  emit(w.final_norm, model.weights.final_norm, DType::F32);
  if (!c.tie_word_embeddings) emit(w.lm_head, model.weights.lm_head, md);
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
