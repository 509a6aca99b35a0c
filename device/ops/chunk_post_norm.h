// ChunkPostNorm (chunk steps of post-norm layers: Gemma 3): for the chunk's tokens [begin, end), the
// residual rows += RMSNorm(projected rows) with the layer's post-attention (Instr::slot kAttentionNorm) or
// post-MLP (kMlpNorm) norm weight; chunk_o_proj and chunk_down wrote the projected rows
// (kWritesProjected). A warp per token.
#pragma once

#include "device/ops/op_spec.h"
#if MK_DEVICE_CODE
#include "device/chunk_machine.h"
#endif

namespace mk::dev {

struct ChunkPostNormOp : OpDefaults {
#if MK_DEVICE_CODE
  template <class MachineT>
  __device__ static void run(MachineT& m, const Instr& in) {
    const KernelParams& p = m.p;
    const ModelDims& d = p.dims;
    const int H = d.hidden, H4 = H / 4;  // hidden is a multiple of 32 (plan_chunk_steps)
    const LayerOffsets& L = p.layers[in.layer];
    const float4* g4 = reinterpret_cast<const float4*>(m.f32(in.slot == kAttentionNorm ? L.post_attn_norm : L.post_mlp_norm));
    const int end = min(int(in.end), m.tokens);
    for (int t = int(in.begin) + warp_id(); t < end; t += kWarps) {
      const float4* y4 = reinterpret_cast<const float4*>(p.chunk_projected + size_t(t) * size_t(H));
      float4* x4 = reinterpret_cast<float4*>(p.chunk_x + size_t(t) * size_t(H));
      float ss = 0.f;
#pragma unroll 8
      for (int k = lane_id(); k < H4; k += MK_WARP_SIZE) {
        const float4 v = load_fresh(y4 + k);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      const float inv = 1.0f / sqrtf(warp_sum(ss) / float(H) + d.rms_eps);
#pragma unroll 8
      for (int k = lane_id(); k < H4; k += MK_WARP_SIZE) {
        const float4 v = load_fresh(y4 + k), x = load_fresh(x4 + k), w = g4[k];
        x4[k] = make_float4(x.x + v.x * inv * w.x, x.y + v.y * inv * w.y, x.z + v.z * inv * w.z, x.w + v.w * inv * w.w);
      }
    }
  }
#endif
};

}  // namespace mk::dev
