#include "device/weights_fill.h"

#include "device/gpu.h"
#include "runtime/sampling.h"

namespace mk::dev {
namespace {

__global__ void fill_kernel(uint8_t* dst, uint64_t count, bool f32, bool fp16, float scale, float center, uint64_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < count; i += uint64_t(gridDim.x) * blockDim.x) {
    const float v = center + scale * (2.0f * uniform01(seed, i) - 1.0f);
    if (f32) {
      reinterpret_cast<float*>(dst)[i] = v;
    } else {
      reinterpret_cast<uint16_t*>(dst)[i] = fp16 ? float_to_fp16(v) : float_to_bf16(v);
    }
  }
}

// A quantized matrix in format F (runtime/matrix_format.h), a 4-byte word per thread step: random codes
// (MatrixCodec<F>::random_code, each from its kRandomBits of one 64-bit draw per word) and every group's
// parameters random_group(scale).
template <MatrixFormat F>
__global__ void fill_quantized_kernel(uint32_t* dst, uint64_t rows, uint32_t cols, uint32_t row_bytes, float scale, uint64_t seed) {
  using Codec = MatrixCodec<F>;
  constexpr uint32_t kBits = uint32_t(matrix_element_bits(F)), kCodesPerWord = 32 / kBits;
  static_assert(kCodesPerWord * Codec::kRandomBits <= 64, "one 64-bit draw per word");
  const GroupParams params = Codec::random_group(scale);
  const uint64_t words = rows * row_bytes / 4;
  const uint32_t groups = uint32_t(scale_groups(F, int(cols))), values = uint32_t(row_value_bytes(F, int(cols)));
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint32_t at = uint32_t((i * 4) % row_bytes);
    if (at < values) {  // the word's codes: any order of random codes is random, so the bit order needs no care
      const uint64_t bits = mix64(seed + i);
      uint32_t word = 0;
      for (uint32_t k = 0; k < kCodesPerWord; ++k) word |= Codec::random_code(uint32_t(bits >> (Codec::kRandomBits * k))) << (kBits * k);
      dst[i] = word;
    } else if (at - values < 4 * groups) {
      dst[i] = __float_as_uint(params.scale);
    } else {
      uint32_t word = 0;
      if constexpr (matrix_format_zero_points(F))
        for (uint32_t b = 0; b < 4; ++b)
          if (at + b - values - 4 * groups < groups) word |= uint32_t(params.zero) << (8 * b);
      dst[i] = word;
    }
  }
}

}  // namespace

void fill_random_bf16(uint16_t* data, uint64_t count, float scale, uint64_t seed) {
  hipLaunchKernelGGL(fill_kernel, dim3(1024), dim3(256), 0, nullptr, reinterpret_cast<uint8_t*>(data), count, false, false,
                     scale, 0.0f, seed);
  MK_GPU_CHECK(hipGetLastError());
  MK_GPU_CHECK(hipDeviceSynchronize());
}

void fill_random_weights(uint8_t* image, const ModelConfig& c, const WeightLayout& w, uint64_t seed) {
  uint64_t piece = 0;
  auto fill_values = [&](uint64_t offset, uint64_t count, bool f32, bool fp16, float scale, float center) {
    hipLaunchKernelGGL(fill_kernel, dim3(1024), dim3(256), 0, nullptr, image + offset, count, f32, fp16, scale, center,
                       mix64(seed + ++piece));
    MK_GPU_CHECK(hipGetLastError());
  };
  auto fill = [&](uint64_t offset, uint64_t count, bool f32, float scale, float center) {
    fill_values(offset, count, f32, false, scale, center);
  };
  // A matrix [rows, cols] in format f ~ uniform(-scale, scale) (quantized: as its MatrixCodec's random codes
  // give; FP8: |v| up to ~1.9 * scale).
  auto matrix_in = [&](MatrixFormat f, uint64_t offset, uint64_t rows, uint64_t cols, float scale) {
    uint32_t* dst = reinterpret_cast<uint32_t*>(image + offset);
    const uint32_t row_bytes = uint32_t(matrix_row_bytes(f, int(cols)));
    if (!matrix_format_quantized(f)) return fill_values(offset, rows * cols, false, f == MatrixFormat::F16, scale, 0.0f);
    with_matrix_format(f, [&](auto format) {
      constexpr MatrixFormat F = decltype(format)::value;
      if constexpr (matrix_format_quantized(F))
        hipLaunchKernelGGL(fill_quantized_kernel<F>, dim3(1024), dim3(256), 0, nullptr, dst, rows, uint32_t(cols), row_bytes, scale,
                           mix64(seed + ++piece));
    });
    MK_GPU_CHECK(hipGetLastError());
  };
  auto matrix = [&](uint64_t offset, uint64_t rows, uint64_t cols, float scale) { matrix_in(w.format, offset, rows, cols, scale); };
  const uint64_t H = uint64_t(c.hidden_size), I = uint64_t(c.intermediate_size), Q = uint64_t(c.q_dim());
  const float in_h = 1.0f / sqrtf(float(H)), in_i = 1.0f / sqrtf(float(I)), in_q = 1.0f / sqrtf(float(c.q_dim()));
  matrix_in(w.head_format, w.embed, uint64_t(c.vocab_size), H, 1.0f);
  for (const LayerOffsets& L : w.layers) {
    fill(L.attn_norm, H, true, 0.1f, 1.0f);
    matrix(L.wqkv, uint64_t(w.qkv_rows), H, in_h);
    if (w.has_qkv_bias) fill(L.bqkv, uint64_t(w.qkv_rows), true, 0.1f, 0.0f);
    if (w.has_qk_norm) {
      fill(L.q_norm, uint64_t(c.head_dim), true, 0.1f, 1.0f);
      fill(L.k_norm, uint64_t(c.head_dim), true, 0.1f, 1.0f);
    }
    matrix(L.wo, H, Q, in_q);
    fill(L.mlp_norm, H, true, 0.1f, 1.0f);
    matrix(L.w_gate, I, H, in_h);
    matrix(L.w_up, I, H, in_h);
    matrix(L.w_down, H, I, in_i);
    if (w.has_post_norms) {  // stored as the executors multiply by them (1 + w folded in), like the others
      fill(L.post_attn_norm, H, true, 0.1f, 1.0f);
      fill(L.post_mlp_norm, H, true, 0.1f, 1.0f);
    }
  }
  fill(w.final_norm, H, true, 0.1f, 1.0f);
  if (!c.tie_word_embeddings) matrix_in(w.head_format, w.lm_head, uint64_t(c.vocab_size), H, in_h);
  MK_GPU_CHECK(hipDeviceSynchronize());
}

}  // namespace mk::dev
