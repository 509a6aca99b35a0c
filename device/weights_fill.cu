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

}  // namespace

void fill_random_bf16(uint16_t* data, uint64_t count, float scale, uint64_t seed) {
  hipLaunchKernelGGL(fill_kernel, dim3(1024), dim3(256), 0, nullptr, reinterpret_cast<uint8_t*>(data), count, false, false,
                     scale, 0.0f, seed);
  MK_GPU_CHECK(hipGetLastError());
  MK_GPU_CHECK(hipDeviceSynchronize());
}

void fill_random_weights(uint8_t* image, const ModelConfig& c, const WeightLayout& w, uint64_t seed) {
  const bool fp16 = w.matrix_dtype == DType::F16;
  uint64_t piece = 0;
  auto fill = [&](uint64_t offset, uint64_t count, bool f32, float scale, float center) {
    hipLaunchKernelGGL(fill_kernel, dim3(1024), dim3(256), 0, nullptr, image + offset, count, f32, fp16, scale, center,
                       mix64(seed + ++piece));
    MK_GPU_CHECK(hipGetLastError());
  };
  const uint64_t H = uint64_t(c.hidden_size), I = uint64_t(c.intermediate_size);
  const float in_h = 1.0f / sqrtf(float(H)), in_i = 1.0f / sqrtf(float(I)), in_q = 1.0f / sqrtf(float(c.q_dim()));
  fill(w.embed, uint64_t(c.vocab_size) * H, false, 1.0f, 0.0f);
  for (const LayerOffsets& L : w.layers) {
    fill(L.attn_norm, H, true, 0.1f, 1.0f);
    fill(L.wqkv, uint64_t(w.qkv_rows) * H, false, in_h, 0.0f);
    if (w.has_qkv_bias) fill(L.bqkv, uint64_t(w.qkv_rows), true, 0.1f, 0.0f);
    if (w.has_qk_norm) {
      fill(L.q_norm, uint64_t(c.head_dim), true, 0.1f, 1.0f);
      fill(L.k_norm, uint64_t(c.head_dim), true, 0.1f, 1.0f);
    }
    fill(L.wo, H * uint64_t(c.q_dim()), false, in_q, 0.0f);
    fill(L.mlp_norm, H, true, 0.1f, 1.0f);
    fill(L.w_gate, I * H, false, in_h, 0.0f);
    fill(L.w_up, I * H, false, in_h, 0.0f);
    fill(L.w_down, H * I, false, in_i, 0.0f);
  }
  fill(w.final_norm, H, true, 0.1f, 1.0f);
  if (!c.tie_word_embeddings) fill(w.lm_head, uint64_t(c.vocab_size) * H, false, in_h, 0.0f);
  MK_GPU_CHECK(hipDeviceSynchronize());
}

}  // namespace mk::dev
