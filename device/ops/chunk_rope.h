// ChunkRope (chunk steps): for the chunk's tokens [begin, end), q/k norm (Qwen3) and RoPE as a token
// step's attention applies them; each token's K and V into the cache at its position, its queries (bf16)
// into chunk_q for chunk attention. A warp per (token, head); a lane takes the rotation pairs
// (i, i + head_dim / 2) for i = lane, lane + 32, ...
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/chunk_machine.h"
#endif

namespace mk::dev {

struct ChunkRopeOp : OpDefaults {
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    const ModelDims& d = p.dims;
    const LayerOffsets& L = p.layers[in.layer];
    const int hd = d.head_dim, half = hd / 2, G = d.group_size;
    const int heads_per_group = G + 2;  // G queries, K, V
    const int begin = int(in.begin), end = min(int(in.end), m.tokens);
    const int items = (end - begin) * d.kv_heads * heads_per_group;
    for (int item = warp_id(); item < items; item += kWarps) {
      const int t = begin + item / (d.kv_heads * heads_per_group);
      const int rest = item % (d.kv_heads * heads_per_group), g = rest / heads_per_group, j = rest % heads_per_group;
      const int pos = m.first_pos + t;
      const float* src = p.chunk_qkv + size_t(t) * size_t(d.qkv_rows) + size_t(g) * size_t(d.qkv_group_rows) + size_t(j) * size_t(hd);
      const size_t cache_row = (size_t(in.layer) * size_t(d.kv_heads) + size_t(g)) * size_t(p.context) + size_t(pos);
      if (j == G + 1) {  // V: as is
        for (int i = lane_id(); i < hd; i += MK_WARP_SIZE) p.v_cache[cache_row * size_t(hd) + size_t(i)] = float_to_bf16_bits(load_fresh(src + i));
        continue;
      }
      float inv = 1.f;
      const float* norm = nullptr;
      if (d.qk_norm) {
        norm = m.f32(j < G ? L.q_norm : L.k_norm);
        float ss = 0.f;
        for (int i = lane_id(); i < hd; i += MK_WARP_SIZE) {
          const float v = load_fresh(src + i);
          ss += v * v;
        }
        inv = 1.0f / sqrtf(warp_sum(ss) / float(hd) + d.rms_eps);
      }
      const float* cos_row = rope_cos_row(p, layer_attention_params(d, p.layer_attention, in.layer), pos);
      const float* sin_row = cos_row + size_t(p.context) * size_t(half);
      uint16_t* dst = j < G ? p.chunk_q + size_t(t) * size_t(d.heads * hd) + size_t(g * G + j) * size_t(hd)
                            : p.k_cache + cache_row * size_t(hd);
      for (int i = lane_id(); i < half; i += MK_WARP_SIZE) {
        float a = load_fresh(src + i), b = load_fresh(src + i + half);
        if (norm) a = a * inv * norm[i], b = b * inv * norm[i + half];
        dst[i] = float_to_bf16_bits(a * cos_row[i] - b * sin_row[i]);
        dst[i + half] = float_to_bf16_bits(b * cos_row[i] + a * sin_row[i]);
      }
    }
  }
#endif
};

}  // namespace mk::dev
